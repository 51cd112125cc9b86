// Package cluster holds the etcd schema shared by the ssdnode service and the
// zone arbiter: key layout, node registration records and zone grants.
//
// Everything under Prefix is JSON. Layout:
//
//	Prefix+"nodes/"+nodeID                   NodeRecord, written by each ssdnode under an etcd lease
//	Prefix+"grants/"+nodeID+"/"+dev+"/"+zone Grant, written by the arbiter leader
//	Prefix+"namespaces/"+name                NamespaceRecord (weight), written by the arbiter with the namespace
//	Prefix+"arbiter/election"                election prefix; the value is the leader's gRPC address
//	Prefix+"arbiter/..."                     other arbiter-private state
//
// A node enforces: namespace N may do I/O to (node, dev, zone) only if the grant
// key exists with Namespace == N. When the arbiter returns a physical zone to
// the free pool (v-zone reset, reclaim of an overdriven stripe group, namespace
// deletion) it deletes the grant key; the node should reset the zone when it
// sees the deletion, so that the next owner finds it empty.
package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Prefix is the root of every ZoneFleet key in etcd.
const Prefix = "/zonefleet/v1/"

// ElectionPrefix is the etcd election prefix of the arbiters. The campaign
// value is the leader's gRPC address.
const ElectionPrefix = Prefix + "arbiter/election"

// ArbiterPrefix is the root of the arbiter's private state.
const ArbiterPrefix = Prefix + "arbiter/"

// NodesPrefix is the prefix of every node registration key.
func NodesPrefix() string { return Prefix + "nodes/" }

// NodeKey is the registration key of a node (written under the node's lease).
func NodeKey(nodeID string) string { return NodesPrefix() + nodeID }

// ParseNodeKey returns the node ID of a node registration key.
func ParseNodeKey(key string) (string, error) {
	id, ok := strings.CutPrefix(key, NodesPrefix())
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", &zerr.InvalidArgumentError{Field: "node key", Reason: fmt.Sprintf("%q is not under %s", key, NodesPrefix())}
	}
	return id, nil
}

// grantsRoot is the prefix of every grant of every node.
func grantsRoot() string { return Prefix + "grants/" }

// GrantsRoot is the prefix of all grants of all nodes.
func GrantsRoot() string { return grantsRoot() }

// GrantsPrefix is the prefix of the grants of one node (ends with "/").
func GrantsPrefix(nodeID string) string { return grantsRoot() + nodeID + "/" }

// GrantKey is the key of the grant of one physical zone. Device and zone are
// zero-padded so that keys sort in numeric order.
func GrantKey(nodeID string, device, zone uint32) string {
	return fmt.Sprintf("%s%04d/%08d", GrantsPrefix(nodeID), device, zone)
}

// ParseGrantKey is the inverse of GrantKey.
func ParseGrantKey(key string) (PhysZone, error) {
	rest, ok := strings.CutPrefix(key, grantsRoot())
	if !ok {
		return PhysZone{}, &zerr.InvalidArgumentError{Field: "grant key", Reason: fmt.Sprintf("%q is not under %s", key, grantsRoot())}
	}
	pz, err := ParsePhysZone(rest)
	if err != nil {
		return PhysZone{}, &zerr.InvalidArgumentError{Field: "grant key", Reason: err.Error()}
	}
	return pz, nil
}

// DeviceInfo is the geometry of one device of a node.
type DeviceInfo struct {
	Index        uint32 `json:"index"`
	Channels     uint32 `json:"channels"`
	Ways         uint32 `json:"ways"`          // dies = Channels*Ways
	DZone        uint32 `json:"dzone"`         // chips per zone
	FCGs         uint32 `json:"fcgs"`          // = dies/DZone
	MAR          uint32 `json:"mar"`           // max active zones
	MOR          uint32 `json:"mor"`           // max open zones
	BlockSize    uint32 `json:"block_size"`    // bytes, 4096
	PageSize     uint32 `json:"page_size"`     // bytes, 16384
	ZoneSize     uint64 `json:"zone_size"`     // blocks
	ZoneCapacity uint64 `json:"zone_capacity"` // blocks
	NumZones     uint32 `json:"num_zones"`
	Media        string `json:"media"`
}

