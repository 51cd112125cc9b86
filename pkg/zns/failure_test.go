package zns

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ioWorkload reaches every I/O call site of the store: data, slot, IPU and
// journal writes, zero-fill and hole punch (finish, TL_open), reads
// (host, compaction, plugging), fdatasync (FUA, Flush, TL finish, new
// generations) and a background checkpoint (open, write, sync, rename,
// directory sync). It stops at the first error, returning the step; acked
// holds every acknowledged block.
//
// maybe collects blocks a destructive command in flight (reset, TL_open)
// may or may not have dropped when that command fails: a failed command may
// have taken effect, like one in flight at a crash.
func ioWorkload(d *Device, acked map[uint64][]byte, maybe map[uint64]bool) (string, error) {
	g := d.g
	bs := g.BlockSize
	ack := func(lba uint64, data []byte) {
		for i := 0; i < len(data)/bs; i++ {
			acked[lba+uint64(i)] = data[i*bs : (i+1)*bs]
		}
	}
	z := func(i uint64) uint64 { return i * g.ZoneSize }
	steps := []struct {
		name string
		run  func() error
	}{
		{"append", func() error {
			data := pattern(bs, 0, 6, 1)
			lba, _, err := d.Append(bg, z(0), data, Flags{})
			if err == nil {
				ack(lba, data)
			}
			return err
		}},
		{"write fua", func() error {
			data := pattern(bs, 6, 2, 2)
			_, err := d.Write(bg, z(0)+6, data, Flags{FUA: true})
			if err == nil {
				ack(z(0)+6, data)
			}
			return err
		}},
		{"read", func() error { _, _, err := d.Read(bg, z(0), 8); return err }},
		{"ipu", func() error {
			data := pattern(bs, 1, 1, 3)
			_, err := d.Write(bg, z(0)+1, data, Flags{Overwrite: true})
			if err == nil {
				ack(z(0)+1, data)
			} else {
				// its records may be in the journal when the sync that
				// makes it durable failed: a restart may find either
				maybe[z(0)+1] = true
			}
			return err
		}},
		{"flush", func() error { _, err := d.Flush(bg); return err }},
		{"finish", func() error {
			data := pattern(bs, z(1), 3, 4)
			if _, _, err := d.Append(bg, z(1), data, Flags{}); err != nil {
				return err
			}
			ack(z(1), data)
			_, err := d.ZoneMgmt(bg, 1, ActionFinish, false)
			return err
		}},
		{"reset", func() error {
			for i := uint64(0); i < 3; i++ {
				maybe[z(1)+i] = true
			}
			_, err := d.ZoneMgmt(bg, 1, ActionReset, false)
			if err == nil {
				for i := uint64(0); i < 3; i++ {
					delete(acked, z(1)+i)
				}
			}
			return err
		}},
		{"compaction", func() error {
			id, err := d.ZoneCompaction(bg, []Copy{{Src: z(0), Dst: z(2), Count: 8}})
			if err != nil {
				return err
			}
			if _, err := d.WaitCompaction(bg, id); err != nil {
				return err
			}
			for i := uint64(0); i < 8; i++ {
				acked[z(2)+i] = acked[z(0)+i]
			}
			return nil
		}},
		{"tl", func() error {
			bm := make([]byte, (g.ZoneCap+7)/8)
			bm[0] = 1 | 4 | 16 // blocks 0, 2, 4 stay valid
			for _, o := range []uint64{1, 3, 5, 6, 7} {
				maybe[z(0)+o] = true
			}
			if _, err := d.TLOpen(bg, 0, bm, LBAOrdered); err != nil {
				return err
			}
			for _, o := range []uint64{1, 3, 5, 6, 7} {
				delete(acked, z(0)+o)
			}
			for _, o := range []uint64{1, 3} {
				data := pattern(bs, z(0)+o, 1, 5)
				if _, err := d.Write(bg, z(0)+o, data, Flags{}); err != nil {
					return err
				}
				ack(z(0)+o, data)
			}
			_, err := d.ZoneMgmt(bg, 0, ActionClose, false)
			return err
		}},
		{"checkpoint", func() error {
			d.j.mu.Lock()
			d.j.limit = 600
			d.j.mu.Unlock()
			for i := 0; i < 12; i++ {
				if _, err := d.ZoneMgmt(bg, 3, ActionOpen, false); err != nil {
					return err
				}
				if _, err := d.ZoneMgmt(bg, 3, ActionClose, false); err != nil {
					return err
				}
			}
			d.bg.Wait()
			return nil
		}},
		{"flush again", func() error { _, err := d.Flush(bg); return err }},
	}
	for _, s := range steps {
		if err := s.run(); err != nil {
			return s.name, err
		}
		clear(maybe)
	}
	return "", nil
}

