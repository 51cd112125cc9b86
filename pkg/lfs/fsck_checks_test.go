package lfs_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestFsckChecksEachCatchTheirCorruption breaks each named invariant of a
// small file system and runs that check alone: it reports the damage, and
// on the image before the damage it reports nothing. Invariants a load
// recomputes (in-memory counters and summaries) are broken and checked on
// the mounted file system; the others are checkpointed and checked offline.
func TestFsckChecksEachCatchTheirCorruption(t *testing.T) {
	online := map[string]bool{"sit-count": true, "sit-meta-zone": true, "block-owner": true, "node-count": true, "used-blocks": true, "root-reserve": true}
	names := lfs.FsckCheckNames()
	require.Len(t, names, 23)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			v := newVol(t, 32, 8)
			fs := mkfsMount(t, v, lfs.Options{})
			_, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
			require.NoError(t, err)
			data := bytes.Repeat([]byte("precious data "), 1000)
			require.NoError(t, writeFile(fs, "d/f", data, false))
			require.NoError(t, writeFile(fs, "d/g", data, true))
			require.NoError(t, writeFile(fs, "d/f", data, false))
			dir, err := walk(fs, "d")
			require.NoError(t, err)
			require.NoError(t, fs.Unlink(bg, dir, "g")) // invalid blocks below a write pointer
			ino, err := walk(fs, "d/f")
			require.NoError(t, err)

			clean, err := fs.CheckOnly(name)
			require.NoError(t, err)
			require.Empty(t, clean.Problems, "a sound file system")

			undo, err := fs.CorruptFor(name, dir, ino, !online[name])
			require.NoError(t, err)
			var rep lfs.Report
			if online[name] {
				rep, err = fs.CheckOnly(name)
				if undo != nil {
					undo()
				}
				fs.Abandon()
			} else {
				fs.Abandon()
				rep, err = lfs.FsckOnly(bg, v, name)
			}
			require.NoError(t, err)
			require.NotEmpty(t, rep.Problems, "%s catches its corruption", name)
			t.Logf("%s: %v", name, rep.Problems)
		})
	}
}
