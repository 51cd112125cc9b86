package lfs_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// mfile is a reference file; hard links share one.
type mfile struct{ data []byte }

// model is one goroutine's reference view: its own files and directories.
type model struct {
	files map[string]*mfile
	dirs  map[string]bool
}

func (m *model) paths() []string {
	out := make([]string, 0, len(m.files))
	for p := range m.files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func setAt(b []byte, off int, d []byte) []byte {
	if end := off + len(d); end > len(b) {
		b = append(b, make([]byte, end-len(b))...)
	}
	copy(b[off:], d)
	return b
}

func truncTo(b []byte, n int) []byte {
	if n <= len(b) {
		return append([]byte(nil), b[:n]...)
	}
	return append(b, make([]byte, n-len(b))...)
}

// worker runs random operations on the FS and its model; it returns the
// first disagreement.
func worker(fs *lfs.FS, id int, seed int64, ops int, shared []string, m *model, fsynced map[string][]byte, mu *sync.Mutex) error {
	rng := rand.New(rand.NewSource(seed))
	pick := func() (string, bool) {
		ps := m.paths()
		if len(ps) == 0 {
			return "", false
		}
		return ps[rng.Intn(len(ps))], true
	}
	parent := func() string {
		dirs := append([]string(nil), shared...)
		for d := range m.dirs {
			dirs = append(dirs, d)
		}
		sort.Strings(dirs)
		return dirs[rng.Intn(len(dirs))]
	}
	n := 0
	newName := func() string {
		n++
		return fmt.Sprintf("%s/g%d_%d", parent(), id, n)
	}
	for i := 0; i < ops; i++ {
		switch op := rng.Intn(100); {
		case op < 25: // create or overwrite part of a file
			p, ok := pick()
			if !ok || rng.Intn(4) == 0 {
				p = newName()
				if err := writeFile(fs, p, nil, false); err != nil {
					return fmt.Errorf("create %s: %w", p, err)
				}
				m.files[p] = &mfile{}
			}
			f := m.files[p]
			off := rng.Intn(len(f.data) + 3*4096 + 1)
			d := make([]byte, rng.Intn(3*4096)+1)
			rng.Read(d)
			ino, err := walk(fs, p)
			if err != nil {
				return fmt.Errorf("walk %s: %w", p, err)
			}
			flags := syscall.O_RDWR
			if rng.Intn(5) == 0 {
				flags |= syscall.O_APPEND
				off = len(f.data)
			}
			h, err := fs.Open(bg, ino, flags)
			if err != nil {
				return err
			}
			if _, err := fs.Write(bg, h, int64(off), d); err != nil {
				fs.Release(bg, h)
				return fmt.Errorf("write %s: %w", p, err)
			}
			f.data = setAt(f.data, off, d)
			if rng.Intn(4) == 0 {
				if err := fs.Fsync(bg, h, false); err != nil {
					fs.Release(bg, h)
					return err
				}
				mu.Lock()
				fsynced[p] = append([]byte(nil), f.data...)
				mu.Unlock()
			}
			fs.Release(bg, h)
		case op < 35: // truncate
			p, ok := pick()
			if !ok {
				continue
			}
			f := m.files[p]
			size := rng.Intn(len(f.data)*2 + 4096)
			ino, _ := walk(fs, p)
			if _, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: uint64(size)}); err != nil {
				return fmt.Errorf("truncate %s: %w", p, err)
			}
			f.data = truncTo(f.data, size)
		case op < 47: // rename, sometimes over an existing own file
			p, ok := pick()
			if !ok {
				continue
			}
			q := newName()
			if o, ok2 := pick(); ok2 && o != p && rng.Intn(3) == 0 {
				q = o
			}
			pd, pn := split(p)
			qd, qn := split(q)
			pi, _ := walk(fs, pd)
			qi, _ := walk(fs, qd)
			if err := fs.Rename(bg, pi, pn, qi, qn, 0); err != nil {
				return fmt.Errorf("rename %s %s: %w", p, q, err)
			}
			f := m.files[p]
			if m.files[q] == f {
				continue // rename between links of one file does nothing
			}
			delete(m.files, p)
			m.files[q] = f
		case op < 55: // hard link
			p, ok := pick()
			if !ok {
				continue
			}
			q := newName()
			ino, _ := walk(fs, p)
			qd, qn := split(q)
			qi, _ := walk(fs, qd)
			if _, err := fs.Link(bg, ino, qi, qn); err != nil {
				return fmt.Errorf("link %s %s: %w", p, q, err)
			}
			m.files[q] = m.files[p]
		case op < 65: // unlink, sometimes while open (then use the handle)
			p, ok := pick()
			if !ok {
				continue
			}
			ino, _ := walk(fs, p)
			h, err := fs.Open(bg, ino, syscall.O_RDWR)
			if err != nil {
				return err
			}
			pd, pn := split(p)
			pi, _ := walk(fs, pd)
			if err := fs.Unlink(bg, pi, pn); err != nil {
				return fmt.Errorf("unlink %s: %w", p, err)
			}
			f := m.files[p]
			delete(m.files, p)
			// write through the open handle; read it back
			d := []byte("still here")
			if _, err := fs.Write(bg, h, 0, d); err != nil {
				return err
			}
			f.data = setAt(f.data, 0, d)
			buf := make([]byte, len(f.data))
			if n, err := fs.Read(bg, h, 0, buf); err != nil || !bytes.Equal(buf[:n], f.data) {
				return fmt.Errorf("read unlinked %s: %v, match %v", p, err, bytes.Equal(buf[:n], f.data))
			}
			fs.Release(bg, h)
		case op < 72: // mkdir
			d := newName()
			pd, pn := split(d)
			pi, _ := walk(fs, pd)
			if _, err := fs.Mkdir(bg, pi, pn, 0o755, 0, 0); err != nil {
				return fmt.Errorf("mkdir %s: %w", d, err)
			}
			m.dirs[d] = true
		case op < 78: // rmdir an empty own dir, or rename an own dir
			var ds []string
			for d := range m.dirs {
				ds = append(ds, d)
			}
			sort.Strings(ds)
			if len(ds) == 0 {
				continue
			}
			d := ds[rng.Intn(len(ds))]
			pd, pn := split(d)
			pi, _ := walk(fs, pd)
			empty := true
			for p := range m.files {
				if strings.HasPrefix(p, d+"/") {
					empty = false
				}
			}
			for o := range m.dirs {
				if strings.HasPrefix(o, d+"/") {
					empty = false
				}
			}
			if empty && rng.Intn(2) == 0 {
				if err := fs.Rmdir(bg, pi, pn); err != nil {
					return fmt.Errorf("rmdir %s: %w", d, err)
				}
				delete(m.dirs, d)
				continue
			}
			q := fmt.Sprintf("%s/g%d_r%d", shared[rng.Intn(len(shared))], id, i)
			qd, qn := split(q)
			qi, _ := walk(fs, qd)
			err := fs.Rename(bg, pi, pn, qi, qn, 0)
			if err != nil {
				return fmt.Errorf("rename dir %s %s: %w", d, q, err)
			}
			nf := map[string]*mfile{}
			for p, f := range m.files {
				if strings.HasPrefix(p, d+"/") {
					p = q + strings.TrimPrefix(p, d)
				}
				nf[p] = f
			}
			m.files = nf
			nd := map[string]bool{}
			for o := range m.dirs {
				if o == d || strings.HasPrefix(o, d+"/") {
					o = q + strings.TrimPrefix(o, d)
				}
				nd[o] = true
			}
			m.dirs = nd
		case op < 85: // read back a file
			p, ok := pick()
			if !ok {
				continue
			}
			got, err := readFile(fs, p)
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			if !bytes.Equal(got, m.files[p].data) {
				return fmt.Errorf("read %s: content differs (len %d vs %d)", p, len(got), len(m.files[p].data))
			}
		default: // xattr and chmod
			p, ok := pick()
			if !ok {
				continue
			}
			ino, _ := walk(fs, p)
			if err := fs.Setxattr(bg, ino, "user.k", []byte(p), 0); err != nil {
				return err
			}
			if _, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetMode, Mode: 0o600}); err != nil {
				return err
			}
		}
	}
	return nil
}

