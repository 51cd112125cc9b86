// Package devbench measures the emulated ZNS+ drive (pkg/zns): chip-bound
// compaction with and without copyback, the latency of user reads during a
// compaction vs idle, in-device zone compaction vs host copy, chip
// utilization of sequential writes, background share of PPA-ordered
// plugging (all on the virtual clock, deterministic: the same numbers on
// every run), and write throughput with 1-8 concurrent writers with the
// clock off (wall time, machine dependent).
//
// None of the virtual-clock figures is a model constant read back: each is
// the outcome of a simulated run (e.g. copyback_compaction_speedup compacts
// the same half-valid zone on the same chips once with copyback and once
// with disable_copyback and divides the two compaction times).
package devbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Options of a run.
type Options struct {
	Dir           string        // where backing files go; "" = a temp dir
	Media         string        // media preset; "" = MLC
	WriteDuration time.Duration // per writer-count measurement with the clock off; 0 = 1s
	WriterCounts  []int         // default 1, 2, 4, 8
	BlocksPerChip int           // flash blocks per chip of the benchmark drive; 0 = 8
}

// Result holds the benchmark keys.
type Result struct {
	Media string `json:"media"`
	// chip-bound compaction of the same half-valid zone onto the same chips
	CopybackCompactionMillis    float64 `json:"copyback_compaction_ms"`
	ReadProgramCompactionMillis float64 `json:"read_program_compaction_ms"` // disable_copyback
	CopybackCompactionSpeedup   float64 `json:"copyback_compaction_speedup"`
	// QD1 4 KiB reads on the compacting chips vs the same reads on an idle drive
	ReadIdleMicros             float64 `json:"read_idle_us"`
	ReadDuringCompactionMicros float64 `json:"read_during_compaction_us"`
	ReadDuringCompactionVsIdle float64 `json:"read_during_compaction_vs_idle"`
	// mean compaction time left when a read was submitted: what each read
	// would wait if the compaction held its chips until its end (convoy)
	CompactionLeftAtReadMicros float64 `json:"compaction_left_at_read_us"`

	IZCVsHostCopy float64 `json:"izc_vs_host_copy"`
	// host copy with one 4 KiB read per valid block: all submitted at once
	// (F2FS, ZNS+ Fig. 3a) vs one synchronous read at a time
	HostCopyParallel4KMillis float64         `json:"host_copy_parallel_4k_ms"`
	HostCopySync4KMillis     float64         `json:"host_copy_sync_4k_ms"`
	IZCVsHostCopyParallel4K  float64         `json:"izc_vs_host_copy_parallel_4k"`
	IZCVsHostCopySync4K      float64         `json:"izc_vs_host_copy_sync_4k"`
	IZCMillis                float64         `json:"izc_ms"`
	HostCopyMillis           float64         `json:"host_copy_ms"`
	SeqWriteChipUtilization  float64         `json:"seq_write_chip_utilization"`
	TLBackgroundPlugRatio    float64         `json:"tl_background_plug_ratio"`
	WriteMiBPerSecond        map[int]float64 `json:"write_mib_per_second"`
}

func (o *Options) defaults() {
	if o.Media == "" {
		o.Media = "MLC"
	}
	if o.WriteDuration == 0 {
		o.WriteDuration = time.Second
	}
	if len(o.WriterCounts) == 0 {
		o.WriterCounts = []int{1, 2, 4, 8}
	}
	if o.BlocksPerChip == 0 {
		o.BlocksPerChip = 8
	}
}

func (o Options) cfg() flash.Config {
	c := flash.Defaults()
	c.Media = o.Media
	c.BlocksPerChip = o.BlocksPerChip
	c.SpareBlocksPerChip = 2
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}

type bench struct {
	dir string
	n   int
}

func (b *bench) open(cfg flash.Config, clk clock.Clock) (*zns.Device, error) {
	b.n++
	p := filepath.Join(b.dir, fmt.Sprintf("bench%d", b.n))
	return zns.Create(p, cfg, clk)
}

func (b *bench) done(d *zns.Device) {
	_ = d.Close()
	p := filepath.Join(b.dir, fmt.Sprintf("bench%d", b.n))
	_ = os.Remove(p)
	_ = os.Remove(p + ".journal")
}

