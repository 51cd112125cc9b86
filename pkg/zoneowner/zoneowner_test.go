package zoneowner

import (
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestDecide(t *testing.T) {
	a1 := Owner{Namespace: "a", Epoch: 100}
	cases := []struct {
		name      string
		persisted Owner
		valid     bool
		grant     Owner
		granted   bool
		want      Action
	}{
		{"same owner, same epoch", a1, true, a1, true, Serve},
		{"no grant", a1, true, Owner{}, false, Deny},
		{"other tenant by overwrite (missed delete)", a1, true, Owner{Namespace: "b", Epoch: 200}, true, Reset},
		{"same tenant, new assignment after release", a1, true, Owner{Namespace: "a", Epoch: 300}, true, Reset},
		{"free zone, first owner", Owner{}, true, a1, true, Reset},
		{"unreadable record", a1, false, a1, true, Reset},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, Decide(tc.persisted, tc.valid, tc.grant, tc.granted), tc.name)
	}
	assert.Equal(t, "reset", Reset.String())
}

func TestStorePersists(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dev0.owners")
	s, err := Open(p, 64)
	require.NoError(t, err)
	assert.True(t, s.Created())
	o, ok := s.Get(5)
	assert.True(t, ok)
	assert.Equal(t, Owner{}, o, "a new file has every zone free")
	long := strings.Repeat("n", MaxNSLen)
	require.NoError(t, s.Set(5, Owner{Namespace: "tenant-a", Epoch: 42}))
	require.NoError(t, s.Set(63, Owner{Namespace: long, Epoch: 1<<63 + 7}))
	assert.ErrorIs(t, s.Set(64, Owner{}), zerr.ErrOutOfRange)
	assert.ErrorIs(t, s.Set(1, Owner{Namespace: long + "x"}), zerr.ErrInvalidArgument)
	_, ok = s.Get(64)
	assert.False(t, ok)
	require.NoError(t, s.Close())
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	s, err = Open(p, 64)
	require.NoError(t, err)
	assert.False(t, s.Created())
	o, ok = s.Get(5)
	assert.True(t, ok)
	assert.Equal(t, Owner{Namespace: "tenant-a", Epoch: 42}, o)
	o, _ = s.Get(63)
	assert.Equal(t, Owner{Namespace: long, Epoch: 1<<63 + 7}, o)
	require.NoError(t, s.Set(5, Owner{}))
	require.NoError(t, s.Close())

	s, err = Open(p, 64)
	require.NoError(t, err)
	o, _ = s.Get(5)
	assert.Equal(t, Owner{}, o, "a reset to free persists")
	require.NoError(t, s.Close())

	_, err = Open(p, 65)
	assert.ErrorIs(t, err, zerr.ErrGeometryMismatch)
	_, err = Open(p, 0)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

func TestCorruptionFailsClosed(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "dev.owners")
	s, err := Open(p, 8)
	require.NoError(t, err)
	require.NoError(t, s.Set(2, Owner{Namespace: "a", Epoch: 9}))
	require.NoError(t, s.Set(3, Owner{Namespace: "b", Epoch: 10}))
	require.NoError(t, s.Close())

	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("X"), HeaderSize+2*RecordSize+3) // flip a namespace byte of zone 2
	require.NoError(t, err)
	// Copy zone 3's record onto zone 4: it must not verify at the wrong index.
	rec := make([]byte, RecordSize)
	_, err = f.ReadAt(rec, HeaderSize+3*RecordSize)
	require.NoError(t, err)
	_, err = f.WriteAt(rec, HeaderSize+4*RecordSize)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(HeaderSize+7*RecordSize-10)) // torn last records
	require.NoError(t, f.Close())

	s, err = Open(p, 8)
	require.NoError(t, err)
	defer s.Close()
	for z, wantValid := range []bool{true, true, false, true, false, true, false, false} {
		o, ok := s.Get(uint32(z))
		assert.Equal(t, wantValid, ok, "zone %d", z)
		if !ok {
			assert.Equal(t, Reset, Decide(o, ok, Owner{Namespace: "a", Epoch: 9}, true), "an unreadable owner forces a reset")
		}
	}
	o, _ := s.Get(3)
	assert.Equal(t, Owner{Namespace: "b", Epoch: 10}, o)
	require.NoError(t, s.Set(2, Owner{Namespace: "c", Epoch: 11}), "a bad record is repaired by the next Set")
	o, ok := s.Get(2)
	assert.True(t, ok)
	assert.Equal(t, "c", o.Namespace)

	for name, mutate := range map[string]func([]byte){
		"magic":   func(b []byte) { b[0] = 'Y' },
		"crc":     func(b []byte) { b[20]++ },
		"version": func(b []byte) { b[8] = 9; fixHeaderCRC(b) },
		"feature": func(b []byte) { b[12] = 0x80; fixHeaderCRC(b) },
	} {
		q := filepath.Join(dir, name)
		s, err := Open(q, 4)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		b, err := os.ReadFile(q)
		require.NoError(t, err)
		mutate(b)
		require.NoError(t, os.WriteFile(q, b, 0o600))
		_, err = Open(q, 4)
		assert.ErrorIs(t, err, zerr.ErrCorrupt, name)
	}
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("ZFOWNER"), 0o600))
	_, err = Open(short, 4)
	assert.ErrorIs(t, err, zerr.ErrCorrupt)
}

