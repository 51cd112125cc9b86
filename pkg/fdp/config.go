package fdp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// HandleType is the isolation a reclaim unit handle promises (TP4146).
type HandleType uint8

const (
	// InitiallyIsolated: data written through the handle starts in reclaim
	// units holding only that handle's data; garbage collection may move
	// it into reclaim units shared with other initially isolated handles
	// of the same reclaim group.
	InitiallyIsolated HandleType = 1
	// PersistentlyIsolated: the handle's data stays in reclaim units
	// holding only data written through that handle, also after garbage
	// collection moved it.
	PersistentlyIsolated HandleType = 2
)

func (t HandleType) String() string {
	switch t {
	case InitiallyIsolated:
		return "initially-isolated"
	case PersistentlyIsolated:
		return "persistently-isolated"
	}
	return fmt.Sprintf("handle-type(%d)", uint8(t))
}

// MarshalText writes the type's name.
func (t HandleType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText accepts "initially-isolated" (or "ii", "initially") and
// "persistently-isolated" (or "pi", "persistently").
func (t *HandleType) UnmarshalText(b []byte) error {
	v, err := ParseHandleType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseHandleType parses a handle type name.
func ParseHandleType(s string) (HandleType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "initially-isolated", "initially", "ii":
		return InitiallyIsolated, nil
	case "persistently-isolated", "persistently", "pi":
		return PersistentlyIsolated, nil
	}
	return 0, &zerr.InvalidArgumentError{Field: "handles", Reason: fmt.Sprintf("unknown reclaim unit handle type %q (want initially-isolated or persistently-isolated)", s)}
}

// VictimPolicy selects the reclaim unit garbage collection empties next.
type VictimPolicy uint8

const (
	// Greedy picks the reclaim unit with the fewest valid blocks.
	Greedy VictimPolicy = 1
	// CostBenefit picks the largest age x (1-u) / 2u (Rosenblum and
	// Ousterhout, LFS), u the valid fraction and age the time since the
	// unit was last written, in host writes.
	CostBenefit VictimPolicy = 2
)

func (p VictimPolicy) String() string {
	switch p {
	case Greedy:
		return "greedy"
	case CostBenefit:
		return "cost-benefit"
	}
	return fmt.Sprintf("victim-policy(%d)", uint8(p))
}

// MarshalText writes the policy's name.
func (p VictimPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText accepts "greedy" and "cost-benefit" ("cb").
func (p *VictimPolicy) UnmarshalText(b []byte) error {
	v, err := ParseVictimPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParseVictimPolicy parses a victim policy name.
func ParseVictimPolicy(s string) (VictimPolicy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "greedy":
		return Greedy, nil
	case "cost-benefit", "costbenefit", "cb":
		return CostBenefit, nil
	}
	return 0, &zerr.InvalidArgumentError{Field: "victim", Reason: fmt.Sprintf("unknown victim policy %q (want greedy or cost-benefit)", s)}
}

// PlacementID selects where a write goes: a reclaim group and a placement
// handle (an index into Config.Handles), as the DSPEC field of an NVMe
// write carries them.
type PlacementID struct {
	Group  uint16 `json:"group"`
	Handle uint16 `json:"handle"`
}

func (p PlacementID) String() string { return fmt.Sprintf("%d/%d", p.Group, p.Handle) }

// Encode packs p into the 32-bit form of the wire (group << 16 | handle).
func (p PlacementID) Encode() uint32 { return uint32(p.Group)<<16 | uint32(p.Handle) }

// DecodePlacementID unpacks the 32-bit wire form; Device.Write checks the
// range.
func DecodePlacementID(v uint32) PlacementID {
	return PlacementID{Group: uint16(v >> 16), Handle: uint16(v)}
}

// Limits of Validate.
const (
	MaxHandles = 128
	MaxGroups  = 64
)

// Config is an FDP drive: the flash geometry and timings (pkg/flash: the
// zone fields are ignored) and the FDP configuration.
type Config struct {
	Flash flash.Config `json:"flash"`
	// ReclaimGroups splits the chips into this many groups (a power of
	// two dividing channels x ways); a reclaim unit never spans groups.
	ReclaimGroups int `json:"reclaim_groups"`
	// RUChips is the reclaim unit size in flash blocks: one block on each
	// of this many chips of the group (0 = every chip of the group).
	// SetRUChips changes it at run time for reclaim units opened later.
	RUChips int `json:"ru_chips"`
	// Handles are the reclaim unit handles, the same set in every group.
	Handles []HandleType `json:"handles"`
	// OverProvision is the fraction of the flash not exposed as LBAs.
	OverProvision float64 `json:"over_provision"`
	// Victim is the garbage collection victim policy.
	Victim VictimPolicy `json:"victim"`
}

// DefaultConfig is an FDP drive on the flash.Small geometry: one reclaim
// group, reclaim units of one block on every chip, four initially isolated
// handles, 20 % over-provisioning, greedy victims.
func DefaultConfig() Config {
	f := flash.Small()
	f.BlocksPerChip = 64
	return Config{Flash: f, ReclaimGroups: 1, Handles: []HandleType{InitiallyIsolated, InitiallyIsolated, InitiallyIsolated, InitiallyIsolated},
		OverProvision: 0.2, Victim: Greedy}
}

// ParseConfig decodes a JSON configuration (unknown fields are refused)
// and validates it.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var ia *zerr.InvalidArgumentError
		if errors.As(err, &ia) {
			return Config{}, ia
		}
		return Config{}, &zerr.InvalidArgumentError{Field: "config", Reason: err.Error()}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func bad(field, format string, a ...any) error {
	return &zerr.InvalidArgumentError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// geometry is what the FTL derives from a valid Config.
type geometry struct {
	chips, groups, chipsPerGroup int
	blocksPerChip, pagesPerBlock int
	chunk                        int // LBAs per flash page
	bs, ps                       int
	slotsPerBlock                int // LBAs per flash block
	slots                        int // physical LBAs
	lbas                         uint64
}

func (c Config) geometry() geometry {
	f := c.Flash.Resolved()
	g := geometry{chips: f.Channels * f.Ways, groups: c.ReclaimGroups, blocksPerChip: f.BlocksPerChip, pagesPerBlock: f.PagesPerBlock,
		chunk: f.PageSize / f.BlockSize, bs: f.BlockSize, ps: f.PageSize}
	g.chipsPerGroup = g.chips / max(g.groups, 1)
	g.slotsPerBlock = g.pagesPerBlock * g.chunk
	g.slots = g.chips * g.blocksPerChip * g.slotsPerBlock
	g.lbas = uint64(float64(g.slots) * (1 - c.OverProvision))
	return g
}

// openRUs is the number of reclaim units a group keeps open: one per
// handle for host writes, one per persistently isolated handle and one
// shared by the initially isolated handles for garbage collection.
func (c Config) openRUs() int {
	n := len(c.Handles) + 1
	for _, h := range c.Handles {
		if h == PersistentlyIsolated {
			n++
		}
	}
	return n
}

// Validate checks c and returns a zerr.InvalidArgumentError naming the
// first bad field.
func (c Config) Validate() error {
	if err := c.Flash.Validate(); err != nil {
		return err
	}
	f := c.Flash.Resolved()
	chips := f.Channels * f.Ways
	if c.ReclaimGroups <= 0 || c.ReclaimGroups > MaxGroups || chips%c.ReclaimGroups != 0 {
		return bad("reclaim_groups", "must divide channels*ways=%d and be in [1, %d], got %d", chips, MaxGroups, c.ReclaimGroups)
	}
	cpg := chips / c.ReclaimGroups
	if c.RUChips < 0 || c.RUChips > cpg {
		return bad("ru_chips", "must be in [0, chips per group %d], got %d", cpg, c.RUChips)
	}
	if len(c.Handles) == 0 || len(c.Handles) > MaxHandles {
		return bad("handles", "need 1..%d reclaim unit handles, got %d", MaxHandles, len(c.Handles))
	}
	for i, h := range c.Handles {
		if h != InitiallyIsolated && h != PersistentlyIsolated {
			return bad("handles", "handle %d has unknown type %d", i, uint8(h))
		}
	}
	if c.Victim != Greedy && c.Victim != CostBenefit {
		return bad("victim", "unknown victim policy %d", uint8(c.Victim))
	}
	if !(c.OverProvision > 0 && c.OverProvision < 0.9) {
		return bad("over_provision", "must be in (0, 0.9), got %v", c.OverProvision)
	}
	if f.BlocksPerChip > 1<<16 || chips*f.BlocksPerChip*f.PagesPerBlock*(f.PageSize/f.BlockSize) > 1<<30 {
		return bad("blocks_per_chip", "an FDP drive maps at most 2^30 blocks")
	}
	return c.checkSpace(c.RUChips)
}

// checkSpace: the flash a group keeps outside its LBAs (its share of the
// over-provisioning) must hold the open reclaim units of every handle and
// garbage collection's reserve (gcReserveRUs units), each of ruChips
// blocks, plus one block per chip of slack, or garbage collection could
// find no victim with an invalid block.
func (c Config) checkSpace(ruChips int) error {
	g := c.geometry()
	if ruChips == 0 {
		ruChips = g.chipsPerGroup
	}
	spare := (uint64(g.slots) - g.lbas) / uint64(g.slotsPerBlock) / uint64(g.groups) // blocks per group
	need := uint64((c.openRUs()+gcReserveRUs)*ruChips + g.chipsPerGroup)
	if spare < need {
		return bad("over_provision", "leaves %d spare flash blocks per reclaim group; %d open reclaim units of %d blocks plus garbage collection's reserve need %d (raise over_provision or blocks_per_chip, or use fewer handles or smaller reclaim units)",
			spare, c.openRUs(), ruChips, need)
	}
	return nil
}

// gcReserveRUs is how many free reclaim units garbage collection keeps in
// each group: host writes that would take the last ones first reclaim.
const gcReserveRUs = 2
