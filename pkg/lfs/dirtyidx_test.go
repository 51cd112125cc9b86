package lfs_test

import (
	"fmt"
	"math/rand"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestDirtyIndexMatchesScan runs random operations on small files (create,
// write, truncate, chmod, rename over another file, unlink of open and
// closed files, fallocate of each mode, xattrs, fsync, syncfs, dropping the
// clean cache, close) and after each compares the index of inodes with
// dirty pages, which write-back walks, with a scan of the inode cache and
// of the active inodes: an inode dirtied through any path must be in it, in
// order, and one cleaned, truncated or deleted must not. On the virtual
// clock (writers write back themselves, reproducibly) every kind of
// operation that adds or removes dirty inodes must have done so at least
// once; with the write-back goroutines running (real clock) the index must
// stay right while they clean inodes concurrently.
func TestDirtyIndexMatchesScan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		virtual bool
		seed    int64
	}{
		{"virtual/seed1", true, 1},
		{"virtual/seed2", true, 2},
		{"virtual/seed3", true, 3},
		{"flusher/seed1", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := lfs.Options{IPUFsyncBlocks: 4, CacheBlocks: 64}
			if tc.virtual {
				opts.Clock = clock.NewVirtual()
			}
			fs := mkfsMount(t, newVol(t, 64, 32), opts)
			changed := runDirtyIndexOps(t, fs, rand.New(rand.NewSource(tc.seed)), 800)
			t.Logf("operations that changed the index: %v; background write-backs %d", changed, fs.Stats().WriteBacks)
			if tc.virtual {
				for _, op := range []string{"create+write", "write", "truncate", "rename", "unlink", "release", "fallocate", "fsync", "sync"} {
					require.Positive(t, changed[op], "no %s changed the index: the test does not cover that path", op)
				}
			}
			require.NoError(t, fs.Sync(bg))
			index, _, _ := fs.DirtyIndex()
			require.Empty(t, index, "nothing dirty after syncfs")
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

type dirtyIdxFile struct {
	name string // "" once unlinked (kept by its open handle)
	ino  uint64
	h    lfs.Handle
	open bool
}

// runDirtyIndexOps runs n random operations, checking the index after each,
// and returns how many of each kind changed it.
func runDirtyIndexOps(t *testing.T, fs *lfs.FS, rng *rand.Rand, n int) map[string]int {
	t.Helper()
	var files []*dirtyIdxFile
	next := 0
	changed := map[string]int{}
	check := func(op string, before []uint64) []uint64 {
		t.Helper()
		index, active, cached := fs.DirtyIndex()
		require.Equal(t, cached, index, "after %s: index against the scan of the inode cache", op)
		require.Equal(t, active, index, "after %s: index against the scan of the active inodes", op)
		if !slices.Equal(before, index) {
			changed[op]++
		}
		return index
	}
	has := func(ino uint64) bool {
		index, _, _ := fs.DirtyIndex()
		return slices.Contains(index, ino)
	}
	data := func() []byte {
		b := make([]byte, 1+rng.Intn(8192))
		rng.Read(b)
		return b
	}
	openF := func(f *dirtyIdxFile) {
		if !f.open {
			h, err := fs.Open(bg, f.ino, syscall.O_RDWR)
			require.NoError(t, err)
			f.h, f.open = h, true
		}
	}
	remove := func(f *dirtyIdxFile) {
		for i, g := range files {
			if g == f {
				files = append(files[:i], files[i+1:]...)
				return
			}
		}
	}
	named := func() *dirtyIdxFile {
		var c []*dirtyIdxFile
		for _, f := range files {
			if f.name != "" {
				c = append(c, f)
			}
		}
		if len(c) == 0 {
			return nil
		}
		return c[rng.Intn(len(c))]
	}
	index, _, _ := fs.DirtyIndex()
	for range n {
		var f *dirtyIdxFile
		if len(files) > 0 {
			f = files[rng.Intn(len(files))]
		}
		op := []string{"create+write", "write", "write", "truncate", "chmod", "rename", "unlink", "fallocate", "xattr", "fsync", "sync", "dropcache", "release"}[rng.Intn(13)]
		if op == "sync" && rng.Intn(4) > 0 {
			op = "write" // rarer: the dirty pages pass the budget and get written back
		}
		if f == nil || len(files) < 4 {
			op = "create+write"
		}
		switch op {
		case "create+write":
			name := fmt.Sprintf("f%d", next)
			next++
			a, h, err := fs.Create(bg, lfs.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			f = &dirtyIdxFile{name: name, ino: a.Ino, h: h, open: true}
			files = append(files, f)
			_, err = fs.Write(bg, h, int64(rng.Intn(4096)), data())
			require.NoError(t, err)
		case "write":
			openF(f)
			_, err := fs.Write(bg, f.h, int64(rng.Intn(64<<10)), data())
			require.NoError(t, err)
		case "truncate":
			size := uint64(0)
			if rng.Intn(2) == 0 {
				size = uint64(rng.Intn(96 << 10))
			}
			_, err := fs.Setattr(bg, f.ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: size})
			require.NoError(t, err)
			if size == 0 {
				require.False(t, has(f.ino), "truncated to 0: no dirty page left")
			}
		case "chmod":
			_, err := fs.Setattr(bg, f.ino, lfs.SetattrIn{Valid: lfs.SetMode, Mode: uint32(0o600 + rng.Intn(0o100))})
			require.NoError(t, err)
		case "rename":
			if f.name == "" {
				continue
			}
			to := named()
			if to == nil || to == f || rng.Intn(3) == 0 {
				name := fmt.Sprintf("f%d", next)
				next++
				require.NoError(t, fs.Rename(bg, lfs.RootIno, f.name, lfs.RootIno, name, 0))
				f.name = name
				break
			}
			require.NoError(t, fs.Rename(bg, lfs.RootIno, f.name, lfs.RootIno, to.name, 0))
			f.name, to.name = to.name, ""
			if !to.open {
				remove(to)
				require.False(t, has(to.ino), "a replaced closed file is deleted")
			}
		case "unlink":
			if f.name == "" {
				continue
			}
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, f.name))
			f.name = ""
			if !f.open {
				remove(f)
				require.False(t, has(f.ino), "an unlinked closed file is deleted")
			}
		case "fallocate":
			mode := []uint32{0, lfs.FallocKeepSize, lfs.FallocPunchHole | lfs.FallocKeepSize, lfs.FallocZeroRange, lfs.FallocZeroRange | lfs.FallocKeepSize}[rng.Intn(5)]
			require.NoError(t, fs.Fallocate(bg, f.ino, mode, uint64(rng.Intn(64<<10)), uint64(1+rng.Intn(32<<10)), nil))
		case "xattr":
			require.NoError(t, fs.Setxattr(bg, f.ino, "user.k", data()[:1], 0))
		case "fsync":
			openF(f)
			require.NoError(t, fs.Fsync(bg, f.h, rng.Intn(2) == 0))
			require.False(t, has(f.ino), "fsynced: no dirty page left")
		case "sync":
			require.NoError(t, fs.Sync(bg))
			got, _, _ := fs.DirtyIndex()
			require.Empty(t, got, "syncfs leaves no dirty inode")
		case "dropcache":
			fs.DropCleanCache()
		case "release":
			if !f.open {
				continue
			}
			require.NoError(t, fs.Release(bg, f.h))
			f.open = false
			if f.name == "" {
				remove(f)
				require.False(t, has(f.ino), "the last close of an unlinked file deletes it")
			}
		}
		index = check(op, index)
	}
	for _, f := range files {
		if f.open {
			require.NoError(t, fs.Release(bg, f.h))
		}
	}
	return changed
}
