package fdpbench

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

// fsProfile is a file-system workload in the manner of Filebench's
// personalities, as the block I/O a journaling file system with discard
// sends a drive: file data in extents of a next-fit allocator, an inode
// table and directory blocks rewritten in place, a circular journal, and
// a trim of every extent of a deleted file.
type fsProfile struct {
	meanFile    float64 // file size, write units (pages), exponential, at least 1
	filesPerDir int
	// One iteration: create (and write) a file, append appends units to
	// appendFiles random files, delete one file; commits journal units;
	// rewrites of an inode's or a directory's block follow every
	// operation that changes them.
	appendFiles int
	appends     int
	commits     int
}

// Filebench's fileserver (meanfilesize 128k, appendsize 16k, no fsync:
// the journal commits periodically) and varmail (meanfilesize 16k,
// appends of 16k, an fsync after every append: a journal commit each), with
// 16 KiB write units.
var fsProfiles = map[string]fsProfile{
	"fileserver": {meanFile: 8, filesPerDir: 20, appendFiles: 1, appends: 1, commits: 1},
	"varmail":    {meanFile: 1, filesPerDir: 1000, appendFiles: 2, appends: 1, commits: 3},
}

func fsPlacements() []placement {
	return []placement{{"fs-hints", ii(3), true, false}, {"fs-hints", pi(3), true, false}, {"one-handle", ii(3), false, false}, {"no-fdp", ii(1), false, false}}
}

// Handles of the fs-hints placement: the journal, the metadata (inodes,
// directories) and the file data each on its own, as F2FS sends its node
// and data logs with distinct write hints.
const (
	hJournal = 0
	hMeta    = 1
	hData    = 2
)

const inodesPerBlock = 64 // 256-byte inodes in a 16 KiB unit

type fsFile struct {
	ext  [][2]uint64 // extents (first unit, units)
	size uint64
}

// fsRun is one file-system workload on one drive.
type fsRun struct {
	ctx     context.Context
	dev     *fdp.Device
	p       placement
	prof    fsProfile
	rng     *rand.Rand
	unit    uint64 // LBAs per write unit
	buf     []byte
	jBase   uint64 // journal region (units)
	jSize   uint64
	jNext   uint64
	iBase   uint64 // inode table
	dBase   uint64 // directory blocks
	data    uint64 // first data unit
	used    []bool // data unit -> allocated
	cursor  uint64 // next-fit allocator
	files   map[uint64]*fsFile
	ids     []uint64 // live file ids (random choice)
	freeIDs []uint64
	live    uint64 // allocated data units
	target  uint64 // live data units the workload keeps
}

func (r *fsRun) write(first, n uint64, class int) error {
	h := uint16(0)
	if r.p.matched {
		h = uint16(class)
	}
	for n > 0 {
		k := min(n, uint64(len(r.buf))/(r.unit*uint64(r.dev.BlockSize())))
		r.buf[0], r.buf[1] = byte(first), byte(first>>8)
		if _, err := r.dev.Write(r.ctx, first*r.unit, r.buf[:k*r.unit*uint64(r.dev.BlockSize())], fdp.PlacementID{Handle: h}, fdp.Flags{}); err != nil {
			return err
		}
		first, n = first+k, n-k
	}
	return nil
}

func (r *fsRun) journal(n int) error {
	for range n {
		if err := r.write(r.jBase+r.jNext, 1, hJournal); err != nil {
			return err
		}
		r.jNext = (r.jNext + 1) % r.jSize
	}
	return nil
}

// meta rewrites file id's inode block and directory block.
func (r *fsRun) meta(id uint64) error {
	if err := r.write(r.iBase+id/inodesPerBlock, 1, hMeta); err != nil {
		return err
	}
	return r.write(r.dBase+id/uint64(r.prof.filesPerDir), 1, hMeta)
}

// alloc takes n free data units next-fit and writes them for f.
func (r *fsRun) alloc(f *fsFile, n uint64) error {
	total := uint64(len(r.used))
	for n > 0 {
		for r.used[r.cursor] {
			r.cursor = (r.cursor + 1) % total
		}
		first, k := r.cursor, uint64(0)
		for k < n && first+k < total && !r.used[first+k] {
			r.used[first+k] = true
			k++
		}
		r.cursor = (first + k) % total
		f.ext = append(f.ext, [2]uint64{first, k})
		f.size += k
		r.live += k
		n -= k
		if err := r.write(r.data+first, k, hData); err != nil {
			return err
		}
	}
	return nil
}

func (r *fsRun) fileSize() uint64 {
	return max(1, uint64(r.rng.ExpFloat64()*r.prof.meanFile+0.5))
}

// room deletes random files until n more units fit under the target.
func (r *fsRun) room(n uint64) error {
	for r.live+n > r.target && len(r.ids) > 0 {
		if err := r.delete(); err != nil {
			return err
		}
	}
	return nil
}

