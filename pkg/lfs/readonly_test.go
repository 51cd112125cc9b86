package lfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// faultVol fails, while armed, every Write to the zones in writes and every
// Reset of the zones in resets with a media error (not retried).
type faultVol struct {
	lfs.Volume
	mu             sync.Mutex
	writes, resets map[lfs.ZoneID]bool
	anyReset       bool
	hits           int
	err            error // what an armed call fails with (nil: errMedia)
}

var errMedia = errors.New("injected media error")

func (f *faultVol) arm(writes []lfs.ZoneID, anyReset bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes, f.anyReset = map[lfs.ZoneID]bool{}, anyReset
	for _, z := range writes {
		f.writes[z] = true
	}
}

func (f *faultVol) clear() { f.arm(nil, false) }

func (f *faultVol) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	return errMedia
}

func (f *faultVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	f.mu.Lock()
	bad := f.writes[z]
	if bad {
		f.hits++
	}
	f.mu.Unlock()
	if bad {
		return f.failure()
	}
	return f.Volume.Write(ctx, z, off, d, fua)
}

func (f *faultVol) Reset(ctx context.Context, z lfs.ZoneID) error {
	f.mu.Lock()
	bad := f.anyReset
	if bad {
		f.hits++
	}
	f.mu.Unlock()
	if bad {
		return f.failure()
	}
	return f.Volume.Reset(ctx, z)
}

