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
	}{
		{"tenant a", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindNamespace, Name: "a", Namespace: "a"}), []string{"a"}},
		{"tenant c", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindNamespace, Name: "c", Namespace: "c"}), nil},
		{"operator", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindAdmin}), []string{"a", "b"}},
		{"node", auth.NewContext(context.Background(), auth.Identity{Kind: auth.KindNode, Name: "n1"}), []string{"a", "b"}},
		{"no authenticator", context.Background(), []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &v1.ClusterStatusResponse{DegradedNamespaces: []string{"a", "b"}}
			redactStatus(tc.ctx, out)
			assert.Equal(t, tc.want, out.DegradedNamespaces)
		})
	}
}
