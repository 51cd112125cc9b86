package zms

import (
	"context"
	"fmt"
	"math/rand"
	"syscall"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// IPUConfig is the tiny-fsync figure.
type IPUConfig struct {
	Zones        int // drive zones (8 MiB each)
	WriteBuffers int // the drive's volatile write buffers (the paper's zoned UFS: 2)
	FileMiB      int // the database / the random-write file
	HotKiB       int // the random-write file of the in-budget run (half the drive's 1 MiB budget)
	Ops          int // measured operations (writes or transactions) per run
	IPUBlocks    int // lfs.Options.IPUFsyncBlocks when on (F2FS's min_fsync_blocks: 8)
	// RecordsPerPage: an insert of a 100-byte record (ZMS Fig. 5) fills the
	// table's last leaf page after this many inserts, then the next one.
	RecordsPerPage int
	Seed           int64
}

// DefaultIPU is the full figure.
func DefaultIPU() IPUConfig {
	return IPUConfig{Zones: 64, WriteBuffers: 2, FileMiB: 16, HotKiB: 512, Ops: 2000, IPUBlocks: 8, RecordsPerPage: 40, Seed: 1}
}

// IPURun is one workload with in-place update off or on.
type IPURun struct {
	InPlace            bool    `json:"in_place"`
	OpsPerSec          float64 `json:"ops_per_sec"` // modelled
	DriveBlocksPerOp   float64 `json:"drive_blocks_per_op"`
	SLCBlocksPerOp     float64 `json:"slc_buffered_blocks_per_op"`
	InPlaceBlocksPerOp float64 `json:"in_place_blocks_per_op"`
	Fallbacks          uint64  `json:"in_place_fallbacks"`
	Checkpoints        uint64  `json:"checkpoints"`
	ModelledMillis     float64 `json:"modelled_ms"`
}

// IPUWorkload is one workload's pair of runs.
type IPUWorkload struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Log         IPURun  `json:"logged"`
	IPU         IPURun  `json:"in_place"`
	IPUOverLog  float64 `json:"in_place_over_logged"`
}

// IPUResult is the figure's output.
type IPUResult struct {
	Config    IPUConfig     `json:"config"`
	Model     string        `json:"model"`
	Workloads []IPUWorkload `json:"workloads"`
}

var ipuWorkloads = []struct {
	name, desc, paper string
}{
	{"randwrite_fsync_in_budget", "4 KiB random overwrite of a file half the drive's in-place update budget, then fdatasync", "~2 (w/o IPU 0.5x of the block-interface baseline, w/ IPU on par)"},
	{"randwrite_fsync", "4 KiB random overwrite of a file 16x the drive's in-place update budget, then fdatasync (the budget is spent: the rest is logged)", "~2 (budget not stated)"},
	{"sqlite_delete", "SQLite insert, rollback journal in DELETE mode: create journal, write and fsync it, fsync the directory, update the header page and the table's last leaf page, fdatasync, unlink the journal", "~1.5 (w/o IPU 0.65x of the baseline, w/ IPU on par)"},
	{"sqlite_truncate", "as delete, but the journal is truncated to 0 instead of unlinked", ">1 (gap larger than in DELETE mode)"},
	{"sqlite_persist", "as delete, but the journal stays and its header is zeroed", ">1 (gap larger than in DELETE mode)"},
}

