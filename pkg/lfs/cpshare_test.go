package lfs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// slowFlushVol counts flushes, holds every Flush while hold is set (until
// hold returns: a drive's cache flush that lasts until the test says) and
// fails them while fail is set.
type slowFlushVol struct {
	lfs.Volume
	hold    atomic.Pointer[func()]
	fail    atomic.Bool
	flushes atomic.Int64
}

var errFlushFailed = errors.New("drive flush failed")

func (v *slowFlushVol) Flush(ctx context.Context) error {
	v.flushes.Add(1)
	if h := v.hold.Load(); h != nil {
		(*h)()
	}
	if v.fail.Load() {
		return errFlushFailed
	}
	return v.Volume.Flush(ctx)
}

// fsync of a file without a name (unlinked while open, O_TMPFILE before
// linkat) writes its data and flushes the drives, but takes no checkpoint:
// no crash can bring the file back. The first fsync after the creation or
// the unlink still takes one (as for every file whose names changed), linkat gives an O_TMPFILE file a
// name that its next fsync makes durable, and a failing flush is reported.
func TestFsyncOfAnUnnamedFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		tmp  bool // O_TMPFILE, linked at the end; else created, then unlinked
	}{{"unlinked while open", false}, {"O_TMPFILE", true}} {
		t.Run(tc.name, func(t *testing.T) {
			v := &slowFlushVol{Volume: newVol(t, 32, 8)}
			fs := mkfsMount(t, v, lfs.Options{})
			fsyncCPs := func() uint64 { return fs.Stats().CheckpointsByCause["fsync"] }
			var h lfs.Handle
			var ino uint64
			if tc.tmp {
				a, th, err := fs.CreateTmp(bg, lfs.RootIno, 0o644, 0, 0, syscall.O_RDWR)
				require.NoError(t, err)
				h, ino = th, a.Ino
				before := fsyncCPs()
				require.NoError(t, fs.Fsync(bg, h, false))
				require.Equal(t, before+1, fsyncCPs(), "a file created since the last checkpoint: its first fsync takes one")
			} else {
				a, ch, err := fs.Create(bg, lfs.RootIno, "scratch", 0o644, 0, 0, syscall.O_RDWR)
				require.NoError(t, err)
				h, ino = ch, a.Ino
				_, err = fs.Write(bg, h, 0, []byte("first"))
				require.NoError(t, err)
				require.NoError(t, fs.Fsync(bg, h, false))
				require.NoError(t, fs.Unlink(bg, lfs.RootIno, "scratch"))
				before := fsyncCPs()
				require.NoError(t, fs.Fsync(bg, h, false))
				require.Equal(t, before+1, fsyncCPs(), "the first fsync after the unlink makes it durable")
			}
			before, flushes := fsyncCPs(), v.flushes.Load()
			for i := 0; i < 20; i++ {
				_, err := fs.Write(bg, h, int64(i)*4096, []byte(fmt.Sprintf("block %d", i)))
				require.NoError(t, err)
				require.NoError(t, fs.Fsync(bg, h, i%2 == 0))
			}
			require.Equal(t, before, fsyncCPs(), "no checkpoint for a file no crash can bring back")
			require.GreaterOrEqual(t, v.flushes.Load()-flushes, int64(20), "every fsync flushed the drives")
			buf := make([]byte, 7)
			_, err := fs.Read(bg, h, 19*4096, buf)
			require.NoError(t, err)
			require.Equal(t, "block 1", string(buf))

			// a flush that fails is fsync's error, never success
			_, err = fs.Write(bg, h, 0, []byte("lost?"))
			require.NoError(t, err)
			v.fail.Store(true)
			require.Error(t, fs.Fsync(bg, h, false))
			v.fail.Store(false)
			require.NoError(t, fs.Fsync(bg, h, false))

			if tc.tmp {
				_, err := fs.Link(bg, ino, lfs.RootIno, "kept")
				require.NoError(t, err)
				require.NoError(t, fs.Fsync(bg, h, false))
				require.Equal(t, before+1, fsyncCPs(), "the fsync after linkat makes the name durable")
			}
			fs.Abandon() // a crash, the handle still open

			fs, err = lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			if tc.tmp {
				got, err := readFile(fs, "kept")
				require.NoError(t, err)
				require.Equal(t, "lost?", string(got[:5]))
				require.Equal(t, "block 19", string(got[19*4096:19*4096+8]))
			} else {
				_, err := walk(fs, "scratch")
				require.ErrorIs(t, err, syscall.ENOENT)
			}
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

// Concurrent requests for a checkpoint share them: threads that each rename
// a file in their own directory and fsync the directory (each fsync needs a
// checkpoint) wait for far fewer checkpoints than there are threads, and
// every name is durable when its fsync returned. The drive's flush lasts
// until every thread has asked for its fsync (all renamed first), so the
// requests meet a checkpoint in progress however the threads are scheduled.
func TestConcurrentFsyncsShareCheckpoints(t *testing.T) {
	const n = 16
	v := &slowFlushVol{Volume: newVol(t, 40, 8)}
	fs := mkfsMount(t, v, lfs.Options{})
	dirs := make([]uint64, n)
	for i := range dirs {
		a, err := fs.Mkdir(bg, lfs.RootIno, fmt.Sprintf("d%d", i), 0o755, 0, 0)
		require.NoError(t, err)
		dirs[i] = a.Ino
		require.NoError(t, writeFile(fs, fmt.Sprintf("d%d/tmp", i), []byte(fmt.Sprintf("data %d", i)), true))
	}
	require.NoError(t, fs.Sync(bg))
	st0 := fs.Stats()
	start, asked := make(chan struct{}), make(chan struct{})
	var entered atomic.Int64
	var fsyncing atomic.Bool // every rename is done
	hold := func() {
		if fsyncing.Load() {
			<-asked
		}
	}
	v.hold.Store(&hold)
	var wg, renamed sync.WaitGroup
	errs := make([]error, n)
	renamed.Add(n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fs.Rename(bg, dirs[i], "tmp", dirs[i], "final", 0)
			renamed.Done()
			renamed.Wait()
			fsyncing.Store(true)
			if entered.Add(1) == n {
				close(asked)
			}
			if errs[i] == nil {
				errs[i] = fs.FsyncIno(bg, dirs[i])
			}
		}()
	}
	close(start)
	wg.Wait()
	v.hold.Store(nil)
	for _, err := range errs {
		require.NoError(t, err)
	}
	st := fs.Stats()
	taken := st.CheckpointsByCause["fsync"] - st0.CheckpointsByCause["fsync"]
	shared := st.CheckpointsShared - st0.CheckpointsShared
	require.Equal(t, uint64(n), taken+shared, "every request took a checkpoint or shared one")
	require.Less(t, taken, uint64(n/2), "requests shared checkpoints (took %d for %d requests)", taken, n)
	fs.Abandon()

	fs, err := lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		got, err := readFile(fs, fmt.Sprintf("d%d/final", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("data %d", i), string(got))
		_, err = walk(fs, fmt.Sprintf("d%d/tmp", i))
		require.ErrorIs(t, err, syscall.ENOENT)
	}
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
