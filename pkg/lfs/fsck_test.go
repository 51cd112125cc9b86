package lfs_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

func TestFsckFindsAndRepairs(t *testing.T) {
	for _, tc := range []struct {
		kind, want string
	}{
		{"sit", "sit"},
		{"nlink", "nlink"},
		{"blocks", "blocks"},
		{"rdev", "mode"},
		{"dangling", "dir"},
		{"unreachable", "nat"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			v := newVol(t, 32, 8)
			fs := mkfsMount(t, v, lfs.Options{})
			_, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
			require.NoError(t, err)
			data := bytes.Repeat([]byte("precious data "), 1000) // 4 blocks: the segment keeps other valid blocks
			require.NoError(t, writeFile(fs, "d/f", data, false))
			ino, err := walk(fs, "d/f")
			require.NoError(t, err)
			require.NoError(t, fs.Corrupt(tc.kind, ino))
			fs.Abandon()

			rep, err := lfs.Fsck(bg, v, false)
			require.NoError(t, err)
			require.NotEmpty(t, rep.Problems)
			require.Equal(t, tc.want, rep.Problems[0].Kind, "%v", rep.Problems)
			t.Logf("%s: %v", tc.kind, rep.Problems)
			again, err := lfs.Fsck(bg, v, false)
			require.NoError(t, err)
			require.Equal(t, rep.Problems, again.Problems, "a check without repair changes nothing")

			rep, err = lfs.Fsck(bg, v, true)
			require.NoError(t, err)
			require.Positive(t, rep.Repaired)
			rep, err = lfs.Fsck(bg, v, false)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)

			fs, err = lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			p := "d/f"
			if tc.kind == "unreachable" {
				p = "lost+found/#" + itoa(ino)
			}
			got, err := readFile(fs, p)
			require.NoError(t, err)
			require.Equal(t, data, got)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

func itoa(n uint64) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}
