package client

import (
	"context"
	"fmt"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Placement is a placement identifier of an fdp namespace: a reclaim
// group of its drive and one of the namespace's own placement handles
// (0..Handles()-1; the node maps it onto the drive handle the arbiter
// granted, so two tenants never write through one handle).
type Placement struct {
	Group  uint32
	Handle uint32
}

// FDPNamespace is the client's fdp namespace: a range of LBAs of one FDP
// drive, addressed from 0, written through placement handles of its own
// (the arbiter's grant, v1.FDPGrant). Calls go straight to the drive's
// node with the client's credentials; the node admits them to the grant
// only (PERMISSION_DENIED for another namespace's drive, OUT_OF_RANGE past
// the capacity). Safe for concurrent use.
type FDPNamespace struct {
	c     *Client
	name  string
	grant *v1.FDPGrant
	fdp   v1.FDPClient
}

// OpenFDP opens the client's namespace, which must be an fdp namespace
// (*zerr.InvalidArgumentError otherwise).
func (c *Client) OpenFDP(ctx context.Context) (*FDPNamespace, error) {
	ns, err := c.GetNamespace(ctx)
	if err != nil {
		return nil, err
	}
	g := ns.GetFdp()
	if ns.GetKind() != "fdp" || g == nil {
		return nil, &zerr.InvalidArgumentError{Field: "namespace", Reason: fmt.Sprintf("%s is a %s namespace, not fdp", ns.GetName(), ns.GetKind())}
	}
	if g.GetAddr() == "" || g.GetBlockSize() == 0 {
		return nil, &zerr.UnavailableError{What: "fdp namespace " + ns.GetName(), Reason: "the node of its drive (" + g.GetNode() + ") is not registered"}
	}
	cc, err := c.NodeConn(g.GetNode(), g.GetAddr())
	if err != nil {
		return nil, err
	}
	return &FDPNamespace{c: c, name: ns.GetName(), grant: g, fdp: v1.NewFDPClient(cc)}, nil
}

// Grant is the namespace's grant: node, drive, range and handles.
func (n *FDPNamespace) Grant() *v1.FDPGrant { return n.grant }

// Blocks is the namespace's capacity in LBAs.
func (n *FDPNamespace) Blocks() uint64 { return n.grant.GetLbas() }

// BlockSize is the bytes of one LBA.
func (n *FDPNamespace) BlockSize() uint32 { return n.grant.GetBlockSize() }

// Handles is the namespace's placement handles.
func (n *FDPNamespace) Handles() int { return len(n.grant.GetHandles()) }

// Write writes whole blocks at lba through placement p; with fua the
// data is durable when Write returns.
func (n *FDPNamespace) Write(ctx context.Context, lba uint64, data []byte, p Placement, fua bool) error {
	if len(data) == 0 || len(data)%int(n.BlockSize()) != 0 {
		return &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("%d bytes is not a positive multiple of the block size %d", len(data), n.BlockSize())}
	}
	_, err := n.fdp.Write(n.c.ctx(ctx), &v1.FDPWriteRequest{Device: n.grant.GetDevice(), Lba: lba, Data: data,
		Placement: &v1.PlacementID{Group: p.Group, Handle: p.Handle}, Fua: fua})
	return n.c.nodeErr(n.grant.GetNode(), n.grant.GetAddr(), err)
}

// Read reads count blocks at lba (unwritten blocks read as zeros).
func (n *FDPNamespace) Read(ctx context.Context, lba, count uint64) ([]byte, error) {
	r, err := n.fdp.Read(n.c.ctx(ctx), &v1.FDPReadRequest{Device: n.grant.GetDevice(), Lba: lba, Count: count})
	return r.GetData(), n.c.nodeErr(n.grant.GetNode(), n.grant.GetAddr(), err)
}

// Trim deallocates count blocks at lba.
func (n *FDPNamespace) Trim(ctx context.Context, lba, count uint64) error {
	_, err := n.fdp.Trim(n.c.ctx(ctx), &v1.FDPTrimRequest{Device: n.grant.GetDevice(), Lba: lba, Count: count})
	return n.c.nodeErr(n.grant.GetNode(), n.grant.GetAddr(), err)
}

// Flush makes every acknowledged write and trim of the drive durable.
func (n *FDPNamespace) Flush(ctx context.Context) error {
	_, err := n.fdp.Flush(n.c.ctx(ctx), &v1.FDPDeviceRequest{Device: n.grant.GetDevice()})
	return n.c.nodeErr(n.grant.GetNode(), n.grant.GetAddr(), err)
}

// LBARange is a run of mapped LBAs of an fdp namespace.
type LBARange struct {
	LBA   uint64
	Count uint64
}

// LBAStatus reports which of the count blocks at lba are mapped (written
// and not trimmed since), as runs in increasing order, adjacent runs
// merged. The node bounds what one call covers; LBAStatus asks again
// until the range is done.
func (n *FDPNamespace) LBAStatus(ctx context.Context, lba, count uint64) ([]LBARange, error) {
	var out []LBARange
	// An empty or wrapping range goes to the node once, which refuses it.
	for end, first := lba+count, true; first || lba < end; first = false {
		r, err := n.fdp.LBAStatus(n.c.ctx(ctx), &v1.FDPLBAStatusRequest{Device: n.grant.GetDevice(), Lba: lba, Count: end - lba})
		if err = n.c.nodeErr(n.grant.GetNode(), n.grant.GetAddr(), err); err != nil {
			return nil, err
		}
		if r.GetCount() == 0 || r.GetCount() > end-lba {
			return nil, &zerr.CorruptError{Path: "LBA status of fdp namespace " + n.name, Reason: fmt.Sprintf("%d blocks at %d: the node covered %d", end-lba, lba, r.GetCount())}
		}
		for _, x := range r.GetRuns() {
			if x.GetCount() == 0 || x.GetLba() < lba || x.GetLba()+x.GetCount() > lba+r.GetCount() || (len(out) > 0 && x.GetLba() < out[len(out)-1].LBA+out[len(out)-1].Count) {
				return nil, &zerr.CorruptError{Path: "LBA status of fdp namespace " + n.name, Reason: fmt.Sprintf("run [%d, +%d) outside [%d, +%d) or out of order", x.GetLba(), x.GetCount(), lba, r.GetCount())}
			}
			if k := len(out) - 1; k >= 0 && out[k].LBA+out[k].Count == x.GetLba() {
				out[k].Count += x.GetCount()
			} else {
				out = append(out, LBARange{LBA: x.GetLba(), Count: x.GetCount()})
			}
		}
		lba += r.GetCount()
	}
	return out, nil
}

// Configs is the namespace's view of its drive's FDP configuration: reclaim
// groups, reclaim unit size, page size, its capacity and its placement
// handles' types.
func (n *FDPNamespace) Configs(ctx context.Context) (*v1.FDPConfigsResponse, error) {
	r, err := n.fdp.Configs(n.c.ctx(ctx), &v1.FDPDeviceRequest{Device: n.grant.GetDevice()})
	return r, n.c.nodeErr(n.grant.GetNode(), n.grant.GetAddr(), err)
}
