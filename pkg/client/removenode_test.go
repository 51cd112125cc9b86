package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/codes"
)

// An operator removes a stopped node over real gRPC (TLS, admin certificate):
// a node without zones goes, a node holding zones or still registered stays,
// and a tenant may not remove anything.
func TestRemoveNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	createNS(t, c, "r", 2) // 2 zones on 3 nodes: at least one node holds none
	ctx := context.Background()
	admin := newClient(t, c, "")
	tenant := newClient(t, c, "r")

	vz, err := tenant.OpenVZone(ctx)
	require.NoError(t, err)
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	holds := map[string]bool{}
	for _, g := range l.GetGroups() {
		for _, z := range g.GetZones() {
			holds[z.GetNode()] = true
		}
	}
	require.NotEmpty(t, holds)
	holder, free, freeIdx, holderIdx := "", "", -1, -1
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("node-%d", i+1)
		if holds[id] && holder == "" {
			holder, holderIdx = id, i
		} else if !holds[id] && free == "" {
			free, freeIdx = id, i
		}
	}
	require.NotEmpty(t, holder)
	require.NotEmpty(t, free, "layout %v", holds)
	running := ""
	for i := 0; i < 3; i++ {
		if i != freeIdx && i != holderIdx {
			running = fmt.Sprintf("node-%d", i+1)
		}
	}

	require.NoError(t, c.StopNode(freeIdx))
	require.NoError(t, c.StopNode(holderIdx))
	require.Eventually(t, func() bool {
		nodes, err := admin.ListNodes(ctx)
		if err != nil {
			return false
		}
		gone := 0
		for _, n := range nodes {
			if (n.GetId() == free || n.GetId() == holder) && !n.GetAvailable() {
				gone++
			}
		}
		return gone == 2
	}, 30*time.Second, 100*time.Millisecond, "the stopped nodes unregister")

	listed := func(cl *client.Client, id string) bool {
		nodes, err := cl.ListNodes(ctx)
		require.NoError(t, err)
		for _, n := range nodes {
			if n.GetId() == id {
				return true
			}
		}
		return false
	}

	tests := []struct {
		name string
		cl   *client.Client
		node string
		is   error      // typed error, or nil
		code codes.Code // gRPC code when is is nil and the call fails
		gone bool       // the node is no longer listed afterwards
	}{
		{"tenant is denied", tenant, free, zerr.ErrPermissionDenied, 0, false},
		{"unknown node", admin, "node-nope", zerr.ErrNotFound, 0, false},
		{"registered node", admin, running, zerr.ErrInvalidArgument, 0, false},
		{"stopped node holding zones", admin, holder, zerr.ErrZoneState, 0, false},
		{"stopped node without zones", admin, free, nil, codes.OK, true},
		{"already removed", admin, free, zerr.ErrNotFound, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cl.RemoveNode(ctx, tt.node)
			switch {
			case tt.is != nil:
				require.ErrorIs(t, err, tt.is)
			case tt.code == codes.OK:
				require.NoError(t, err)
			default:
				require.Error(t, err)
				assert.Equal(t, tt.code, rpcerr.Code(err), "%v", err) // typed errors and statuses alike
			}
			if tt.node != "node-nope" {
				assert.Equal(t, !tt.gone, listed(admin, tt.node))
			}
		})
	}
	// The refused node and the running one are untouched.
	assert.True(t, listed(admin, holder))
	assert.True(t, listed(admin, running))
}
