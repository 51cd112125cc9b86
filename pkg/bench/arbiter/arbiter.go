// Package arbiterbench measures the control plane at cluster scale (`zctl
// bench arbiter`): an arbiter on an embedded etcd (pkg/etcdlocal) with
// simulated ssdnodes, whose registrations are written straight into etcd
// (no node process: the arbiter only reads them).
//
// For each cluster size it runs allocation cycles — OpenVZone, NextStripeGroup,
// FinishVZone, ResetVZone: four state mutations and two stripe-group
// allocations — from several workers on distinct v-zones and reports:
//
//   - allocations_per_second: allocation cycles per second (a cycle is
//     v-zone open + stripe group + finish + reset),
//     the median of Repeats runs;
//   - bytes_per_mutation: key and value bytes the arbiter wrote to etcd per
//     mutation, counted by a wrapper around the etcd client's KV (every
//     committed transaction's puts and deletes), so it does not rely on the
//     arbiter's own accounting;
//   - ratio_vs_smallest: throughput relative to the smallest cluster of the
//     same run (the machine is noisy, so targets are ratios).
//
// A second scenario runs DBMutations mutations on the largest cluster with
// the arbiter's compaction on and reports etcd's database size.
//
// Every run uses its own etcd in a fresh directory; nothing is shared.
package arbiterbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/arbiter"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Options configure the benchmark.
type Options struct {
	// Dir holds the etcd data directories (default: a temporary directory).
	Dir string
	// Nodes are the simulated cluster sizes. Default 10, 100, 1000.
	Nodes []int
	// ZonesPerNode is the zones of each node's one device. Default 100.
	ZonesPerNode int
	// Cycles per run (after Warmup). Default 300.
	Cycles int
	// Warmup cycles before each measured run. Default 20.
	Warmup int
	// Repeats of each measurement; the median is reported. Default 3.
	Repeats int
	// Workers run cycles concurrently on distinct v-zones. Default 4.
	Workers int
	// FillVZones full v-zones (16 zones each) are allocated before the
	// measured cycles, so that they run against an occupied cluster.
	FillVZones int
	// DBMutations for the database-size scenario (0 skips it).
	DBMutations int
	// CompactInterval of the arbiter in the database-size scenario. Default 5s.
	CompactInterval time.Duration
}

