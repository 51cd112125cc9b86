package lfs_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestStressConcurrentOps runs many goroutines mixing every operation on one
// file system over a small devvol volume (so foreground recycling and
// write-back run all the time) while background recycling and periodic
// checkpoints run on a real clock:
//
//   - model workers (model_test.go) create/write/read/truncate/rename/link/
//     unlink/mkdir/rmdir/fsync/setattr/setxattr in their own subtrees and the
//     shared directories, each against its own reference model;
//   - racers create, write, rename, unlink and symlink the same few names in
//     one hot directory (ENOENT/EEXIST are the only acceptable failures);
//   - readers list directories and read whatever they find, concurrently with
//     all of it (ENOENT is the only acceptable failure);
//   - a syncer calls Sync and Statfs.
//
// Then the tree must equal the union of the models (racers clean up their
// directory), fsck must be clean on-line and off-line, and a remount must
// show the same tree.
//
// make test runs this workload once, under TestStressLockOrder (the same
// checks plus the lock-order checker); -long (make test-long) runs it
// without the checker too, whose timing gives other interleavings.
func TestStressConcurrentOps(t *testing.T) {
	if !*fsPowerLong {
		t.Skip("runs under TestStressLockOrder in make test; -long runs it without the lock-order checker too")
	}
	stressConcurrentOps(t)
}

func stressConcurrentOps(t *testing.T) {
	for _, tc := range []struct {
		name string
		move lfs.MoveMethod
	}{
		{"host-copy", lfs.HostCopy},
		{"izc", lfs.Compact},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.Realtime(1)
			t.Cleanup(clk.Stop)
			v := newVol(t, 64, 8)
			fs := mkfsMount(t, v, lfs.Options{Move: tc.move, CacheBlocks: 192, Clock: clk,
				BackgroundGC: time.Millisecond, CheckpointEvery: 3 * time.Millisecond})
			shared := []string{"a", "b", "c"}
			for _, s := range append(shared, "hot") {
				_, err := fs.Mkdir(bg, lfs.RootIno, s, 0o755, 0, 0)
				require.NoError(t, err)
			}
			const workers, ops = 8, 500
			models := make([]*model, workers)
			errs := make(chan error, 64)
			fsynced := map[string][]byte{}
			var mu sync.Mutex
			var wg, others sync.WaitGroup
			for i := range models {
				models[i] = &model{files: map[string]*mfile{}, dirs: map[string]bool{}}
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					if err := worker(fs, i, 7000+int64(i), ops, shared, models[i], fsynced, &mu); err != nil {
						errs <- fmt.Errorf("worker %d: %w", i, err)
					}
				}(i)
			}
			var stop atomic.Bool
			var readerOps, racerOps atomic.Int64
			for r := 0; r < 3; r++ {
				others.Add(1)
				go func(r int) {
					defer others.Done()
					if err := stressReader(fs, r, &stop, &readerOps); err != nil {
						errs <- fmt.Errorf("reader %d: %w", r, err)
					}
				}(r)
			}
			for r := 0; r < 3; r++ {
				others.Add(1)
				go func(r int) {
					defer others.Done()
					if err := stressRacer(fs, r, &stop, &racerOps); err != nil {
						errs <- fmt.Errorf("racer %d: %w", r, err)
					}
				}(r)
			}
			others.Add(1)
			go func() {
				defer others.Done()
				for !stop.Load() {
					if err := fs.Sync(bg); err != nil {
						errs <- fmt.Errorf("sync: %w", err)
						return
					}
					if _, err := fs.Statfs(bg); err != nil {
						errs <- fmt.Errorf("statfs: %w", err)
						return
					}
					time.Sleep(2 * time.Millisecond) // pacing of the background syncer, not a wait for anything
				}
			}()
			wg.Wait()
			stop.Store(true)
			others.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Positive(t, readerOps.Load())
			require.Positive(t, racerOps.Load())
			// the racers' directory is emptied so the tree is exactly the models
			hot, err := fs.Lookup(bg, lfs.RootIno, "hot")
			require.NoError(t, err)
			ents, err := fs.Readdir(bg, hot.Ino)
			require.NoError(t, err)
			for _, e := range ents {
				if e.Name != "." && e.Name != ".." {
					require.NoError(t, fs.Unlink(bg, hot.Ino, e.Name))
				}
			}
			require.NoError(t, fs.Rmdir(bg, lfs.RootIno, "hot"))
			compareTree(t, fs, models)
			st := fs.Stats()
			t.Logf("readers %d, racers %d ops; gc fg %d bg %d, checkpoints %d", readerOps.Load(), racerOps.Load(), st.GCForeground, st.GCBackground, st.Checkpoints)
			require.Positive(t, st.GCForeground+st.GCBackground, "recycling ran during the stress")
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs.Unmount(bg))
			rep, err = lfs.Fsck(bg, v, false)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			fs, err = lfs.Mount(bg, v, lfs.Options{Move: tc.move})
			require.NoError(t, err)
			compareTree(t, fs, models)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

func benign(err error) bool {
	return err == nil || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EEXIST)
}