// Dies is the number of chips of the device.
func (d DeviceInfo) Dies() uint32 { return d.Channels * d.Ways }

// ZoneDies returns the chips a zone spans: zone z belongs to FCG g = z % FCGs
// and FCG g spans chips [g*DZone, (g+1)*DZone). It returns nil for an invalid
// geometry or a zone out of range.
func (d DeviceInfo) ZoneDies(zone uint32) []uint32 {
	if d.FCGs == 0 || d.DZone == 0 || zone >= d.NumZones {
		return nil
	}
	g := zone % d.FCGs
	out := make([]uint32, 0, d.DZone)
	for c := g * d.DZone; c < (g+1)*d.DZone; c++ {
		out = append(out, c)
	}
	return out
}

// ZoneFCG returns the flash chip group of a zone (z % FCGs).
func (d DeviceInfo) ZoneFCG(zone uint32) uint32 {
	if d.FCGs == 0 {
		return 0
	}
	return zone % d.FCGs
}

// Validate checks the geometry is usable.
func (d DeviceInfo) Validate() error {
	bad := func(f, r string) error { return &zerr.InvalidArgumentError{Field: "device " + f, Reason: r} }
	switch {
	case d.Channels == 0 || d.Ways == 0:
		return bad("channels/ways", "must be > 0")
	case d.DZone == 0 || d.Dies()%d.DZone != 0:
		return bad("dzone", fmt.Sprintf("%d does not divide %d dies", d.DZone, d.Dies()))
	case d.FCGs != d.Dies()/d.DZone:
		return bad("fcgs", fmt.Sprintf("%d, want dies/dzone = %d", d.FCGs, d.Dies()/d.DZone))
	case d.MAR == 0:
		return bad("mar", "must be > 0")
	case d.BlockSize == 0:
		return bad("block_size", "must be > 0")
	case d.NumZones == 0:
		return bad("num_zones", "must be > 0")
	case d.ZoneCapacity == 0 || d.ZoneCapacity > d.ZoneSize:
		return bad("zone_capacity", fmt.Sprintf("%d must be in (0, zone_size=%d]", d.ZoneCapacity, d.ZoneSize))
	}
	return nil
}

// NodeRecord is what an ssdnode registers under NodeKey.
type NodeRecord struct {
	ID        string       `json:"id"`
	Addr      string       `json:"addr"`
	Version   string       `json:"version"`
	Devices   []DeviceInfo `json:"devices"`
	StartedAt time.Time    `json:"started_at"`
	// FDPDevices are the node's FDP drives (numbered apart from Devices).
	FDPDevices []FDPDeviceInfo `json:"fdp_devices,omitempty"`
}