func (o *Options) defaults() error {
	if len(o.Nodes) == 0 {
		o.Nodes = []int{10, 100, 1000}
	}
	if o.ZonesPerNode == 0 {
		o.ZonesPerNode = 100
	}
	if o.Cycles == 0 {
		o.Cycles = 300
	}
	if o.Warmup == 0 {
		o.Warmup = 20
	}
	if o.Repeats == 0 {
		o.Repeats = 3
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.CompactInterval == 0 {
		o.CompactInterval = 5 * time.Second
	}
	for _, n := range o.Nodes {
		if n < 1 || n > 100000 {
			return &zerr.InvalidArgumentError{Field: "nodes", Reason: fmt.Sprintf("%d is not in [1, 100000]", n)}
		}
	}
	if o.ZonesPerNode < 8 || len(o.Nodes) == 0 || o.Cycles < 1 || o.Repeats < 1 || o.Workers < 1 || o.Workers > 64 || o.DBMutations < 0 || o.FillVZones < 0 {
		return &zerr.InvalidArgumentError{Field: "options", Reason: "zones per node >= 8, cycles >= 1, repeats >= 1, workers in [1, 64], db mutations and fill v-zones >= 0"}
	}
	return nil
}

// Row is one cluster size.
type Row struct {
	Nodes                int       `json:"nodes"`
	ZonesPerNode         int       `json:"zones_per_node"`
	AllocatedZones       int       `json:"allocated_zones_before"`
	Cycles               int       `json:"cycles"`
	Mutations            int64     `json:"mutations"`
	BytesPerMutation     float64   `json:"bytes_per_mutation"`
	TxnsPerMutation      float64   `json:"transactions_per_mutation"` // below 1 when concurrent workers' mutations share a group commit
	AllocationsPerSecond float64   `json:"allocations_per_second"`    // cycles/s, median of the repeats
	StripeGroupsPerSec   float64   `json:"stripe_groups_per_second"`
	RatioVsSmallest      float64   `json:"ratio_vs_smallest"`
	Runs                 []float64 `json:"runs_allocations_per_second"`
}

// DBRow is the database-size scenario.
type DBRow struct {
	Nodes           int     `json:"nodes"`
	Mutations       int64   `json:"mutations"`
	DBSizeBytes     int64   `json:"db_size_bytes"`
	DBSizeMiB       float64 `json:"db_size_mib"`
	Compactions     int64   `json:"compactions"`
	Seconds         float64 `json:"seconds"`
	CompactInterval string  `json:"compact_interval"`
}

// Result is the whole benchmark.
type Result struct {
	Rows []Row  `json:"rows"`
	DB   *DBRow `json:"db,omitempty"`
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "zonefleet-bench-arbiter-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := &Result{}
	type acc struct{ bytes, txns, muts int64 }
	accs := make([]acc, len(o.Nodes))
	for _, n := range o.Nodes {
		res.Rows = append(res.Rows, Row{Nodes: n, ZonesPerNode: o.ZonesPerNode, Cycles: o.Cycles, AllocatedZones: o.FillVZones * 2 * benchWidth})
	}
	// Repeats are interleaved (every size once per round) so that the
	// machine's noise hits every size alike.
	for r := 0; r < o.Repeats; r++ {
		for i, n := range o.Nodes {
			m, err := runOnce(ctx, fmt.Sprintf("%s/n%d-r%d", dir, n, r), n, o, o.Cycles, 0)
			if err != nil {
				return nil, fmt.Errorf("%d nodes: %w", n, err)
			}
			res.Rows[i].Runs = append(res.Rows[i].Runs, m.cyclesPerSec)
			accs[i].bytes, accs[i].txns, accs[i].muts = accs[i].bytes+m.bytes, accs[i].txns+m.txns, accs[i].muts+m.mutations
		}
	}
	for i := range res.Rows {
		row, a := &res.Rows[i], accs[i]
		row.Mutations = a.muts
		row.BytesPerMutation = float64(a.bytes) / float64(max(a.muts, 1))
		row.TxnsPerMutation = float64(a.txns) / float64(max(a.muts, 1))
		row.AllocationsPerSecond = median(row.Runs)
		row.StripeGroupsPerSec = 2 * row.AllocationsPerSecond
	}
	if len(res.Rows) > 0 {
		base := res.Rows[0].AllocationsPerSecond
		for _, r := range res.Rows {
			if r.Nodes < res.Rows[0].Nodes {
				base = r.AllocationsPerSecond
			}
		}
		for i := range res.Rows {
			res.Rows[i].RatioVsSmallest = res.Rows[i].AllocationsPerSecond / base
		}
	}
	if o.DBMutations > 0 {
		n := slices.Max(o.Nodes)
		start := time.Now()
		m, err := runOnce(ctx, fmt.Sprintf("%s/db-n%d", dir, n), n, o, (o.DBMutations+3)/4, o.CompactInterval)
		if err != nil {
			return nil, fmt.Errorf("db size: %w", err)
		}
		res.DB = &DBRow{Nodes: n, Mutations: m.mutations, DBSizeBytes: m.dbSize, DBSizeMiB: float64(m.dbSize) / (1 << 20),
			Compactions: m.compactions, Seconds: time.Since(start).Seconds(), CompactInterval: o.CompactInterval.String()}
	}
	return res, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

type measure struct {
	cyclesPerSec float64
	bytes, txns  int64
	mutations    int64
	dbSize       int64
	compactions  int64
}

const (
	devFCGs    = 4
	benchWidth = 8
)

// device is each simulated node's drive: 4 flash chip groups, MAR 4 (all
// essentials, no spares, so the widths do not depend on overdrive).
func device(zones int) cluster.DeviceInfo {
	return cluster.DeviceInfo{Index: 0, Channels: devFCGs, Ways: 1, DZone: 1, FCGs: devFCGs, MAR: devFCGs, MOR: devFCGs, BlockSize: 4096, PageSize: 16384,
		ZoneSize: 1024, ZoneCapacity: 1024, NumZones: uint32(zones), Media: "TLC"}
}

func runOnce(ctx context.Context, dir string, nodes int, o Options, cycles int, compact time.Duration) (measure, error) {
	var m measure
	srv, err := etcdlocal.StartWith(dir, "", etcdlocal.Options{})
	if err != nil {
		return m, err
	}
	defer srv.Close()
	cli, err := srv.Client()
	if err != nil {
		return m, err
	}
	defer cli.Close()
	if err := registerNodes(ctx, cli, nodes, o.ZonesPerNode); err != nil {
		return m, err
	}
	acli, err := srv.Client() // the arbiter's client, its KV counted
	if err != nil {
		return m, err
	}
	defer acli.Close()
	counter := &countingKV{KV: acli.KV}
	acli.KV = counter
	if compact == 0 {
		compact = -1
	}
	a, err := arbiter.New(arbiter.Config{Addr: "bench:0", ReclaimInterval: -1, CompactInterval: compact,
		Logger: slog.New(slog.DiscardHandler)}, acli, nil)
	if err != nil {
		return m, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(rctx)
	}()
	defer func() { cancel(); <-done }()
	if err := waitReady(ctx, a, nodes); err != nil {
		return m, err
	}
	// MAR_logical is set so the namespace's minimum stripe width is the same
	// (8) at every cluster size: every cycle allocates two groups of 8 zones.
	mar := max(uint32(nodes)*devFCGs/benchWidth, uint32(o.Workers))
	if _, err := a.CreateNamespace(ctx, arbiter.NamespaceSpec{Name: "bench", MARLogical: mar, ZonesPerVZone: 2 * benchWidth}); err != nil {
		return m, err
	}
	run := func(n int) error {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, o.Workers)
		for w := 0; w < o.Workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					if errs[w] = cycle(ctx, a, "bench", uint64(w)); errs[w] != nil {
						next.Store(int64(n)) // stop the others
						return
					}
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	for i := 0; i < o.FillVZones; i++ {
		id := uint64(o.Workers + i)
		if _, err := a.OpenVZone(ctx, "bench", id); err != nil {
			return m, fmt.Errorf("fill: %w", err)
		}
		if _, err := a.NextStripeGroup(ctx, "bench", id); err != nil {
			return m, fmt.Errorf("fill: %w", err)
		}
		if _, err := a.FinishVZone(ctx, "bench", id); err != nil {
			return m, fmt.Errorf("fill: %w", err)
		}
	}
	if err := run(o.Warmup); err != nil {
		return m, err
	}
	b0, t0, c0 := counter.bytes.Load(), counter.txns.Load(), counter.compactions.Load()
	start := time.Now()
	if err := run(cycles); err != nil {
		return m, err
	}
	el := time.Since(start)
	m.cyclesPerSec = float64(cycles) / el.Seconds()
	m.bytes, m.txns, m.mutations = counter.bytes.Load()-b0, counter.txns.Load()-t0, int64(cycles)*4
	if compact > 0 {
		time.Sleep(2 * compact) // let the last rounds compact
		m.compactions = counter.compactions.Load() - c0
	}
	m.dbSize = srv.DBSize()
	return m, nil
}

func cycle(ctx context.Context, a *arbiter.Arbiter, ns string, id uint64) error {
	if _, err := a.OpenVZone(ctx, ns, id); err != nil {
		return fmt.Errorf("open: %w", err)
	}
	if _, err := a.NextStripeGroup(ctx, ns, id); err != nil {
		return fmt.Errorf("next stripe group: %w", err)
	}
	if _, err := a.FinishVZone(ctx, ns, id); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if err := a.ResetVZone(ctx, ns, id); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

func registerNodes(ctx context.Context, cli *clientv3.Client, nodes, zones int) error {
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := cli.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		return err
	}
	for i := 0; i < nodes; i++ {
		id := fmt.Sprintf("node-%05d", i)
		b, err := cluster.EncodeNode(cluster.NodeRecord{ID: id, Addr: fmt.Sprintf("10.0.%d.%d:7000", i/250, i%250+1), Version: "bench",
			Devices: []cluster.DeviceInfo{device(zones)}, StartedAt: time.Now()})
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(cluster.NodeKey(id), string(b)))
		if len(ops) == 100 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func waitReady(ctx context.Context, a *arbiter.Arbiter, nodes int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := a.Status(ctx)
		if err == nil && s.Leader && s.AvailableNodes == nodes {
			return nil
		}
		if time.Now().After(deadline) {
			return &zerr.UnavailableError{What: "arbiter", Reason: fmt.Sprintf("not serving %d nodes after 2m (%v)", nodes, err)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// countingKV counts what committed transactions wrote (keys and values of
// puts, keys of deletes) and compactions.
type countingKV struct {
	clientv3.KV
	bytes, txns, compactions atomic.Int64
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	return &countingTxn{Txn: k.KV.Txn(ctx), kv: k}
}

func (k *countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	r, err := k.KV.Put(ctx, key, val, opts...)
	if err == nil {
		k.bytes.Add(int64(len(key) + len(val)))
		k.txns.Add(1)
	}
	return r, err
}

func (k *countingKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	r, err := k.KV.Compact(ctx, rev, opts...)
	if err == nil {
		k.compactions.Add(1)
	}
	return r, err
}

type countingTxn struct {
	clientv3.Txn
	kv      *countingKV
	mu      sync.Mutex
	pending int64
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.mu.Lock()
	for _, op := range ops {
		t.pending += int64(len(op.KeyBytes()) + len(op.ValueBytes()))
	}
	t.mu.Unlock()
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	r, err := t.Txn.Commit()
	if err == nil && r.Succeeded {
		t.mu.Lock()
		t.kv.bytes.Add(t.pending)
		t.mu.Unlock()
		t.kv.txns.Add(1)
	}
	return r, err
}

// WriteTable prints the result.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODES\tZONES/NODE\tALLOCATED\tCYCLES/S (median)\tRATIO\tSTRIPE GROUPS/S\tBYTES/MUTATION\tTXNS/MUTATION\tRUNS")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%.2f\t%.0f\t%.0f\t%.2f\t%v\n", x.Nodes, x.ZonesPerNode, x.AllocatedZones, x.AllocationsPerSecond, x.RatioVsSmallest,
			x.StripeGroupsPerSec, x.BytesPerMutation, x.TxnsPerMutation, roundAll(x.Runs))
	}
	if r.DB != nil {
		fmt.Fprintf(tw, "\netcd db size after %d mutations at %d nodes (compaction every %s): %.1f MiB, %d compactions, %.0fs\n",
			r.DB.Mutations, r.DB.Nodes, r.DB.CompactInterval, r.DB.DBSizeMiB, r.DB.Compactions, r.DB.Seconds)
	}
	return tw.Flush()
}

func roundAll(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}