// TestIOErrorInjection fails, one at a time, the Nth operation of each kind
// the store makes, and checks: the caller gets a typed error carrying the
// cause; the device says so (counter, log line, read-only zone or device);
// the failed write did not land in memory (the write pointer did not move);
// and everything acknowledged before reads back, before and after a restart.
func TestIOErrorInjection(t *testing.T) {
	// count the operations of the workload
	cnt := &vfs.Counter{}
	mem := vfs.NewCrashableMem()
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(vfs.WithErrors(mem, cnt)), WithLogger(quiet))
	require.NoError(t, err)
	step, err := ioWorkload(d, map[uint64][]byte{}, map[uint64]bool{})
	require.NoError(t, err, step)
	require.Greater(t, d.Log().JournalCheckpoints, uint64(0), "the workload must reach a checkpoint")
	require.NoError(t, d.Close())

	kinds := []vfs.OpKind{vfs.OpOpen, vfs.OpRead, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpPunch, vfs.OpSize, vfs.OpRename, vfs.OpSyncDir}
	fired := 0
	for _, k := range kinds {
		n := cnt.Count(k)
		require.Greater(t, n, 0, "workload never does %s", k)
		for i := 1; i <= n; i++ {
			t.Run(fmt.Sprintf("%s#%d", k, i), func(t *testing.T) {
				fired += checkInjected(t, k, i)
			})
		}
	}
	t.Logf("%d injected errors checked", fired)
	require.Greater(t, fired, 50)
}

func checkInjected(t *testing.T, kind vfs.OpKind, n int) int {
	mem := vfs.NewCrashableMem()
	inj := vfs.OnNth(kind, "", n)
	logs := &syncBuf{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(vfs.WithErrors(mem, inj)), WithLogger(log))
	if err != nil {
		// failed while creating: a typed error, nothing acknowledged
		require.Equal(t, 1, inj.Fired())
		var ioe *IOError
		require.ErrorAs(t, err, &ioe)
		require.ErrorIs(t, err, zerr.ErrUnavailable)
		require.ErrorIs(t, err, vfs.ErrInjected)
		return 1
	}
	acked := map[uint64][]byte{}
	before, _ := d.ReportZones(StateAny, 0, 0)
	maybe := map[uint64]bool{}
	step, err := ioWorkload(d, acked, maybe)
	if inj.Fired() == 0 {
		require.NoError(t, err, step)
		err := d.Close()
		if inj.Fired() == 0 {
			require.NoError(t, err)
			return 0
		}
		// the Nth op happened in Close
		require.ErrorIs(t, err, vfs.ErrInjected)
		require.ErrorIs(t, err, zerr.ErrUnavailable)
		return 1
	}
	l := d.Log()
	require.GreaterOrEqual(t, l.IOErrors+l.JournalCheckpointFailures, uint64(1), "step %s: not counted", step)
	require.Contains(t, logs.String(), "level=ERROR", "step %s: not logged", step)
	if err != nil {
		require.ErrorIs(t, err, vfs.ErrInjected, "step %s", step)
		require.ErrorIs(t, err, zerr.ErrUnavailable, "step %s: %v", step, err)
		var ioe *IOError
		require.ErrorAs(t, err, &ioe, "step %s", step)
		if kind != vfs.OpRead {
			require.True(t, l.ReadOnly || l.ZonesFailed > 0, "step %s: a failed %s left the device writable", step, kind)
		}
		if ioe.Zone >= 0 && kind != vfs.OpRead {
			zs, _ := d.ReportZones(StateAny, uint64(ioe.Zone), 1)
			require.Equal(t, StateReadOnly, zs[0].State, "step %s", step)
			_, err := d.Write(bg, zs[0].WP, pattern(d.g.BlockSize, zs[0].WP, 1, 9), Flags{})
			require.ErrorIs(t, err, zerr.ErrZoneState, "step %s: a failed zone still takes writes", step)
		}
		if l.ReadOnly {
			_, err := d.Flush(bg)
			require.ErrorIs(t, err, zerr.ErrUnavailable, "step %s: a failed device still flushes", step)
		}
	} else {
		// only a background checkpoint can fail without a caller
		require.True(t, l.JournalCheckpointFailures > 0 || l.ReadOnly, "injected %s#%d vanished", kind, n)
	}
	_ = before
	verify := func(d *Device, when string) {
		for lba, want := range acked {
			if maybe[lba] {
				continue
			}
			got, _, err := d.Read(bg, lba, 1)
			require.NoError(t, err, "%s: step %s", when, step)
			require.True(t, bytes.Equal(want, got), "%s: step %s: acknowledged block %d lost", when, step, lba)
		}
	}
	verify(d, "same process")
	// a killed process: the page cache (the in-memory file system) survives
	d.abandon()
	d2, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(mem), WithLogger(quiet))
	require.NoError(t, err, "reopen after step %s", step)
	checkInvariants(t, d2)
	verify(d2, "after restart")
	require.NoError(t, d2.Close())
	return 1
}

