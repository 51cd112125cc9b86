//go:build fio

package fio

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fioengine"
	"google.golang.org/grpc/metadata"
)

// figure is one run of a workload: throughput and latency percentiles.
type figure struct {
	MiBps    float64
	P50, P99 time.Duration
}

// workload is the same I/O through fio and the engine, and through the
// client's gRPC calls to the drive directly: writes are 1 MiB unary
// Writes, reads 4 KiB unary Reads, depth goroutines each with one in
// flight (fio's iodepth). The I/O is that of `zctl bench node`'s
// grpc_unary_qd1 point and its random reads (QD1; it has no deeper read
// point), but not its path: that benchmark serves an in-process node over
// plaintext without a credential, where both sides here dial the same
// cluster node over the same connection settings, credential and codec
// (pkg/client, as the engine does).
type workload struct {
	name  string
	fio   []string // fio arguments besides the target
	write bool
	bs    int
	depth int
	ops   int
}

const (
	benchOffset = 150 // zones: clear of the test jobs' ranges
	benchZones  = 16
)

var workloads = []workload{
	{name: "seq write 1 MiB QD1", write: true, bs: mib, depth: 1, ops: benchZones * zoneCap / mib,
		fio: []string{"--rw=write", "--bs=1M", "--iodepth=1"}},
	{name: "rand read 4 KiB QD1", bs: 4096, depth: 1, ops: 4000,
		fio: []string{"--rw=randread", "--bs=4k", "--iodepth=1", "--io_size=" + strconv.Itoa(4000*4096)}},
	{name: "rand read 4 KiB QD16", bs: 4096, depth: 16, ops: 16000,
		fio: []string{"--rw=randread", "--bs=4k", "--iodepth=16", "--io_size=" + strconv.Itoa(16000*4096)}},
}

// BenchmarkEngineVsClient measures each workload through fio and the
// engine and through the raw client on the same drive of a three-node
// local cluster, three runs each interleaved (in alternating order), and
// reports the medians, the engine-over-client throughput ratio (the
// engine must not be the bottleneck: ≥ 0.8) and the host's load average. ZONEFLEET_FIO_RUNS changes
// the number of runs, ZONEFLEET_FIO_ARGS adds fio arguments (busy_poll=1).
//
//	make build fio-engine && ZONEFLEET_BIN_DIR=$PWD/bin ZONEFLEET_FIO_ENGINE=$PWD/bin/zonefleet-fio.so \
//	  go test -tags fio -run '^$' -bench EngineVsClient -benchtime 1x ./test/fio/
func BenchmarkEngineVsClient(b *testing.B) {
	c := localUp(b, "--zone-capacity", "768", "--default-namespace", "")
	raw := rawDrive(b, c)
	runs := 3
	if s := os.Getenv("ZONEFLEET_FIO_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\nload average before: %s", loadavg())
	fmt.Fprintf(&table, "\n%-22s %12s %10s %10s %12s %10s %10s %7s\n", "workload", "engine MiB/s", "p50", "p99", "client MiB/s", "p50", "p99", "ratio")
	for _, w := range workloads {
		var eng, cli []figure
		for r := 0; r < runs; r++ { // alternately engine first and client first
			if r%2 == 1 {
				cli = append(cli, raw.run(b, w))
			}
			if w.write { // fio finds the zones empty: it would reset full ones as it reaches them, timed
				raw.reset(b)
			}
			eng = append(eng, c.fioFigure(b, w))
			if r%2 == 0 {
				cli = append(cli, raw.run(b, w))
			}
		}
		e, k := median(eng), median(cli)
		ratio := e.MiBps / k.MiBps
		fmt.Fprintf(&table, "%-22s %12.1f %10s %10s %12.1f %10s %10s %7.2f\n", w.name, e.MiBps, e.P50, e.P99, k.MiBps, k.P50, k.P99, ratio)
		b.ReportMetric(ratio, strings.ReplaceAll(w.name, " ", "_")+"_ratio")
	}
	fmt.Fprintf(&table, "load average after: %s\n", loadavg())
	fmt.Print(table.String()) // (b.Log would drown it in the fio reports)
}

