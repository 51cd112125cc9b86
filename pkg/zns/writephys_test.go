package zns

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

// TestWritePhysOnePwritePerRun checks that a write reaches the store as one
// pwrite per run of chunks that lie back to back in the file: a zone on one
// die takes a whole write in one pwrite, a zone striped over dies one per
// chunk; and that the data reads back either way, also after a reopen.
func TestWritePhysOnePwritePerRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dzone  int
		writes func(chunks int) int // data pwrites expected for a write of chunks whole chunks
	}{
		{"one die per zone", 1, func(int) int { return 1 }},
		{"two dies per zone", 2, func(c int) int { return c }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := plCfg()
			cfg.DZone, cfg.ZoneCapacity = tc.dzone, 0 // (zone capacity = size)
			var mu sync.Mutex
			var lens []int
			rec := vfs.InjectorFunc(func(o vfs.Op) error {
				if o.Kind == vfs.OpWrite && !strings.HasSuffix(o.Path, ".journal") && o.Len >= 4096 { // (not a write-pointer slot or a journal frame)
					mu.Lock()
					lens = append(lens, o.Len)
					mu.Unlock()
				}
				return nil
			})
			mem := vfs.NewCrashableMem()
			d, err := Create("/dev/zns0", cfg, clock.Off(), WithFS(vfs.WithErrors(mem, rec)), WithLogger(quiet))
			require.NoError(t, err)
			g := d.Geometry()
			cb := g.ChunkBlocks
			chunks := 3
			n := chunks * cb
			require.LessOrEqual(t, uint64(n+1), g.ZoneCap)
			mu.Lock()
			lens = nil
			mu.Unlock()
			data := pattern(g.BlockSize, 0, n, 7)
			_, err = d.Write(bg, 0, data, Flags{})
			require.NoError(t, err)
			mu.Lock()
			require.Len(t, lens, tc.writes(chunks), "data pwrites of a %d-chunk write: %v", chunks, lens)
			total := 0
			for _, l := range lens {
				total += l
			}
			mu.Unlock()
			require.Equal(t, len(data), total)
			// a write that starts and ends inside chunks: one pwrite per
			// run as well, split where the runs are
			tail := pattern(g.BlockSize, uint64(n), 1, 9)
			_, err = d.Write(bg, uint64(n), tail, Flags{})
			require.NoError(t, err)

			check := func(d *Device) {
				got, _, err := d.Read(bg, 0, uint64(n+1))
				require.NoError(t, err)
				require.Equal(t, append(append([]byte{}, data...), tail...), got)
			}
			check(d)
			_, err = d.Flush(bg)
			require.NoError(t, err)
			require.NoError(t, d.Close())
			d2, err := Open("/dev/zns0", cfg, clock.Off(), WithFS(mem), WithLogger(quiet))
			require.NoError(t, err)
			defer d2.Close()
			check(d2)
		})
	}
}
