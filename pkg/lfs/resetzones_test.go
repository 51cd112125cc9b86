package lfs_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// batchVol is a faultVol that resets several zones at once
// (lfs.ZonesResetter), recording each batch; a zone in fail fails its next
// fail[z].n resets with fail[z].err.
type batchVol struct {
	*faultVol
	bmu     sync.Mutex
	batches [][]lfs.ZoneID
	failAll int   // every zone fails this many resets (counted per zone)
	failErr error // with this error
	failed  map[lfs.ZoneID]int
}

func (b *batchVol) ResetZones(ctx context.Context, zs []lfs.ZoneID) []error {
	b.bmu.Lock()
	b.batches = append(b.batches, slices.Clone(zs))
	b.bmu.Unlock()
	errs := make([]error, len(zs))
	for i, z := range zs {
		b.bmu.Lock()
		fail := b.failed[z] < b.failAll
		if fail {
			b.failed[z]++
		}
		b.bmu.Unlock()
		if fail {
			errs[i] = b.failErr
			continue
		}
		errs[i] = b.faultVol.Reset(ctx, z)
	}
	return errs
}

// The checkpoint resets the segments it frees with one ResetZones call; a
// zone whose reset found a node unavailable is retried (with the others that
// failed, in one call), and a zone whose reset failed otherwise makes the
// file system read-only, as a single Reset would.
func TestCheckpointResetsFreedZonesTogether(t *testing.T) {
	for _, tt := range []struct {
		name     string
		failAll  int
		failErr  error
		readOnly bool
	}{
		{"all succeed", 0, nil, false},
		{"unavailable once, retried", 1, &zerr.UnavailableError{What: "node n1", Reason: "injected"}, false},
		{"media error", 1, errMedia, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bv := &batchVol{faultVol: &faultVol{Volume: newVol(t, 40, 4)}, failed: map[lfs.ZoneID]int{}}
			fs := mkfsMount(t, bv, lfs.Options{Registry: prometheus.NewRegistry(), Retries: 3})
			want := map[string][]byte{}
			write := func(round byte) {
				for i := 0; i < 4; i++ {
					n := fmt.Sprintf("f%d", i)
					d := bytes.Repeat([]byte{round + byte(i)}, 200<<10)
					require.NoError(t, writeFile(fs, n, d, true))
					want[n] = d
				}
			}
			write('a')
			require.NoError(t, fs.Sync(bg))
			bv.bmu.Lock()
			bv.batches, bv.failAll, bv.failErr = nil, tt.failAll, tt.failErr
			bv.bmu.Unlock()
			write('k') // every segment of round a is garbage now
			err := fs.Sync(bg)
			bv.bmu.Lock()
			batches := slices.Clone(bv.batches)
			bv.bmu.Unlock()
			require.NotEmpty(t, batches, "the checkpoint freed segments")
			require.Greater(t, len(batches[0]), 1, "several freed segments in one call: %v", batches)
			ro, why := fs.ReadOnly()
			if tt.readOnly {
				require.True(t, ro, "a reset failing with a media error makes the file system read-only")
				require.Contains(t, fmt.Sprint(why), "reset of a freed segment")
				require.Equal(t, syscall.EROFS, lfs.Errno(fs.Unmount(bg)), "unmount cannot checkpoint a read-only file system")
				return
			}
			require.NoError(t, err)
			require.False(t, ro, "%v", why)
			if tt.failAll > 0 {
				require.GreaterOrEqual(t, len(batches), 2, "the failed resets are tried again")
				require.Equal(t, batches[0], batches[1], "every zone failed once: all are retried together")
			}
			require.NoError(t, fs.Unmount(bg))
			fsckRemountRead(t, bv, want)
		})
	}
}