// Run computes all keys.
func Run(ctx context.Context, o Options) (Result, error) {
	o.defaults()
	dir := o.Dir
	if dir == "" {
		var err error
		dir, err = os.MkdirTemp("", "devbench")
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(dir)
	}
	b := &bench{dir: dir}
	r := Result{Media: o.Media, WriteMiBPerSecond: map[int]float64{}}
	var err error
	if err = b.copyback(ctx, o, &r); err != nil {
		return r, err
	}
	if err = b.readsDuring(ctx, o, &r); err != nil {
		return r, err
	}
	if r.IZCMillis, r.HostCopyMillis, err = b.izc(ctx, o); err != nil {
		return r, err
	}
	r.IZCVsHostCopy = r.IZCMillis / r.HostCopyMillis
	for _, h := range []struct {
		mode int
		ms   *float64
		vs   *float64
	}{{hostBlocks, &r.HostCopyParallel4KMillis, &r.IZCVsHostCopyParallel4K}, {hostBlocksSync, &r.HostCopySync4KMillis, &r.IZCVsHostCopySync4K}} {
		t, err := b.hostCopy(ctx, o, h.mode)
		if err != nil {
			return r, err
		}
		*h.ms = float64(t) / 1e6
		*h.vs = r.IZCMillis / *h.ms
	}
	if r.SeqWriteChipUtilization, err = b.seqUtil(ctx, o); err != nil {
		return r, err
	}
	if r.TLBackgroundPlugRatio, err = b.tlPlug(ctx, o); err != nil {
		return r, err
	}
	for _, w := range o.WriterCounts {
		if r.WriteMiBPerSecond[w], err = b.writers(ctx, o, w); err != nil {
			return r, err
		}
	}
	return r, nil
}

func block(bs int, tag byte) []byte {
	p := make([]byte, bs)
	for i := range p {
		p[i] = tag + byte(i)
	}
	return p
}

func writeN(ctx context.Context, d *zns.Device, lba uint64, n int, chunk int) (zns.IOResult, error) {
	bs := d.Geometry().BlockSize
	buf := make([]byte, chunk*bs)
	for i := range buf {
		buf[i] = byte(i)
	}
	var last zns.IOResult
	for i := 0; i < n; i += chunk {
		k := min(chunk, n-i)
		res, err := d.Write(ctx, lba+uint64(i), buf[:k*bs], zns.Flags{})
		if err != nil {
			return last, err
		}
		last = res
	}
	return last, nil
}

// compactHalf compacts the half-valid zone 0 into zone 1 (same chips: the
// chunks keep their chip) and returns the compaction's start and end; during
// it, if reads > 0, a QD1 reader issues that many 4 KiB reads of zone 0
// spread over all chips from 'from' on, and their mean latency and the mean
// compaction time left at their submission are returned.
func (b *bench) compactHalf(ctx context.Context, o Options, noCopyback bool, reads int, from time.Duration) (comp zns.CompactionResult, readLat, left time.Duration, err error) {
	cfg := o.cfg()
	cfg.DisableCopyback = noCopyback
	v := clock.NewVirtual()
	d, err := b.open(cfg, v)
	if err != nil {
		return comp, 0, 0, err
	}
	defer b.done(d)
	g := d.Geometry()
	cb := uint64(g.ChunkBlocks)
	valid, err := halfValid(ctx, d)
	if err != nil {
		return comp, 0, 0, err
	}
	v.AdvanceTo(d.Drained() + time.Millisecond)
	t0 := v.Now()
	var copies []zns.Copy
	for k, c := range valid {
		copies = append(copies, zns.Copy{Src: c * cb, Dst: g.ZoneSize + uint64(k)*cb, Count: cb})
	}
	id, err := d.ZoneCompaction(ctx, copies)
	if err != nil {
		return comp, 0, 0, err
	}
	var subs []time.Duration
	if reads > 0 {
		v.AdvanceTo(t0 + from)
		var sum time.Duration
		for i := 0; i < reads; i++ {
			// chunk valid[i*7 % n]: a valid chunk, a different chip each time
			c := valid[(i*7)%len(valid)]
			_, res, err := d.Read(ctx, c*cb, 1)
			if err != nil {
				return comp, 0, 0, err
			}
			sum += res.Latency()
			subs = append(subs, res.Submitted)
		}
		readLat = sum / time.Duration(reads)
	}
	comp, err = d.WaitCompaction(ctx, id)
	if err != nil {
		return comp, 0, 0, err
	}
	if len(subs) > 0 {
		var l time.Duration
		for _, s := range subs {
			l += comp.Completed - s
		}
		left = l / time.Duration(len(subs))
	}
	return comp, readLat, left, nil
}

