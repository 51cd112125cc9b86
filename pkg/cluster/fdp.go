package cluster

import (
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// NamespaceKind is what a namespace is made of: v-zones over physical
// zones (zoned, the zero value) or a range of LBAs of one FDP drive with
// placement handles of its own (fdp).
type NamespaceKind uint8

// The namespace kinds.
const (
	KindZoned NamespaceKind = iota
	KindFDP
)

// ParseNamespaceKind parses "" or "zoned" and "fdp". Anything else is a
// *zerr.InvalidArgumentError.
func ParseNamespaceKind(s string) (NamespaceKind, error) {
	switch s {
	case "", "zoned":
		return KindZoned, nil
	case "fdp":
		return KindFDP, nil
	}
	return KindZoned, &zerr.InvalidArgumentError{Field: "kind", Reason: fmt.Sprintf("%q is not a namespace kind (zoned or fdp)", s)}
}

// String is the canonical form: "zoned" or "fdp".
func (k NamespaceKind) String() string {
	if k == KindFDP {
		return "fdp"
	}
	if k == KindZoned {
		return "zoned"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText is the canonical form; records keep the kind as text.
func (k NamespaceKind) MarshalText() ([]byte, error) {
	if k > KindFDP {
		return nil, &zerr.InvalidArgumentError{Field: "kind", Reason: k.String() + " is not a namespace kind"}
	}
	return []byte(k.String()), nil
}

// UnmarshalText parses like ParseNamespaceKind.
func (k *NamespaceKind) UnmarshalText(b []byte) error {
	v, err := ParseNamespaceKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// FDPDeviceInfo is an FDP drive of a node, as the node registers it: the
// arbiter grants ranges of its LBAs and its placement handles to fdp
// namespaces.
type FDPDeviceInfo struct {
	Index         uint32 `json:"index"`
	BlockSize     uint32 `json:"block_size"`
	LBAs          uint64 `json:"lbas"`
	ReclaimGroups uint32 `json:"reclaim_groups"`
	// Handles are the reclaim unit handle types, "initially-isolated" or
	// "persistently-isolated", one per handle.
	Handles []string `json:"handles"`
}

// FDPDevice returns the FDP drive with the given index.
func (n NodeRecord) FDPDevice(index uint32) (FDPDeviceInfo, bool) {
	for _, d := range n.FDPDevices {
		if d.Index == index {
			return d, true
		}
	}
	return FDPDeviceInfo{}, false
}

// FDPExtent is what an fdp namespace is granted: LBAs [FirstLBA,
// FirstLBA+LBAs) of one FDP drive and, exclusively, the drive handles
// Handles (the namespace's placement handle i is drive handle Handles[i],
// in every reclaim group). The namespace addresses its LBAs from 0.
type FDPExtent struct {
	Node     string   `json:"node"`
	Device   uint32   `json:"device"`
	FirstLBA uint64   `json:"first_lba"`
	LBAs     uint64   `json:"lbas"`
	Handles  []uint32 `json:"handles"`
}

// Overlaps tells whether e and o share an LBA of one drive.
func (e FDPExtent) Overlaps(o FDPExtent) bool {
	return e.Node == o.Node && e.Device == o.Device && e.FirstLBA < o.FirstLBA+o.LBAs && o.FirstLBA < e.FirstLBA+e.LBAs
}
