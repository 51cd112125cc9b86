package client_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// writeToken replaces a token file atomically (what an operator's rotation
// does: write a new file, rename it over the old one).
func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(tok+"\n"), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// tenantFromFile is a tenant client whose only credential is a token file
// (what `zctl mount --token-file` runs with).
func tenantFromFile(t *testing.T, c *localcluster.Cluster, ns, file string, reg prometheus.Registerer) *client.Client {
	t.Helper()
	cfg := c.ClientConfig(ns)
	cfg.Credentials = auth.NewFileToken(file, 100*time.Millisecond, nil)
	cfg.Etcd, cfg.RetryDeadline, cfg.Registerer = c.Etcd.Endpoints(), 20*time.Second, reg
	cl, err := client.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// appendAndRead does arbiter-free data-path calls on every node of the
// v-zone's group (append, read back) and one arbiter call.
func appendAndRead(ctx context.Context, cl *client.Client, vz *client.VZone, bs int) error {
	data := bytes.Repeat([]byte{byte(time.Now().UnixNano())}, bs)
	off, err := vz.Append(ctx, data)
	if err != nil {
		return err
	}
	got, err := vz.Read(ctx, off, 1)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return errors.New("read back differs")
	}
	_, err = cl.GetNamespace(ctx)
	return err
}

// A tenant whose first token lives 4 s keeps working well past that token's
// expiry (and the servers' 30 s skew): the client renews it through the
// arbiter, presenting it, at 2/3 of each lifetime, on real TLS gRPC against
// real servers. The first token itself is refused by then.
func TestTokenRenewalOutlivesFirstToken(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for a token to expire past the servers' skew (~40 s)")
	}
	c := startCluster(t, 3, 1)
	createNS(t, c, "renew", 2)
	ctx := context.Background()
	first, err := c.MintToken("renew", 4*time.Second)
	require.NoError(t, err)
	fcl, err := auth.PeekClaims(first)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "renew.token")
	writeToken(t, file, first)
	reg := prometheus.NewRegistry()
	cl := tenantFromFile(t, c, "renew", file, reg)
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := int(info.BlockSize)

	until := fcl.ExpiresAt.Add(auth.DefaultSkew + 3*time.Second)
	// The token's lifetime is the arbiter's wall time (Unix seconds checked
	// by real servers), so the scenario spans it on the wall clock; it is
	// paced by the renewals themselves: after each call, the next waits
	// for the next renewal, so every renewed token serves a call.
	calls, seen := 0, 0.0
	for time.Now().Before(until) {
		require.NoError(t, appendAndRead(ctx, cl, vz, bs), "call %d at %s (first token expires %s)", calls, time.Now().Format(time.RFC3339), fcl.ExpiresAt.Format(time.RFC3339))
		calls++
		// a hang guard: renewals come every ~2.7 s
		require.Eventually(t, func() bool {
			n := testutil.ToFloat64(renewalsCounter(t, reg, "ok"))
			if n > seen {
				seen = n
				return true
			}
			return false
		}, time.Minute, 20*time.Millisecond, "renewal %d", int(seen)+1)
	}
	require.NoError(t, appendAndRead(ctx, cl, vz, bs), "after the first token's expiry")
	renewals := testutil.ToFloat64(renewalsCounter(t, reg, "ok"))
	assert.GreaterOrEqual(t, renewals, float64(10), "renewed every ~2.7 s")
	assert.Zero(t, testutil.ToFloat64(renewalsCounter(t, reg, "refused")))

	// The servers refuse the first token now: it is the renewal that works.
	cc, err := grpc.NewClient(c.ArbiterAddrs()[0], grpc.WithTransportCredentials(credentials.NewTLS(c.ClientTLS())),
		grpc.WithPerRPCCredentials(auth.PerRPC(auth.StaticToken(first), false)))
	require.NoError(t, err)
	defer cc.Close()
	_, err = v1.NewArbiterClient(cc).GetNamespace(ctx, &v1.GetNamespaceRequest{Name: "renew"})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
}

// renewalsCounter finds zonefleet_client_token_renewals_total{outcome}.
func renewalsCounter(t *testing.T, reg *prometheus.Registry, outcome string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "zonefleet_client_token_renewals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, m.GetCounter().GetValue)
				}
			}
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return 0 })
}

// After `zctl token revoke` the renewal is refused: calls fail at once with
// UNAUTHENTICATED saying the token can no longer be renewed (not after
// minutes of retries, not as UNAVAILABLE). The operator writes a new token
// into the file: the client re-reads it and works again, no restart.
func TestTokenRenewalStopsOnRevocationAndFollowsTheFile(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	createNS(t, c, "rev", 2)
	ctx := context.Background()
	admin := newClient(t, c, "")
	resp, err := admin.IssueToken(ctx, "rev", 6*time.Second)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "rev.token")
	writeToken(t, file, resp.GetToken())
	reg := prometheus.NewRegistry()
	cl := tenantFromFile(t, c, "rev", file, reg)
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := int(info.BlockSize)
	require.NoError(t, appendAndRead(ctx, cl, vz, bs))

	gen, err := admin.RevokeTokens(ctx, "rev")
	require.NoError(t, err)
	var last error
	require.Eventually(t, func() bool {
		last = appendAndRead(ctx, cl, vz, bs)
		return last != nil && strings.Contains(last.Error(), "can no longer be renewed")
	}, 20*time.Second, 200*time.Millisecond, "last error: %v", last)
	assert.True(t, errors.Is(last, zerr.ErrUnauthenticated) || status.Code(last) == codes.Unauthenticated, "%v", last)
	assert.Contains(t, last.Error(), "revoked")
	assert.Equal(t, float64(1), testutil.ToFloat64(renewalsCounter(t, reg, "refused")))

	// The operator rotates the file: a token of the new generation.
	resp, err = admin.IssueToken(ctx, "rev", 6*time.Second)
	require.NoError(t, err)
	require.Equal(t, gen, resp.GetGeneration())
	writeToken(t, file, resp.GetToken())
	require.Eventually(t, func() bool {
		last = appendAndRead(ctx, cl, vz, bs)
		return last == nil
	}, 10*time.Second, 100*time.Millisecond, "after rotation: %v", last)
	// And it is renewed from there on (every ~4 s for a 6 s token).
	okBefore := testutil.ToFloat64(renewalsCounter(t, reg, "ok"))
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(renewalsCounter(t, reg, "ok")) >= okBefore+2
	}, 20*time.Second, 200*time.Millisecond)
	require.NoError(t, appendAndRead(ctx, cl, vz, bs))
}
