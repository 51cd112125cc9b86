package zctl

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// zctl node remove against a local cluster (TLS, admin certificate from
// cluster.json): a stopped node without zones goes, a stopped node holding
// zones is a conflict (4), a registered node a usage error (2), an unknown
// node not found (3), and a tenant's token is denied (6).
func TestNodeRemove(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 4, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, localcluster.WriteInfo(cl.Info()))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))
	t.Setenv("ZONEFLEET_CONFIG", filepath.Join(dir, "config.yaml")) // never the user's config

	_, errOut, code := run(t, "", "ns", "create", "t", "--max-active-vzones", "2", "--zones-per-vzone", "2")
	require.Equal(t, 0, code, errOut)
	tenant, err := client.New(ctx, cl.ClientConfig("t"))
	require.NoError(t, err)
	defer tenant.Close()
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
	// 2 zones on 4 nodes: one node holds zones, two others hold none.
	holder, free, free2, running := -1, -1, -1, -1
	for i := 0; i < 4; i++ {
		switch {
		case holds[nodeName(i)] && holder < 0:
			holder = i
		case !holds[nodeName(i)] && free < 0:
			free = i
		case !holds[nodeName(i)] && free2 < 0:
			free2 = i
		default:
			running = i
		}
	}
	require.True(t, holder >= 0 && free >= 0 && free2 >= 0 && running >= 0, "layout %v", holds)
	require.NoError(t, cl.StopNode(holder))
	require.NoError(t, cl.StopNode(free))
	require.NoError(t, cl.StopNode(free2))
	listed := func(id string) (present, available bool) {
		out, errOut, code := run(t, "", "node", "list", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var nodes []*struct {
			ID        string `json:"id"`
			Available bool   `json:"available"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &nodes), out)
		for _, n := range nodes {
			if n.ID == id {
				return true, n.Available
			}
		}
		return false, false
	}
	require.Eventually(t, func() bool {
		p1, a1 := listed(nodeName(holder))
		p2, a2 := listed(nodeName(free))
		return p1 && p2 && !a1 && !a2
	}, 30*time.Second, 100*time.Millisecond, "stopped nodes unregister")

	tok, err := cl.MintToken("t", time.Hour)
	require.NoError(t, err)
	tokFile := filepath.Join(dir, "t.token")
	require.NoError(t, os.WriteFile(tokFile, []byte(tok), 0o600))
	asTenant := []string{"--ca-file", cl.Info().CAFile, "--token-file", tokFile}

	steps := []struct {
		name   string
		args   []string
		code   int
		stderr string // in the error line
		gone   string // node no longer listed afterwards
		keep   string // node still listed afterwards
	}{
		{"tenant", append(asTenant, "node", "remove", nodeName(free)), ExitDenied, "permission denied", "", nodeName(free)},
		{"unknown", []string{"node", "remove", "node-9"}, ExitNotFound, `node "node-9" not found`, "", ""},
		{"registered", []string{"node", "remove", nodeName(running)}, ExitUsage, "is registered", "", nodeName(running)},
		{"holding zones", []string{"node", "remove", nodeName(holder)}, ExitConflict, "holds 1 allocated zones", "", nodeName(holder)},
		{"removed", []string{"node", "remove", nodeName(free), "-o", "json"}, 0, "", nodeName(free), ""},
		{"removed twice", []string{"node", "remove", nodeName(free), "-o", "yaml"}, ExitNotFound, "not found", nodeName(free), ""},
	}
	if len(holds) == 1 { // both zones on one node
		steps[3].stderr = "holds 2 allocated zones"
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			out, errOut, code := run(t, "", s.args...)
			require.Equal(t, s.code, code, "stdout %q stderr %q", out, errOut)
			assert.Contains(t, errOut, s.stderr)
			if s.code == 0 {
				golden(t, "node-remove.json", strings.ReplaceAll(out, nodeName(free), "NODE"))
			} else {
				assert.Empty(t, out)
			}
			if s.gone != "" {
				present, _ := listed(s.gone)
				assert.False(t, present, "%s is gone", s.gone)
			}
			if s.keep != "" {
				present, _ := listed(s.keep)
				assert.True(t, present, "%s stays", s.keep)
			}
		})
	}
	// The table form names the node.
	require.Eventually(t, func() bool { p, a := listed(nodeName(free2)); return p && !a }, 30*time.Second, 100*time.Millisecond)
	out, errOut, code := run(t, "", "node", "remove", nodeName(free2))
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "removed node "+nodeName(free2)+"\n", out)
	present, _ := listed(nodeName(free2))
	assert.False(t, present)
}

func nodeName(i int) string { return fmt.Sprintf("node-%d", i+1) }
