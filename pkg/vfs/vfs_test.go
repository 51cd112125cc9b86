package vfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func fill(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

type namedFS struct {
	name string
	fs   FS
	dir  string
}

// everyFS is each implementation, with a directory to use on it.
func everyFS(t *testing.T) []namedFS {
	return []namedFS{
		{"os", Default, t.TempDir()},
		{"mem", NewCrashableMem(), "/d"},
		{"errors-none", WithErrors(NewCrashableMem(), &Counter{}), "/d"},
	}
}

// Both implementations behave like a file system for the calls the store makes.
func TestFSBasics(t *testing.T) {
	for _, tc := range everyFS(t) {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(tc.dir, "f")
			_, err := tc.fs.OpenFile(p, os.O_RDWR, 0)
			require.ErrorIs(t, err, os.ErrNotExist)
			f, err := tc.fs.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			require.NoError(t, err)
			_, err = tc.fs.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			require.ErrorIs(t, err, os.ErrExist)
			require.NoError(t, f.Truncate(3*pageSize))
			_, err = f.WriteAt(fill(100, 7), pageSize-50)
			require.NoError(t, err)
			require.NoError(t, f.PunchHole(pageSize, pageSize))
			got := make([]byte, 200)
			_, err = f.ReadAt(got, pageSize-100)
			require.NoError(t, err)
			require.Equal(t, append(append(fill(50, 0), fill(50, 7)...), fill(100, 0)...), got)
			require.NoError(t, f.Datasync())
			n, err := f.Size()
			require.NoError(t, err)
			require.Equal(t, int64(3*pageSize), n)
			_, err = f.ReadAt(make([]byte, 10), 3*pageSize-5)
			require.Error(t, err, "short read at the end is io.EOF")
			require.NoError(t, f.Close())
			require.NoError(t, WriteFileAtomic(tc.fs, filepath.Join(tc.dir, "g"), []byte("hello")))
			b, err := ReadFile(tc.fs, filepath.Join(tc.dir, "g"))
			require.NoError(t, err)
			require.Equal(t, "hello", string(b))
			require.NoError(t, tc.fs.Remove(p))
			_, err = tc.fs.Stat(p)
			require.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

func TestCrashCloneKeepsSyncedDropsUnsynced(t *testing.T) {
	m := NewCrashableMem()
	f, err := m.OpenFile("/d/a", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, _ = f.WriteAt(fill(pageSize, 1), 0)
	require.NoError(t, f.Sync())
	require.NoError(t, m.SyncDir("/d"))
	_, _ = f.WriteAt(fill(pageSize, 2), pageSize) // never synced
	g, _ := m.OpenFile("/d/b", os.O_RDWR|os.O_CREATE, 0o644)
	_, _ = g.WriteAt(fill(10, 3), 0)
	require.NoError(t, g.Sync()) // contents synced, directory not

	outcomes := map[string]bool{}
	for seed := uint64(0); seed < 200; seed++ {
		c := m.CrashClone(seed)
		b, err := ReadFile(c, "/d/a")
		require.NoError(t, err, "seed %d", seed)
		require.Equal(t, fill(pageSize, 1), b[:pageSize], "seed %d: synced data lost", seed)
		switch {
		case len(b) == pageSize:
			outcomes["lost"] = true
		case bytes.Equal(b[pageSize:], fill(pageSize, 2)):
			outcomes["kept"] = true
		case bytes.Equal(b[pageSize:], fill(pageSize, 0)):
			outcomes["zeros"] = true
		default:
			outcomes["torn/garbage"] = true
		}
		_, err = c.Stat("/d/b")
		outcomes["b="+map[bool]string{true: "present", false: "absent"}[err == nil]] = true
		// same seed, same result
		b2, _ := ReadFile(m.CrashClone(seed), "/d/a")
		require.Equal(t, b, b2)
	}
	for _, k := range []string{"lost", "kept", "zeros", "torn/garbage", "b=present", "b=absent"} {
		require.True(t, outcomes[k], "outcome %q never produced", k)
	}
	// the original keeps working
	b, err := ReadFile(m, "/d/a")
	require.NoError(t, err)
	require.Equal(t, fill(pageSize, 2), b[pageSize:])
}

func TestRenameAtomicAfterCrash(t *testing.T) {
	m := NewCrashableMem()
	require.NoError(t, WriteFileAtomic(m, "/d/j", []byte("old")))
	require.NoError(t, WriteFileAtomic(m, "/d/j", []byte("new")))
	f, _ := m.OpenFile("/d/j.tmp", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	_, _ = f.WriteAt([]byte("newer"), 0)
	require.NoError(t, f.Sync())
	require.NoError(t, m.Rename("/d/j.tmp", "/d/j")) // directory not synced
	seen := map[string]bool{}
	for seed := uint64(0); seed < 50; seed++ {
		b, err := ReadFile(m.CrashClone(seed), "/d/j")
		require.NoError(t, err)
		require.Contains(t, []string{"new", "newer"}, string(b))
		seen[string(b)] = true
	}
	require.Len(t, seen, 2)
}

func TestInjectors(t *testing.T) {
	nth := OnNth(OpWrite, "/x", 2)
	fs := WithErrors(NewCrashableMem(), nth)
	f, err := fs.OpenFile("/d/x", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	g, err := fs.OpenFile("/d/y", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	for i, want := range []bool{false, true, false} {
		_, err := g.WriteAt([]byte{1}, 0) // other file: never counted
		require.NoError(t, err)
		_, err = f.WriteAt([]byte{1}, int64(i))
		require.Equal(t, want, errors.Is(err, ErrInjected), "write %d", i+1)
	}
	require.Equal(t, 1, nth.Fired())

	p := WithErrors(NewCrashableMem(), OnPredicate(func(o Op) bool { return o.Kind == OpSync }))
	h, _ := p.OpenFile("/d/z", os.O_RDWR|os.O_CREATE, 0o644)
	require.ErrorIs(t, h.Sync(), ErrInjected)
	require.ErrorIs(t, h.Datasync(), ErrInjected)
	var pe *os.PathError
	require.ErrorAs(t, h.Sync(), &pe)
	require.Equal(t, "/d/z", pe.Path)
}

// WriteAtV writes its buffers back to back, however many and however cut
// (more than one pwritev's IOV_MAX, empty ones, odd lengths), on every
// implementation; the operating system's file in one vectored call per
// IOV_MAX buffers.
func TestWriteAtV(t *testing.T) {
	for _, tc := range everyFS(t) {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.fs.OpenFile(filepath.Join(tc.dir, "f"), os.O_RDWR|os.O_CREATE, 0o644)
			require.NoError(t, err)
			defer f.Close()
			var want []byte
			var bufs [][]byte
			for i := 0; i < 2*iovMax+17; i++ {
				b := fill(i%37, byte(i))
				bufs = append(bufs, b)
				want = append(want, b...)
			}
			n, err := WriteAtV(f, bufs, 123)
			require.NoError(t, err)
			require.Equal(t, len(want), n)
			got := make([]byte, len(want))
			_, err = f.ReadAt(got, 123)
			require.NoError(t, err)
			require.Equal(t, want, got)
			size, err := f.Size()
			require.NoError(t, err)
			require.Equal(t, int64(123+len(want)), size)
		})
	}
	t.Run("injected error", func(t *testing.T) {
		fs := WithErrors(NewCrashableMem(), InjectorFunc(func(o Op) error {
			if o.Kind == OpWrite && o.Len == 30 {
				return ErrInjected
			}
			return nil
		}))
		f, err := fs.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(t, err)
		_, err = WriteAtV(f, [][]byte{fill(10, 1), fill(20, 2)}, 0)
		require.ErrorIs(t, err, ErrInjected)
		size, err := f.Size()
		require.NoError(t, err)
		require.Zero(t, size, "a refused vectored write writes nothing")
	})
}
