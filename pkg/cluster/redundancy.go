package cluster

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// MaxCopies is the most copies a mirrored namespace may ask for.
const MaxCopies = 4

// ParityMinNodes is the fewest distinct nodes a parity (raid5) stripe group
// needs: one data leg plus the parity leg.
const ParityMinNodes = 2

// ParityPPLogs is the partial-parity log zones of a parity stripe group
// (on its parity leg's node, used alternately: one is reset only while the
// other holds the newest records). Groups laid out before had one.
const ParityPPLogs = 2

// Redundancy is how a namespace protects its v-zones against the loss of a
// node: Copies legs hold the same data, each on a distinct node. Copies 1 is
// "none" (RAID-0 legs, the default).
//
// Parity ("raid5") keeps Copies 1 and protects each stripe row of k data
// units (k is the stripe group's width, chosen by the arbiter like any
// width) with one parity unit on a parity leg. The group's k data legs, and
// its parity leg, are on k+1 distinct nodes; the group also holds
// ParityPPLogs partial-parity log zones on the parity leg's node, used
// alternately (pkg/client's package doc has the design). The parity leg is
// fixed per group (RAID-4 placement, the name says what it protects
// against: one lost node), so a group of width k takes k+3 physical zones
// and needs k+1 ≥ ParityMinNodes nodes.
type Redundancy struct {
	Copies uint32
	Parity bool
}

// ParseRedundancy parses "" or "none" (one copy), "mirror:N" (N copies,
// 2 ≤ N ≤ MaxCopies) and "raid5" (parity). Anything else is a
// *zerr.InvalidArgumentError.
func ParseRedundancy(s string) (Redundancy, error) {
	switch s {
	case "", "none":
		return Redundancy{Copies: 1}, nil
	case "raid5":
		return Redundancy{Copies: 1, Parity: true}, nil
	}
	bad := func(why string) (Redundancy, error) {
		return Redundancy{}, &zerr.InvalidArgumentError{Field: "redundancy", Reason: fmt.Sprintf("%q: %s", s, why)}
	}
	n, ok := strings.CutPrefix(s, "mirror:")
	if !ok {
		if strings.HasPrefix(s, "raid") || strings.HasPrefix(s, "parity") {
			return bad("the parity form is raid5 (k data legs + 1 parity leg per stripe group)")
		}
		return bad("want none, mirror:N or raid5")
	}
	c, err := strconv.ParseUint(n, 10, 32)
	if err != nil || c < 2 || c > MaxCopies {
		return bad(fmt.Sprintf("N must be an integer in [2, %d]", MaxCopies))
	}
	return Redundancy{Copies: uint32(c)}, nil
}

// None is one copy without parity (RAID-0 legs). The zero Redundancy means
// the same: a record without the field (Normal makes it explicit).
var None = Redundancy{Copies: 1}

// Normal is r with the zero value made None.
func (r Redundancy) Normal() Redundancy {
	if r.Copies == 0 {
		r.Copies = 1
	}
	return r
}

// IsZero reports whether r is None (so `omitzero` leaves it out of a
// record, as a record without the field reads back as None).
func (r Redundancy) IsZero() bool { return r.Copies <= 1 && !r.Parity }

// MarshalText is the canonical form (String): records and messages keep
// the redundancy as text.
func (r Redundancy) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses like ParseRedundancy.
func (r *Redundancy) UnmarshalText(b []byte) error {
	v, err := ParseRedundancy(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// String is the canonical form: "none", "mirror:N" or "raid5".
func (r Redundancy) String() string {
	switch {
	case r.Parity:
		return "raid5"
	case r.Copies <= 1:
		return "none"
	}
	return fmt.Sprintf("mirror:%d", r.Copies)
}

// MinNodes is the fewest distinct available nodes a stripe group of this
// redundancy can be placed on (width 1).
func (r Redundancy) MinNodes() int {
	if r.Parity {
		return ParityMinNodes
	}
	return int(max(r.Copies, 1))
}
