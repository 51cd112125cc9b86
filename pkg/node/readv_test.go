package node

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// ReadV answers several ranges of a node in one call, in request order,
// whatever codec either end uses; bad requests are typed errors, and a
// range the caller does not own fails the whole call.
func TestReadVRangesInRequestOrder(t *testing.T) {
	for _, c := range []struct {
		name           string
		server, client bool
	}{{"bulk", true, true}, {"standard", false, false}, {"bulk-server", true, false}, {"bulk-client", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			n := startNodeCfg(t, "readv-"+c.name, true, c.server, c.client, nil)
			for z := uint32(0); z < 3; z++ {
				grant(t, n.svc.cfg.ID, z, "a")
			}
			for z := uint32(0); z < 3; z++ {
				waitGrant(t, n, z, "a")
			}
			ctx := asNS("a")
			zone := [][]byte{randBlocks(t, 64), randBlocks(t, 64), randBlocks(t, 64)}
			for z, d := range zone {
				_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: uint64(z) * 2048, Data: d})
				require.NoError(t, err)
			}
			blk := func(z, from, to int) []byte { return zone[z][from*4096 : to*4096] }
			r, err := n.client.ReadV(ctx, &v1.ReadVRequest{Ranges: []*v1.ReadRange{
				{Lba: 2*2048 + 8, Blocks: 8}, {Lba: 0, Blocks: 4}, {Lba: 2048 + 60, Blocks: 8}, // the last reads 4 unwritten blocks
			}})
			require.NoError(t, err)
			want := append(append(append(append([]byte{}, blk(2, 8, 16)...), blk(0, 0, 4)...), blk(1, 60, 64)...), make([]byte, 4*4096)...)
			assert.True(t, bytes.Equal(want, r.GetData()), "data in request order")
			assert.Equal(t, uint64(2*2048+8), r.GetLba())

			_, err = n.client.ReadV(ctx, &v1.ReadVRequest{})
			assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
			_, err = n.client.ReadV(ctx, &v1.ReadVRequest{Ranges: []*v1.ReadRange{{Lba: 0, Blocks: 0}}})
			assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
			_, err = n.client.ReadV(ctx, &v1.ReadVRequest{Ranges: []*v1.ReadRange{{Device: 3, Lba: 0, Blocks: 1}}})
			assert.ErrorIs(t, err, zerr.ErrNotFound)
			_, err = n.client.ReadV(ctx, &v1.ReadVRequest{Ranges: []*v1.ReadRange{{Lba: 1 << 40, Blocks: 1}}})
			assert.ErrorIs(t, err, zerr.ErrOutOfRange)
			many := make([]*v1.ReadRange, MaxReadRanges+1)
			for i := range many {
				many[i] = &v1.ReadRange{Lba: 0, Blocks: 1}
			}
			_, err = n.client.ReadV(ctx, &v1.ReadVRequest{Ranges: many})
			assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
			_, err = n.client.ReadV(ctx, &v1.ReadVRequest{Ranges: []*v1.ReadRange{{Lba: 0, Blocks: 2048}, {Lba: 2048, Blocks: 2048}}})
			assert.ErrorIs(t, err, zerr.ErrInvalidArgument, "over the unary limit")
			_, err = n.client.ReadV(ctx, &v1.ReadVRequest{Ranges: []*v1.ReadRange{{Lba: 0, Blocks: 4}, {Lba: 3 * 2048, Blocks: 4}}})
			assert.ErrorIs(t, err, zerr.ErrNotOwner, "zone 3 is not granted")
			_, err = n.client.ReadV(asNS("b"), &v1.ReadVRequest{Ranges: []*v1.ReadRange{{Lba: 0, Blocks: 4}}})
			assert.ErrorIs(t, err, zerr.ErrNotOwner)
		})
	}
}