// tree lists every regular file of the FS with its content.
func tree(t *testing.T, fs *lfs.FS) map[string][]byte {
	out := map[string][]byte{}
	var rec func(ino uint64, prefix string)
	rec = func(ino uint64, prefix string) {
		ents, err := fs.Readdir(bg, ino)
		require.NoError(t, err)
		for _, e := range ents {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			p := prefix + "/" + e.Name
			if e.Mode == syscall.S_IFDIR {
				rec(e.Ino, p)
				continue
			}
			a, err := fs.Getattr(bg, e.Ino)
			require.NoError(t, err)
			if a.Size > 16<<20 {
				out[strings.TrimPrefix(p, "/")] = []byte(fmt.Sprintf("size %d", a.Size))
				continue
			}
			got, err := readFile(fs, strings.TrimPrefix(p, "/"))
			require.NoError(t, err, p)
			out[strings.TrimPrefix(p, "/")] = got
		}
	}
	rec(lfs.RootIno, "")
	return out
}

func compareTree(t *testing.T, fs *lfs.FS, models []*model) {
	t.Helper()
	want := map[string][]byte{}
	for _, m := range models {
		for p, f := range m.files {
			want[p] = f.data
		}
	}
	got := tree(t, fs)
	for p := range got {
		require.Contains(t, want, p, "extra file")
	}
	for p, d := range want {
		require.Contains(t, got, p)
		require.True(t, bytes.Equal(d, got[p]), "content of %s: %d vs %d bytes", p, len(d), len(got[p]))
	}
}

func TestModelRandom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		ops     int
		seed    int64
		mode    lfs.Mode
	}{
		{"host-copy", 4, 1500, 1, lfs.ModeZNS},
		{"izc", 4, 1500, 2, lfs.ModeIZC},
		{"zns+", 4, 1500, 3, lfs.ModeZNSPlus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, 64, 8)
			fs := mkfsMount(t, v, lfs.Options{Mode: tc.mode, CacheBlocks: 256})
			shared := []string{"a", "b", "c"}
			for _, s := range shared {
				_, err := fs.Mkdir(bg, lfs.RootIno, s, 0o755, 0, 0)
				require.NoError(t, err)
			}
			models := make([]*model, tc.workers)
			errs := make([]error, tc.workers)
			fsynced := map[string][]byte{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range models {
				models[i] = &model{files: map[string]*mfile{}, dirs: map[string]bool{}}
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					errs[i] = worker(fs, i, tc.seed*100+int64(i), tc.ops, shared, models[i], fsynced, &mu)
				}(i)
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			compareTree(t, fs, models)
			t.Logf("%+v", fs.Stats())
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs.Unmount(bg))
			rep, err = lfs.Fsck(bg, v, false)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			fs, err = lfs.Mount(bg, v, lfs.Options{Mode: tc.mode})
			require.NoError(t, err)
			compareTree(t, fs, models)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}
