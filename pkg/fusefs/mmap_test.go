package fusefs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

type mmapResult struct {
	Durable          []int  // chunks whose fsync returned 0
	FailedAt         int    // first chunk whose fsync failed (-1: none)
	SyncAfterFailure []int  // chunks whose fsync returned 0 after a failure (must be none)
	Err              string // setup failure
}

// TestMmapWriterChild is the mmap writer of TestMmapWriterAtENOSPC, run in
// a child process (ZF_MMAP_CHILD=path,chunk bytes,chunks); it prints RESULT
// and a JSON mmapResult.
func TestMmapWriterChild(t *testing.T) {
	arg := os.Getenv("ZF_MMAP_CHILD")
	if arg == "" {
		t.Skip("child process of TestMmapWriterAtENOSPC")
	}
	var p string
	var csize, nchunks int
	parts := strings.Split(arg, ",")
	p = parts[0]
	_, _ = fmt.Sscan(parts[1], &csize)
	_, _ = fmt.Sscan(parts[2], &nchunks)
	res := mmapResult{FailedAt: -1}
	defer func() {
		b, _ := json.Marshal(res)
		fmt.Printf("RESULT %s\n", b)
	}()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		res.Err = err.Error()
		return
	}
	defer f.Close()
	if err := f.Truncate(int64(nchunks * csize)); err != nil {
		res.Err = err.Error()
		return
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, nchunks*csize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		res.Err = err.Error()
		return
	}
	defer func() { _ = unix.Munmap(mem) }()
	for i := 0; i < nchunks; i++ {
		copy(mem[i*csize:], chunkPattern(i, csize))
		_ = unix.Msync(mem[i*csize:(i+1)*csize], unix.MS_SYNC) // reports the failure once, like the kernel's errseq
		err := f.Sync()
		switch {
		case err == nil && res.FailedAt >= 0:
			res.SyncAfterFailure = append(res.SyncAfterFailure, i)
		case err == nil:
			res.Durable = append(res.Durable, i)
		case res.FailedAt < 0:
			if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) {
				res.Err = fmt.Sprintf("chunk %d: %v", i, err)
				return
			}
			res.FailedAt = i
		}
	}
}

func chunkPattern(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j/4096 + 1)
	}
	return b
}

// The mmap/ENOSPC guarantee: write(2) gets ENOSPC while a reserve is left
// for write-back of mapped pages; an mmap writer that then fills the file
// system never loses a page whose fsync returned 0, and once a write-back
// failed every later fsync of the file fails (until the last close).
func TestMmapWriterAtENOSPC(t *testing.T) {
	m := mountCluster(t)
	var sfs unix.Statfs_t
	require.NoError(t, unix.Statfs(m.dir, &sfs))
	bs := int64(sfs.Bsize)

	// 1. a buffered writer fills the file system: ENOSPC at once, with the
	// reserve still free
	filler, err := os.Create(filepath.Join(m.dir, "filler"))
	require.NoError(t, err)
	chunk := bytes.Repeat([]byte("f"), 64<<10)
	var werr error
	for off := int64(0); werr == nil; off += int64(len(chunk)) {
		_, werr = filler.WriteAt(chunk, off)
	}
	require.ErrorIs(t, werr, syscall.ENOSPC)
	require.NoError(t, filler.Close())
	require.NoError(t, unix.Statfs(m.dir, &sfs))
	reserve := int64(sfs.Bfree) - int64(sfs.Bavail)
	t.Logf("full for write(2): bfree %d, bavail %d blocks (reserve %d)", sfs.Bfree, sfs.Bavail, reserve)
	require.Greater(t, reserve, int64(8), "a write-back reserve is kept")

	// 2. an mmap writer stores into holes past what the reserve holds. It
	// runs in a child process: a page fault on a mapping served by this
	// process would stall the Go runtime's stop-the-world (the faulting
	// thread cannot be preempted while the FUSE server is stopped).
	p := filepath.Join(m.dir, "mapped")
	const pagesPerChunk = 4
	csize := int(pagesPerChunk * bs)
	nchunks := int(2*reserve/pagesPerChunk) + 8
	cmd := exec.Command(os.Args[0], "-test.run=^TestMmapWriterChild$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("ZF_MMAP_CHILD=%s,%d,%d", p, csize, nchunks))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var res mmapResult
	i := bytes.Index(out, []byte("RESULT "))
	require.GreaterOrEqual(t, i, 0, "%s", out)
	require.NoError(t, json.NewDecoder(bytes.NewReader(out[i+len("RESULT "):])).Decode(&res))
	require.Empty(t, res.Err, "%s", out)
	durable, failedAt := map[int]bool{}, res.FailedAt
	for _, c := range res.Durable {
		durable[c] = true
	}
	require.Empty(t, res.SyncAfterFailure, "fsync succeeded after a failed write-back")
	t.Logf("%d chunks of %d pages durable, write-back failed at chunk %d", len(durable), pagesPerChunk, failedAt)

	// 3. after a remount (no page cache) every acknowledged chunk is there
	m.remount(t)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	for i := range durable {
		require.Equal(t, chunkPattern(i, csize), got[i*csize:(i+1)*csize], "chunk %d was fsynced", i)
	}
	require.GreaterOrEqual(t, failedAt, 0, "the mmap writer reached ENOSPC")
	require.Greater(t, len(durable), int(reserve/pagesPerChunk)/2, "the reserve took the mapped pages")
	// the file is usable again once space is freed
	require.NoError(t, os.Remove(filepath.Join(m.dir, "filler")))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(chunkPattern(1, csize), int64(failedAt*csize))
	require.NoError(t, err)
	assert.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	m.unmountAndCheck(t)
}
