package zns

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

func TestConcurrentZones(t *testing.T) {
	for _, tc := range []struct {
		name string
		clk  func() clock.Clock
	}{{"off", clock.Off}, {"virtual", func() clock.Clock { return clock.NewVirtual() }}, {"realtime", func() clock.Clock { return clock.Realtime(0.001) }}} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDev(t, testCfgNoLimits(), tc.clk())
			d.j.mu.Lock()
			d.j.limit = 4096 // checkpoints run concurrently with the I/O
			d.j.mu.Unlock()
			bs := d.g.BlockSize
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					zs := uint64(w) * d.g.ZoneSize
					for round := 0; round < 3; round++ {
						for i := 0; i < 15; i++ {
							data := pattern(bs, uint64(i), 4, byte(w))
							lba, _, err := d.Append(bg, zs, data, Flags{FUA: i == 7})
							if err != nil {
								errs <- err
								return
							}
							got, _, err := d.Read(bg, lba, 4)
							if err != nil {
								errs <- err
								return
							}
							if string(got) != string(data) {
								errs <- &mismatch{lba}
								return
							}
						}
						if _, err := d.ZoneMgmt(bg, uint64(w), ActionReset, false); err != nil {
							errs <- err
							return
						}
					}
				}(w)
			}
			wg.Add(1)
			go func() { // compaction + TL on other zones meanwhile
				defer wg.Done()
				fill(t, d, 8, 60, 3)
				id, err := d.ZoneCompaction(bg, []Copy{{Src: 8 * d.g.ZoneSize, Dst: 10 * d.g.ZoneSize, Count: 40}})
				if err != nil {
					errs <- err
					return
				}
				for i := 0; i < 10; i++ {
					if _, _, err := d.Read(bg, 10*d.g.ZoneSize, 8); err != nil {
						errs <- err
					}
				}
				if _, err := d.WaitCompaction(bg, id); err != nil {
					errs <- err
				}
				bm := make([]byte, 8)
				bm[0] = 0x0f
				if _, err := d.TLOpen(bg, 8, bm, PPAOrdered); err != nil {
					errs <- err
					return
				}
				if _, err := d.Write(bg, 8*d.g.ZoneSize+4, pattern(bs, 0, 4, 1), Flags{}); err != nil {
					errs <- err
				}
				_, _ = d.ZoneMgmt(bg, 8, ActionClose, false)
			}()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					_ = d.Log()
					_, _ = d.ReportZones(StateAny, 0, 0)
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			l := d.Log()
			require.Equal(t, uint64(8*3*15*4+60+4), l.HostBlocksWritten)
		})
	}
}

type mismatch struct{ lba uint64 }

func (m *mismatch) Error() string { return "data mismatch" }
