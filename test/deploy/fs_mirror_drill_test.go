//go:build deploy

package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
)

// A mounted file system on a mirror:2 namespace keeps serving
// reads and writes (with fsync) while `docker kill` stops an ssdnode; the
// operator declares the node lost (`zctl node remove`), its copies are
// rebuilt node to node, and every file's checksum is right, through the
// mount and after a clean unmount (fsck clean).
func TestDrillSSDNodeKilledUnderMirroredFS(t *testing.T) {
	fsNodeLossDrill(t, nodeLossDrill{ns: "mirror-fs", redundancy: "mirror:2", zonesPerVZone: 1, maxActive: 12, before: 40, during: 12,
		rebuilt: func(st *v1.ClusterStatusResponse) bool { return st.GetLostCopies() == 0 && st.GetRebuilding() == 0 }})
}

// The same drill on a raid5 namespace (2 data legs + parity + the two
// partial-parity logs per group, on 3 of the 4 nodes): reads reconstruct
// from parity while the node is down, then the arbiter re-places the
// node's legs on a node outside each group and that node rebuilds them
// from the survivors (RebuildParityLeg: pulled node to node and XORed).
// Fewer files than the mirrored drill: the rebuild path is what it adds.
func TestDrillSSDNodeKilledUnderRaid5FS(t *testing.T) {
	fsNodeLossDrill(t, nodeLossDrill{ns: "raid5-fs", redundancy: "raid5", zonesPerVZone: 2, maxActive: 8, before: 24, during: 8,
		rebuilt: func(st *v1.ClusterStatusResponse) bool {
			return st.GetLostParityZones() == 0 && st.GetRebuilding() == 0
		}})
}

type nodeLossDrill struct {
	ns, redundancy           string
	zonesPerVZone, maxActive uint32
	before, during           int // files written before and while the node is down
	rebuilt                  func(*v1.ClusterStatusResponse) bool
}

func fsNodeLossDrill(t *testing.T, d nodeLossDrill) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	const limit = 90 * time.Second // one operation (a hang, not a speed)
	waitReady(t, nodeCount, time.Minute)
	ns := d.ns
	admin := newClient(t, "", 20*time.Second)
	ctx := context.Background()
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: d.maxActive, ZonesPerVzone: d.zonesPerVZone, Redundancy: d.redundancy})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Namespaces().Delete(context.Background(), ns, true) })
	out, err := zctlFS(t, "mkfs", "-n", ns)
	require.NoError(t, err, out)

	dir := t.TempDir()
	m, mlog := mountFSWith(t, ns, dir, "--cache-blocks", "64", "--checkpoint-every", "1s")
	t.Cleanup(func() { // a failed drill leaves no mount behind
		if m.ProcessState == nil {
			_ = m.Process.Signal(syscall.SIGTERM)
			_ = m.Wait()
		}
	})
	files := map[string][]byte{}
	write := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			name := filepath.Join(dir, fmt.Sprintf("%s%02d", prefix, i))
			data := fileContent(name, 100_000+i*3_000)
			require.NoError(t, bounded(t, limit, "write+fsync "+name, func() error {
				f, err := os.Create(name)
				if err != nil {
					return err
				}
				defer f.Close()
				if _, err := f.Write(data); err != nil {
					return err
				}
				return f.Sync()
			}), "write+fsync %s: %s", name, mlog)
			files[name] = data
		}
	}
	checkAll := func(when string) {
		for name, want := range files {
			var got []byte
			require.NoError(t, bounded(t, limit, "read "+name, func() (err error) { got, err = os.ReadFile(name); return err }), "%s: read %s", when, name)
			require.True(t, bytes.Equal(want, got), "%s: %s has other bytes", when, name)
		}
	}
	write("f", d.before) // several segments

	// the victim: the node holding the first leg (copy 0, or data leg 0) of the most file data
	cl := newClient(t, ns, 10*time.Second)
	vol, err := fsvol.New(ctx, cl, fsvol.Options{})
	require.NoError(t, err)
	zones, err := vol.Zones(ctx)
	require.NoError(t, err)
	data := map[string]uint64{}
	for _, z := range zones {
		l, err := vol.Locate(ctx, z.ID, 0)
		require.NoError(t, err)
		if z.WP >= 64 {
			data[l.Node] += z.WP
		}
	}
	victim, most := "", uint64(0)
	for n, b := range data {
		if b > most {
			victim, most = n, b
		}
	}
	require.NotEmpty(t, victim)
	svc := "ssdnode-" + strings.TrimPrefix(victim, "node-")
	compose(t, "kill", svc)
	t.Logf("killed %s", svc)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_, _ = runCompose("start", svc)
		}
	})

	// the mount keeps serving: every file reads back, new files fsync
	checkAll("node killed")
	write("during", d.during)
	checkAll("node killed, after writes")
	require.NotContains(t, mlog.String(), "read-only", "the file system stays writable")

	// declared lost: rebuilt node to node
	waitGoneFromArbiter(t, admin, victim)
	out, err = zctlFS(t, "node", "remove", victim)
	require.Error(t, err, "the node holds zones: %s", out)
	require.Contains(t, out, "rebuilt")
	require.Eventually(t, func() bool {
		st, err := admin.ClusterStatus(ctx)
		return err == nil && d.rebuilt(st)
	}, 5*time.Minute, time.Second, "everything on %s rebuilt", victim)
	checkAll("after the rebuild")
	write("after", 4)

	require.NoError(t, m.Process.Signal(syscall.SIGTERM))
	require.NoError(t, m.Wait(), "a clean unmount on SIGTERM: %s", mlog)
	out, err = zctlFS(t, "fsck", "-n", ns)
	require.NoError(t, err, "fsck after the rebuild: %s", out)
	out, err = zctlFS(t, "node", "remove", victim)
	require.NoError(t, err, "nothing left on the lost node: %s", out)

	compose(t, "start", svc) // it joins afresh
	restarted = true
	require.NoError(t, waitHealthy())
	waitReady(t, nodeCount, 2*time.Minute)
}

// waitGoneFromArbiter waits until the arbiter sees node id unavailable.
func waitGoneFromArbiter(t *testing.T, admin interface {
	ListNodes(context.Context) ([]*v1.Node, error)
}, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		nodes, err := admin.ListNodes(context.Background())
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.GetId() == id {
				return !n.GetAvailable()
			}
		}
		return true
	}, time.Minute, 250*time.Millisecond, "the arbiter still sees %s", id)
}
