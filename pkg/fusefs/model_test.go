package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// worker applies the same random operations to the mount and to a reference
// directory on the host's file system. Workers own disjoint names (w<id>-…)
// in shared directories, so they run concurrently while each one's sequence
// of operations decides both trees.
type worker struct {
	id        int
	rng       *rand.Rand
	mnt, ref  string
	dirs      []string // shared directories (relative)
	own       []string // directories this worker made (relative)
	seq       int
	opsByKind map[string]int
}

// both runs op on the mount and on the reference and requires the same
// outcome (success, or the same errno).
func (w *worker) both(t *testing.T, what string, op func(root string) error) bool {
	em := op(w.mnt)
	er := op(w.ref)
	var xm, xr syscall.Errno
	errors.As(em, &xm)
	errors.As(er, &xr)
	if (em == nil) != (er == nil) || xm != xr {
		t.Errorf("worker %d: %s: mount says %v, reference says %v", w.id, what, em, er)
		return false
	}
	w.opsByKind[what]++
	return em == nil
}

func (w *worker) dir() string {
	all := append(append([]string{}, w.dirs...), w.own...)
	return all[w.rng.IntN(len(all))]
}

func (w *worker) name() string {
	return filepath.Join(w.dir(), fmt.Sprintf("w%d-%d", w.id, w.rng.IntN(12)))
}

func (w *worker) data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(w.rng.IntN(256))
	}
	// mostly compressible runs, like real files
	if w.rng.IntN(2) == 0 {
		for i := range b {
			b[i] = byte(w.id*31 + w.seq + i/4096)
		}
	}
	return b
}

func (w *worker) step(t *testing.T) {
	w.seq++
	switch k := w.rng.IntN(100); {
	case k < 35: // write at a random offset (creating the file)
		p := w.name()
		off := int64(w.rng.IntN(256 << 10))
		data := w.data(1 + w.rng.IntN(96<<10))
		fsync := w.rng.IntN(8) == 0
		w.both(t, "write", func(root string) error {
			f, err := os.OpenFile(filepath.Join(root, p), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt(data, off); err != nil {
				return err
			}
			if fsync {
				return f.Sync()
			}
			return nil
		})
	case k < 45: // truncate
		p := w.name()
		size := int64(w.rng.IntN(300 << 10))
		w.both(t, "truncate", func(root string) error { return os.Truncate(filepath.Join(root, p), size) })
	case k < 55: // append
		p := w.name()
		data := w.data(1 + w.rng.IntN(16<<10))
		w.both(t, "append", func(root string) error {
			f, err := os.OpenFile(filepath.Join(root, p), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write(data)
			return err
		})
	case k < 65: // rename, possibly over an existing name
		a, b := w.name(), w.name()
		w.both(t, "rename", func(root string) error { return os.Rename(filepath.Join(root, a), filepath.Join(root, b)) })
	case k < 72: // hard link
		a, b := w.name(), w.name()
		w.both(t, "link", func(root string) error { return os.Link(filepath.Join(root, a), filepath.Join(root, b)) })
	case k < 82: // unlink
		p := w.name()
		w.both(t, "unlink", func(root string) error { return os.Remove(filepath.Join(root, p)) })
	case k < 85: // symlink
		p := w.name()
		target := fmt.Sprintf("target-%d", w.seq)
		w.both(t, "symlink", func(root string) error { return os.Symlink(target, filepath.Join(root, p)) })
	case k < 88: // chmod
		p := w.name()
		mode := os.FileMode(0o600 + w.rng.IntN(0o177))
		w.both(t, "chmod", func(root string) error {
			st, err := os.Lstat(filepath.Join(root, p))
			if err != nil || st.Mode()&os.ModeSymlink != 0 {
				return err
			}
			return os.Chmod(filepath.Join(root, p), mode)
		})
	case k < 91: // mkdir / rmdir of the worker's own directory
		if len(w.own) < 2 && w.rng.IntN(2) == 0 {
			d := filepath.Join(w.dirs[w.rng.IntN(len(w.dirs))], fmt.Sprintf("w%d-dir%d", w.id, w.seq))
			if w.both(t, "mkdir", func(root string) error { return os.Mkdir(filepath.Join(root, d), 0o755) }) {
				w.own = append(w.own, d)
			}
		} else if len(w.own) > 0 {
			i := w.rng.IntN(len(w.own))
			d := w.own[i]
			if w.both(t, "rmdir", func(root string) error { return os.Remove(filepath.Join(root, d)) }) {
				w.own = append(w.own[:i], w.own[i+1:]...)
			}
		}
	default: // read a range and compare now
		p := w.name()
		off := int64(w.rng.IntN(300 << 10))
		n := 1 + w.rng.IntN(64<<10)
		var got [2][]byte
		i := 0
		w.both(t, "read", func(root string) error {
			defer func() { i++ }()
			f, err := os.Open(filepath.Join(root, p))
			if err != nil {
				return err
			}
			defer f.Close()
			b := make([]byte, n)
			m, err := f.ReadAt(b, off)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			got[i] = b[:m]
			return nil
		})
		if !bytes.Equal(got[0], got[1]) {
			t.Errorf("worker %d: read %s [%d, +%d): mount and reference differ (%d vs %d bytes)", w.id, p, off, n, len(got[0]), len(got[1]))
		}
	}
}

type node struct {
	mode   os.FileMode
	size   int64
	nlink  uint64
	target string
	data   []byte
}

// tree reads everything under root (byte for byte).
func tree(t *testing.T, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		n := node{mode: st.Mode(), nlink: st.Sys().(*syscall.Stat_t).Nlink}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			n.target, err = os.Readlink(p)
		case st.Mode().IsRegular():
			n.size = st.Size()
			n.data, err = os.ReadFile(p)
		default:
			n.nlink = 0 // directories: ext4 and lfs count alike, but skip
		}
		out[rel] = n
		return err
	}))
	return out
}