func runIPU(ctx context.Context, short bool) (any, []Line, error) {
	c := DefaultIPU()
	if short {
		c.Zones, c.FileMiB, c.Ops = 32, 4, 300
	}
	r, err := RunIPU(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	var lines []Line
	for i, w := range r.Workloads {
		lines = append(lines, Line{Label: "in_place_over_logged, " + w.Name, Ours: w.IPUOverLog, Paper: ipuWorkloads[i].paper})
	}
	return r, lines, nil
}

// RunIPU runs every workload with in-place update off, then on.
func RunIPU(ctx context.Context, c IPUConfig) (*IPUResult, error) {
	res := &IPUResult{Config: c, Model: fmt.Sprintf("drive: MobileConfig, %d write buffers of a superpage without power-loss protection (a FUA write or Flush programs their content to SLC); host CPU not modelled", c.WriteBuffers)}
	for _, w := range ipuWorkloads {
		wl := IPUWorkload{Name: w.name, Description: w.desc}
		for _, on := range []bool{false, true} {
			run, err := runIPUOne(ctx, c, w.name, on)
			if err != nil {
				return nil, fmt.Errorf("%s (in place %t): %w", w.name, on, err)
			}
			if on {
				wl.IPU = run
			} else {
				wl.Log = run
			}
		}
		if wl.Log.OpsPerSec > 0 {
			wl.IPUOverLog = round3(wl.IPU.OpsPerSec / wl.Log.OpsPerSec)
		}
		res.Workloads = append(res.Workloads, wl)
	}
	return res, nil
}

// ipuRig is one mounted file system on one drive.
type ipuRig struct {
	d   *zns.Device
	clk *clock.Virtual
	fs  *lfs.FS
}

func newIPURig(ctx context.Context, c IPUConfig, ipu int) (*ipuRig, error) {
	d, clk, err := newDrive(MobileConfig(c.Zones), zns.WithWriteBuffers(c.WriteBuffers))
	if err != nil {
		return nil, err
	}
	dv, err := devvol.New(d)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	if err := lfs.Mkfs(ctx, dv, lfs.MkfsOptions{}); err != nil {
		_ = d.Close()
		return nil, err
	}
	fs, err := lfs.Mount(ctx, dv, lfs.Options{Clock: clk, CacheBlocks: 16384, ReadAheadBlocks: -1, IPUFsyncBlocks: ipu})
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return &ipuRig{d: d, clk: clk, fs: fs}, nil
}

func (r *ipuRig) close(ctx context.Context) error {
	err := r.fs.Unmount(ctx)
	if e := r.d.Close(); err == nil {
		err = e
	}
	return err
}

// create makes name in the root and returns its handle and inode.
func (r *ipuRig) create(ctx context.Context, name string) (lfs.Handle, uint64, error) {
	a, h, err := r.fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
	return h, a.Ino, err
}

// block returns a 4 KiB block stamped with tag (the scratch file system
// keeps only non-zero pages).
func block(n int, tag uint64) []byte {
	b := make([]byte, n*4096)
	for i := 0; i < n; i++ {
		for j := 0; j < 8; j++ {
			b[i*4096+j] = byte(tag >> (8 * j))
		}
		b[i*4096+8] = 1
	}
	return b
}

func runIPUOne(ctx context.Context, c IPUConfig, workload string, on bool) (IPURun, error) {
	ipu := 0
	if on {
		ipu = c.IPUBlocks
	}
	r, err := newIPURig(ctx, c, ipu)
	if err != nil {
		return IPURun{}, err
	}
	defer func() { _ = r.close(ctx) }()
	fs := r.fs
	blocks := c.FileMiB << 8
	if workload == "randwrite_fsync_in_budget" {
		blocks = c.HotKiB >> 2
	}
	db, dbIno, err := r.create(ctx, "db")
	if err != nil {
		return IPURun{}, err
	}
	_ = dbIno
	for off := 0; off < blocks; off += 256 {
		if _, err := fs.Write(ctx, db, int64(off)*4096, block(min(256, blocks-off), uint64(off))); err != nil {
			return IPURun{}, err
		}
	}
	// two fsyncs: the first checkpoints the new name, the second writes the
	// marked inode that in-place updates rely on
	for i := 0; i < 2; i++ {
		if err := fs.Fsync(ctx, db, false); err != nil {
			return IPURun{}, err
		}
	}
	var journal lfs.Handle
	var jIno uint64
	if workload == "sqlite_persist" || workload == "sqlite_truncate" {
		if journal, jIno, err = r.create(ctx, "db-journal"); err != nil {
			return IPURun{}, err
		}
	}
	rng := rand.New(rand.NewSource(c.Seed))
	s0, l0, t0 := fs.Stats(), r.d.Log(), r.clk.Now()
	for op := 0; op < c.Ops; op++ {
		tag := uint64(op+1) << 20
		switch workload {
		case "randwrite_fsync", "randwrite_fsync_in_budget":
			if _, err := fs.Write(ctx, db, int64(rng.Intn(blocks))*4096, block(1, tag)); err != nil {
				return IPURun{}, err
			}
			err = fs.Fsync(ctx, db, true)
		default:
			leaf := blocks/2 + op/max(c.RecordsPerPage, 1) // the table's pages: an existing range
			journal, err = r.transaction(ctx, workload, db, journal, jIno, leaf%blocks, tag)
		}
		if err != nil {
			return IPURun{}, fmt.Errorf("operation %d: %w", op, err)
		}
	}
	el := r.clk.Now() - t0
	s1, l1 := fs.Stats(), r.d.Log()
	n := float64(c.Ops)
	return IPURun{InPlace: on, OpsPerSec: round3(perSec(c.Ops, el)), ModelledMillis: round3(float64(el) / float64(time.Millisecond)),
		DriveBlocksPerOp:   round3(float64(l1.HostBlocksWritten-l0.HostBlocksWritten) / n),
		SLCBlocksPerOp:     round3(float64(l1.SLCBufferedBlocks-l0.SLCBufferedBlocks) / n),
		InPlaceBlocksPerOp: round3(float64(s1.IPUBlocks-s0.IPUBlocks) / n),
		Fallbacks:          s1.IPUFallbacks - s0.IPUFallbacks, Checkpoints: s1.Checkpoints - s0.Checkpoints}, nil
}

// transaction is one SQLite insert in rollback-journal mode (ZMS Fig. 5a):
// the journal gets a header and the original of the page to change, is
// fsynced (and, when just created, the directory too); the database's leaf
// page and its header page (the change counter) are overwritten and
// fdatasynced;
// then the journal is deleted, truncated or has its header zeroed. It
// returns the journal's handle (persist and truncate keep it open).
func (r *ipuRig) transaction(ctx context.Context, mode string, db, journal lfs.Handle, jIno uint64, page int, tag uint64) (lfs.Handle, error) {
	fs := r.fs
	var err error
	if mode == "sqlite_delete" {
		if journal, _, err = r.create(ctx, "db-journal"); err != nil {
			return journal, err
		}
	}
	if _, err := fs.Write(ctx, journal, 0, block(2, tag)); err != nil {
		return journal, err
	}
	if err := fs.Fsync(ctx, journal, false); err != nil {
		return journal, err
	}
	if mode == "sqlite_delete" {
		if err := fs.FsyncIno(ctx, lfs.RootIno); err != nil {
			return journal, err
		}
	}
	if _, err := fs.Write(ctx, db, int64(page)*4096, block(1, tag)); err != nil {
		return journal, err
	}
	if _, err := fs.Write(ctx, db, 0, block(1, tag|1)); err != nil {
		return journal, err
	}
	if err := fs.Fsync(ctx, db, true); err != nil {
		return journal, err
	}
	switch mode {
	case "sqlite_delete":
		if err := fs.Release(ctx, journal); err != nil {
			return journal, err
		}
		return journal, fs.Unlink(ctx, lfs.RootIno, "db-journal")
	case "sqlite_truncate":
		_, err := fs.Setattr(ctx, jIno, lfs.SetattrIn{Valid: lfs.SetSize, Size: 0})
		return journal, err
	default: // persist: zero the header
		_, err := fs.Write(ctx, journal, 0, make([]byte, 512))
		return journal, err
	}
}