func (r *fsRun) create() error {
	n := r.fileSize()
	if err := r.room(n); err != nil {
		return err
	}
	var id uint64
	if k := len(r.freeIDs); k > 0 {
		id, r.freeIDs = r.freeIDs[k-1], r.freeIDs[:k-1]
	} else {
		id = uint64(len(r.files) + len(r.freeIDs))
	}
	f := &fsFile{}
	r.files[id] = f
	r.ids = append(r.ids, id)
	if err := r.alloc(f, n); err != nil {
		return err
	}
	return r.meta(id)
}

func (r *fsRun) appendTo() error {
	if len(r.ids) == 0 {
		return nil
	}
	n := uint64(r.prof.appends)
	if err := r.room(n); err != nil {
		return err
	}
	if len(r.ids) == 0 {
		return nil
	}
	id := r.ids[r.rng.IntN(len(r.ids))]
	if err := r.alloc(r.files[id], n); err != nil {
		return err
	}
	return r.write(r.iBase+id/inodesPerBlock, 1, hMeta)
}

func (r *fsRun) delete() error {
	i := r.rng.IntN(len(r.ids))
	id := r.ids[i]
	r.ids[i] = r.ids[len(r.ids)-1]
	r.ids = r.ids[:len(r.ids)-1]
	f := r.files[id]
	delete(r.files, id)
	r.freeIDs = append(r.freeIDs, id)
	for _, e := range f.ext {
		for u := e[0]; u < e[0]+e[1]; u++ {
			r.used[u] = false
		}
		if err := r.dev.Trim(r.ctx, (r.data+e[0])*r.unit, e[1]*r.unit); err != nil {
			return err
		}
	}
	r.live -= f.size
	return r.meta(id)
}

func (r *fsRun) iteration() error {
	if err := r.create(); err != nil {
		return err
	}
	for range r.prof.appendFiles {
		if err := r.appendTo(); err != nil {
			return err
		}
	}
	if len(r.ids) > 0 {
		if err := r.delete(); err != nil {
			return err
		}
	}
	return r.journal(r.prof.commits)
}

// runFS runs file-system workload name under placement p: the file set
// is created up to the utilization (the fill), then iterations run until
// the host has written Passes x the used capacity; only those count.
func runFS(ctx context.Context, o Options, cfg fdp.Config, name string, p placement) (Row, error) {
	prof := fsProfiles[name]
	clk := clock.NewVirtual()
	dev, err := fdp.Create("/bench-fdp", cfg, clk, fdp.WithFS(vfs.NewCrashableMem()))
	if err != nil {
		return Row{}, err
	}
	defer dev.Close()
	unit := uint64(cfg.Flash.PageSize / cfg.Flash.BlockSize)
	units := uint64(float64(dev.Capacity())*o.Utilization) / unit
	all := dev.Capacity() / unit
	r := &fsRun{ctx: ctx, dev: dev, p: p, prof: prof, rng: rand.New(rand.NewPCG(o.Seed, 0xf11e)), unit: unit,
		buf: make([]byte, 16*int(unit)*cfg.Flash.BlockSize), files: map[uint64]*fsFile{}}
	// Layout of the LBAs: journal (2 %), inode table, directory blocks,
	// data; the files keep the data region filled up to the utilization.
	maxFiles := uint64(float64(units)/prof.meanFile*2) + 64
	r.jSize = max(all/50, 4)
	r.iBase = r.jSize
	r.dBase = r.iBase + (maxFiles+inodesPerBlock-1)/inodesPerBlock
	r.data = r.dBase + (maxFiles+uint64(prof.filesPerDir)-1)/uint64(prof.filesPerDir)
	if r.data >= units {
		return Row{}, bad("utilization", "%.2f leaves no room for file data beside the file system's metadata", o.Utilization)
	}
	r.used = make([]bool, all-r.data)
	r.target = units - r.data
	for r.live < r.target-uint64(prof.meanFile) { // the fill: the file set
		if err := r.create(); err != nil {
			return Row{}, err
		}
		if err := r.journal(1); err != nil {
			return Row{}, err
		}
	}
	m := startMeasure(dev, clk)
	budget := uint64(o.Passes*float64(units)) * unit * uint64(cfg.Flash.BlockSize)
	for dev.Stats().HostBytesWritten-m.before.HostBytesWritten < budget {
		if err := r.iteration(); err != nil {
			return Row{}, err
		}
	}
	row := m.row(dev, clk, name, p)
	return row, dev.Close()
}

// measure is the state at the start of a measured phase.
type measure struct {
	before fdp.Stats
	t0     time.Duration
	busy0  []int64
	ev0    int
}

func startMeasure(dev *fdp.Device, clk clock.Clock) measure {
	return measure{before: dev.Stats(), t0: clk.Now(), busy0: dev.Status().ChipBusyNs, ev0: len(dev.Events(0))}
}
