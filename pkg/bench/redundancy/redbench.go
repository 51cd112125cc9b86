// Package redbench measures what redundancy costs and what it buys
// (`zctl bench redundancy`): on one local cluster (real gRPC over
// loopback, TLS, real backing files, the drives' timing model on the
// realtime clock) it writes and reads back the same bytes in a namespace
// without redundancy, in a mirror:2 namespace and in a raid5 namespace,
// reads the raid5 bytes again with the node of a data leg stopped (reads
// reconstructed from parity) and restarts it, reads the mirrored bytes
// again with one node stopped (degraded reads), then declares that node
// lost and times the rebuild of its copies elsewhere (node to node) and,
// since the same node held legs of the raid5 bytes, the rebuild of those
// legs (the node outside each group pulls the k surviving units of every
// row from their nodes and XORs them).
//
// Each throughput point is the median of Runs runs, interleaved (every
// round measures none, mirror:2 then raid5), each on fresh v-zones; every
// read is compared byte for byte with what was written. The figures are
// this machine's software path: every "node" runs in this process on the
// same two cores, so mirror:2 pays its second copy and raid5 its XOR and
// parity writes in CPU, not only in network and drive bandwidth as on a
// real cluster. Only the ratios carry over. The arbiter rebuilds one leg
// at a time, mirrored copies before raid5 legs in each pass, so the raid5
// rebuild is timed from the end of the mirrored one.
package redbench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Options of a run.
type Options struct {
	Dir   string // backing files (default: a temporary directory)
	Nodes int    // default 4
	MiB   int    // bytes written per point, default 64
	Runs  int    // runs per point (median), default 3
	Chunk int    // bytes per write and read call, default 1 MiB
	// Tenant throughput during a rebuild (load.go): LoadMiB of mirror:2
	// data to rebuild (default 128), LoadOps tenant operations with no
	// rebuild (default 32), the throttled point's rebuild rate in MiB/s
	// (0: node.DefaultRebuildRate). NoLoad skips the two points.
	LoadMiB     int
	LoadOps     int
	RebuildRate float64
	NoLoad      bool
}

func (o *Options) defaults() {
	if o.Nodes == 0 {
		o.Nodes = 4
	}
	if o.MiB == 0 {
		o.MiB = 64
	}
	if o.Runs == 0 {
		o.Runs = 3
	}
	if o.Chunk == 0 {
		o.Chunk = 1 << 20
	}
	if o.LoadMiB == 0 {
		o.LoadMiB = 128
	}
	if o.LoadOps == 0 {
		o.LoadOps = 32
	}
	if o.RebuildRate == 0 {
		o.RebuildRate = node.DefaultRebuildRate
	}
}

