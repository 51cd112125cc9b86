package lfs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// A read updates atime per the mode: relatime when atime is not after
// mtime or is over a day old, strictatime always, noatime never; the new
// atime survives an unmount.
func TestAtimeModes(t *testing.T) {
	day := int64(24 * time.Hour)
	for _, tc := range []struct {
		mode lfs.AtimeMode
		// the atime set before the read: relative to mtime; 1: after the
		// ctime the Setattr gives; -2 days: two days before now
		before  int64
		updated bool
	}{
		{lfs.AtimeRelative, -1, true},       // not after mtime
		{lfs.AtimeRelative, 1, false},       // read since the change, recently
		{lfs.AtimeRelative, -2 * day, true}, // and older than a day
		{lfs.AtimeStrict, 1, true},          // every read
		{lfs.AtimeNever, -2 * day, false},   // never
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			v := newVol(t, 32, 8)
			fs := mkfsMount(t, v, lfs.Options{Atime: tc.mode})
			a, h := mustCreate(t, fs, lfs.RootIno, "f")
			_, err := fs.Write(bg, h, 0, []byte("data"))
			require.NoError(t, err)
			st, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			set := st.Mtime + tc.before
			switch tc.before {
			case 1:
				set = time.Now().UnixNano() + int64(time.Minute)
			case -2 * day:
				set = time.Now().UnixNano() - 2*day
			}
			_, err = fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetAtime, Atime: set})
			require.NoError(t, err)
			t0 := time.Now().UnixNano()
			_, err = fs.Read(bg, h, 0, make([]byte, 4))
			require.NoError(t, err)
			st, err = fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			if tc.updated {
				require.GreaterOrEqual(t, st.Atime, t0, "the read set atime to its time")
			} else {
				require.Equal(t, set, st.Atime, "the read left atime")
			}
			require.NoError(t, fs.Release(bg, h))
			require.NoError(t, fs.Unmount(bg))
			fs, err = lfs.Mount(bg, v, lfs.Options{Atime: lfs.AtimeNever})
			require.NoError(t, err)
			again, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			require.Equal(t, st.Atime, again.Atime, "persisted")
			require.NoError(t, fs.Unmount(bg))
		})
	}
	_, err := lfs.ParseAtime("sometimes")
	require.Error(t, err)
}
