package lfs_test

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestReadVecConcurrent runs readers of several files (ReadVec, which hands
// out slices of the page cache, and Read) while one writer per file
// overwrites it again and again, whole and in half pages, on a small volume
// with a small page cache (pages are evicted and read back from the drives,
// foreground recycling moves blocks, background recycling and periodic
// checkpoints run). Every half page a read returns must be one version,
// never older than the last write completed before the read began and
// never newer than the last one begun; the slices ReadVec returned must
// keep their contents while the writers go on (cached contents are never
// changed in place). Then fsck is clean and a remount reads the last
// versions.
func TestReadVecConcurrent(t *testing.T) {
	const files, pages, bs, versions, readers = 4, 48, 4096, 60, 3
	clk := clock.Realtime(1)
	t.Cleanup(clk.Stop)
	v := newVol(t, 64, 8)
	fs := mkfsMount(t, v, lfs.Options{Move: lfs.Compact, CacheBlocks: 96, Clock: clk,
		BackgroundGC: time.Millisecond, CheckpointEvery: 3 * time.Millisecond})
	inos := make([]uint64, files)
	whs := make([]lfs.Handle, files)
	var started, completed [files]atomic.Int32
	for f := range files {
		a, h, err := fs.Create(bg, lfs.RootIno, fmt.Sprintf("f%d", f), 0o644, 0, 0, syscall.O_RDWR)
		require.NoError(t, err)
		inos[f], whs[f] = a.Ino, h
		require.NoError(t, fillWith(fs, h, 0, pages*bs, 0))
	}

	// checkHalves checks that b, read at block offset 0 of a file, holds
	// whole half pages of versions in [lo, hi].
	checkHalves := func(what string, b []byte, lo, hi int32) bool {
		ok := true
		for off := 0; off < len(b); off += bs / 2 {
			half := b[off:min(off+bs/2, len(b))]
			ver := int32(half[0])
			ok = assert.Equal(t, bytes.Repeat(half[:1], len(half)), half, "%s: half page at %d torn", what, off) && ok
			ok = assert.True(t, ver >= lo && ver <= hi, "%s: half page at %d has version %d, want [%d, %d]", what, off, ver, lo, hi) && ok
			if !ok {
				return false
			}
		}
		return true
	}

	var writers sync.WaitGroup
	for f := range files {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for ver := int32(1); ver <= versions; ver++ {
				started[f].Store(ver)
				var err error
				if ver%3 == 0 {
					// half pages: a read may see a page's halves of two versions
					for p := 0; p < pages && err == nil; p++ {
						if err = fillWith(fs, whs[f], int64(p*bs), bs/2, byte(ver)); err == nil {
							err = fillWith(fs, whs[f], int64(p*bs+bs/2), bs/2, byte(ver))
						}
					}
				} else {
					err = fillWith(fs, whs[f], 0, pages*bs, byte(ver))
				}
				if !assert.NoError(t, err, "file %d version %d", f, ver) {
					return
				}
				completed[f].Store(ver)
				if ver%10 == 0 {
					assert.NoError(t, fs.Fsync(bg, whs[f], false))
				}
			}
		}()
	}

	type kept struct {
		piece, want []byte
	}
	var readersWG sync.WaitGroup
	stop := make(chan struct{})
	for r := range readers {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			var keep []kept
			buf := make([]byte, pages*bs)
			for i := 0; ; i++ {
				select {
				case <-stop:
					for _, k := range keep {
						assert.Equal(t, k.want, k.piece, "reader %d: a ReadVec piece changed after the read", r)
					}
					return
				default:
				}
				f := (r + i) % files
				h, err := fs.Open(bg, inos[f], syscall.O_RDONLY)
				if !assert.NoError(t, err) {
					return
				}
				lo := completed[f].Load()
				off := (i % 5) * bs / 2 // also reads starting in the middle of a page
				var got []byte
				switch {
				case i%4 == 2:
					// sequential reads of 16 KiB (read-ahead): each piece
					// checked by itself (the halves of one read are of
					// versions no older than the write completed before it)
					got = nil
					for pos := off; pos < pages*bs; {
						lo := completed[f].Load()
						vec, n, err := fs.ReadVec(bg, h, int64(pos), buf[pos:min(pos+4*bs, len(buf))], nil)
						if !assert.NoError(t, err) || !assert.Positive(t, n) {
							return
						}
						chunk := bytes.Join(vec, nil)
						if !checkHalves(fmt.Sprintf("reader %d read %d file %d at %d", r, i, f, pos), chunk, lo, started[f].Load()) {
							return
						}
						got = append(got, chunk...)
						pos += n
					}
				case i%4 == 3:
					n, err := fs.Read(bg, h, int64(off), buf[:len(buf)-off])
					if !assert.NoError(t, err) {
						return
					}
					got = buf[:n]
				default:
					into := buf
					if i%16 == 0 {
						into = make([]byte, len(buf)) // the pieces read from the drives are kept too
					}
					vec, n, err := fs.ReadVec(bg, h, int64(off), into[:len(into)-off], nil)
					if !assert.NoError(t, err) {
						return
					}
					got = bytes.Join(vec, nil)
					if !assert.Len(t, got, n) {
						return
					}
					if i%16 == 0 && len(keep) < 64 {
						keep = append(keep, kept{piece: vec[0], want: bytes.Clone(vec[0])})
					}
				}
				hi := started[f].Load()
				assert.NoError(t, fs.Release(bg, h))
				if !assert.Len(t, got, pages*bs-off) || !checkHalves(fmt.Sprintf("reader %d read %d file %d", r, i, f), got, lo, hi) {
					return
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	readersWG.Wait()
	st := fs.Stats()
	t.Logf("recycling rounds: %d foreground, %d background; read-ahead blocks %d", st.GCForeground, st.GCBackground, st.ReadAheadBlocks)

	for f := range files {
		require.NoError(t, fs.Fsync(bg, whs[f], false))
		require.NoError(t, fs.Release(bg, whs[f]))
	}
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, fs.Unmount(bg)) }()
	for f := range files {
		h, err := fs.Open(bg, inos[f], syscall.O_RDONLY)
		require.NoError(t, err)
		vec, n, err := fs.ReadVec(bg, h, 0, make([]byte, pages*bs), nil)
		require.NoError(t, err)
		require.Equal(t, pages*bs, n)
		assert.Equal(t, bytes.Repeat([]byte{versions}, pages*bs), bytes.Join(vec, nil), "file %d after remount", f)
		require.NoError(t, fs.Release(bg, h))
	}
}
