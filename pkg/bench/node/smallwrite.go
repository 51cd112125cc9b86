package nodebench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// SmallWriteOptions configures the many-client 4 KiB write scaling
// measurement. Zero values take the defaults.
type SmallWriteOptions struct {
	Dir     string // backing files; "" = a temporary directory
	Clients []int  // default 1, 2, 4, 8, 16, 32 (1 is always measured)
	Writes  int    // 4 KiB writes per point over all clients (default 16384: 64 MiB)
	Runs    int    // runs per point, interleaved, median reported (default 3)
	// CacheQueues is the multi-queue drive's flash.Config.WriteCacheQueues
	// (default 16: one per chip of the 16-chip drive).
	CacheQueues int
}

// DefaultSmallWriteOptions is what `zctl bench node` runs.
func DefaultSmallWriteOptions() SmallWriteOptions {
	return SmallWriteOptions{Clients: []int{1, 2, 4, 8, 16, 32}, Writes: 16384, Runs: 3, CacheQueues: 16}
}

// SmallWriteResult is many clients writing 4 KiB blocks into one node,
// judged against the same run's CPU ceiling, for two drives: the write
// cache as one shared pool and as a multi-queue cache; JSON keys are
// stable.
//
// Each client has its own connection and zones and keeps one unary 4 KiB
// write in flight. The node's drive runs on the realtime clock (ssdnode's
// default), so every write also goes through the flash model's host link,
// write cache and chip bookings. The ceiling of N clients is what the
// machine's cores allow: the one-client throughput times min(N, CPUs ÷ the
// cores the one-client point kept busy); efficiency is the N-client
// throughput over it. A machine shared with other work gives the points
// fewer cores than CPUs, so efficiency is then below what the code allows.
// Lock wait is from the runtime's mutex profile (every contention event
// sampled during the points): the delay a holder caused its waiters,
// attributed to the function that released the lock, per GiB written.
//
// The drive series run the same clients as goroutines calling the drive
// (zns.Device.Write) in process, without gRPC: the drive's write path
// alone, where its locks are a larger share of the work.
type SmallWriteResult struct {
	Clients     []int             `json:"clients"`
	CPUs        int               `json:"cpus"`
	Single      SmallWriteSeries  `json:"single_queue"`
	Multi       SmallWriteSeries  `json:"multi_queue"`
	DriveSingle SmallWriteSeries  `json:"drive_single_queue"`
	DriveMulti  SmallWriteSeries  `json:"drive_multi_queue"`
	Config      map[string]string `json:"config"`
}

// SmallWriteSeries is one drive's points (medians of the runs).
type SmallWriteSeries struct {
	CacheQueues  int             `json:"cache_queues"` // flash.Config.WriteCacheQueues
	Drive        bool            `json:"drive_only"`   // in process, no gRPC
	MiBPerSecond map[int]float64 `json:"mib_per_second"`
	Efficiency   map[int]float64 `json:"efficiency"` // throughput ÷ ceiling
	// CPUEfficiency is the MiB written per CPU-second at N clients over
	// that at one client: below 1 when more clients cost more CPU per
	// byte (spinning, parking, scheduling). Unlike Efficiency it does not
	// depend on how many cores other work leaves the points.
	CPUEfficiency  map[int]float64 `json:"cpu_efficiency"`
	Cores          map[int]float64 `json:"cores_busy"`       // process CPU ÷ wall time
	CoresOneClient float64         `json:"cores_one_client"` // Cores[1]
	// WritePathWaitMsPerGiB: lock wait released in the node, the drive
	// emulator and the flash model (pkg/node, pkg/zns, pkg/flash), in
	// milliseconds per GiB written.
	WritePathWaitMsPerGiB map[int]float64 `json:"write_path_lock_wait_ms_per_gib"`
	// AllWaitMsPerGiB: every sync.Mutex/RWMutex and runtime lock wait of
	// the process (gRPC's, the runtime's), per GiB (runtime/metrics).
	AllWaitMsPerGiB map[int]float64 `json:"all_lock_wait_ms_per_gib"`
	// TopLocks: the write path's largest lock-wait sites over every point
	// and run, "function: ms per GiB written".
	TopLocks []string          `json:"top_write_path_locks"`
	Samples  map[int][]float64 `json:"samples_mib_per_second"`

	sites    map[string]float64 // seconds of write-path wait by site, all points
	wp, all  map[int][]float64
	cores    map[int][]float64
	b        *bench
	pool     []v1.ZonedDeviceClient
	dev      *zns.Device
	zoneSize uint64
	zoneCap  uint64
}

