//go:build deploy

package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// clientMetricsAddr is where deploy/prometheus/prometheus.yml scrapes client
// programs; the dashboard test serves its client library's metrics there.
const clientMetricsAddr = "127.0.0.1:7901"

// startPrometheus runs a prometheus binary on the host with the deploy
// config and returns its base URL.
func startPrometheus(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		bin = "prometheus"
	}
	path, err := exec.LookPath(bin)
	require.NoError(t, err, "the dashboard test needs a prometheus binary (apt-get install prometheus, or $PROMETHEUS)")
	l := listen(t, "127.0.0.1:0")
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	cmd := exec.Command(path, "--config.file="+filepath.Join(repoRoot(), "deploy", "prometheus", "prometheus.yml"),
		"--storage.tsdb.path="+t.TempDir(), "--web.listen-address="+addr, "--log.level=warn")
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 200*time.Millisecond, "prometheus ready")
	return base
}

type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []json.RawMessage `json:"result"`
	} `json:"data"`
}

func promQuery(base, expr string) (int, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r promResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, errors.New(r.Error)
	}
	return len(r.Data.Result), nil
}

// workload exercises what the dashboards show: namespace create and
// delete, stripe-group allocations, writes, appends, reads, compactions
// (in-drive and node to node), a v-zone reset, and a write at a wrong write
// pointer (a FAILED_PRECONDITION error on a node). It runs for about d.
func workload(t *testing.T, reg prometheus.Registerer, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	createNamespace(t, "dash", 4, 8)
	createNamespace(t, "dash-tmp", 1, 4)
	admin := newClient(t, "", 20*time.Second)
	require.NoError(t, admin.Namespaces().Delete(ctx, "dash-tmp", true))

	cl := newClient(t, "dash", 20*time.Second, func(c *client.Config) { c.Registerer = reg })
	fsDone := make(chan error, 1)
	go func() { fsDone <- fsWorkload(t, reg) }()
	defer func() { require.NoError(t, <-fsDone, "file system workload") }()
	src, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := src.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize

	end := time.Now().Add(d)
	var wp uint64
	round := 0
	for time.Now().Before(end) && wp+512 < info.Capacity {
		data := pattern("dash", src.ID(), wp, 128, bs)
		if round%2 == 0 {
			require.NoError(t, src.Write(ctx, wp, data))
		} else {
			off, err := src.Append(ctx, data)
			require.NoError(t, err)
			require.Equal(t, wp, off)
		}
		wp += 128
		got, err := src.Read(ctx, 0, min(wp, 256))
		require.NoError(t, err)
		require.Equal(t, pattern("dash", src.ID(), 0, min(wp, 256), bs), got)
		round++
		time.Sleep(300 * time.Millisecond) // the workload's pace over its d, not a wait
	}
	t.Logf("workload: %d blocks written in %d rounds", wp, round)

	// Compaction into a second v-zone: the nodes copy (copyback or
	// read-and-program inside a drive, or push to a peer node).
	dst, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	st, err := src.Compact(ctx, []client.Copy{{Dst: dst.ID(), SrcOff: 0, DstOff: 0, Blocks: wp / 2}})
	require.NoError(t, err)
	t.Logf("compaction: %+v", st)
	got, err := dst.Read(ctx, 0, 64)
	require.NoError(t, err)
	require.Equal(t, pattern("dash", src.ID(), 0, 64, bs), got)

	// A raw write past a zone's write pointer: the node refuses it.
	l, err := src.Layout(ctx)
	require.NoError(t, err)
	z := l.GetGroups()[0].GetZones()[0]
	dev, dctx, err := cl.Device(z.GetNode(), z.GetAddr())
	require.NoError(t, err)
	id, err := dev.Identify(dctx, &v1.IdentifyRequest{Device: z.GetDevice()})
	require.NoError(t, err)
	_, err = dev.Write(dctx, &v1.WriteRequest{Device: z.GetDevice(), Lba: uint64(z.GetZone())*id.GetZoneSize() + id.GetZoneSize() - 1, Data: make([]byte, bs)})
	require.ErrorIs(t, err, zerr.ErrWritePointer)

	// Reset: the arbiter takes the zones back, the nodes reset them.
	require.NoError(t, src.Reset(ctx))
}

