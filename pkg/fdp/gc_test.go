package fdp

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

// gate blocks the first ReadAt of the device's data file after it is
// armed (only garbage collection reads it while the test writes) until
// released.
type gate struct {
	armed   atomic.Bool
	hit     chan struct{} // closed when a ReadAt is held
	release chan struct{}
}

type gateFS struct {
	vfs.FS
	g *gate
}

func (f gateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fl, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || name != "/fdp0" {
		return fl, err
	}
	return gateFile{fl, f.g}, nil
}

type gateFile struct {
	vfs.File
	g *gate
}

func (f gateFile) ReadAt(p []byte, off int64) (int, error) {
	if f.g.armed.CompareAndSwap(true, false) {
		close(f.g.hit)
		<-f.g.release
	}
	return f.File.ReadAt(p, off)
}

// TestHostIOWhileGCCopies holds garbage collection in the middle of its
// copies (its first read of a victim) and checks that a host write, a
// read and a trim complete meanwhile; the trim makes every copy of the
// held collection stale, which must not resurrect the trimmed data, neither
// in the running device nor after a power loss.
func TestHostIOWhileGCCopies(t *testing.T) {
	g := &gate{hit: make(chan struct{}), release: make(chan struct{})}
	mem := vfs.NewCrashableMem()
	d, err := Create("/fdp0", testConfig(), clock.Off(), WithFS(gateFS{mem, g}), WithLogger(quiet))
	require.NoError(t, err)
	defer func() { _ = d.Close() }()
	bs := d.BlockSize()
	ctx := context.Background()
	span := d.Capacity() * 8 / 10 // handle 0's LBAs; the host write below is past them
	other := span + 1

	rng := rand.New(rand.NewPCG(3, 4))
	for d.Stats().GCCopies == 0 { // steady state: the next units need collection
		lba := rng.Uint64N(span)
		_, err := d.Write(ctx, lba, block(bs, lba, 1), PlacementID{Handle: 0}, Flags{})
		require.NoError(t, err)
	}
	_, err = d.Write(ctx, other, block(bs, other, 1), PlacementID{Handle: 1}, Flags{}) // opens handle 1's unit
	require.NoError(t, err)

	g.armed.Store(true)
	held := make(chan error, 1)
	go func() { // writes until one of its writes collects and is held there
		for {
			lba := rng.Uint64N(span)
			if _, err := d.Write(ctx, lba, block(bs, lba, 2), PlacementID{Handle: 0}, Flags{}); err != nil {
				held <- err
				return
			}
			select {
			case <-g.hit:
				held <- nil
				return
			default:
			}
		}
	}()
	select {
	case <-g.hit:
	case err := <-held:
		t.Fatalf("the writer stopped before a collection: %v", err)
	}

	// The collection is held with data still to move. Host I/O goes on.
	_, err = d.Write(ctx, other, block(bs, other, 2), PlacementID{Handle: 1}, Flags{})
	require.NoError(t, err, "host write while GC copies")
	got, _, err := d.Read(ctx, other, 1)
	require.NoError(t, err)
	require.Equal(t, block(bs, other, 2), got)
	require.NoError(t, d.Trim(ctx, 0, span), "trim while GC copies")

	close(g.release)
	require.NoError(t, <-held)
	checkInvariants(t, d)
	zero := make([]byte, bs)
	check := func(d *Device) {
		t.Helper()
		for lba := uint64(0); lba < span; lba += 7 {
			got, _, err := d.Read(ctx, lba, 1)
			require.NoError(t, err)
			require.True(t, bytes.Equal(zero, got), "LBA %d: trimmed while its GC copy was in flight, reads data", lba)
		}
		got, _, err := d.Read(ctx, other, 1)
		require.NoError(t, err)
		require.Equal(t, block(bs, other, 2), got)
	}
	check(d)
	require.NoError(t, d.Flush(ctx))

	img := mem.CrashClone(7)
	r, err := Open("/fdp0", testConfig(), clock.Off(), WithFS(img), WithLogger(quiet))
	require.NoError(t, err)
	defer func() { _ = r.Close() }()
	check(r)
	checkInvariants(t, r)
}
