package zms

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// TailorConfig is the IOTailor figure: concurrent buffered writers of
// files of different temperatures (each log writes its own zone), written
// back under memory pressure, on a drive with few write buffers.
type TailorConfig struct {
	Zones        int
	WriteBuffers []int // the drive's write buffers per run (the paper: 1 and 2)
	Streams      int   // writers, alternating warm and cold files (two data logs)
	TotalMiB     int   // written by all streams together
	MaxWriteKiB  int   // each write appends 4 KiB..MaxWriteKiB to its file
	CacheBlocks  int   // the host page cache (the dirty budget is a quarter)
	Seed         int64
}

// DefaultTailor is the full figure.
func DefaultTailor() TailorConfig {
	return TailorConfig{Zones: 64, WriteBuffers: []int{1, 2}, Streams: 3, TotalMiB: 96, MaxWriteKiB: 64, CacheBlocks: 1024, Seed: 1}
}

// TailorRun is one run.
type TailorRun struct {
	WriteBuffers   int     `json:"write_buffers"`
	IOTailor       bool    `json:"iotailor"`
	SLCShare       float64 `json:"slc_buffered_share"` // SLC-buffered blocks / blocks the host wrote
	BufferSwitches uint64  `json:"buffer_switches"`
	MBps           float64 `json:"mb_per_s"` // modelled
	WriteBacks     uint64  `json:"write_backs"`
}

// TailorResult is the figure's output.
type TailorResult struct {
	Config TailorConfig `json:"config"`
	Model  string       `json:"model"`
	Runs   []TailorRun  `json:"runs"`
}

func runIOTailor(ctx context.Context, short bool) (any, []Line, error) {
	c := DefaultTailor()
	if short {
		c.Zones, c.TotalMiB = 32, 16
	}
	r, err := RunTailor(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	var lines []Line
	for i := 0; i+1 < len(r.Runs); i += 2 {
		off, on := r.Runs[i], r.Runs[i+1]
		p := "0.60 -> 0.05"
		if off.WriteBuffers > 1 {
			p = "0.30 -> 0.05"
		}
		lines = append(lines,
			Line{Label: fmt.Sprintf("slc_share_without_iotailor, %d buffer(s)", off.WriteBuffers), Ours: off.SLCShare, Paper: p},
			Line{Label: fmt.Sprintf("slc_share_with_iotailor, %d buffer(s)", on.WriteBuffers), Ours: on.SLCShare, Paper: p})
	}
	return r, lines, nil
}

// RunTailor runs each write-buffer count without, then with IOTailor.
func RunTailor(ctx context.Context, c TailorConfig) (*TailorResult, error) {
	res := &TailorResult{Config: c, Model: "drive: MobileConfig (superpage 64 KiB = 16 blocks), n write buffers without power-loss protection; lfs on the virtual clock writes back synchronously past its dirty budget; the final sync is counted"}
	for _, wb := range c.WriteBuffers {
		for _, on := range []bool{false, true} {
			r, err := runTailorOne(ctx, c, wb, on)
			if err != nil {
				return nil, fmt.Errorf("%d buffers, iotailor %t: %w", wb, on, err)
			}
			res.Runs = append(res.Runs, r)
		}
	}
	return res, nil
}

func runTailorOne(ctx context.Context, c TailorConfig, buffers int, on bool) (TailorRun, error) {
	d, clk, err := newDrive(MobileConfig(c.Zones), zns.WithWriteBuffers(buffers))
	if err != nil {
		return TailorRun{}, err
	}
	defer func() { _ = d.Close() }()
	dv, err := devvol.New(d)
	if err != nil {
		return TailorRun{}, err
	}
	if err := lfs.Mkfs(ctx, dv, lfs.MkfsOptions{}); err != nil {
		return TailorRun{}, err
	}
	fs, err := lfs.Mount(ctx, dv, lfs.Options{Clock: clk, CacheBlocks: c.CacheBlocks, ReadAheadBlocks: -1, IOTailor: on})
	if err != nil {
		return TailorRun{}, err
	}
	defer func() { _ = fs.Unmount(ctx) }()
	type stream struct {
		h   lfs.Handle
		off int64
	}
	ss := make([]stream, c.Streams)
	for i := range ss {
		a, h, err := fs.Create(ctx, lfs.RootIno, fmt.Sprintf("stream%d", i), 0o644, 0, 0, 2)
		if err != nil {
			return TailorRun{}, err
		}
		if i%2 == 1 {
			if err := fs.Setxattr(ctx, a.Ino, "user.lfs.cold", []byte("1"), 0); err != nil {
				return TailorRun{}, err
			}
		}
		ss[i].h = h
	}
	if err := fs.Sync(ctx); err != nil {
		return TailorRun{}, err
	}
	rng := rand.New(rand.NewSource(c.Seed))
	l0, s0, t0 := d.Log(), fs.Stats(), clk.Now()
	total := int64(c.TotalMiB) << 20
	var written int64
	for i := 0; written < total; i = (i + 1) % len(ss) {
		n := 1 + rng.Intn(c.MaxWriteKiB/4)
		if _, err := fs.Write(ctx, ss[i].h, ss[i].off, block(n, uint64(written))); err != nil {
			return TailorRun{}, err
		}
		ss[i].off += int64(n) << 12
		written += int64(n) << 12
	}
	if err := fs.Sync(ctx); err != nil {
		return TailorRun{}, err
	}
	el := clk.Now() - t0
	l1, s1 := d.Log(), fs.Stats()
	r := TailorRun{WriteBuffers: buffers, IOTailor: on, BufferSwitches: l1.WriteBufferSwitches - l0.WriteBufferSwitches,
		WriteBacks: s1.WriteBacks - s0.WriteBacks}
	if hw := l1.HostBlocksWritten - l0.HostBlocksWritten; hw > 0 {
		r.SLCShare = round3(float64(l1.SLCBufferedBlocks-l0.SLCBufferedBlocks) / float64(hw))
	}
	if el > 0 {
		r.MBps = round3(float64(written) / (1 << 20) / (float64(el) / float64(time.Second)))
	}
	return r, nil
}
