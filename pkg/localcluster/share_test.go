package localcluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/codes"
)

// A namespace without a capacity quota stops at its default share of the
// cluster's zones (RESOURCE_EXHAUSTED saying so), and another tenant can
// still open v-zones: no tenant takes the last free zones of the others.
func TestDefaultShareLeavesZonesForOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := testcluster.Start(t, localcluster.Config{Nodes: 2})
	admin := testcluster.Client(t, cl, "")
	for _, ns := range []string{"hog", "other"} {
		testcluster.CreateNamespace(t, cl, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: 2, ZonesPerVzone: 2})
	}
	st, err := admin.ClusterStatus(ctx)
	require.NoError(t, err)
	t.Logf("cluster status: %v", st)

	hog := testcluster.Client(t, cl, "hog")
	// Open and finish empty v-zones (each holds its first stripe group)
	// until refused.
	var refused error
	opened := 0
	for i := 0; i < 100000 && refused == nil; i++ {
		vz, err := hog.OpenVZone(ctx)
		if err != nil {
			refused = err
			break
		}
		opened++
		require.NoError(t, vz.Finish(ctx))
	}
	require.Error(t, refused, "the hog was never refused")
	var nr *zerr.NoResourcesError
	require.True(t, errors.As(refused, &nr), "want *zerr.NoResourcesError, got %T: %v", refused, refused)
	assert.Equal(t, codes.ResourceExhausted, rpcerr.Code(refused))
	assert.Contains(t, refused.Error(), "default share")
	assert.Greater(t, opened, 0)

	hns, err := admin.Namespaces().Get(ctx, "hog")
	require.NoError(t, err)
	t.Logf("hog opened %d v-zones, holds %d zones", opened, hns.GetAllocatedZones())

	other := testcluster.Client(t, cl, "other")
	for i := 0; i < 2; i++ {
		_, err := other.OpenVZone(ctx)
		require.NoError(t, err, "another tenant must still open v-zones")
	}
}
