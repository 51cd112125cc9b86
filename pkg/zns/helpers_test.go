package zns

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
)

var bg = context.Background()

func testCfg() flash.Config {
	c := flash.Small()
	c.ZoneCapacity = 60
	return c
}

func newDev(t testing.TB, cfg flash.Config, clk clock.Clock) (*Device, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dev0")
	d, err := Create(p, cfg, clk)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d, p
}

// pattern returns n blocks whose bytes encode (lba, tag).
func pattern(bs int, lba uint64, n int, tag byte) []byte {
	b := make([]byte, bs*n)
	for i := 0; i < n; i++ {
		for j := 0; j < bs; j += 8 {
			b[i*bs+j] = byte(lba + uint64(i))
			b[i*bs+j+1] = byte((lba + uint64(i)) >> 8)
			b[i*bs+j+2] = tag
			b[i*bs+j+3] = byte(j)
		}
	}
	return b
}

func testCfgNoLimits() flash.Config {
	c := testCfg()
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}
