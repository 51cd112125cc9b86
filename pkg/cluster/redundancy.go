package cluster

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// MaxCopies is the most copies a mirrored namespace may ask for.
const MaxCopies = 4

// Redundancy is how a namespace protects its v-zones against the loss of a
// node: Copies legs hold the same data, each on a distinct node. Copies 1 is
// "none" (RAID-0 legs, the default). Parity (raid5-like) is not offered yet.
type Redundancy struct {
	Copies uint32
}

// ParseRedundancy parses "" or "none" (one copy) and "mirror:N" (N copies,
// 2 ≤ N ≤ MaxCopies). Anything else is a *zerr.InvalidArgumentError.
func ParseRedundancy(s string) (Redundancy, error) {
	switch s {
	case "", "none":
		return Redundancy{Copies: 1}, nil
	}
	bad := func(why string) (Redundancy, error) {
		return Redundancy{}, &zerr.InvalidArgumentError{Field: "redundancy", Reason: fmt.Sprintf("%q: %s", s, why)}
	}
	n, ok := strings.CutPrefix(s, "mirror:")
	if !ok {
		if strings.HasPrefix(s, "raid") || strings.HasPrefix(s, "parity") {
			return bad("parity is not implemented yet; use none or mirror:N")
		}
		return bad("want none or mirror:N")
	}
	c, err := strconv.ParseUint(n, 10, 32)
	if err != nil || c < 2 || c > MaxCopies {
		return bad(fmt.Sprintf("N must be an integer in [2, %d]", MaxCopies))
	}
	return Redundancy{Copies: uint32(c)}, nil
}

// String is the canonical form: "none" or "mirror:N".
func (r Redundancy) String() string {
	if r.Copies <= 1 {
		return "none"
	}
	return fmt.Sprintf("mirror:%d", r.Copies)
}