// idleReads issues the reads of compactHalf on a drive that does nothing else.
func (b *bench) idleReads(ctx context.Context, o Options, reads int) (time.Duration, error) {
	v := clock.NewVirtual()
	d, err := b.open(o.cfg(), v)
	if err != nil {
		return 0, err
	}
	defer b.done(d)
	cb := uint64(d.Geometry().ChunkBlocks)
	valid, err := halfValid(ctx, d)
	if err != nil {
		return 0, err
	}
	v.AdvanceTo(d.Drained() + time.Millisecond)
	var sum time.Duration
	for i := 0; i < reads; i++ {
		_, res, err := d.Read(ctx, valid[(i*7)%len(valid)]*cb, 1)
		if err != nil {
			return 0, err
		}
		sum += res.Latency()
	}
	return sum / time.Duration(reads), nil
}

// copyback: the same chip-bound compaction with copyback and with every
// chunk copied by read and program.
func (b *bench) copyback(ctx context.Context, o Options, r *Result) error {
	cb, _, _, err := b.compactHalf(ctx, o, false, 0, 0)
	if err != nil {
		return err
	}
	rp, _, _, err := b.compactHalf(ctx, o, true, 0, 0)
	if err != nil {
		return err
	}
	if cb.CopybackChunks == 0 || rp.CopybackChunks != 0 || rp.ReadProgBlocks != cb.Blocks {
		return fmt.Errorf("copyback bench: unexpected copy paths %+v %+v", cb, rp)
	}
	r.CopybackCompactionMillis = float64(cb.Duration()) / 1e6
	r.ReadProgramCompactionMillis = float64(rp.Duration()) / 1e6
	r.CopybackCompactionSpeedup = float64(rp.Duration()) / float64(cb.Duration())
	return nil
}

const benchReads = 16

// readsDuring: QD1 reads on the compacting chips, from a quarter into the
// compaction on, vs the same reads on an idle drive.
func (b *bench) readsDuring(ctx context.Context, o Options, r *Result) error {
	idle, err := b.idleReads(ctx, o, benchReads)
	if err != nil {
		return err
	}
	from := time.Duration(r.CopybackCompactionMillis*1e6) / 4
	_, lat, left, err := b.compactHalf(ctx, o, false, benchReads, from)
	if err != nil {
		return err
	}
	r.ReadIdleMicros = float64(idle) / 1e3
	r.ReadDuringCompactionMicros = float64(lat) / 1e3
	r.ReadDuringCompactionVsIdle = float64(lat) / float64(idle)
	r.CompactionLeftAtReadMicros = float64(left) / 1e3
	return nil
}

// halfValid fills zone 0 and returns its valid chunks: every other stripe.
func halfValid(ctx context.Context, d *zns.Device) ([]uint64, error) {
	g := d.Geometry()
	if _, err := writeN(ctx, d, 0, int(g.ZoneCap), 64); err != nil {
		return nil, err
	}
	var valid []uint64
	for c := uint64(0); c < g.ZoneCap/uint64(g.ChunkBlocks); c++ {
		if (c/uint64(g.DZone))%2 == 0 {
			valid = append(valid, c)
		}
	}
	return valid, nil
}

// izc: compact a half-valid zone with zone_compaction vs host read + write back.
func (b *bench) izc(ctx context.Context, o Options) (float64, float64, error) {
	izc, err := b.compactHalfIZC(ctx, o)
	if err != nil {
		return 0, 0, err
	}
	host, err := b.hostCopy(ctx, o, hostChunks)
	if err != nil {
		return 0, 0, err
	}
	return float64(izc) / 1e6, float64(host) / 1e6, nil
}

func (b *bench) compactHalfIZC(ctx context.Context, o Options) (time.Duration, error) {
	v := clock.NewVirtual()
	d, err := b.open(o.cfg(), v)
	if err != nil {
		return 0, err
	}
	defer b.done(d)
	g := d.Geometry()
	cb := uint64(g.ChunkBlocks)
	valid, err := halfValid(ctx, d)
	if err != nil {
		return 0, err
	}
	v.AdvanceTo(d.Drained() + time.Millisecond)
	t0 := v.Now()
	var copies []zns.Copy
	for k, c := range valid {
		copies = append(copies, zns.Copy{Src: c * cb, Dst: g.ZoneSize + uint64(k)*cb, Count: cb})
	}
	id, err := d.ZoneCompaction(ctx, copies)
	if err == nil {
		_, err = d.WaitCompaction(ctx, id)
	}
	if err != nil {
		return 0, err
	}
	return d.Drained() - t0, nil
}