// Result of a run. Throughputs are MiB/s (medians).
type Result struct {
	Nodes             int     `json:"nodes"`
	MiB               int     `json:"mib"`
	Runs              int     `json:"runs"`
	NoneWriteMiBps    float64 `json:"none_write_mibps"`
	NoneReadMiBps     float64 `json:"none_read_mibps"`
	MirrorWriteMiBps  float64 `json:"mirror2_write_mibps"`
	MirrorReadMiBps   float64 `json:"mirror2_read_mibps"`
	DegradedReadMiBps float64 `json:"mirror2_degraded_read_mibps"`
	ParityWriteMiBps  float64 `json:"raid5_write_mibps"`
	ParityReadMiBps   float64 `json:"raid5_read_mibps"`
	ParityDegradedMiB float64 `json:"raid5_degraded_read_mibps"`
	// Ratios to none in the same run.
	MirrorWriteRatio    float64 `json:"mirror2_write_over_none"`
	MirrorReadRatio     float64 `json:"mirror2_read_over_none"`
	DegradedReadRatio   float64 `json:"mirror2_degraded_read_over_none"`
	ParityWriteRatio    float64 `json:"raid5_write_over_none"`
	ParityReadRatio     float64 `json:"raid5_read_over_none"`
	ParityDegradedRatio float64 `json:"raid5_degraded_read_over_none"`
	RebuiltCopies       int     `json:"rebuilt_copies"`
	RebuiltMiB          float64 `json:"rebuilt_mib"` // zone capacity of the rebuilt copies
	RebuildSeconds      float64 `json:"rebuild_seconds"`
	RebuildSecondsPerGi float64 `json:"rebuild_seconds_per_gib"`
	// raid5: legs (data and parity) of the kept raid5 bytes on the lost node.
	ParityRebuiltLegs       int     `json:"raid5_rebuilt_legs"`
	ParityRebuiltMiB        float64 `json:"raid5_rebuilt_mib"` // zone capacity of the rebuilt legs
	ParityRebuildSeconds    float64 `json:"raid5_rebuild_seconds"`
	ParityRebuildSecondsPer float64 `json:"raid5_rebuild_seconds_per_gib"`
	// Tenant throughput during a mirror:2 rebuild at the rebuild rate
	// (Throttled) and with no limit (Unthrottled), each in its own cluster.
	Throttled   *LoadPoint `json:"tenant_during_throttled_rebuild,omitempty"`
	Unthrottled *LoadPoint `json:"tenant_during_unthrottled_rebuild,omitempty"`
}

