package paper

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/paper/scratch"
	"github.com/zonefleet/zonefleet/pkg/bench/paper/sim"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// rig is one simulated drive with the node's write path in front of it:
// admission control (node.Admission, the code ssdnode runs) and the pkg/zns
// drive model, both on the simulation's clock. Calls are in-process; nothing
// else of the node (gRPC, auth) adds to modelled time, so nothing is lost.
type rig struct {
	s    *sim.Sim
	dev  *zns.Device
	adm  *node.Admission
	geo  flash.Geometry
	die  []int    // active zones per FCG (least populated first)
	used []bool   // zones handed out
	wp   []uint64 // write pointer per zone (blocks)
	buf  []byte
	// slots are the node's device slots (node.WRR, by default two per
	// chip as in ssdnode) that writes take after admission, as the node's
	// write path does; reads take them in physRead.
	slots *slotQueue
}

func newRig(dir string, cfg flash.Config, ac bool) (*rig, error) {
	return newRigAC(dir, cfg, node.AdmissionConfig{Enabled: ac})
}

// newRigAC is newRig with the admission control's whole configuration.
func newRigAC(dir string, cfg flash.Config, acfg node.AdmissionConfig) (*rig, error) {
	s := sim.New()
	dev, err := zns.Create(filepath.Join(dir, "drive"), cfg, s, zns.WithFS(scratch.New()))
	if err != nil {
		return nil, err
	}
	g := dev.Geometry()
	r := &rig{s: s, dev: dev, geo: g, die: make([]int, g.NFCG), used: make([]bool, g.Zones), wp: make([]uint64, g.Zones)}
	r.adm = node.NewAdmission(s, acfg)
	r.slots = newSlots(s, 2*g.Chips) // the node's default QueueSlots
	return r, nil
}

func (r *rig) close() {
	r.s.Stop()
	r.adm.Close()
	_ = r.dev.Close()
}

// alloc picks width unused zones on distinct, least populated chip groups
// (lowest index first): the arbiter's placement rule (eZNS §4.2), collisions
// only once every die is populated.
func (r *rig) alloc(width int) ([]uint64, error) {
	if width > r.geo.NFCG {
		return nil, fmt.Errorf("width %d exceeds the %d chip groups", width, r.geo.NFCG)
	}
	taken := map[int]bool{}
	var out []uint64
	for len(out) < width {
		best := -1
		for f := 0; f < r.geo.NFCG; f++ {
			if taken[f] || !r.freeOn(f) {
				continue
			}
			if best < 0 || r.die[f] < r.die[best] {
				best = f
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("no free zone for a stripe group of width %d", width)
		}
		taken[best] = true
		for z := uint64(best); z < r.geo.Zones; z += uint64(r.geo.NFCG) {
			if !r.used[z] {
				r.used[z] = true
				r.die[best]++
				out = append(out, z)
				break
			}
		}
	}
	return out, nil
}

// allocSame picks an unused zone on the chip group of each of zones.
func (r *rig) allocSame(zones []uint64) ([]uint64, error) {
	out := make([]uint64, 0, len(zones))
	for _, old := range zones {
		f := r.geo.FCG(old)
		found := false
		for z := uint64(f); z < r.geo.Zones; z += uint64(r.geo.NFCG) {
			if !r.used[z] {
				r.used[z] = true
				out = append(out, z)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no free zone left on chip group %d", f)
		}
	}
	return out, nil
}

func (r *rig) freeOn(f int) bool {
	for z := uint64(f); z < r.geo.Zones; z += uint64(r.geo.NFCG) {
		if !r.used[z] {
			return true
		}
	}
	return false
}

// lzone is a logical zone: RAID-0 over width physical zones with stripe
// bytes per stripe, written sequentially like the client does (stripes of one
// I/O coalesced per physical zone and submitted in parallel).
type lzone struct {
	r      *rig
	zones  []uint64
	stripe int
	off    uint64 // bytes written in the current stripe group
	bytes  uint64 // bytes written in all (completed)
	// sameDies continues a full stripe group on new zones of the same chip
	// groups (the fairness experiments of eZNS §5.2 place competing zones on
	// fixed dies) instead of the least populated ones.
	sameDies bool
}

func (r *rig) newLZone(width, stripe int) (*lzone, error) {
	zs, err := r.alloc(width)
	if err != nil {
		return nil, err
	}
	return &lzone{r: r, zones: zs, stripe: stripe}, nil
}

// write writes n bytes (a multiple of width*stripe) at the logical zone's
// write pointer and returns when every physical write completed; a full
// stripe group is followed by a new one (like NextStripeGroup).
func (lz *lzone) write(ctx context.Context, n int) error {
	r := lz.r
	w := uint64(len(lz.zones))
	capBytes := r.geo.ZoneCap * uint64(r.geo.BlockSize) * w
	if lz.off+uint64(n) > capBytes {
		var zs []uint64
		var err error
		if lz.sameDies {
			zs, err = r.allocSame(lz.zones)
		} else {
			zs, err = r.alloc(len(lz.zones))
		}
		if err != nil {
			return err
		}
		lz.zones, lz.off = zs, 0
	}
	// Coalesce: a full-row I/O gives each physical zone n/w contiguous bytes.
	per := n / int(w)
	left := int(w)
	done := r.s.NewCond()
	var firstErr error
	for i := range lz.zones {
		z := lz.zones[i]
		r.s.Go(func(ctx context.Context) {
			err := r.physWrite(ctx, z, per)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			left--
			if left == 0 {
				done.Broadcast()
			}
		})
	}
	for left > 0 {
		if err := done.Wait(ctx); err != nil {
			return err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	lz.off += uint64(n)
	lz.bytes += uint64(n)
	return nil
}

// physWrite is the node's write path (pkg/node io.go): admit, take a device
// slot (when the figure models them), write, report the modelled latency to
// the admission monitor.
func (r *rig) physWrite(ctx context.Context, z uint64, n int) error {
	blocks := n / r.geo.BlockSize
	if _, err := r.adm.Admit(ctx, 0, z, blocks); err != nil {
		return err
	}
	if len(r.buf) < n {
		r.buf = make([]byte, n)
	}
	lba := z*r.geo.ZoneSize + r.wp[z]
	r.wp[z] += uint64(blocks)
	if r.slots != nil {
		if err := r.slots.acquire(ctx); err != nil {
			return err
		}
	}
	res, err := r.dev.Write(ctx, lba, r.buf[:n], zns.Flags{})
	if r.slots != nil {
		r.slots.release()
	}
	if err != nil {
		return err
	}
	r.adm.Complete(blocks, res.Latency())
	return nil
}

// meter counts bytes completed inside a measurement window.
type meter struct {
	from, to time.Duration
	bytes    uint64
}

func (m *meter) add(now time.Duration, n int) {
	if now > m.from && now <= m.to {
		m.bytes += uint64(n)
	}
}

// mbps is MB/s (10^6 bytes per second) over the window, as the paper quotes.
func (m *meter) mbps() float64 {
	d := (m.to - m.from).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(m.bytes) / 1e6 / d
}