// Host-copy baselines (ZNS: the file system reads the valid blocks and
// writes them back).
const (
	hostChunks     = iota // one read per valid chunk, all submitted at once
	hostBlocks            // one 4 KiB read per valid block, all submitted at once (F2FS, ZNS+ Fig. 3a)
	hostBlocksSync        // one synchronous 4 KiB read per valid block (QD1)
)

// hostCopy: read the valid data of the half-valid zone, then, once every read
// is done (the write phase waits for the read phase, Fig. 3a), write it
// back to zone 1 in chunk-sized writes submitted at once.
func (b *bench) hostCopy(ctx context.Context, o Options, mode int) (time.Duration, error) {
	v := clock.NewVirtual()
	d, err := b.open(o.cfg(), v)
	if err != nil {
		return 0, err
	}
	defer b.done(d)
	g := d.Geometry()
	cb := uint64(g.ChunkBlocks)
	valid, err := halfValid(ctx, d)
	if err != nil {
		return 0, err
	}
	v.AdvanceTo(d.Drained() + time.Millisecond)
	t0 := v.Now()
	nw := zns.NoWait(ctx)
	var data [][]byte
	readDone := t0
	for _, c := range valid {
		if mode == hostChunks {
			buf, res, err := d.Read(nw, c*cb, cb)
			if err != nil {
				return 0, err
			}
			data = append(data, buf)
			readDone = max(readDone, res.Completed)
			continue
		}
		var chunk []byte
		for i := uint64(0); i < cb; i++ {
			rctx := nw
			if mode == hostBlocksSync {
				rctx = ctx // waits: the clock moves to the completion
			}
			buf, res, err := d.Read(rctx, c*cb+i, 1)
			if err != nil {
				return 0, err
			}
			chunk = append(chunk, buf...)
			readDone = max(readDone, res.Completed)
		}
		data = append(data, chunk)
	}
	v.AdvanceTo(readDone)
	end := readDone
	for k, buf := range data {
		res, err := d.Write(nw, g.ZoneSize+uint64(k)*cb, buf, zns.Flags{})
		if err != nil {
			return 0, err
		}
		end = max(end, res.Completed)
	}
	return max(end, d.Drained()) - t0, nil
}

// seqUtil: one QD1 sequential writer over a full-stripe zone; mean chip busy
// share from the first write until the device drains.
func (b *bench) seqUtil(ctx context.Context, o Options) (float64, error) {
	cfg := o.cfg()
	v := clock.NewVirtual()
	d, err := b.open(cfg, v)
	if err != nil {
		return 0, err
	}
	defer b.done(d)
	g := d.Geometry()
	for z := uint64(0); z < 2; z++ {
		if _, err := writeN(ctx, d, z*g.ZoneSize, int(g.ZoneCap), 16); err != nil {
			return 0, err
		}
	}
	end := d.Drained()
	l := d.Log()
	var sum float64
	for _, bz := range l.ChipBusy {
		sum += float64(bz) / float64(end)
	}
	return sum / float64(len(l.ChipBusy)), nil
}

// tlPlug: TL_open a half-valid zone (PPA-ordered), overwrite its invalid
// blocks in LBA order at QD1; share of plugged blocks done in the background.
func (b *bench) tlPlug(ctx context.Context, o Options) (float64, error) {
	cfg := o.cfg()
	v := clock.NewVirtual()
	d, err := b.open(cfg, v)
	if err != nil {
		return 0, err
	}
	defer b.done(d)
	g := d.Geometry()
	cb := uint64(g.ChunkBlocks)
	valid, err := halfValid(ctx, d)
	if err != nil {
		return 0, err
	}
	// plus scattered valid blocks inside invalid chunks (partial chunks)
	bm := make([]byte, (g.ZoneCap+7)/8)
	isValid := make([]bool, g.ZoneCap)
	for _, c := range valid {
		for i := c * cb; i < (c+1)*cb; i++ {
			isValid[i] = true
		}
	}
	for i := uint64(0); i < g.ZoneCap; i += 37 {
		isValid[i] = true
	}
	for i, ok := range isValid {
		if ok {
			bm[i/8] |= 1 << (i % 8)
		}
	}
	v.AdvanceTo(d.Drained() + time.Millisecond)
	if _, err := d.TLOpen(ctx, 0, bm, zns.PPAOrdered); err != nil {
		return 0, err
	}
	blk := block(g.BlockSize, 1)
	for i := uint64(0); i < g.ZoneCap; {
		if isValid[i] {
			i++
			continue
		}
		n := uint64(0)
		var buf []byte
		for i+n < g.ZoneCap && !isValid[i+n] && n < 16 {
			buf = append(buf, blk...)
			n++
		}
		if _, err := d.Write(ctx, i, buf, zns.Flags{}); err != nil {
			return 0, err
		}
		i += n
	}
	l := d.Log()
	tot := l.PluggedBackground + l.PluggedOnDemand
	if tot == 0 {
		return 0, nil
	}
	return float64(l.PluggedBackground) / float64(tot), nil
}