type point struct {
	ids  []uint64
	ends []int // bytes written into each v-zone (a finished one reports its capacity)
	data []byte
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (Result, error) {
	o.defaults()
	if o.Nodes < 3 || o.MiB < 1 || o.Runs < 1 || o.Chunk < 4096 || o.Chunk%4096 != 0 || o.LoadMiB < 1 || o.LoadOps < 1 {
		return Result{}, &zerr.InvalidArgumentError{Field: "options", Reason: "want at least 3 nodes, 1 MiB, 1 run, 1 load MiB and op, and a chunk of whole 4 KiB blocks"}
	}
	if _, err := node.RebuildRateBytes(o.RebuildRate); err != nil {
		return Result{}, err
	}
	res := Result{Nodes: o.Nodes, MiB: o.MiB, Runs: o.Runs}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "zonefleet-redbench-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: o.Nodes, Arbiters: 1, SessionTTL: time.Second,
		Device: localcluster.SmallDevice(), Admission: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return res, err
	}
	closeCluster := sync.OnceValue(cl.Close)
	defer closeCluster()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	if err != nil {
		return res, err
	}
	defer admin.Close()
	clients := map[string]*client.Client{}
	for _, ns := range []struct{ name, red string }{{"none", "none"}, {"mirror2", "mirror:2"}, {"raid5", "raid5"}} {
		if _, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns.name, MaxActiveVzones: 2, ZonesPerVzone: 4, Redundancy: ns.red}); err != nil {
			return res, fmt.Errorf("namespace %s: %w", ns.name, err)
		}
		c, err := client.New(ctx, cl.ClientConfig(ns.name))
		if err != nil {
			return res, err
		}
		defer c.Close()
		clients[ns.name] = c
	}
	bytesPer := o.MiB << 20
	var wNone, rNone, wMir, rMir, wPar, rPar []float64
	var keep, keepPar point
	for run := 0; run < o.Runs; run++ {
		for _, name := range []string{"none", "mirror2", "raid5"} {
			c := clients[name]
			p, wr, err := writePoint(ctx, c, bytesPer, o.Chunk)
			if err != nil {
				return res, fmt.Errorf("%s write: %w", name, err)
			}
			rd, err := readPoint(ctx, c, p, o.Chunk)
			if err != nil {
				return res, fmt.Errorf("%s read: %w", name, err)
			}
			switch name {
			case "none":
				wNone, rNone = append(wNone, wr), append(rNone, rd)
			case "mirror2":
				wMir, rMir = append(wMir, wr), append(rMir, rd)
			default:
				wPar, rPar = append(wPar, wr), append(rPar, rd)
			}
			if name == "mirror2" && run == o.Runs-1 {
				keep = p // read degraded and rebuilt below
				continue
			}
			if name == "raid5" && run == o.Runs-1 {
				keepPar = p // read degraded below
				continue
			}
			for _, id := range p.ids {
				if err := c.VZone(id).Reset(ctx); err != nil {
					return res, err
				}
			}
		}
	}
	res.NoneWriteMiBps, res.NoneReadMiBps = benchstat.Median(wNone), benchstat.Median(rNone)
	res.MirrorWriteMiBps, res.MirrorReadMiBps = benchstat.Median(wMir), benchstat.Median(rMir)
	res.ParityWriteMiBps, res.ParityReadMiBps = benchstat.Median(wPar), benchstat.Median(rPar)

	// raid5 degraded reads: stop the node of a data leg of the kept data
	// (reads reconstruct its units from the others and the parity), then
	// bring it back for the mirror:2 part.
	pc := clients["raid5"]
	pVictim, pIdx, err := nodeOf(ctx, pc, keepPar.ids[0])
	if err != nil {
		return res, err
	}
	if err := cl.StopNode(pIdx); err != nil {
		return res, err
	}
	var pdr []float64
	for run := 0; run < o.Runs; run++ {
		rd, err := readPoint(ctx, pc, keepPar, o.Chunk)
		if err != nil {
			return res, fmt.Errorf("raid5 degraded read: %w", err)
		}
		pdr = append(pdr, rd)
	}
	res.ParityDegradedMiB = benchstat.Median(pdr)
	if err := cl.StartNode(ctx, pIdx); err != nil {
		return res, err
	}
	if err := waitBack(ctx, admin, pVictim); err != nil {
		return res, err
	}

	// Degraded reads: stop a node holding copies of the kept data, the
	// raid5 victim when it holds some (its raid5 legs are rebuilt too).
	mc := clients["mirror2"]
	victim, idx, err := nodeOf(ctx, mc, keep.ids[0])
	if err != nil {
		return res, err
	}
	if n, err := zonesOn(ctx, mc, keep.ids, pVictim, false); err == nil && n > 0 {
		victim, idx = pVictim, pIdx
	}
	if err := cl.StopNode(idx); err != nil {
		return res, err
	}
	var dr []float64
	for run := 0; run < o.Runs; run++ {
		rd, err := readPoint(ctx, mc, keep, o.Chunk)
		if err != nil {
			return res, fmt.Errorf("degraded read: %w", err)
		}
		dr = append(dr, rd)
	}
	res.DegradedReadMiBps = benchstat.Median(dr)

	// Rebuild: the node is declared lost; time until no layout names it.
	if err := waitGone(ctx, admin, victim); err != nil {
		return res, err
	}
	lost := 0
	var zoneCap uint64
	for _, id := range keep.ids {
		l, err := layout(ctx, mc, id)
		if err != nil {
			return res, err
		}
		for _, g := range l.GetGroups() {
			for _, z := range g.GetZones() {
				if z.GetNode() == victim {
					lost++
				}
			}
			zoneCap = g.GetCapacity() / uint64(max(g.GetWidth(), 1))
		}
	}
	parLegs, err := zonesOn(ctx, pc, keepPar.ids, victim, true)
	if err != nil {
		return res, err
	}
	var parZoneCap uint64
	for _, id := range keepPar.ids {
		l, err := layout(ctx, pc, id)
		if err != nil {
			return res, err
		}
		for _, g := range l.GetGroups() {
			parZoneCap = g.GetCapacity() / uint64(max(g.GetWidth(), 1))
			if int(g.GetWidth())+1 >= o.Nodes {
				parLegs = 0 // no node outside the group to rebuild on: not measured
			}
		}
	}
	t0 := time.Now()
	if err := admin.RemoveNode(ctx, victim); err != nil && !errors.Is(err, zerr.ErrZoneState) {
		return res, fmt.Errorf("declare %s lost: %w", victim, err)
	}
	for {
		left := 0
		for _, id := range keep.ids {
			l, err := layout(ctx, mc, id)
			if err != nil {
				return res, err
			}
			for _, g := range l.GetGroups() {
				for _, z := range g.GetZones() {
					if z.GetNode() == victim {
						left++
					}
				}
			}
		}
		if left == 0 {
			break
		}
		if time.Since(t0) > 10*time.Minute {
			return res, &zerr.UnavailableError{What: "rebuild", Reason: fmt.Sprintf("%d copies still on %s after 10 minutes", left, victim)}
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	res.RebuildSeconds = time.Since(t0).Seconds()
	if parLegs > 0 {
		t1 := time.Now()
		for {
			left, err := zonesOn(ctx, pc, keepPar.ids, victim, false)
			if err != nil {
				return res, err
			}
			if left == 0 {
				break
			}
			if time.Since(t1) > 10*time.Minute {
				return res, &zerr.UnavailableError{What: "rebuild", Reason: fmt.Sprintf("%d raid5 zones still on %s after 10 minutes", left, victim)}
			}
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		res.ParityRebuildSeconds = time.Since(t1).Seconds()
		res.ParityRebuiltLegs = parLegs
		res.ParityRebuiltMiB = float64(uint64(parLegs)*parZoneCap*4096) / (1 << 20)
		if res.ParityRebuiltMiB > 0 {
			res.ParityRebuildSecondsPer = res.ParityRebuildSeconds / (res.ParityRebuiltMiB / 1024)
		}
		pfresh, err := client.New(ctx, cl.ClientConfig("raid5"))
		if err != nil {
			return res, err
		}
		defer pfresh.Close()
		if _, err := readPoint(ctx, pfresh, keepPar, o.Chunk); err != nil {
			return res, fmt.Errorf("raid5 read after the rebuild: %w", err)
		}
	}
	res.RebuiltCopies = lost
	res.RebuiltMiB = float64(uint64(lost)*zoneCap*4096) / (1 << 20)
	if res.RebuiltMiB > 0 {
		res.RebuildSecondsPerGi = res.RebuildSeconds / (res.RebuiltMiB / 1024)
	}
	// every byte still reads back, from the rebuilt layout, with the node gone
	fresh, err := client.New(ctx, cl.ClientConfig("mirror2"))
	if err != nil {
		return res, err
	}
	defer fresh.Close()
	if _, err := readPoint(ctx, fresh, keep, o.Chunk); err != nil {
		return res, fmt.Errorf("read after the rebuild: %w", err)
	}
	if res.NoneWriteMiBps > 0 {
		res.MirrorWriteRatio = res.MirrorWriteMiBps / res.NoneWriteMiBps
	}
	if res.NoneReadMiBps > 0 {
		res.MirrorReadRatio = res.MirrorReadMiBps / res.NoneReadMiBps
		res.DegradedReadRatio = res.DegradedReadMiBps / res.NoneReadMiBps
		res.ParityReadRatio = res.ParityReadMiBps / res.NoneReadMiBps
		res.ParityDegradedRatio = res.ParityDegradedMiB / res.NoneReadMiBps
	}
	if res.NoneWriteMiBps > 0 {
		res.ParityWriteRatio = res.ParityWriteMiBps / res.NoneWriteMiBps
	}
	if !o.NoLoad {
		_ = closeCluster() // one cluster at a time on this machine
		for _, rate := range []float64{o.RebuildRate, 0} {
			lp, err := loadPoint(ctx, o, rate)
			if err != nil {
				return res, fmt.Errorf("tenant during a rebuild at %v MiB/s: %w", rate, err)
			}
			if rate > 0 {
				res.Throttled = &lp
			} else {
				res.Unthrottled = &lp
			}
		}
	}
	return res, nil
}

// writePoint writes n random bytes in chunks into fresh v-zones, finishing
// each when full (and the last one), and returns the MiB/s.
func writePoint(ctx context.Context, c *client.Client, n, chunk int) (point, float64, error) {
	p := point{data: make([]byte, n)}
	_, _ = rand.Read(p.data)
	t0 := time.Now()
	var vz *client.VZone
	for off := 0; off < n; {
		if vz == nil {
			var err error
			if vz, err = c.OpenVZone(ctx); err != nil {
				return p, 0, err
			}
			p.ids = append(p.ids, vz.ID())
			p.ends = append(p.ends, 0)
		}
		k := min(chunk, n-off)
		_, err := vz.Append(ctx, p.data[off:off+k])
		if errors.Is(err, zerr.ErrZoneFull) {
			if err := vz.Finish(ctx); err != nil {
				return p, 0, err
			}
			vz = nil
			continue
		}
		if err != nil {
			return p, 0, err
		}
		off += k
		p.ends[len(p.ends)-1] += k
	}
	if err := vz.Flush(ctx); err != nil {
		return p, 0, err
	}
	secs := time.Since(t0).Seconds()
	if err := vz.Finish(ctx); err != nil {
		return p, 0, err
	}
	return p, float64(n) / (1 << 20) / secs, nil
}

// readPoint reads p back in chunks, compares it, and returns the MiB/s.
func readPoint(ctx context.Context, c *client.Client, p point, chunk int) (float64, error) {
	buf := make([]byte, chunk)
	t0 := time.Now()
	at := 0
	for i, id := range p.ids {
		vz := c.VZone(id)
		for off := 0; off < p.ends[i]; off += chunk {
			k := min(chunk, p.ends[i]-off)
			if err := vz.ReadInto(ctx, uint64(off)/4096, buf[:k]); err != nil { // SmallDevice: 4 KiB blocks
				return 0, err
			}
			if !bytes.Equal(buf[:k], p.data[at:at+k]) {
				return 0, &zerr.CorruptError{Path: fmt.Sprintf("v-zone %d at byte %d", id, off), Reason: "read back other bytes than written"}
			}
			at += k
		}
	}
	secs := time.Since(t0).Seconds()
	if at != len(p.data) {
		return 0, &zerr.CorruptError{Path: "bench data", Reason: fmt.Sprintf("read %d of %d bytes", at, len(p.data))}
	}
	return float64(at) / (1 << 20) / secs, nil
}

func layout(ctx context.Context, c *client.Client, id uint64) (*v1.VZone, error) {
	a, err := c.Arbiter(ctx)
	if err != nil {
		return nil, err
	}
	return a.GetVZone(ctx, &v1.VZoneRequest{Namespace: c.Namespace(), Id: id})
}

// nodeOf is a node holding a zone of v-zone id, and its index in the cluster.
func nodeOf(ctx context.Context, c *client.Client, id uint64) (string, int, error) {
	l, err := layout(ctx, c, id)
	if err != nil {
		return "", 0, err
	}
	node := l.GetGroups()[0].GetZones()[0].GetNode()
	var i int
	if _, err := fmt.Sscanf(node, "node-%d", &i); err != nil {
		return "", 0, err
	}
	return node, i - 1, nil
}

// zonesOn counts the zones of v-zones ids on node (legsOnly: the data
// and parity legs of raid5 groups, not their partial-parity logs).
func zonesOn(ctx context.Context, c *client.Client, ids []uint64, node string, legsOnly bool) (int, error) {
	n := 0
	for _, id := range ids {
		l, err := layout(ctx, c, id)
		if err != nil {
			return 0, err
		}
		for _, g := range l.GetGroups() {
			for i, z := range g.GetZones() {
				if z.GetNode() == node && (!legsOnly || !g.GetParity() || i <= int(g.GetWidth())) {
					n++
				}
			}
		}
	}
	return n, nil
}

// waitBack waits until the arbiter sees node id available again.
func waitBack(ctx context.Context, admin *client.Client, id string) error {
	for t0 := time.Now(); time.Since(t0) < time.Minute; {
		nodes, err := admin.ListNodes(ctx)
		if err == nil {
			for _, n := range nodes {
				if n.GetId() == id && n.GetAvailable() {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return &zerr.UnavailableError{What: "arbiter", Reason: "does not see the restarted node " + id}
}

// waitGone waits until the arbiter sees node id unavailable.
func waitGone(ctx context.Context, admin *client.Client, id string) error {
	for t0 := time.Now(); time.Since(t0) < time.Minute; {
		nodes, err := admin.ListNodes(ctx)
		if err == nil {
			for _, n := range nodes {
				if n.GetId() == id && !n.GetAvailable() {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return &zerr.UnavailableError{What: "arbiter", Reason: "still sees the stopped node " + id}
}

// WriteTable prints the result.
func (r Result) WriteTable(w io.Writer) error {
	t := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(t, "redundancy (%d nodes, %d MiB, median of %d)\twrite MiB/s\tread MiB/s\twrite / none\tread / none\n", r.Nodes, r.MiB, r.Runs)
	fmt.Fprintf(t, "none\t%.1f\t%.1f\t1.00\t1.00\n", r.NoneWriteMiBps, r.NoneReadMiBps)
	fmt.Fprintf(t, "mirror:2\t%.1f\t%.1f\t%.2f\t%.2f\n", r.MirrorWriteMiBps, r.MirrorReadMiBps, r.MirrorWriteRatio, r.MirrorReadRatio)
	fmt.Fprintf(t, "mirror:2, one node stopped\t-\t%.1f\t-\t%.2f\n", r.DegradedReadMiBps, r.DegradedReadRatio)
	fmt.Fprintf(t, "raid5\t%.1f\t%.1f\t%.2f\t%.2f\n", r.ParityWriteMiBps, r.ParityReadMiBps, r.ParityWriteRatio, r.ParityReadRatio)
	fmt.Fprintf(t, "raid5, a data leg's node stopped\t-\t%.1f\t-\t%.2f\n", r.ParityDegradedMiB, r.ParityDegradedRatio)
	fmt.Fprintf(t, "rebuild (mirror:2)\t%d copies (%.0f MiB) in %.2f s\t%.1f s/GiB\t\t\n", r.RebuiltCopies, r.RebuiltMiB, r.RebuildSeconds, r.RebuildSecondsPerGi)
	if r.ParityRebuiltLegs > 0 {
		fmt.Fprintf(t, "rebuild (raid5)\t%d legs (%.0f MiB) in %.2f s\t%.1f s/GiB\t\t\n", r.ParityRebuiltLegs, r.ParityRebuiltMiB, r.ParityRebuildSeconds, r.ParityRebuildSecondsPer)
	} else {
		fmt.Fprintf(t, "rebuild (raid5)\tthe lost node held no raid5 leg of the kept bytes\t\t\t\n")
	}
	if r.Throttled != nil || r.Unthrottled != nil {
		fmt.Fprintf(t, "tenant, 1 MiB append + read-back\tduring the rebuild\tduring / none\trebuild\t\n")
	}
	for _, lp := range []*LoadPoint{r.Throttled, r.Unthrottled} {
		if lp == nil {
			continue
		}
		rate := "unlimited"
		if lp.RateMiBps > 0 {
			rate = fmt.Sprintf("%.0f MiB/s", lp.RateMiBps)
		}
		fmt.Fprintf(t, "mirror:2 rebuild at %s\t%.1f MiB/s (none: %.1f), %d ops\t%.2f\t%.0f MiB in %.2f s, %.2f s throttled\t\n",
			rate, lp.DuringMiBps, lp.BaselineMiBps, lp.Samples, lp.Ratio, lp.RebuiltMiB, lp.RebuildSeconds, lp.ThrottledSeconds)
	}
	return t.Flush()
}
