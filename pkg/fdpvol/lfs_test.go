package fdpvol_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/fdpvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

// mountOn opens the drive in fs (created when create), its volume and the
// file system on it (formatted when create).
func mountOn(t *testing.T, mem vfs.FS, create bool, mode ...lfs.Mode) (*fdp.Device, *lfs.FS) {
	t.Helper()
	var d *fdp.Device
	var err error
	if create {
		d, err = fdp.Create("/fdp0", testConfig(), clock.Off(), fdp.WithFS(mem), fdp.WithLogger(quiet))
	} else {
		d, err = fdp.Open("/fdp0", testConfig(), clock.Off(), fdp.WithFS(mem), fdp.WithLogger(quiet))
	}
	require.NoError(t, err)
	v, err := fdpvol.New(bg, d, fdpvol.Options{})
	require.NoError(t, err)
	if create {
		require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	}
	m := lfs.ModeZNS
	if len(mode) > 0 {
		m = mode[0]
	}
	fs, err := lfs.Mount(bg, v, lfs.Options{Mode: m, CacheBlocks: 64, Clock: clock.NewVirtual()})
	require.NoError(t, err)
	return d, fs
}

func fileIno(t *testing.T, fs *lfs.FS, name string) (uint64, bool) {
	a, err := fs.Lookup(bg, lfs.RootIno, name)
	if err == syscall.ENOENT {
		return 0, false
	}
	require.NoError(t, err)
	return a.Ino, true
}

func readAll(t *testing.T, fs *lfs.FS, ino uint64) []byte {
	a, err := fs.Getattr(bg, ino)
	require.NoError(t, err)
	h, err := fs.Open(bg, ino, syscall.O_RDONLY)
	require.NoError(t, err)
	defer fs.Release(bg, h)
	buf := make([]byte, a.Size)
	n, err := fs.Read(bg, h, 0, buf)
	require.NoError(t, err)
	require.Equal(t, len(buf), n)
	return buf
}

func setAt(b []byte, off int, d []byte) []byte {
	if off+len(d) > len(b) {
		b = append(b, make([]byte, off+len(d)-len(b))...)
	}
	copy(b[off:], d)
	return b
}

// TestLFSModel runs random file operations on lfs over an FDP drive
// against a model of the files, through restarts, long enough that the
// file system recycles segments many times over: by host copy (zns mode)
// and through the volume's Compact (izc mode, a host copy inside the
// volume on FDP).
func TestLFSModel(t *testing.T) {
	for _, m := range []lfs.Mode{lfs.ModeZNS, lfs.ModeIZC} {
		t.Run(m.String(), func(t *testing.T) { testLFSModel(t, m) })
	}
}

func testLFSModel(t *testing.T, mode lfs.Mode) {
	mem := vfs.NewCrashableMem()
	d, fs := mountOn(t, mem, true, mode)
	rng := rand.New(rand.NewSource(1))
	model := map[string][]byte{}
	check := func() {
		for name, want := range model {
			ino, ok := fileIno(t, fs, name)
			require.True(t, ok, name)
			require.True(t, bytes.Equal(want, readAll(t, fs, ino)), name)
		}
		rep, err := fs.Fsck(bg)
		require.NoError(t, err)
		require.Empty(t, rep.Problems)
	}
	var written int
	// a file set of about 60 % of the user blocks, then small overwrites
	// (segments end up partly valid: recycling moves data)
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("f%d", i)
		data := make([]byte, 512<<10)
		rng.Read(data)
		_, h, err := fs.Create(bg, lfs.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
		require.NoError(t, err)
		_, err = fs.Write(bg, h, 0, data)
		require.NoError(t, err)
		require.NoError(t, fs.Release(bg, h))
		model[name] = data
	}
	for i := 0; i < 1500; i++ {
		name := fmt.Sprintf("f%d", rng.Intn(10))
		cur, exists := model[name]
		switch r := rng.Intn(200); {
		case !exists || r == 0:
			if exists {
				require.NoError(t, fs.Unlink(bg, lfs.RootIno, name))
			}
			_, h, err := fs.Create(bg, lfs.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			require.NoError(t, fs.Release(bg, h))
			model[name] = []byte{}
		case r < 3:
			ino, _ := fileIno(t, fs, name)
			size := rng.Intn(len(cur) + 1)
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: uint64(size)})
			require.NoError(t, err)
			model[name] = cur[:size]
		case r < 6:
			require.NoError(t, fs.Unmount(bg))
			require.NoError(t, d.Close())
			d, fs = mountOn(t, mem, false, mode)
			check()
		default:
			ino, _ := fileIno(t, fs, name)
			h, err := fs.Open(bg, ino, syscall.O_RDWR)
			require.NoError(t, err)
			off := rng.Intn(min(len(cur)+4096, 600<<10))
			data := make([]byte, 1+rng.Intn(32<<10))
			rng.Read(data)
			n, err := fs.Write(bg, h, int64(off), data)
			require.NoError(t, err)
			require.Equal(t, len(data), n)
			written += n
			if rng.Intn(4) == 0 {
				require.NoError(t, fs.Fsync(bg, h, false))
			}
			require.NoError(t, fs.Release(bg, h))
			model[name] = setAt(append([]byte(nil), cur...), off, data)
		}
	}
	check()
	st := fs.Stats()
	require.NoError(t, fs.Unmount(bg))
	ds := d.Stats()
	require.NoError(t, d.Close())
	t.Logf("user blocks %d used %d segments %d; user bytes %d, segments recycled %d (moved %d blocks by host copy, %d through Compact), drive WAF %.3f, drive GC copies %d",
		st.UserBlocks, st.UsedBlocks, st.SegmentsTotal, written, st.CompactedSegments, st.MovedHostCopy+st.MovedHostCached+st.MovedHostDirty, st.CompactLocal, ds.WAF(), ds.GCCopies)
	require.NotZero(t, st.MovedHostCopy+st.MovedHostCached+st.MovedHostDirty+st.MovedIZC, "the file system never moved a block")
	if mode == lfs.ModeIZC {
		require.NotZero(t, st.CompactLocal, "no block moved through Compact")
	}
}