// writers: clock off, w goroutines appending 64 KiB to their own zones.
func (b *bench) writers(ctx context.Context, o Options, w int) (float64, error) {
	cfg := o.cfg()
	cfg.DZone = 1 // many small zones, one per writer
	d, err := b.open(cfg, clock.Off())
	if err != nil {
		return 0, err
	}
	defer b.done(d)
	g := d.Geometry()
	buf := make([]byte, 16*g.BlockSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	var total int64
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	deadline := start.Add(o.WriteDuration)
	var wg sync.WaitGroup
	for i := 0; i < w; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			zi := uint64(i)
			var n int64
			for time.Now().Before(deadline) {
				_, _, err := d.Append(ctx, zi*g.ZoneSize, buf, zns.Flags{})
				if err != nil {
					if _, err := d.ZoneMgmt(ctx, zi, zns.ActionReset, false); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
					continue
				}
				n += int64(len(buf))
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(total) / (1 << 20) / time.Since(start).Seconds(), nil
}

// WriteTable prints r as a table.
func (r Result) WriteTable(w io.Writer) error {
	rows := []struct{ k, v, note string }{
		{"media", r.Media, ""},
		{"copyback_compaction_speedup", fmt.Sprintf("%.3f", r.CopybackCompactionSpeedup), fmt.Sprintf("chip-bound compaction of a half-valid zone: read-and-program %.2f ms / copyback %.2f ms", r.ReadProgramCompactionMillis, r.CopybackCompactionMillis)},
		{"read_during_compaction_vs_idle", fmt.Sprintf("%.2f", r.ReadDuringCompactionVsIdle), fmt.Sprintf("QD1 4 KiB reads on compacting chips %.1f us vs idle %.1f us (compaction left at submission: %.0f us)", r.ReadDuringCompactionMicros, r.ReadIdleMicros, r.CompactionLeftAtReadMicros)},
		{"izc_vs_host_copy", fmt.Sprintf("%.3f", r.IZCVsHostCopy), fmt.Sprintf("zone_compaction %.2f ms vs host copy %.2f ms of a half-valid zone", r.IZCMillis, r.HostCopyMillis)},
		{"izc_vs_host_copy_parallel_4k", fmt.Sprintf("%.3f", r.IZCVsHostCopyParallel4K), fmt.Sprintf("host copy by 4 KiB reads all submitted at once (F2FS): %.2f ms", r.HostCopyParallel4KMillis)},
		{"izc_vs_host_copy_sync_4k", fmt.Sprintf("%.3f", r.IZCVsHostCopySync4K), fmt.Sprintf("host copy by synchronous 4 KiB reads (weak baseline): %.2f ms", r.HostCopySync4KMillis)},
		{"seq_write_chip_utilization", fmt.Sprintf("%.3f", r.SeqWriteChipUtilization), "mean chip busy share, QD1 sequential writer"},
		{"tl_background_plug_ratio", fmt.Sprintf("%.3f", r.TLBackgroundPlugRatio), "PPA-ordered plugging done in the background"},
	}
	ws := []int{}
	for k := range r.WriteMiBPerSecond {
		ws = append(ws, k)
	}
	for i := range ws {
		for j := i + 1; j < len(ws); j++ {
			if ws[j] < ws[i] {
				ws[i], ws[j] = ws[j], ws[i]
			}
		}
	}
	for _, k := range ws {
		rows = append(rows, struct{ k, v, note string }{fmt.Sprintf("write_mib_per_second[%d]", k), fmt.Sprintf("%.1f", r.WriteMiBPerSecond[k]), "clock off, wall time"})
	}
	for _, row := range rows {
		if _, err := fmt.Fprintf(w, "%-30s %10s  %s\n", row.k, row.v, row.note); err != nil {
			return err
		}
	}
	return nil
}