func captureSlog(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&syncWriter{w: &buf}, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A metadata write that fails for good turns the file system read-only:
// mutating operations get EROFS, fsynced files still read back, the gauge
// says 1 and one ERROR line says why; after the fault clears a remount is
// fsck clean and holds every fsynced file.
func TestReadOnlyAfterMetadataWriteFails(t *testing.T) {
	for _, c := range []struct {
		name   string
		writes bool // fail the metadata zone's writes (checkpoint record, snapshot)
		resets bool // fail resets (the previous metadata zone, freed segments)
	}{{"checkpoint-record", true, false}, {"metadata-reset", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			logs := captureSlog(t)
			fv := &faultVol{Volume: newVol(t, 24, 4)}
			reg := prometheus.NewRegistry()
			fs := mkfsMount(t, fv, lfs.Options{Registry: reg})
			want := map[string][]byte{}
			for i, n := range []string{"a", "b", "c"} {
				d := bytes.Repeat([]byte{byte('A' + i)}, 5000+i*4096)
				require.NoError(t, writeFile(fs, n, d, true))
				want[n] = d
			}
			require.Equal(t, 0.0, gaugeValue(t, reg, "zonefleet_fs_read_only"))

			var zs []lfs.ZoneID
			if c.writes {
				zs = append(zs, fs.Stats().MetaZone)
			}
			fv.arm(zs, c.resets)
			// Sync checkpoints; with resets failing the checkpoint must rotate
			// the metadata zone (forced by enough checkpoints) to hit a reset.
			var err error
			for i := 0; i < 600 && err == nil; i++ {
				if err = writeFile(fs, "x", []byte{byte(i)}, false); err == nil {
					err = fs.Sync(bg)
				}
			}
			require.Error(t, err)
			require.Equal(t, syscall.EROFS, lfs.Errno(err), "%v", err)
			var ro *lfs.ReadOnlyError
			require.ErrorAs(t, err, &ro)
			require.ErrorIs(t, err, errMedia)
			isRO, why := fs.ReadOnly()
			require.True(t, isRO)
			require.Error(t, why)
			require.True(t, fs.Stats().ReadOnly)
			require.Equal(t, 1.0, gaugeValue(t, reg, "zonefleet_fs_read_only"))

			// Every mutating operation is refused with EROFS; reads work.
			_, _, err = fs.Create(bg, lfs.RootIno, "new", 0o644, 0, 0, syscall.O_RDWR)
			require.Equal(t, syscall.EROFS, lfs.Errno(err))
			_, err = fs.Mkdir(bg, lfs.RootIno, "dir", 0o755, 0, 0)
			require.Equal(t, syscall.EROFS, lfs.Errno(err))
			require.Equal(t, syscall.EROFS, lfs.Errno(fs.Unlink(bg, lfs.RootIno, "a")))
			require.Equal(t, syscall.EROFS, lfs.Errno(writeFile(fs, "b", []byte("overwrite"), true)))
			for n, d := range want {
				got, err := readFile(fs, n)
				require.NoError(t, err, n)
				require.Equal(t, d, got, n)
			}
			ents, err := fs.Readdir(bg, lfs.RootIno)
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(ents), 3)
			require.Equal(t, 1, strings.Count(logs.String(), "file system went read-only"), "one ERROR line: %s", logs.String())
			require.Contains(t, logs.String(), "level=ERROR")
			require.Equal(t, syscall.EROFS, lfs.Errno(fs.Unmount(bg)), "unmount cannot checkpoint a read-only file system")

			// The fault clears: a remount is clean and keeps every fsynced file.
			fv.clear()
			rep, err := lfs.Fsck(bg, fv, false)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			fs2, err := lfs.Mount(bg, fv, lfs.Options{Registry: prometheus.NewRegistry()})
			require.NoError(t, err)
			ro2, _ := fs2.ReadOnly()
			require.False(t, ro2)
			for n, d := range want {
				got, err := readFile(fs2, n)
				require.NoError(t, err, n)
				require.Equal(t, d, got, n)
			}
			rep, err = fs2.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, writeFile(fs2, "after", []byte("writable again"), true))
			require.NoError(t, fs2.Unmount(bg))
		})
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1)
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A roll-forward that finds the drives disagreeing with the checkpoint (the
// zones written after it lost their data) mounts the checkpoint read-only
// instead of refusing the file system: reads work, writes get EROFS, the
// gauge says 1.
func TestRollForwardInconsistencyMountsReadOnly(t *testing.T) {
	logs := captureSlog(t)
	v := newVol(t, 24, 4)
	fs := mkfsMount(t, v, lfs.Options{})
	require.NoError(t, writeFile(fs, "a", bytes.Repeat([]byte("a"), 9000), false))
	require.NoError(t, fs.Sync(bg))
	meta := fs.Stats().MetaZone
	before := map[lfs.ZoneID]uint64{}
	zs, err := v.Zones(bg)
	require.NoError(t, err)
	for _, z := range zs {
		before[z.ID] = z.WP
	}
	// rolled forward at mount; more than a zone: its data opens new zones
	require.NoError(t, writeFile(fs, "b", bytes.Repeat([]byte("b"), 50*4096), true))
	fs.Abandon()
	zs, err = v.Zones(bg)
	require.NoError(t, err)
	lost := 0
	for _, z := range zs {
		if _, old := before[z.ID]; !old && z.ID != meta {
			require.NoError(t, v.Reset(bg, z.ID)) // the drives lose zones written after the checkpoint
			lost++
		}
	}
	require.Positive(t, lost)
	reg := prometheus.NewRegistry()
	fs, err = lfs.Mount(bg, v, lfs.Options{Registry: reg})
	require.NoError(t, err)
	ro, why := fs.ReadOnly()
	require.True(t, ro)
	require.ErrorContains(t, why, "roll-forward")
	require.Equal(t, 1.0, gaugeValue(t, reg, "zonefleet_fs_read_only"))
	got, err := readFile(fs, "a")
	require.NoError(t, err, "reads work")
	require.Equal(t, bytes.Repeat([]byte("a"), 9000), got, "the checkpoint's files are intact")
	require.Equal(t, syscall.EROFS, lfs.Errno(writeFile(fs, "c", []byte("c"), false)))
	require.Contains(t, logs.String(), "file system went read-only")
	require.Equal(t, syscall.EROFS, lfs.Errno(fs.Unmount(bg)))
}

// A node that is unavailable past the retry deadline is not a failing drive:
// a checkpoint record write or a reset that fails that way leaves the file
// system writable (fsync reports the error), the resets are retried at the
// next checkpoint, and once the node is back everything checkpoints, the
// file system is fsck clean and every file reads back after a remount.
func TestTransientMetadataFailureIsRetried(t *testing.T) {
	fv := &faultVol{Volume: newVol(t, 24, 4), err: &zerr.UnavailableError{What: "node n1", Reason: "injected outage"}}
	reg := prometheus.NewRegistry()
	fs := mkfsMount(t, fv, lfs.Options{Registry: reg, Retries: 1, RetryDeadline: 10 * time.Millisecond})
	want := map[string][]byte{}
	for i, n := range []string{"a", "b", "c"} {
		d := bytes.Repeat([]byte{byte('A' + i)}, 5000+i*4096)
		require.NoError(t, writeFile(fs, n, d, true))
		want[n] = d
	}
	fv.arm([]lfs.ZoneID{fs.Stats().MetaZone}, true)
	failures := 0
	done := 0
	for i := 0; i < 300; i++ {
		name := fmt.Sprintf("x%d", i%7)
		d := bytes.Repeat([]byte{byte(i)}, 4096*(1+i%3))
		err := writeFile(fs, name, d, false)
		if errors.Is(err, zerr.ErrNoResources) {
			// every reset fails in this outage: the freed segments cannot
			// be reused until it ends (ENOSPC, not EROFS)
			break
		}
		require.NoError(t, err, "writes go on while the node is away")
		want[name] = d
		done++
		if err := fs.Sync(bg); err != nil {
			require.ErrorIs(t, err, zerr.ErrUnavailable)
			failures++
		}
		ro, why := fs.ReadOnly()
		require.False(t, ro, "a transient failure is not a reason to go read-only: %v", why)
	}
	require.Positive(t, failures, "the outage reached the checkpoint")
	require.Greater(t, done, 20, "writes went on during the outage")
	fv.mu.Lock()
	hits := fv.hits
	fv.mu.Unlock()
	require.Positive(t, hits)
	require.Equal(t, 0.0, gaugeValue(t, reg, "zonefleet_fs_read_only"))

	fv.clear()
	require.NoError(t, fs.Sync(bg), "the node is back: the checkpoint goes through")
	require.NoError(t, fs.Sync(bg))
	for n, d := range want {
		got, err := readFile(fs, n)
		require.NoError(t, err, n)
		require.Equal(t, d, got, n)
	}
	require.NoError(t, fs.Unmount(bg))
	fsckRemountRead(t, fv, want)
}

// fsckRemountRead checks an unmounted volume: fsck finds no problem, and a
// new mount reads every file of want back as written.
func fsckRemountRead(t *testing.T, vol lfs.Volume, want map[string][]byte) {
	t.Helper()
	rep, err := lfs.Fsck(bg, vol, false)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	fs2, err := lfs.Mount(bg, vol, lfs.Options{Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	for n, d := range want {
		got, err := readFile(fs2, n)
		require.NoError(t, err, n)
		require.Equal(t, d, got, n)
	}
	require.NoError(t, fs2.Unmount(bg))
}