// Validate checks a node record.
func (n NodeRecord) Validate() error {
	if n.ID == "" || strings.ContainsAny(n.ID, "/ ") {
		return &zerr.InvalidArgumentError{Field: "node id", Reason: fmt.Sprintf("%q must be non-empty without '/' or spaces", n.ID)}
	}
	seen := map[uint32]bool{}
	for _, d := range n.Devices {
		if seen[d.Index] {
			return &zerr.InvalidArgumentError{Field: "device index", Reason: fmt.Sprintf("%d is duplicated", d.Index)}
		}
		seen[d.Index] = true
		if err := d.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Device returns the device with the given index.
func (n NodeRecord) Device(index uint32) (DeviceInfo, bool) {
	for _, d := range n.Devices {
		if d.Index == index {
			return d, true
		}
	}
	return DeviceInfo{}, false
}

// Grant says which namespace may do I/O to a physical zone.
type Grant struct {
	Namespace  string `json:"namespace"`
	VZone      uint64 `json:"vzone"`
	Group      uint32 `json:"group"`      // stripe group index inside the v-zone
	Generation uint64 `json:"generation"` // v-zone layout generation at grant time
	// Sealed: the arbiter is moving the zone's data (eZNS reclaim). The
	// nodes serve reads and refuse every write and zone change of the
	// namespace (UNAVAILABLE, to be retried) until the move commits (the
	// grant goes) or rolls back (the grant is put again unsealed): a write
	// that landed after the copy would be lost with the zone's reset.
	Sealed bool `json:"sealed,omitempty"`
}

// PhysZone is a cluster-wide physical zone address.
type PhysZone struct {
	Node   string `json:"node"`
	Device uint32 `json:"device"`
	Zone   uint32 `json:"zone"`
}

// String returns "node/dev/zone".
func (p PhysZone) String() string { return fmt.Sprintf("%s/%d/%d", p.Node, p.Device, p.Zone) }

// GrantKey returns the grant key of the zone.
func (p PhysZone) GrantKey() string { return GrantKey(p.Node, p.Device, p.Zone) }

// ParsePhysZone parses "node/dev/zone" (leading zeros accepted).
func ParsePhysZone(s string) (PhysZone, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" {
		return PhysZone{}, &zerr.InvalidArgumentError{Field: "physical zone", Reason: fmt.Sprintf("%q is not node/device/zone", s)}
	}
	dev, err1 := strconv.ParseUint(parts[1], 10, 32)
	zone, err2 := strconv.ParseUint(parts[2], 10, 32)
	if err1 != nil || err2 != nil {
		return PhysZone{}, &zerr.InvalidArgumentError{Field: "physical zone", Reason: fmt.Sprintf("%q: device and zone must be unsigned integers", s)}
	}
	return PhysZone{Node: parts[0], Device: uint32(dev), Zone: uint32(zone)}, nil
}

// Encode marshals v as JSON.
func Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &zerr.InvalidArgumentError{Field: "value", Reason: err.Error()}
	}
	return b, nil
}

// Decode unmarshals JSON stored at key into v; bad JSON is a *zerr.CorruptError.
func Decode(key string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &zerr.CorruptError{Path: key, Reason: "bad JSON: " + err.Error()}
	}
	return nil
}

// EncodeNode marshals a node record.
func EncodeNode(n NodeRecord) ([]byte, error) { return Encode(n) }

// DecodeNode unmarshals and validates a node record stored at key.
func DecodeNode(key string, data []byte) (NodeRecord, error) {
	var n NodeRecord
	if err := Decode(key, data, &n); err != nil {
		return NodeRecord{}, err
	}
	if err := n.Validate(); err != nil {
		return NodeRecord{}, &zerr.CorruptError{Path: key, Reason: err.Error()}
	}
	return n, nil
}

// EncodeGrant marshals a grant.
func EncodeGrant(g Grant) ([]byte, error) { return Encode(g) }

// DecodeGrant unmarshals a grant stored at key.
func DecodeGrant(key string, data []byte) (Grant, error) {
	var g Grant
	if err := Decode(key, data, &g); err != nil {
		return Grant{}, err
	}
	if g.Namespace == "" {
		return Grant{}, &zerr.CorruptError{Path: key, Reason: "grant without namespace"}
	}
	return g, nil
}

// NamespacesPrefix holds one NamespaceRecord per namespace, written by the
// arbiter in the transaction that creates or deletes the namespace; nodes
// watch it for the weights of their per-namespace round robin.
func NamespacesPrefix() string { return Prefix + "namespaces/" }

// NamespaceKey is the key of a namespace's record.
func NamespaceKey(name string) string { return NamespacesPrefix() + name }

// NamespaceRecord is what nodes need to know of a namespace.
type NamespaceRecord struct {
	Name   string `json:"name"`
	Weight uint32 `json:"weight"` // share of a device's request slots (>= 1)
	// FDP is an fdp namespace's grant: the node serving the drive admits
	// the namespace's FDP I/O to this range and these handles only.
	FDP *FDPExtent `json:"fdp,omitempty"`
}

// EncodeNamespace marshals a namespace record.
func EncodeNamespace(n NamespaceRecord) ([]byte, error) { return Encode(n) }

// DecodeNamespace unmarshals a namespace record.
func DecodeNamespace(key string, data []byte) (NamespaceRecord, error) {
	var n NamespaceRecord
	err := Decode(key, data, &n)
	return n, err
}