func TestIOErrorTypes(t *testing.T) {
	e := &IOError{Path: "p", Zone: 3, Op: "write data", Err: vfs.ErrInjected}
	require.ErrorIs(t, e, zerr.ErrUnavailable)
	require.ErrorIs(t, e, vfs.ErrInjected)
	require.Contains(t, e.Error(), "zone 3")
	require.True(t, errors.Is(&IOError{Zone: -1, Err: vfs.ErrInjected}, zerr.ErrUnavailable))
}

// TestCompactionRunFails: a compaction whose second destination run fails
// to write returns the typed error, counts only the run that landed, and
// that run reads back below the zone's write pointer.
func TestCompactionRunFails(t *testing.T) {
	saved := compactStageBytes
	compactStageBytes = 8 * 4096
	defer func() { compactStageBytes = saved }()
	var armed atomic.Bool
	var data atomic.Int32
	inj := vfs.InjectorFunc(func(o vfs.Op) error {
		if armed.Load() && o.Kind == vfs.OpWrite && o.Len == 8*4096 && data.Add(1) == 2 {
			return fmt.Errorf("second run: %w", vfs.ErrInjected)
		}
		return nil
	})
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(vfs.WithErrors(vfs.NewCrashableMem(), inj)), WithLogger(quiet))
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, 4096, d.g.BlockSize)
	fill(t, d, 0, 24, 1)
	armed.Store(true)
	zs := d.g.ZoneSize
	id, err := d.ZoneCompaction(bg, []Copy{{Src: 0, Dst: 2 * zs, Count: 24}})
	require.NoError(t, err)
	res, err := d.WaitCompaction(bg, id)
	require.ErrorIs(t, err, vfs.ErrInjected)
	var ioe *IOError
	require.ErrorAs(t, err, &ioe)
	require.Equal(t, uint64(8), res.Blocks)
	require.Equal(t, res.Blocks, res.CopybackBlocks+res.ReadProgBlocks)
	rep, err := d.ReportZones(StateAny, 2, 1)
	require.NoError(t, err)
	require.Equal(t, 2*zs+8, rep[0].WP)
	got, _, err := d.Read(bg, 2*zs, 8)
	require.NoError(t, err)
	require.Equal(t, pattern(d.g.BlockSize, 0, 8, 1), got)
}
