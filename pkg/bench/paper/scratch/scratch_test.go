package scratch

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// A random sequence of writes (zeros and data, unaligned), truncations and
// hole punches reads back like a plain byte slice would.
func TestFileMatchesModel(t *testing.T) {
	fs := New()
	f, err := fs.OpenFile("d", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	require.NoError(t, err)
	var model []byte
	rng := rand.New(rand.NewPCG(1, 2))
	grow := func(n int64) {
		if int64(len(model)) < n {
			model = append(model, make([]byte, n-int64(len(model)))...)
		}
	}
	for i := 0; i < 3000; i++ {
		off := rng.Int64N(5 * pageSize)
		n := rng.Int64N(3 * pageSize)
		switch rng.IntN(6) {
		case 0, 1: // data
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.IntN(4)) // zeros too
			}
			_, err := f.WriteAt(p, off)
			require.NoError(t, err)
			grow(off + n)
			copy(model[off:], p)
		case 2: // zeros
			_, err := f.WriteAt(make([]byte, n), off)
			require.NoError(t, err)
			grow(off + n)
			clear(model[off : off+n])
		case 3:
			require.NoError(t, f.PunchHole(off, n))
			if off < int64(len(model)) {
				clear(model[off:min(off+n, int64(len(model)))])
			}
		case 4:
			sz := rng.Int64N(6 * pageSize)
			require.NoError(t, f.Truncate(sz))
			if sz < int64(len(model)) {
				model = model[:sz]
			} else {
				grow(sz)
			}
		case 5:
			p := make([]byte, n)
			got, err := f.ReadAt(p, off)
			want := max(0, min(int64(len(model))-off, n))
			require.Equal(t, int(want), got)
			if want < n {
				require.ErrorIs(t, err, io.EOF)
			} else {
				require.NoError(t, err)
			}
			if want > 0 {
				require.Equal(t, model[off:off+want], p[:want], "op %d", i)
			}
		}
		sz, err := f.Size()
		require.NoError(t, err)
		require.Equal(t, int64(len(model)), sz)
	}
}

// Writing zeros over holes allocates nothing.
func TestZerosAreFree(t *testing.T) {
	fs := New()
	vf, err := fs.OpenFile("d", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	f := vf.(*file)
	require.NoError(t, f.Truncate(1<<30))
	_, err = f.WriteAt(make([]byte, 1<<20), 1<<29)
	require.NoError(t, err)
	require.Empty(t, f.pages)
	_, err = f.WriteAt([]byte{1}, 5)
	require.NoError(t, err)
	require.Len(t, f.pages, 1)
}

func TestNames(t *testing.T) {
	fs := New()
	_, err := fs.OpenFile("a", os.O_RDWR, 0)
	require.ErrorIs(t, err, os.ErrNotExist)
	f, err := fs.OpenFile("a", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("hello"), 0)
	require.NoError(t, err)
	_, err = fs.OpenFile("a", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	require.ErrorIs(t, err, os.ErrExist)
	require.NoError(t, fs.Rename("a", "b"))
	n, err := fs.Stat("b")
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	_, err = fs.Stat("a")
	require.True(t, errors.Is(err, os.ErrNotExist))
	g, err := fs.OpenFile("b", os.O_RDWR|os.O_TRUNC, 0)
	require.NoError(t, err)
	n, _ = g.Size()
	require.Zero(t, n)
	require.NoError(t, fs.Remove("b"))
	require.ErrorIs(t, fs.Remove("b"), os.ErrNotExist)
	require.NoError(t, fs.SyncDir("."))
	require.NoError(t, g.Sync())
	require.NoError(t, g.Datasync())
	require.NoError(t, g.Close())
}