// Every dashboard panel's queries, with every template variable at All
// (substitute: .* and $__rate_interval = 1m), return series from a real
// Prometheus scraping the compose cluster after a short workload
// (exemptPanels lists the panels that cannot yet, and why).
func TestDashboards(t *testing.T) {
	waitReady(t, nodeCount, time.Minute)
	reg := prometheus.NewRegistry()
	l := listen(t, clientMetricsAddr)
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	base := startPrometheus(t)
	workload(t, reg, 25*time.Second)
	// Two more scrapes of every target after the last step: each target's
	// latest sample is more than one scrape interval (5 s) younger than the
	// workload's end (a hang guard of two minutes). The end is taken to the
	// millisecond: truncated to the second, a scrape up to a second before
	// the last step could count as one of the two, and a counter born in
	// that last step (the write-pointer error, the compaction) would have
	// one sample, which rate() drops.
	end := float64(time.Now().UnixMilli()) / 1000
	require.Eventually(t, func() bool {
		n, err := promQuery(base, fmt.Sprintf(`timestamp(up) > %.3f`, end+5))
		return err == nil && n == len(metricsAddrs)+1
	}, 2*time.Minute, 250*time.Millisecond, "every target scraped twice after the workload")

	// The client library's metrics (what the mount will export) are documented.
	doc := readmeMetrics(t)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.NotEmpty(t, mfs)
	for _, mf := range mfs {
		assert.True(t, doc[mf.GetName()], "client metric %s is documented nowhere (docs/operations.md)", mf.GetName())
	}

	// Every scrape target is up (the client one is this test).
	n, err := promQuery(base, `up == 1`)
	require.NoError(t, err)
	assert.Equal(t, len(metricsAddrs)+1, n, "targets up")

	checked, exempted := 0, 0
	var empty []string

	for _, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			if reason, ok := exempt(d.UID, p.ID); ok {
				exempted++
				t.Logf("exempt %s/%d %q: %s", d.UID, p.ID, p.Title, reason)
				continue
			}
			for _, tg := range p.Targets {
				expr := substitute(tg.Expr) // every variable at All
				n, err := promQuery(base, expr)
				if !assert.NoError(t, err, "%s/%d %q: %s", d.UID, p.ID, p.Title, expr) {
					continue
				}
				checked++
				if n == 0 {
					empty = append(empty, fmt.Sprintf("%s/%d %q %s: %s", d.UID, p.ID, p.Title, tg.RefID, expr))
				}
			}
		}
	}
	t.Logf("%d panel queries checked, %d panels exempt", checked, exempted)
	assert.Empty(t, empty, "panel queries with no series")

	// The alerting rules (deploy/prometheus/rules) are loaded and evaluate
	// without error on the cluster's real series.
	rules := promRules(t, base)
	require.NotEmpty(t, rules, "prometheus.yml loads the alerting rules")
	t.Logf("%d alerting rules evaluated", len(rules))
	for _, r := range rules {
		assert.Equal(t, "ok", r.Health, "rule %s: %s", r.Name, r.LastError)
		if r.State == "firing" {
			t.Logf("alert firing during the workload: %s", r.Name)
		}
	}
}

type promRule struct {
	Name      string `json:"name"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	State     string `json:"state"`
}

// promRules lists every rule Prometheus evaluates, once each has run.
func promRules(t *testing.T, base string) []promRule {
	t.Helper()
	var rules []promRule
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/api/v1/rules")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Groups []struct {
					Rules []promRule `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil {
			return false
		}
		rules = rules[:0]
		for _, g := range r.Data.Groups {
			for _, rl := range g.Rules {
				if rl.Health == "unknown" { // not evaluated yet
					return false
				}
				rules = append(rules, rl)
			}
		}
		return len(rules) > 0
	}, 30*time.Second, time.Second, "prometheus evaluates the rules")
	return rules
}

