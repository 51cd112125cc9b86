package lfs_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// tornBatchVol cuts the power during the first FUA write of more than one
// block once armed: the write keeps only its last block (the marked
// inode of an fsync's node batch), the blocks before it read as zeros, and
// every later call fails (the machine is down).
type tornBatchVol struct {
	lfs.Volume
	armed, down atomic.Bool
	tore        atomic.Int32 // blocks zeroed
}

func (v *tornBatchVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	if v.down.Load() {
		return &zerr.ClosedError{What: "powered-off volume"}
	}
	const bs = 4096
	if v.armed.Load() && fua && len(d) > bs {
		torn := make([]byte, len(d))
		copy(torn[len(d)-bs:], d[len(d)-bs:])
		v.tore.Store(int32(len(d)/bs - 1))
		v.down.Store(true)
		_ = v.Volume.Write(ctx, z, off, torn, fua)
		return &zerr.ClosedError{What: "powered-off volume"}
	}
	return v.Volume.Write(ctx, z, off, d, fua)
}

func (v *tornBatchVol) Flush(ctx context.Context) error {
	if v.down.Load() {
		return &zerr.ClosedError{What: "powered-off volume"}
	}
	return v.Volume.Flush(ctx)
}

// TestFsyncTornBatchRollsBackToPreviousFsync: an fsync writes its direct
// nodes and marked inode in one write (nodeFlagBatch). A power loss that
// keeps the inode but not the direct node written with it must not roll
// the inode forward (its size would cover blocks no surviving node maps):
// the file comes back as of its previous fsync, and fsck is clean. With a
// whole batch the second fsync's content comes back.
func TestFsyncTornBatchRollsBackToPreviousFsync(t *testing.T) {
	for _, torn := range []bool{true, false} {
		name := "whole batch"
		if torn {
			name = "torn batch"
		}
		t.Run(name, func(t *testing.T) {
			base := newVol(t, 32, 8)
			v := &tornBatchVol{Volume: base}
			fs := mkfsMount(t, v, lfs.Options{})
			_, h, err := fs.Create(bg, lfs.RootIno, "f", 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			first := bytes.Repeat([]byte{0xa1}, 64<<10)
			_, err = fs.Write(bg, h, 0, first)
			require.NoError(t, err)
			require.NoError(t, fs.Fsync(bg, h, false)) // a new name: a checkpoint
			// a second fsync point of the same inode, still a small file
			_, err = fs.Write(bg, h, 0, bytes.Repeat([]byte{0xb2}, 4096))
			require.NoError(t, err)
			require.NoError(t, fs.Fsync(bg, h, false))
			want := append(bytes.Repeat([]byte{0xb2}, 4096), first[4096:]...)
			// grow the file far enough for a new direct node
			far := int64(8 << 20)
			_, err = fs.Write(bg, h, far, bytes.Repeat([]byte{0xc3}, 4096))
			require.NoError(t, err)
			v.armed.Store(torn)
			err = fs.Fsync(bg, h, false)
			if torn {
				require.Error(t, err, "the fsync whose node write lost power must fail")
				require.Positive(t, v.tore.Load(), "the batch write had direct nodes before the inode")
			} else {
				require.NoError(t, err)
				want = append(want, make([]byte, far-int64(len(want)))...)
				want = append(want, bytes.Repeat([]byte{0xc3}, 4096)...)
			}
			// power back on: mount what the drive holds (the old mount is gone)
			v.down.Store(true)
			fs.Abandon()
			fs2, err := lfs.Mount(bg, base, lfs.Options{})
			require.NoError(t, err)
			defer fs2.Unmount(bg)
			got, err := readFile(fs2, "f")
			require.NoError(t, err)
			require.Equal(t, len(want), len(got), "file size after the crash")
			require.True(t, bytes.Equal(want, got), "file content after the crash")
			rep, err := fs2.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
		})
	}
}
