package redbench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Tenant throughput during a rebuild (a rebuild is throttled so
// tenants keep their bandwidth). Each point starts its own cluster of
// Options.Nodes nodes with the rebuild rate under test, writes LoadMiB into
// a mirror:2 namespace, stops the node of its first copy, and then a
// tenant (a namespace without redundancy, so its v-zones are on the
// surviving nodes, the ones the rebuild reads from and writes to) runs
// 1 MiB append + 1 MiB read-back operations, one after the other: first
// with no rebuild (the node stopped, not yet declared lost), then while
// the rebuild runs (from `node remove` until no layout names the node).
// The figure is the median MiB/s of the operations during the rebuild over
// the median of those before it, in the same cluster.

// LoadPoint is one rebuild rate's tenant figures.
type LoadPoint struct {
	RateMiBps        float64 `json:"rebuild_rate_mibps"` // 0: unlimited
	BaselineMiBps    float64 `json:"tenant_no_rebuild_mibps"`
	DuringMiBps      float64 `json:"tenant_during_rebuild_mibps"`
	Ratio            float64 `json:"tenant_during_over_no_rebuild"`
	Samples          int     `json:"tenant_ops_during_rebuild"`
	RebuiltMiB       float64 `json:"rebuilt_mib"` // rebuild bytes written by the nodes
	RebuildSeconds   float64 `json:"rebuild_seconds"`
	ThrottledSeconds float64 `json:"throttled_seconds"` // summed over the nodes
}

func loadPoint(ctx context.Context, o Options, rateMiB float64) (LoadPoint, error) {
	lp := LoadPoint{RateMiBps: rateMiB}
	dir, err := os.MkdirTemp(o.Dir, "load-")
	if err != nil {
		return lp, err
	}
	defer os.RemoveAll(dir)
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: o.Nodes, Arbiters: 1, SessionTTL: time.Second,
		Device: localcluster.SmallDevice(), Admission: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RebuildRate: rateMiB, UnlimitedRebuild: rateMiB == 0})
	if err != nil {
		return lp, err
	}
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	if err != nil {
		return lp, err
	}
	defer admin.Close()
	for _, ns := range []struct{ name, red string }{{"m", "mirror:2"}, {"t", "none"}} {
		if _, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns.name, MaxActiveVzones: 2, ZonesPerVzone: 4, Redundancy: ns.red}); err != nil {
			return lp, fmt.Errorf("namespace %s: %w", ns.name, err)
		}
	}
	mc, err := client.New(ctx, cl.ClientConfig("m"))
	if err != nil {
		return lp, err
	}
	defer mc.Close()
	tc, err := client.New(ctx, cl.ClientConfig("t"))
	if err != nil {
		return lp, err
	}
	defer tc.Close()
	keep, _, err := writePoint(ctx, mc, o.LoadMiB<<20, o.Chunk)
	if err != nil {
		return lp, fmt.Errorf("mirror:2 write: %w", err)
	}
	victim, idx, err := nodeOf(ctx, mc, keep.ids[0])
	if err != nil {
		return lp, err
	}
	if err := cl.StopNode(idx); err != nil {
		return lp, err
	}
	if err := waitGone(ctx, admin, victim); err != nil {
		return lp, err
	}
	ten := &tenant{c: tc, buf: make([]byte, o.Chunk), back: make([]byte, o.Chunk)}
	if _, err := rand.Read(ten.buf); err != nil {
		return lp, err
	}
	var base []float64
	for i := 0; i < o.LoadOps; i++ {
		v, err := ten.op(ctx)
		if err != nil {
			return lp, fmt.Errorf("tenant before the rebuild: %w", err)
		}
		base = append(base, v)
	}
	before := rebuildTotals(cl, victim)
	t0 := time.Now()
	if err := admin.RemoveNode(ctx, victim); err != nil && !errors.Is(err, zerr.ErrZoneState) {
		return lp, fmt.Errorf("declare %s lost: %w", victim, err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			left, err := zonesOn(ctx, mc, keep.ids, victim, false)
			if err != nil || left == 0 {
				done <- err
				return
			}
			if time.Since(t0) > 10*time.Minute {
				done <- &zerr.UnavailableError{What: "rebuild", Reason: fmt.Sprintf("%d copies still on %s after 10 minutes", left, victim)}
				return
			}
			select {
			case <-ctx.Done():
				done <- ctx.Err()
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var during []float64
	var rebuildErr error
loop:
	for {
		select {
		case rebuildErr = <-done:
			break loop
		default:
		}
		v, err := ten.op(ctx)
		if err != nil {
			return lp, fmt.Errorf("tenant during the rebuild: %w", err)
		}
		during = append(during, v)
	}
	if rebuildErr != nil {
		return lp, rebuildErr
	}
	lp.RebuildSeconds = time.Since(t0).Seconds()
	after := rebuildTotals(cl, victim)
	lp.RebuiltMiB = (after.written - before.written) / (1 << 20)
	lp.ThrottledSeconds = after.throttled - before.throttled
	lp.BaselineMiBps, lp.DuringMiBps, lp.Samples = benchstat.Median(base), benchstat.Median(during), len(during)
	if lp.BaselineMiBps > 0 {
		lp.Ratio = lp.DuringMiBps / lp.BaselineMiBps
	}
	// every mirrored byte reads back from the rebuilt layout
	fresh, err := client.New(ctx, cl.ClientConfig("m"))
	if err != nil {
		return lp, err
	}
	defer fresh.Close()
	if _, err := readPoint(ctx, fresh, keep, o.Chunk); err != nil {
		return lp, fmt.Errorf("read after the rebuild: %w", err)
	}
	return lp, nil
}

// tenant appends a chunk and reads it back, in a v-zone it resets (and
// opens again) when full.
type tenant struct {
	c         *client.Client
	vz        *client.VZone
	buf, back []byte
}

// op is one append and read-back; it returns MiB/s over both.
func (t *tenant) op(ctx context.Context) (float64, error) {
	t0 := time.Now()
	for {
		if t.vz == nil {
			vz, err := t.c.OpenVZone(ctx)
			if err != nil {
				return 0, err
			}
			t.vz = vz
		}
		off, err := t.vz.Append(ctx, t.buf)
		if errors.Is(err, zerr.ErrZoneFull) {
			if err := t.vz.Reset(ctx); err != nil {
				return 0, err
			}
			t.vz = nil      // a reset v-zone is opened again
			t0 = time.Now() // the reset is not the tenant's data path
			continue
		}
		if err != nil {
			return 0, err
		}
		if err := t.vz.ReadInto(ctx, off, t.back); err != nil {
			return 0, err
		}
		if !bytes.Equal(t.buf, t.back) {
			return 0, &zerr.CorruptError{Path: fmt.Sprintf("tenant v-zone %d at block %d", t.vz.ID(), off), Reason: "read back other bytes than written"}
		}
		return float64(2*len(t.buf)) / (1 << 20) / time.Since(t0).Seconds(), nil
	}
}

type totals struct{ written, throttled float64 }

// rebuildTotals sums the surviving nodes' rebuild counters (bytes read
// and written for rebuilds, throttled seconds). written is half the bytes
// for mirror copies (read on the source, written on the target).
func rebuildTotals(cl *localcluster.Cluster, victim string) totals {
	var t totals
	for _, n := range cl.Info().Nodes {
		if n.ID == victim {
			continue
		}
		b, th := scrapeRebuild(n.Metrics)
		t.written += b / 2
		t.throttled += th
	}
	return t
}

// scrapeRebuild reads a node's rebuild bytes and throttled seconds from
// its /metrics (0, 0 when it does not answer: a stopped node).
func scrapeRebuild(url string) (bytes, throttled float64) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "zonefleet_node_rebuild_bytes_total":
			bytes = v
		case "zonefleet_node_rebuild_throttled_seconds_total":
			throttled = v
		}
	}
	return bytes, throttled
}