// plHistory is what a power loss may leave of each file: a file synced
// (and every file after a Sync) holds, block by block, one of its
// versions since.
type plHistory struct {
	mu       sync.Mutex
	versions map[string][][]byte // the durable version first, then later ones (acknowledged or in flight)
}

func (h *plHistory) add(name string, v []byte) {
	h.mu.Lock()
	h.versions[name] = append(h.versions[name], v)
	h.mu.Unlock()
}

func (h *plHistory) durable(name string) {
	h.mu.Lock()
	vs := h.versions[name]
	h.versions[name] = vs[len(vs)-1:]
	h.mu.Unlock()
}

func (h *plHistory) snapshot() map[string][][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][][]byte{}
	for k, v := range h.versions {
		out[k] = append([][]byte(nil), v...)
	}
	return out
}

type crashPoint struct {
	mem *vfs.MemFS
	exp map[string][][]byte
	at  int
}

// TestLFSPowerLoss cuts the power at random drive file operations (the
// crashable vfs keeps a random subset of the unsynced writes) while lfs on
// an FDP drive overwrites and fsyncs files; after each cut the drive, the
// volume (its write pointers from the drive's mapping) and the file system
// recover, the file system is consistent, and every file holds, block by
// block, one of its versions since its last completed fsync or sync.
func TestLFSPowerLoss(t *testing.T) {
	const nFiles, size, bs = 6, 96 << 10, 4096
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			crng := rand.New(rand.NewSource(seed + 100))
			mem := vfs.NewCrashableMem()
			h := &plHistory{versions: map[string][][]byte{}}
			var points []crashPoint
			armed, fileOps := false, 0
			hook := vfs.InjectorFunc(func(fo vfs.Op) error {
				if fo.Kind == vfs.OpRead || !armed {
					return nil
				}
				fileOps++
				if crng.Intn(40) == 0 && len(points) < 12 {
					points = append(points, crashPoint{mem: mem.CrashClone(crng.Uint64()), exp: h.snapshot(), at: fileOps})
				}
				return nil
			})
			d, fs := mountOn(t, vfs.WithErrors(mem, hook), true)
			cur := map[string][]byte{}
			for i := 0; i < nFiles; i++ {
				name := fmt.Sprintf("f%d", i)
				data := make([]byte, size)
				rng.Read(data)
				_, hd, err := fs.Create(bg, lfs.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
				require.NoError(t, err)
				_, err = fs.Write(bg, hd, 0, data)
				require.NoError(t, err)
				require.NoError(t, fs.Release(bg, hd))
				cur[name] = data
				h.add(name, data)
			}
			require.NoError(t, fs.Sync(bg))
			for name := range cur {
				h.durable(name)
			}
			armed = true
			for i := 0; i < 400; i++ {
				name := fmt.Sprintf("f%d", rng.Intn(nFiles))
				if rng.Intn(25) == 0 {
					require.NoError(t, fs.Sync(bg))
					for n := range cur {
						h.durable(n)
					}
					continue
				}
				ino, _ := fileIno(t, fs, name)
				hd, err := fs.Open(bg, ino, syscall.O_RDWR)
				require.NoError(t, err)
				off := rng.Intn(size/bs) * bs
				data := make([]byte, min(size-off, (1+rng.Intn(8))*bs))
				rng.Read(data)
				nv := setAt(append([]byte(nil), cur[name]...), off, data)
				h.add(name, nv)
				_, err = fs.Write(bg, hd, int64(off), data)
				require.NoError(t, err)
				cur[name] = nv
				if rng.Intn(3) == 0 {
					require.NoError(t, fs.Fsync(bg, hd, rng.Intn(2) == 0))
					h.durable(name)
				}
				require.NoError(t, fs.Release(bg, hd))
			}
			armed = false
			require.NoError(t, fs.Unmount(bg))
			require.NoError(t, d.Close())
			require.NotEmpty(t, points)
			for _, cp := range points {
				d, fs := mountOn(t, cp.mem, false)
				rep, err := fs.Fsck(bg)
				require.NoError(t, err)
				require.Empty(t, rep.Problems, "crash at file op %d", cp.at)
				names := make([]string, 0, len(cp.exp))
				for n := range cp.exp {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, name := range names {
					ino, ok := fileIno(t, fs, name)
					require.True(t, ok, "crash at file op %d: %s lost", cp.at, name)
					got := readAll(t, fs, ino)
					require.Len(t, got, size, "crash at file op %d: %s", cp.at, name)
					for b := 0; b < size/bs; b++ {
						blk := got[b*bs : (b+1)*bs]
						ok := false
						for _, v := range cp.exp[name] {
							if bytes.Equal(blk, v[b*bs:(b+1)*bs]) {
								ok = true
								break
							}
						}
						require.True(t, ok, "crash at file op %d: %s block %d holds no version since its last fsync (%d versions)", cp.at, name, b, len(cp.exp[name]))
					}
				}
				require.NoError(t, fs.Unmount(bg))
				require.NoError(t, d.Close())
			}
		})
	}
}
