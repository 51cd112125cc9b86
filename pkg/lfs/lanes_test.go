package lfs_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// laneVol records the Volume writes of a file system: how many data writes
// (not node blocks) are in flight at once, and, whenever a direct node is written, whether every
// block it names was written by a Write that already returned (metadata
// must never point at data whose write has not completed). While hold is
// set, a data write that finds no other data write in flight waits (up to
// a second, at most holds times) for a second one to start, so concurrent
// write-backs overlap even on a slow machine.
type laneVol struct {
	lfs.Volume
	bs int

	mu          sync.Mutex
	inflight    int
	maxInflight int
	hold        bool
	holds       int
	second      chan struct{} // closed when a write starts while one is held
	written     map[lfs.ZoneID][]bool
	early       []string
}

func newLaneVol(v lfs.Volume) *laneVol {
	return &laneVol{Volume: v, bs: v.Geometry().BlockSize, written: map[lfs.ZoneID][]bool{}}
}

func (v *laneVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, data []byte, fua bool) error {
	n := len(data) / v.bs
	v.mu.Lock()
	for i := 0; i < n; i++ {
		addrs, ok := lfs.DirectNodeAddrs(data[i*v.bs : (i+1)*v.bs])
		if !ok {
			continue
		}
		for e, a := range addrs {
			if a == 0 {
				continue
			}
			if w := v.written[a.Zone()]; a.Off() >= uint64(len(w)) || !w[a.Off()] {
				v.early = append(v.early, fmt.Sprintf("node at %d/%d entry %d names %v before its write returned", z, off+uint64(i), e, a))
			}
		}
	}
	isData := n > 0 && !lfs.IsNodeBlock(data[:v.bs])
	var wait chan struct{}
	if isData {
		v.inflight++
		v.maxInflight = max(v.maxInflight, v.inflight)
		if v.hold && v.holds > 0 && v.inflight == 1 && v.second == nil {
			v.holds--
			v.second = make(chan struct{})
			wait = v.second
		} else if v.second != nil && v.inflight > 1 {
			close(v.second)
			v.second = nil
		}
	}
	v.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(time.Second):
			v.mu.Lock()
			if v.second == wait {
				v.second = nil
			}
			v.mu.Unlock()
		}
	}
	err := v.Volume.Write(ctx, z, off, data, fua)
	v.mu.Lock()
	if isData {
		v.inflight--
	}
	if err == nil {
		w := v.written[z]
		for uint64(len(w)) < off+uint64(n) {
			w = append(w, false)
		}
		for i := 0; i < n; i++ {
			w[off+uint64(i)] = true
		}
		v.written[z] = w
	}
	v.mu.Unlock()
	return err
}

func (v *laneVol) Reset(ctx context.Context, z lfs.ZoneID) error {
	err := v.Volume.Reset(ctx, z)
	if err == nil {
		v.mu.Lock()
		delete(v.written, z)
		v.mu.Unlock()
	}
	return err
}

func (v *laneVol) setHold(on bool) {
	v.mu.Lock()
	v.hold, v.holds = on, 16
	v.mu.Unlock()
}

// Two write lanes per data log (the default off the virtual clock): several
// writers' write-backs are in flight at once on different segments of the
// same log, no direct node ever names a block before the write of that block
// returned, fsynced files survive a crash (roll-forward finds their blocks
// in the extra lanes' segments), and everything reads back after a remount.
func TestWriteLanesConcurrentWriteBack(t *testing.T) {
	vol := newLaneVol(newVol(t, 96, 8))
	opts := lfs.Options{Move: lfs.HostCopy, CacheBlocks: 1024}
	fs := mkfsMount(t, vol, opts)
	require.Equal(t, lfs.DefaultWriteLanes, fs.WriteLanes())
	vol.setHold(true)

	const files, size, chunk = 4, 3 << 20, 128 << 10
	content := func(f int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(f*31 + i/4096)
		}
		return b
	}
	var wg sync.WaitGroup
	errs := make([]error, files)
	for f := 0; f < files; f++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[f] = func() error {
				root := uint64(lfs.RootIno)
				_, h, err := fs.Create(bg, root, fmt.Sprintf("f%d", f), 0o644, 0, 0, syscall.O_RDWR)
				if err != nil {
					return err
				}
				defer fs.Release(bg, h)
				data := content(f)
				for off := 0; off < size; off += chunk {
					if _, err := fs.Write(bg, h, int64(off), data[off:off+chunk]); err != nil {
						return err
					}
					if off%(1<<20) == 0 {
						if err := fs.Fsync(bg, h, false); err != nil {
							return err
						}
					}
				}
				return fs.Fsync(bg, h, false)
			}()
		}()
	}
	wg.Wait()
	vol.setHold(false)
	for _, err := range errs {
		require.NoError(t, err)
	}
	vol.mu.Lock()
	early, maxIn := vol.early, vol.maxInflight
	vol.mu.Unlock()
	assert.Empty(t, early, "direct nodes named blocks whose write had not returned")
	assert.GreaterOrEqual(t, maxIn, 2, "data write-backs were in flight concurrently")

	// a crash after the fsyncs: roll-forward finds every block
	fs.Abandon()
	fs2, err := lfs.Mount(bg, vol, opts)
	require.NoError(t, err)
	for f := 0; f < files; f++ {
		got, err := readFile(fs2, fmt.Sprintf("f%d", f))
		require.NoError(t, err)
		require.True(t, bytes.Equal(content(f), got), "file %d after the crash", f)
	}
	require.NoError(t, fs2.Unmount(bg))
	fs3, err := lfs.Mount(bg, vol, opts)
	require.NoError(t, err)
	defer fs3.Unmount(bg)
	for f := 0; f < files; f++ {
		got, err := readFile(fs3, fmt.Sprintf("f%d", f))
		require.NoError(t, err)
		require.True(t, bytes.Equal(content(f), got), "file %d after a remount", f)
	}
	vol.mu.Lock()
	assert.Empty(t, vol.early)
	vol.mu.Unlock()
}
