package client_test

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/client"
)

// cabCompact copies the valid chunks of victim into dst the way a
// copyback-aware allocator does (ZNS+ §3.3.1): for each destination chunk
// slot, in write order, a remaining valid chunk on the same chip if there is
// one, else the oldest remaining one. Only the destination's allocated
// stripe groups are planned (their chips are known). It returns the
// compaction's statistics, the planned same-chip share and the number of
// chunks moved, and checks the data.
func cabCompact(t *testing.T, ctx context.Context, cl *client.Client, victim *client.VZone, data []byte, dst *client.VZone, valid []uint64, chunk uint64) (client.CompactStats, float64, int) {
	t.Helper()
	type src struct {
		off uint64
		key string
	}
	keyOf := func(l client.Location) string { return fmt.Sprintf("%s/%d/%d", l.Node, l.Device, l.Chip) }
	var left []src
	for _, off := range valid {
		l, err := victim.Locate(ctx, off)
		require.NoError(t, err)
		left = append(left, src{off, keyOf(l)})
	}
	var copies []client.Copy
	same := 0
	for d := uint64(0); len(left) > 0; d += chunk {
		l, err := dst.Locate(ctx, d)
		if err != nil {
			break // past the allocated stripe groups
		}
		k := keyOf(l)
		pick := 0
		for i, s := range left {
			if s.key == k {
				pick = i
				same++
				break
			}
		}
		copies = append(copies, client.Copy{Src: victim.ID(), SrcOff: left[pick].off, Dst: dst.ID(), DstOff: d, Blocks: chunk})
		left = append(left[:pick], left[pick+1:]...)
	}
	require.NotEmpty(t, copies)
	st, err := cl.Compact(ctx, copies)
	require.NoError(t, err)
	for _, c := range copies {
		got, err := dst.Read(ctx, c.DstOff, c.Blocks)
		require.NoError(t, err)
		require.True(t, bytes.Equal(got, data[c.SrcOff*bs:(c.SrcOff+c.Blocks)*bs]), "chunk from %d at %d", c.SrcOff, c.DstOff)
	}
	return st, float64(same) / float64(len(copies)), len(copies)
}

// The copyback-aware layout hint: a destination v-zone opened "like" the
// victim sits on the victim's dies, so a copyback-aware compaction finds a
// same-chip destination for (nearly) every chunk and the drives move them by
// copyback; a destination placed independently finds few. Both compactions
// run in the same cluster, same victim, same valid chunks; the shares are
// logged (go test -v -run TestCopybackAwareLayout ./pkg/client).
func TestCopybackAwareLayout(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "cab", 4)
	cl := newClient(t, c, "cab")
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(11, 12))
	victim, data := fullVZone(t, ctx, cl, rng)
	const chunk = 4 // blocks per 16 KiB page of the tiny drive
	var valid []uint64
	for off := uint64(0); off < uint64(len(data)/bs); off += chunk {
		if rng.IntN(3) != 0 { // about two thirds of the chunks are valid
			valid = append(valid, off)
		}
	}

	plain, _, err := cl.OpenVZoneIncarnation(ctx)
	require.NoError(t, err)
	stPlain, planPlain, nPlain := cabCompact(t, ctx, cl, victim, data, plain, valid, chunk)
	require.NoError(t, plain.Finish(ctx))

	like, _, err := cl.OpenVZoneLike(ctx, victim.ID())
	require.NoError(t, err)
	stLike, planLike, nLike := cabCompact(t, ctx, cl, victim, data, like, valid, chunk)
	require.NoError(t, like.Finish(ctx))

	share := func(s client.CompactStats) float64 { return float64(s.Copyback) / float64(s.Total()) }
	t.Logf("copyback share: independent layout %.3f (%d of %d blocks, %d chunks, same-chip plan %.3f); like the victim %.3f (%d of %d blocks, %d chunks, same-chip plan %.3f)",
		share(stPlain), stPlain.Copyback, stPlain.Total(), nPlain, planPlain, share(stLike), stLike.Copyback, stLike.Total(), nLike, planLike)
	assert.Greater(t, planLike, planPlain, "the hint gives same-chip destinations")
	assert.Greater(t, share(stLike), share(stPlain), "and the drives copy them by copyback")
	assert.GreaterOrEqual(t, share(stLike), 0.8, "ZNS+ Fig. 11: > 80 %% with copyback-aware allocation")
}
