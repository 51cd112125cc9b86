package lfs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// featVol serves every superblock it reads with the given feature bits (as
// if a newer build had written them).
type featVol struct {
	lfs.Volume
	feat ondisk.Features
	seen bool
}

func (f *featVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	if err := f.Volume.Read(ctx, z, off, buf); err != nil {
		return err
	}
	if off == 0 && lfs.RewriteSuperFeatures(buf, f.feat) {
		f.seen = true
	}
	return nil
}

// Mount on an image with unknown feature bits: compat mounts, ro_compat and
// incompat are refused with an *ondisk.FeatureError naming the class (not
// mistaken for a corrupt metadata zone and skipped), and nothing changes.
func TestMountFeatureBits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		feat  ondisk.Features
		class ondisk.Class
	}{
		{"compat", ondisk.Features{Compat: 1 << 3}, ""},
		{"ro_compat", ondisk.Features{ROCompat: 1 << 3}, ondisk.ClassROCompat},
		{"incompat", ondisk.Features{Incompat: 1 << 3}, ondisk.ClassIncompat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, 24, 8)
			require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
			fv := &featVol{Volume: v, feat: tc.feat}
			fs, err := lfs.Mount(bg, fv, lfs.Options{})
			require.True(t, fv.seen, "the superblock was read")
			if tc.class == "" {
				require.NoError(t, err, "an unknown compat feature is ignored")
				require.NoError(t, fs.Unmount(bg))
				return
			}
			var fe *ondisk.FeatureError
			require.True(t, errors.As(err, &fe), "mount must say why: %v", err)
			require.Equal(t, tc.class, fe.Class)
			require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
			fs, err = lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err, "the refused mount changed nothing")
			require.NoError(t, fs.Unmount(bg))
		})
	}
}
