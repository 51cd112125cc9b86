package node

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// FDPGrants is the node's cache of the fdp namespaces' grants
// (cluster.NamespaceRecord.FDP), kept current by an etcd watch of the
// namespace records. A grant that goes (the namespace deleted) has its
// LBAs on this node's drive trimmed before the watch applies anything
// later, so a namespace granted the same range afterwards never reads the
// old tenant's data: a lookup that misses waits until the watch has
// applied the record's revision.
type FDPGrants struct {
	cli      *clientv3.Client
	log      *slog.Logger
	onRevoke func(cluster.FDPExtent)

	mu      sync.Mutex
	m       map[string]cluster.FDPExtent
	rev     int64         // every namespace record event up to rev is applied
	changed chan struct{} // closed when rev advances
}

// WatchFDPGrants loads the fdp grants and follows them until ctx ends;
// onRevoke runs (on the watch goroutine) for each grant that goes.
func WatchFDPGrants(ctx context.Context, cli *clientv3.Client, log *slog.Logger, onRevoke func(cluster.FDPExtent)) (*FDPGrants, error) {
	g := &FDPGrants{cli: cli, log: log, onRevoke: onRevoke, m: map[string]cluster.FDPExtent{}, changed: make(chan struct{})}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := cli.Get(lctx, cluster.NamespacesPrefix(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, &zerr.UnavailableError{What: "etcd", Reason: "load fdp grants: " + err.Error()}
	}
	for _, kv := range resp.Kvs {
		g.apply(string(kv.Key), kv.Value, false)
	}
	g.advance(resp.Header.Revision)
	go g.follow(ctx, resp.Header.Revision)
	return g, nil
}

// apply takes one namespace record event (deleted: the key went).
func (g *FDPGrants) apply(key string, val []byte, deleted bool) {
	name := strings.TrimPrefix(key, cluster.NamespacesPrefix())
	var ext *cluster.FDPExtent
	if !deleted {
		rec, err := cluster.DecodeNamespace(key, val)
		if err != nil {
			g.log.Warn("ignoring malformed namespace record", "key", key, "err", err)
			return
		}
		ext = rec.FDP
	}
	g.mu.Lock()
	old, had := g.m[name]
	if ext != nil {
		g.m[name] = *ext
	} else {
		delete(g.m, name)
	}
	g.mu.Unlock()
	if had && g.onRevoke != nil && (ext == nil || ext.Node != old.Node || ext.Device != old.Device || ext.FirstLBA != old.FirstLBA || ext.LBAs != old.LBAs) {
		g.onRevoke(old)
	}
}

func (g *FDPGrants) advance(rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if rev > g.rev {
		g.rev = rev
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

func (g *FDPGrants) follow(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for wr := range g.cli.Watch(clientv3.WithRequireLeader(ctx), cluster.NamespacesPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				g.log.Warn("fdp grant watch interrupted", "err", wr.Err())
				break
			}
			for _, ev := range wr.Events {
				g.apply(string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete)
			}
			rev = wr.Header.Revision
			g.advance(rev)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // pause before re-watching a failed watch
		}
	}
}

// Extents are the grants cached now.
func (g *FDPGrants) Extents() []cluster.FDPExtent {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]cluster.FDPExtent, 0, len(g.m))
	for _, e := range g.m {
		out = append(out, e)
	}
	return out
}

// Lookup returns namespace ns's grant. On a miss it reads the namespace's
// record from etcd (a grant just written may not have reached the watch)
// and waits until the watch has applied it; a namespace without a grant is
// ok false.
func (g *FDPGrants) Lookup(ctx context.Context, ns string) (cluster.FDPExtent, bool, error) {
	g.mu.Lock()
	e, ok := g.m[ns]
	g.mu.Unlock()
	if ok {
		return e, true, nil
	}
	resp, err := g.cli.Get(ctx, cluster.NamespaceKey(ns))
	if err != nil {
		return e, false, &zerr.UnavailableError{What: "etcd", Reason: "read fdp grant: " + err.Error()}
	}
	if len(resp.Kvs) == 0 {
		return e, false, nil
	}
	want := resp.Kvs[0].ModRevision
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		g.mu.Lock()
		e, ok = g.m[ns]
		rev, ch := g.rev, g.changed
		g.mu.Unlock()
		if rev >= want {
			return e, ok, nil
		}
		select {
		case <-ch:
		case <-wait.Done():
			return e, false, &zerr.UnavailableError{What: "fdp grants", Reason: fmt.Sprintf("not yet at etcd revision %d", want)}
		}
	}
}

// fdpTenant is what a tenant's FDP call resolves to.
type fdpTenant struct {
	dev *fdp.Device
	ext *cluster.FDPExtent // nil for the operator (device-level addressing)
}