// Every zonefleet_* metric the running cluster exports (and the client
// library, as the mount will) is documented in docs/operations.md.
func TestExportedMetricsAreDocumented(t *testing.T) {
	doc := readmeMetrics(t)
	fams := map[string]string{}
	for _, addr := range metricsAddrs {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
				name := strings.Fields(f)[0]
				if strings.HasPrefix(name, "zonefleet_") {
					fams[name] = addr
				}
			}
		}
	}
	require.Greater(t, len(fams), 30, "exported metric families")
	var missing []string
	for name, from := range fams {
		if !doc[name] {
			missing = append(missing, name+" (from "+from+")")
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "exported metrics documented nowhere (add them to docs/operations.md's metrics table)")
}

// fsWorkload runs the file system in this process on the namespace dash-fs,
// its metrics on reg (what `zctl mount --metrics-listen` exports): files
// written and overwritten until segment recycling (IZC) runs, reads, a failed
// lookup. It stays mounted until the test ends, so its gauges stay scraped.
func fsWorkload(t *testing.T, reg prometheus.Registerer) error {
	ctx := context.Background()
	createNamespace(t, "dash-fs", 8, 1)
	cl := newClient(t, "dash-fs", 20*time.Second)
	// A mount lease as zctl mount takes it: its metrics feed the file system
	// dashboard's lease panel.
	vol, err := fsvol.New(ctx, cl, fsvol.Options{MaxZones: 16, MountHolder: "dashboard-test", Registerer: reg})
	if err != nil {
		return err
	}
	if err := lfs.Mkfs(ctx, vol, lfs.MkfsOptions{OPPercent: 20}); err != nil {
		return err
	}
	fs, err := lfs.Mount(ctx, vol, lfs.Options{Registry: reg, Move: lfs.Compact, Clock: clock.Realtime(1), CheckpointEvery: 2 * time.Second})
	if err != nil {
		return err
	}
	t.Cleanup(func() {
		_ = fs.Unmount(context.Background())
		_ = vol.Close(context.Background()) // releases the mount lease and stops its renewals
	})
	if _, err := fs.Lookup(ctx, lfs.RootIno, "missing"); err == nil {
		return fmt.Errorf("lookup of a missing file succeeded")
	}
	// Fill 60 % of the space users are promised, then overwrite pieces.
	const nfiles, piece = 8, 64 << 10
	st := fs.Stats()
	size := int(st.UserBlocks) * st.BlockSize * 6 / 10 / nfiles / piece * piece
	buf := make([]byte, piece)
	write := func(name string, off int64) error {
		a, err := fs.Lookup(ctx, lfs.RootIno, name)
		var h lfs.Handle
		if err == nil {
			h, err = fs.Open(ctx, a.Ino, os.O_RDWR)
		} else {
			_, h, err = fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, os.O_RDWR)
		}
		if err != nil {
			return err
		}
		defer fs.Release(ctx, h)
		if _, err := fs.Write(ctx, h, off, buf); err != nil {
			return err
		}
		if _, err := fs.Read(ctx, h, off, buf); err != nil {
			return err
		}
		return fs.Fsync(ctx, h, false)
	}
	for i := 0; i < nfiles; i++ {
		for off := int64(0); off < int64(size); off += piece {
			if err := write(fmt.Sprintf("f%d", i), off); err != nil {
				return fmt.Errorf("fill: %w", err)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	deadline := time.Now().Add(40 * time.Second)
	for fs.Stats().GCForeground+fs.Stats().GCBackground == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no segment recycling after 40s of overwrites: %+v", fs.Stats())
		}
		if err := write(fmt.Sprintf("f%d", rng.IntN(nfiles)), int64(rng.IntN(size/piece))*piece); err != nil {
			return fmt.Errorf("overwrite: %w", err)
		}
	}
	t.Logf("file system workload: %+v", fs.Stats())
	return nil
}
