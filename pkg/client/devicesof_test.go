package client_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// writtenBytes scrapes every node's /metrics and returns the bytes each
// drive has taken in writes (zonefleet_node_io_bytes_total, op write).
func writtenBytes(t *testing.T, c *localcluster.Cluster) map[client.DeviceRef]float64 {
	t.Helper()
	out := map[client.DeviceRef]float64{}
	for _, n := range c.Info().Nodes {
		resp, err := http.Get(n.Metrics)
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "zonefleet_node_io_bytes_total{") || !strings.Contains(line, `op="write"`) {
				continue
			}
			labels, value, ok := strings.Cut(line[len("zonefleet_node_io_bytes_total{"):], "} ")
			require.True(t, ok, line)
			var dev uint32
			for _, kv := range strings.Split(labels, ",") {
				if k, v, _ := strings.Cut(kv, "="); k == "device" {
					d, err := strconv.ParseUint(strings.Trim(v, `"`), 10, 32)
					require.NoError(t, err, line)
					dev = uint32(d)
				}
			}
			f, err := strconv.ParseFloat(value, 64)
			require.NoError(t, err, line)
			out[client.DeviceRef{Node: n.ID, Addr: n.GRPC, Device: dev}] += f
		}
		require.NoError(t, sc.Err())
		resp.Body.Close()
	}
	return out
}

// DevicesOf names every drive a write of a range reaches (checked against
// the nodes' own write counters, scraped from /metrics around each write):
// for plain striping exactly those, so that a Flush after a small write
// syncs one drive instead of all of the v-zone's; with mirrors every copy;
// with parity at least the data, parity and partial-parity legs written.
func TestDevicesOfCoversEveryDriveAWriteReaches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		redundancy string
		exact      bool
	}{{"", true}, {"mirror:2", false}, {"raid5", false}} {
		t.Run(fmt.Sprintf("redundancy=%q", tc.redundancy), func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, 3, 1)
			ctx := context.Background()
			admin := newClient(t, c, "")
			_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "d", MaxActiveVzones: 2, ZonesPerVzone: 4, Redundancy: tc.redundancy})
			require.NoError(t, err)
			cl := newClient(t, c, "d")
			vz, err := cl.OpenVZone(ctx)
			require.NoError(t, err)
			info, err := vz.ReportZone(ctx)
			require.NoError(t, err)
			bs := info.BlockSize
			all, err := vz.Devices(ctx)
			require.NoError(t, err)
			smaller := 0
			off := uint64(0)
			// single blocks, stripe-sized and odd runs, then runs crossing stripe groups
			for i, n := range []uint64{1, 1, 3, 16, 1, 37, 64, 5, 200, 1, 129, 300} {
				if off+n > info.Capacity {
					break
				}
				before := writtenBytes(t, c)
				require.NoError(t, vz.Write(ctx, off, random(int(n*bs))), "write %d: %d blocks at %d", i, n, off)
				after := writtenBytes(t, c)
				got, err := vz.DevicesOf(ctx, off, n)
				require.NoError(t, err)
				var reached []client.DeviceRef
				for d, b := range after {
					if b > before[d] {
						reached = append(reached, d)
					}
				}
				require.NotEmpty(t, reached)
				all, err = vz.Devices(ctx) // (the v-zone grows by stripe groups)
				require.NoError(t, err)
				for _, d := range reached {
					require.Contains(t, got, d, "write %d (%d blocks at %d) reached %v; DevicesOf says %v", i, n, off, reached, got)
				}
				for _, d := range got {
					require.Contains(t, all, d)
				}
				if tc.exact {
					require.ElementsMatch(t, reached, got, "write %d (%d blocks at %d)", i, n, off)
				}
				if len(got) < len(all) {
					smaller++
				}
				off += n
			}
			if tc.redundancy != "raid5" {
				require.Positive(t, smaller, "some small write reaches fewer drives than the v-zone spans")
			}
		})
	}
}