func compareTrees(t *testing.T, mnt, ref, when string) {
	t.Helper()
	got, want := tree(t, mnt), tree(t, ref)
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		g, ok := got[n]
		if !assert.True(t, ok, "%s: %s missing on the mount", when, n) {
			continue
		}
		w := want[n]
		assert.Equal(t, w.mode, g.mode, "%s: %s mode", when, n)
		assert.Equal(t, w.nlink, g.nlink, "%s: %s link count", when, n)
		assert.Equal(t, w.target, g.target, "%s: %s symlink target", when, n)
		assert.Equal(t, w.size, g.size, "%s: %s size", when, n)
		assert.True(t, bytes.Equal(w.data, g.data), "%s: %s content differs", when, n)
	}
	for n := range got {
		_, ok := want[n]
		assert.True(t, ok, "%s: %s exists only on the mount", when, n)
	}
	assert.Len(t, got, len(want), when)
}

// The model-based random test: concurrent workers create, write, truncate,
// append, rename, link, unlink, symlink, chmod, mkdir/rmdir and fsync on the
// mount and on a reference directory; reads compare as they go, and the whole
// trees are compared byte for byte at the end, after a remount, and fsck is
// clean. The volume is small, so segments are recycled (IZC) during the run.
func TestModelAgainstReference(t *testing.T) {
	m := mountCluster(t)
	ref := t.TempDir()
	shared := []string{".", "a", "b", "a/c"}
	for _, d := range shared[1:] {
		require.NoError(t, os.Mkdir(filepath.Join(m.dir, d), 0o755))
		require.NoError(t, os.Mkdir(filepath.Join(ref, d), 0o755))
	}
	const workers, steps = 4, 800
	ws := make([]*worker, workers)
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = &worker{id: i, rng: rand.New(rand.NewPCG(uint64(i), 42)), mnt: m.dir, ref: ref, dirs: shared, opsByKind: map[string]int{}}
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			for s := 0; s < steps && !t.Failed(); s++ {
				w.step(t)
			}
		}(ws[i])
	}
	wg.Wait()
	total := map[string]int{}
	for _, w := range ws {
		for k, v := range w.opsByKind {
			total[k] += v
		}
	}
	t.Logf("operations: %v", total)
	compareTrees(t, m.dir, ref, "after the run")
	st := m.fs.Stats()
	t.Logf("stats: %d used blocks, %d user blocks written, %d drive blocks, WAF %.2f, gc %d+%d runs, moved IZC %d host %d",
		st.UsedBlocks, st.UserBlocksWritten, st.DriveBlocksWritten, st.WAF, st.GCForeground, st.GCBackground, st.MovedIZC, st.MovedHostCopy)

	assert.Positive(t, st.GCForeground+st.GCBackground, "segments were recycled during the run")

	// Unmount (checkpoint), fsck, mount again: the same tree.
	m.unmountAndCheck(t)
	fs2, err := lfs.Mount(context.Background(), m.vol, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	srv, err := fusefs.Mount(fusefs.New(fs2, fusefs.Config{}), m.dir, fusefs.MountOptions{Direct: os.Geteuid() == 0})
	require.NoError(t, err)
	m.fs, m.srv = fs2, srv
	compareTrees(t, m.dir, ref, "after a remount")
	m.unmountAndCheck(t)
}