// SmallWrites runs the measurement.
func SmallWrites(ctx context.Context, o SmallWriteOptions) (*SmallWriteResult, error) {
	def := DefaultSmallWriteOptions()
	if len(o.Clients) == 0 {
		o.Clients = def.Clients
	}
	if o.Writes <= 0 {
		o.Writes = def.Writes
	}
	if o.Runs <= 0 {
		o.Runs = def.Runs
	}
	if o.CacheQueues <= 0 {
		o.CacheQueues = def.CacheQueues
	}
	seen := map[int]bool{1: true}
	clients := []int{1}
	for _, n := range o.Clients {
		if n < 1 || n > 256 {
			return nil, &zerr.InvalidArgumentError{Field: "clients", Reason: fmt.Sprintf("%d clients: want 1..256", n)}
		}
		if !seen[n] {
			seen[n] = true
			clients = append(clients, n)
		}
	}
	sort.Ints(clients)
	if o.Writes < clients[len(clients)-1] {
		return nil, &zerr.InvalidArgumentError{Field: "writes", Reason: fmt.Sprintf("%d writes for %d clients", o.Writes, clients[len(clients)-1])}
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "zctl-bench-node-small-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	maxClients := clients[len(clients)-1]
	total := int64(o.Writes) * 4096
	clk := clock.Realtime(1)
	defer clk.Stop()
	ctx = wire.WithNamespace(ctx, "bench")
	res := &SmallWriteResult{Clients: clients, CPUs: runtime.NumCPU()}
	series := []*SmallWriteSeries{&res.Single, &res.Multi, &res.DriveSingle, &res.DriveMulti}
	for i, s := range series {
		*s = SmallWriteSeries{MiBPerSecond: map[int]float64{}, Efficiency: map[int]float64{}, CPUEfficiency: map[int]float64{}, Cores: map[int]float64{},
			WritePathWaitMsPerGiB: map[int]float64{}, AllWaitMsPerGiB: map[int]float64{}, Samples: map[int][]float64{},
			sites: map[string]float64{}, wp: map[int][]float64{}, all: map[int][]float64{}, cores: map[int][]float64{}}
		cfg := throughputDrive(total+int64(maxClients)*zoneBytes, maxClients)
		if i%2 == 1 {
			s.CacheQueues = o.CacheQueues
			cfg.WriteCacheQueues = o.CacheQueues
		}
		dir := filepath.Join(o.Dir, fmt.Sprintf("s%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if i >= 2 {
			s.Drive = true
			d, err := zns.Create(filepath.Join(dir, "dev0.zns"), cfg, clk)
			if err != nil {
				return nil, err
			}
			defer func() {
				_ = d.Close()
				removeDrive(d.Path())
			}()
			s.dev = d
			g := d.Identify()
			s.zoneSize, s.zoneCap = g.ZoneSize, g.ZoneCapacity
			continue
		}
		b, err := start(dir, cfg, clk, false, 0)
		if err != nil {
			return nil, err
		}
		defer b.close()
		s.b = b
		for len(s.pool) < maxClients {
			c, closeC, err := b.client(ctx, false)
			if err != nil {
				return nil, err
			}
			defer closeC()
			s.pool = append(s.pool, c)
		}
		id, err := s.pool[0].Identify(ctx, &v1.IdentifyRequest{})
		if err != nil {
			return nil, err
		}
		s.zoneSize, s.zoneCap = id.GetZoneSize(), id.GetZoneCapacity()
	}
	payload := make([]byte, 4096)
	_, _ = rand.Read(payload)

	prevFrac := runtime.SetMutexProfileFraction(1)
	defer runtime.SetMutexProfileFraction(prevFrac)

	gib := float64(total) / (1 << 30)
	point := func(s *SmallWriteSeries, n int, timed bool) error {
		if s.Drive {
			if _, err := s.dev.ZoneMgmt(ctx, 0, zns.ActionReset, true); err != nil {
				return err
			}
		} else if _, err := s.pool[0].ZoneManagement(ctx, &v1.ZoneManagementRequest{SelectAll: true, Action: v1.ZoneAction_ZONE_ACTION_RESET}); err != nil {
			return err
		}
		s0, a0 := writePathWait(), allLockWait()
		t0, c0 := time.Now(), benchstat.ProcessCPU()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			k := o.Writes / n
			if i < o.Writes%n {
				k++
			}
			wg.Add(1)
			go func(client uint64) {
				defer wg.Done()
				for j := uint64(0); j < uint64(k); j++ {
					// client i writes zones i, i+maxClients, ... in order
					lba := (client+uint64(maxClients)*(j/s.zoneCap))*s.zoneSize + j%s.zoneCap
					var err error
					if s.Drive {
						_, err = s.dev.Write(ctx, lba, payload, zns.Flags{})
					} else {
						_, err = s.pool[client].Write(ctx, &v1.WriteRequest{Lba: lba, Data: payload})
					}
					if err != nil {
						errs <- fmt.Errorf("client %d write %d: %w", client, j, err)
						return
					}
				}
			}(uint64(i))
		}
		wg.Wait()
		el, cpu := time.Since(t0), benchstat.ProcessCPU()-c0
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		if !timed {
			return nil
		}
		s1, a1 := writePathWait(), allLockWait()
		var w float64
		for k, v := range s1 {
			d := v - s0[k]
			w += d
			s.sites[k] += d
		}
		s.Samples[n] = append(s.Samples[n], float64(total)/mib/el.Seconds())
		s.wp[n] = append(s.wp[n], w*1e3/gib)
		s.all[n] = append(s.all[n], (a1-a0)*1e3/gib)
		s.cores[n] = append(s.cores[n], cpu.Seconds()/el.Seconds())
		return nil
	}
	for _, n := range clients { // warm-up: connections, zones, page cache
		for _, s := range series {
			if err := point(s, n, false); err != nil {
				return nil, err
			}
		}
	}
	// Interleaved: every round runs every point of both drives once, the
	// drives alternating, so that the machine's slow spells spread.
	for r := 0; r < o.Runs; r++ {
		for _, n := range clients {
			for k := range series {
				if err := point(series[(k+r)%len(series)], n, true); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, s := range series {
		s.finish(clients, res.CPUs, gib, o.Runs)
	}
	res.Config = map[string]string{"writes_per_point": strconv.Itoa(o.Writes), "runs": strconv.Itoa(o.Runs),
		"clock": "realtime 1", "write": "unary 4 KiB, one in flight per client", "gomaxprocs": strconv.Itoa(runtime.GOMAXPROCS(0))}
	return res, nil
}

// finish computes the medians, efficiencies and top lock sites.
func (s *SmallWriteSeries) finish(clients []int, cpus int, gib float64, runs int) {
	for _, n := range clients {
		s.MiBPerSecond[n] = benchstat.Median(s.Samples[n])
		s.WritePathWaitMsPerGiB[n] = benchstat.Median(s.wp[n])
		s.AllWaitMsPerGiB[n] = benchstat.Median(s.all[n])
		s.Cores[n] = benchstat.Median(s.cores[n])
	}
	s.CoresOneClient = s.Cores[1]
	one := s.MiBPerSecond[1]
	for _, n := range clients {
		ceil := one * min(float64(n), float64(cpus)/max(s.CoresOneClient, 1e-9))
		if ceil > 0 {
			s.Efficiency[n] = s.MiBPerSecond[n] / ceil
		}
		if one > 0 && s.Cores[n] > 0 && s.CoresOneClient > 0 {
			s.CPUEfficiency[n] = s.MiBPerSecond[n] / s.Cores[n] / (one / s.CoresOneClient)
		}
	}
	type site struct {
		name string
		s    float64
	}
	var ss []site
	for k, v := range s.sites {
		if v > 0 {
			ss = append(ss, site{k, v})
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].s > ss[j].s || ss[i].s == ss[j].s && ss[i].name < ss[j].name })
	points := float64(runs * len(clients))
	for i := 0; i < len(ss) && i < 6; i++ {
		s.TopLocks = append(s.TopLocks, fmt.Sprintf("%s: %.2f", ss[i].name, ss[i].s*1e3/gib/points))
	}
}

// writePathPkgs are the packages whose lock releases count as the write path's.
var writePathPkgs = []string{"zonefleet/pkg/node.", "zonefleet/pkg/zns.", "zonefleet/pkg/flash."}

// writePathWait is the mutex profile's wait so far, in seconds, by the
// function that released the lock (the first frame past sync and runtime),
// for releases in the write path's packages.
func writePathWait() map[string]float64 {
	var buf bytes.Buffer
	if err := pprof.Lookup("mutex").WriteTo(&buf, 1); err != nil {
		return nil
	}
	return parseMutexProfile(&buf)
}

// parseMutexProfile reads a mutex profile in pprof's text form (debug=1).
func parseMutexProfile(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	cps, period := 0.0, 1.0
	var cycles float64
	site := ""
	flush := func() {
		if site != "" && cps > 0 {
			out[site] += cycles / cps * period
		}
		site, cycles = "", 0
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	inRecord, found := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cycles/second="):
			cps, _ = strconv.ParseFloat(strings.TrimPrefix(line, "cycles/second="), 64)
		case strings.HasPrefix(line, "sampling period="):
			period, _ = strconv.ParseFloat(strings.TrimPrefix(line, "sampling period="), 64)
			period = max(period, 1)
		case strings.Contains(line, " @ "):
			flush()
			f := strings.Fields(line)
			cycles, _ = strconv.ParseFloat(f[0], 64)
			inRecord, found = true, false
		case inRecord && strings.HasPrefix(line, "#"):
			f := strings.Fields(line)
			if found || len(f) < 3 {
				continue
			}
			fn := f[2]
			if i := strings.LastIndex(fn, "+0x"); i > 0 {
				fn = fn[:i]
			}
			if strings.HasPrefix(fn, "sync.") || strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/") {
				continue
			}
			found = true
			for _, p := range writePathPkgs {
				if strings.Contains(fn, p) {
					site = fn[strings.Index(fn, "pkg/")+4:]
				}
			}
		case line == "":
			inRecord = false
		}
	}
	flush()
	return out
}

// allLockWait is the process's lock wait so far, in seconds.
func allLockWait() float64 {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// WriteTable prints r as a table.
func (r *SmallWriteResult) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "4 KiB writes from N clients into one node (%d CPUs; efficiency = throughput / (1-client throughput x min(N, CPUs / cores one client keeps busy)))\n", r.CPUs)
	for _, s := range []*SmallWriteSeries{&r.Single, &r.Multi, &r.DriveSingle, &r.DriveMulti} {
		name := "gRPC, one shared write cache"
		if s.CacheQueues > 1 {
			name = fmt.Sprintf("gRPC, write cache in %d queues", s.CacheQueues)
		}
		if s.Drive {
			name = "drive only" + name[len("gRPC"):]
		}
		fmt.Fprintf(w, "%s: one client keeps %.2f cores busy\n", name, s.CoresOneClient)
		fmt.Fprintf(w, "  %-8s %8s %6s %10s %8s %16s %16s\n", "clients", "MiB/s", "cores", "efficiency", "cpu eff", "write-path wait", "all lock wait")
		for _, n := range r.Clients {
			fmt.Fprintf(w, "  %-8d %8.1f %6.2f %10.2f %8.2f %9.1f ms/GiB %9.1f ms/GiB\n", n, s.MiBPerSecond[n], s.Cores[n], s.Efficiency[n], s.CPUEfficiency[n], s.WritePathWaitMsPerGiB[n], s.AllWaitMsPerGiB[n])
		}
		for _, l := range s.TopLocks {
			fmt.Fprintf(w, "    lock %s ms/GiB\n", l)
		}
	}
}