// tenant resolves a data call (Write, Read, Trim, Flush) on drive idx: the
// operator addresses the whole drive; a tenant only its own namespace's
// grant, on this node's drive idx (PERMISSION_DENIED otherwise). A node
// that follows no grants (standalone) serves the operator only.
func (f *FDPService) tenant(ctx context.Context, idx uint32, what string) (fdpTenant, error) {
	if f.grants == nil || f.isAdmin(ctx) {
		d, err := f.dev(ctx, idx, what)
		return fdpTenant{dev: d}, err
	}
	ns := f.namespace(ctx)
	deny := func(reason string) error {
		return &zerr.PermissionDeniedError{Identity: "namespace:" + ns, Method: "/zonefleet.v1.FDP/" + what, Reason: reason}
	}
	if ns == "" {
		return fdpTenant{}, deny("no namespace")
	}
	e, ok, err := f.grants.Lookup(ctx, ns)
	if err != nil {
		return fdpTenant{}, err
	}
	if !ok || e.Node != f.node || e.Device != idx || int(idx) >= len(f.devs) {
		return fdpTenant{}, deny(fmt.Sprintf("fdp device %d of node %s is not granted to the namespace", idx, f.node))
	}
	return fdpTenant{dev: f.devs[idx], ext: &e}, nil
}

// lbas maps a tenant's LBA range onto the drive (the operator's unchanged).
func (t fdpTenant) lbas(lba, count uint64) (uint64, error) {
	if t.ext == nil {
		return lba, nil
	}
	if lba > t.ext.LBAs || count > t.ext.LBAs-lba {
		return 0, &zerr.OutOfRangeError{LBA: lba, Count: count, Limit: t.ext.LBAs}
	}
	return t.ext.FirstLBA + lba, nil
}

// placement maps a tenant's placement handle onto the drive's.
func (t fdpTenant) placement(p fdp.PlacementID) (fdp.PlacementID, error) {
	if t.ext == nil {
		return p, nil
	}
	if int(p.Handle) >= len(t.ext.Handles) {
		return p, &zerr.InvalidArgumentError{Field: "placement", Reason: fmt.Sprintf("handle %d: the namespace has %d placement handles", p.Handle, len(t.ext.Handles))}
	}
	p.Handle = uint16(t.ext.Handles[p.Handle])
	return p, nil
}

// revoke trims a grant that went, when it is on this node.
func (f *FDPService) revoke(e cluster.FDPExtent) {
	if e.Node != f.node || int(e.Device) >= len(f.devs) {
		return
	}
	if err := f.devs[e.Device].Trim(context.Background(), e.FirstLBA, e.LBAs); err != nil {
		f.log.Error("trimming a revoked fdp grant", "device", e.Device, "first_lba", e.FirstLBA, "lbas", e.LBAs, "err", err)
	}
}

// sweepUngranted trims the LBAs of this node's drives that none of
// grants holds.
func (f *FDPService) sweepUngranted(ctx context.Context, grants []cluster.FDPExtent) error {
	for idx, d := range f.devs {
		var mine []cluster.FDPExtent
		for _, e := range grants {
			if e.Node == f.node && e.Device == uint32(idx) {
				mine = append(mine, e)
			}
		}
		slices.SortFunc(mine, func(a, b cluster.FDPExtent) int { return cmp.Compare(a.FirstLBA, b.FirstLBA) })
		lbas := d.Configs().LBAs
		var at, trimmed uint64
		for _, e := range append(mine, cluster.FDPExtent{FirstLBA: lbas}) {
			if end := min(e.FirstLBA, lbas); end > at {
				if err := d.Trim(ctx, at, end-at); err != nil {
					return fmt.Errorf("fdp device %d: trimming ungranted LBAs [%d, %d): %w", idx, at, end, err)
				}
				trimmed += end - at
			}
			at = max(at, e.FirstLBA+e.LBAs)
		}
		f.log.Info("fdp drive: ungranted LBAs trimmed", "device", idx, "grants", len(mine), "lbas", trimmed)
	}
	return nil
}

// Infos are the drives as the node registers them.
func (f *FDPService) Infos() []cluster.FDPDeviceInfo {
	out := make([]cluster.FDPDeviceInfo, 0, len(f.devs))
	for i, d := range f.devs {
		c := d.Configs()
		info := cluster.FDPDeviceInfo{Index: uint32(i), BlockSize: uint32(c.BlockSize), LBAs: c.LBAs, ReclaimGroups: uint32(c.ReclaimGroups)}
		for _, h := range c.Handles {
			info.Handles = append(info.Handles, h.String())
		}
		out = append(out, info)
	}
	return out
}