// loadavg is the host's 1, 5 and 15 minute load averages: the figures
// are only comparable at like load (the cluster, fio and the client share
// the host's cores).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func median(fs []figure) figure {
	pick := func(f func(figure) float64) float64 {
		v := make([]float64, len(fs))
		for i := range fs {
			v[i] = f(fs[i])
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return figure{MiBps: pick(func(f figure) float64 { return f.MiBps }),
		P50: time.Duration(pick(func(f figure) float64 { return float64(f.P50) })),
		P99: time.Duration(pick(func(f figure) float64 { return float64(f.P99) }))}
}

// fioFigure runs w through fio and the engine on node-1's zones
// [benchOffset, benchOffset+benchZones).
func (c *cluster) fioFigure(b *testing.B, w workload) figure {
	args := append([]string{"--name=bench", "--thread", "--ioengine=external:" + engine, "--filename=zf", "--node=node-1",
		"--zonemode=zbd", "--direct=1", "--lat_percentiles=1", "--offset=" + strconv.Itoa(benchOffset) + "z",
		"--size=" + strconv.Itoa(benchZones) + "z"}, w.fio...)
	args = append(args, strings.Fields(os.Getenv("ZONEFLEET_FIO_ARGS"))...) // e.g. --busy_poll=1
	r := c.fio(b, nil, args...)
	require.Equal(b, 0, r.code, "%s\n%s", r.normal, r.stderr)
	j := r.report.Jobs[0]
	d := j.Read
	if w.write {
		d = j.Write
	}
	return figure{MiBps: d.BW / mib, P50: time.Duration(d.LatNS.Percentile["50.000000"]), P99: time.Duration(d.LatNS.Percentile["99.000000"])}
}

// raw is node-1's drive through the client's connection, with the admin
// credential, as the engine reaches it.
type raw struct {
	dev  v1.ZonedDeviceClient
	ctx  context.Context
	zone uint64 // blocks
	cap  uint64
}

func rawDrive(b *testing.B, c *cluster) *raw {
	for _, e := range c.env {
		k, v, _ := strings.Cut(e, "=")
		b.Setenv(k, v)
	}
	o, err := fioengine.Options{}.Resolve()
	require.NoError(b, err)
	cfg, err := o.ClientConfig("")
	require.NoError(b, err)
	cl, err := client.New(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(cl.Close)
	n, err := cl.GetNode(context.Background(), "node-1")
	require.NoError(b, err)
	dev, dctx, err := cl.Device("node-1", n.GetAddr())
	require.NoError(b, err)
	md, _ := metadata.FromOutgoingContext(dctx)
	ctx := metadata.NewOutgoingContext(context.Background(), md)
	id, err := dev.Identify(ctx, &v1.IdentifyRequest{})
	require.NoError(b, err)
	return &raw{dev: dev, ctx: ctx, zone: id.GetZoneSize(), cap: id.GetZoneCapacity()}
}

// reset empties the benchmark's zones.
func (r *raw) reset(b *testing.B) {
	for z := uint64(benchOffset); z < benchOffset+benchZones; z++ {
		_, err := r.dev.ZoneManagement(r.ctx, &v1.ZoneManagementRequest{Zone: uint32(z), Action: v1.ZoneAction_ZONE_ACTION_RESET})
		require.NoError(b, err)
	}
}

func (r *raw) run(b *testing.B, w workload) figure {
	buf := make([]byte, w.bs)
	_, _ = rand.Read(buf)
	lats := make([]time.Duration, w.ops)
	var start time.Time
	if w.write { // the zones fio wrote: reset (untimed), then written 1 MiB at a time, zone after zone
		r.reset(b)
		per := int(r.cap * 4096 / uint64(w.bs))
		start = time.Now()
		for i := 0; i < w.ops; i++ {
			z, k := uint64(benchOffset+i/per), uint64(i%per)
			t0 := time.Now()
			_, err := r.dev.Write(r.ctx, &v1.WriteRequest{Lba: z*r.zone + k*uint64(w.bs)/4096, Data: buf})
			require.NoError(b, err)
			lats[i] = time.Since(t0)
		}
	} else { // random blocks of the written zones, depth goroutines
		blocks := r.cap
		var wg sync.WaitGroup
		errs := make(chan error, w.depth)
		start = time.Now()
		for g := 0; g < w.depth; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := mrand.New(mrand.NewPCG(uint64(g), 1))
				for i := g; i < w.ops; i += w.depth {
					z := uint64(benchOffset) + rng.Uint64N(benchZones)
					lba := z*r.zone + rng.Uint64N(blocks)
					t0 := time.Now()
					_, err := r.dev.Read(r.ctx, &v1.ReadRequest{Lba: lba, Blocks: uint32(w.bs / 4096)})
					if err != nil {
						errs <- err
						return
					}
					lats[i] = time.Since(t0)
				}
			}()
		}
		wg.Wait()
		close(errs)
		require.NoError(b, <-errs)
	}
	el := time.Since(start)
	slices.Sort(lats)
	return figure{MiBps: float64(w.ops*w.bs) / mib / el.Seconds(), P50: lats[len(lats)/2], P99: lats[len(lats)*99/100]}
}
