package zctl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestParseBytes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		bad  bool
	}{
		{in: "4096", want: 4096},
		{in: "4096B", want: 4096},
		{in: "64KiB", want: 64 << 10},
		{in: "64K", want: 64 << 10},
		{in: "256MiB", want: 256 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "2T", want: 2 << 40},
		{in: "", bad: true},
		{in: "MiB", bad: true},
		{in: "1.5GiB", bad: true},
		{in: "-1", bad: true},
		{in: "99999999999TiB", bad: true},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseBytes(tt.in)
			if tt.bad {
				assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	assert.Equal(t, "256KiB", iec(256<<10))
	assert.Equal(t, "3GiB", iec(3<<30))
	assert.Equal(t, "4097B", iec(4097))
}

func TestKindFlag(t *testing.T) {
	var f kindFlag
	assert.Equal(t, "zoned", f.String(), "zoned is the default")
	require.NoError(t, f.Set("fdp"))
	assert.Equal(t, cluster.KindFDP, f.k)
	assert.ErrorIs(t, f.Set("zfs"), zerr.ErrInvalidArgument)
}
