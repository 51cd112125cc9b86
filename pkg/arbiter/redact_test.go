package arbiter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
)

// A tenant's ClusterStatus names no other tenant; the operator, the
// components and servers without the authenticator see every namespace.
func TestClusterStatusRedaction(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want []string
		all  bool // sees the cluster-wide rebuild counts
	}{
		{"tenant a", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindNamespace, Name: "a", Namespace: "a"}), []string{"a"}, false},
		{"tenant c", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindNamespace, Name: "c", Namespace: "c"}), nil, false},
		{"operator", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindAdmin}), []string{"a", "b"}, true},
		{"node", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindNode, Name: "n1"}), []string{"a", "b"}, true},
		{"no authenticator", context.Background(), []string{"a", "b"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &v1.ClusterStatusResponse{DegradedNamespaces: []string{"a", "b"}, LostCopies: 7, Rebuilding: 1}
			redactStatus(tc.ctx, out)
			assert.Equal(t, tc.want, out.DegradedNamespaces)
			if tc.all {
				assert.Equal(t, uint32(7), out.LostCopies)
				assert.Equal(t, uint32(1), out.Rebuilding)
			} else {
				assert.Zero(t, out.LostCopies+out.Rebuilding, "a tenant sees no cluster-wide rebuild counts")
			}
		})
	}
}