// stressReader walks the tree and reads every file it meets.
func stressReader(fs *lfs.FS, r int, stop *atomic.Bool, n *atomic.Int64) error {
	buf := make([]byte, 64<<10)
	for !stop.Load() {
		var rec func(ino uint64, depth int) error
		rec = func(ino uint64, depth int) error {
			ents, err := fs.Readdir(bg, ino)
			if err != nil {
				return nilIf(err)
			}
			n.Add(1)
			for _, e := range ents {
				if stop.Load() {
					return nil
				}
				if e.Name == "." || e.Name == ".." {
					continue
				}
				a, err := fs.Lookup(bg, ino, e.Name)
				if err != nil {
					if !benign(err) {
						return fmt.Errorf("lookup %s: %w", e.Name, err)
					}
					continue
				}
				switch {
				case a.Mode&syscall.S_IFMT == syscall.S_IFDIR && depth < 6:
					if err := rec(a.Ino, depth+1); err != nil {
						return err
					}
				case a.Mode&syscall.S_IFMT == syscall.S_IFLNK:
					if _, err := fs.Readlink(bg, a.Ino); !benign(err) {
						return fmt.Errorf("readlink %s: %w", e.Name, err)
					}
				case a.Mode&syscall.S_IFMT == syscall.S_IFREG:
					h, err := fs.Open(bg, a.Ino, syscall.O_RDONLY)
					if err != nil {
						if !benign(err) {
							return fmt.Errorf("open %s: %w", e.Name, err)
						}
						continue
					}
					for off := int64(0); ; off += int64(len(buf)) {
						k, err := fs.Read(bg, h, off, buf)
						if err != nil {
							_ = fs.Release(bg, h)
							return fmt.Errorf("read %s: %w", e.Name, err)
						}
						n.Add(1)
						if k < len(buf) {
							break
						}
					}
					if _, err := fs.Listxattr(bg, a.Ino); !benign(err) {
						return fmt.Errorf("listxattr %s: %w", e.Name, err)
					}
					if err := fs.Release(bg, h); err != nil {
						return fmt.Errorf("release %s: %w", e.Name, err)
					}
				}
			}
			return nil
		}
		if err := rec(lfs.RootIno, 0); err != nil {
			return err
		}
	}
	return nil
}

func nilIf(err error) error {
	if benign(err) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	return err
}

// stressRacer fights over a few names in /hot with the other racers.
func stressRacer(fs *lfs.FS, r int, stop *atomic.Bool, n *atomic.Int64) error {
	rng := rand.New(rand.NewSource(int64(r) + 99))
	hot, err := fs.Lookup(bg, lfs.RootIno, "hot")
	if err != nil {
		return err
	}
	name := func() string { return fmt.Sprintf("n%d", rng.Intn(6)) }
	for !stop.Load() {
		n.Add(1)
		switch rng.Intn(7) {
		case 0, 1: // create and write, or write an existing one
			nm := name()
			data := bytes.Repeat([]byte{byte(rng.Intn(256))}, rng.Intn(20000)+1)
			_, h, err := fs.Create(bg, hot.Ino, nm, 0o644, 0, 0, syscall.O_RDWR)
			if errors.Is(err, syscall.EEXIST) {
				a, err2 := fs.Lookup(bg, hot.Ino, nm)
				if err2 != nil {
					if benign(err2) {
						continue
					}
					return err2
				}
				if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
					continue
				}
				h, err = fs.Open(bg, a.Ino, syscall.O_RDWR)
			}
			if err != nil {
				if benign(err) {
					continue
				}
				return fmt.Errorf("create %s: %w", nm, err)
			}
			if _, err := fs.Write(bg, h, int64(rng.Intn(8192)), data); err != nil {
				_ = fs.Release(bg, h)
				return fmt.Errorf("write %s: %w", nm, err)
			}
			if rng.Intn(3) == 0 {
				if err := fs.Fsync(bg, h, false); err != nil {
					_ = fs.Release(bg, h)
					return fmt.Errorf("fsync %s: %w", nm, err)
				}
			}
			if err := fs.Release(bg, h); err != nil {
				return fmt.Errorf("release %s: %w", nm, err)
			}
		case 2: // rename over whatever is there
			a, b := name(), name()
			if err := fs.Rename(bg, hot.Ino, a, hot.Ino, b, 0); !benign(err) && !errors.Is(err, syscall.EISDIR) && !errors.Is(err, syscall.ENOTDIR) {
				return fmt.Errorf("rename %s %s: %w", a, b, err)
			}
		case 3:
			nm := name()
			if err := fs.Unlink(bg, hot.Ino, nm); !benign(err) && !errors.Is(err, syscall.EISDIR) {
				return fmt.Errorf("unlink %s: %w", nm, err)
			}
		case 4:
			nm := name()
			if _, err := fs.Symlink(bg, hot.Ino, nm, "target-"+nm, 0, 0); !benign(err) {
				return fmt.Errorf("symlink %s: %w", nm, err)
			}
		case 5: // truncate and chmod whatever the name is now
			nm := name()
			a, err := fs.Lookup(bg, hot.Ino, nm)
			if err != nil || a.Mode&syscall.S_IFMT != syscall.S_IFREG {
				continue
			}
			if _, err := fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetSize | lfs.SetMode, Size: uint64(rng.Intn(30000)), Mode: 0o640}); !benign(err) {
				return fmt.Errorf("setattr %s: %w", nm, err)
			}
		case 6:
			if _, err := fs.Readdir(bg, hot.Ino); err != nil {
				return fmt.Errorf("readdir: %w", err)
			}
		}
	}
	return nil
}