func fixHeaderCRC(b []byte) {
	c := crc32.Checksum(b[:24], ondisk.Castagnoli)
	b[24], b[25], b[26], b[27] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
}

func TestConcurrentSetsOfDifferentZones(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.owners")
	s, err := Open(p, 32)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for z := uint32(0); z < 32; z++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := uint64(1); e <= 5; e++ {
				assert.NoError(t, s.Set(z, Owner{Namespace: "ns", Epoch: uint64(z)*100 + e}))
				_, _ = s.Get((z + 1) % 32)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, s.Syncs(), uint64(32*5), "at most one fdatasync per Set (concurrent Sets share them)")
	t.Logf("%d Sets, %d fdatasyncs", 32*5, s.Syncs())
	require.NoError(t, s.Close())
	s, err = Open(p, 32)
	require.NoError(t, err)
	defer s.Close()
	for z := uint32(0); z < 32; z++ {
		o, ok := s.Get(z)
		require.True(t, ok)
		assert.Equal(t, uint64(z)*100+5, o.Epoch)
	}
}

// SetFree does not wait for an fdatasync (its loss fails closed: the old
// owner or an unknown record forces a reset), the next Set's sync or Close
// makes it durable, and it reads back free after a reopen.
func TestSetFreeIsLazy(t *testing.T) {
	p := filepath.Join(t.TempDir(), "free.owners")
	s, err := Open(p, 4)
	require.NoError(t, err)
	a := Owner{Namespace: "a", Epoch: 7}
	require.NoError(t, s.Set(1, a))
	syncs := s.Syncs()
	require.NoError(t, s.SetFree(1))
	require.NoError(t, s.SetFree(2))
	assert.Equal(t, syncs, s.Syncs(), "SetFree ran an fdatasync")
	o, ok := s.Get(1)
	assert.True(t, ok)
	assert.Equal(t, Owner{}, o)
	require.NoError(t, s.Close())
	s, err = Open(p, 4)
	require.NoError(t, err)
	defer s.Close()
	for _, z := range []uint32{1, 2} {
		o, ok := s.Get(z)
		assert.True(t, ok)
		assert.Equal(t, Owner{}, o, "zone %d", z)
	}
}

// TestSetDuringClose: a Set racing Close (a revocation reset still running
// while the node shuts down) either lands or fails with os.ErrClosed and
// leaves the zone unknown; never a write to a closed descriptor.
func TestSetDuringClose(t *testing.T) {
	p := filepath.Join(t.TempDir(), "close.owners")
	s, err := Open(p, 16)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for z := uint32(0); z < 16; z++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := uint64(1); e <= 20; e++ {
				if err := s.Set(z, Owner{Namespace: "ns", Epoch: e}); err != nil {
					assert.ErrorIs(t, err, os.ErrClosed)
					_, ok := s.Get(z)
					assert.False(t, ok, "a Set that failed leaves the zone unknown")
					return
				}
			}
		}()
	}
	require.NoError(t, s.Close())
	wg.Wait()
	require.NoError(t, s.Close(), "a second Close is harmless")
	assert.ErrorIs(t, s.Set(0, Owner{Namespace: "late", Epoch: 99}), os.ErrClosed)
}

// FuzzOpen: any file content opens with a typed error or gives records that
// are either valid or marked invalid; never a panic.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed")
	s, err := Open(seed, 4)
	if err != nil {
		f.Fatal(err)
	}
	_ = s.Set(1, Owner{Namespace: "a", Epoch: 1})
	_ = s.Close()
	b, _ := os.ReadFile(seed)
	f.Add(b)
	f.Add(b[:HeaderSize])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(p, 4)
		if err != nil {
			return
		}
		defer s.Close()
		for z := uint32(0); z < 4; z++ {
			if o, ok := s.Get(z); ok && len(o.Namespace) > MaxNSLen {
				t.Fatalf("zone %d: accepted namespace of %d bytes", z, len(o.Namespace))
			}
		}
	})
}

// TestMemoryStore: the file-less store (in-process test nodes) decides the
// same way and starts with every zone free.
func TestMemoryStore(t *testing.T) {
	s := NewMemory(4)
	defer s.Close()
	o, ok := s.Get(2)
	if !ok || o != (Owner{}) {
		t.Fatalf("zone 2: %+v %v, want free", o, ok)
	}
	if got := Decide(o, ok, Owner{Namespace: "a", Epoch: 1}, true); got != Reset {
		t.Fatalf("free zone for a: %v, want reset", got)
	}
	if err := s.Set(2, Owner{Namespace: "a", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	o, ok = s.Get(2)
	if got := Decide(o, ok, Owner{Namespace: "a", Epoch: 1}, true); got != Serve {
		t.Fatalf("after Set: %v, want serve", got)
	}
	if err := s.Set(9, Owner{}); err == nil {
		t.Fatal("zone out of range accepted")
	}
	if _, ok := s.Get(9); ok {
		t.Fatal("zone out of range readable")
	}
}
