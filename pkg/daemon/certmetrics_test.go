package daemon

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// secureDaemon runs a TLS daemon of node n1 with the authenticator in
// front and returns it with its PKI directory.
func secureDaemon(t *testing.T) (*Daemon, string) {
	t.Helper()
	t.Setenv(AdminTokenEnv, "")
	dir := t.TempDir()
	_, err := auth.InitDir(auth.InitOptions{Dir: dir, Nodes: []string{"n1"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	log, _ := NewLogger(io.Discard, "text", "error")
	sec, err := LoadSecurity(SecurityFlags{PKIDir: dir}, pki.Role{Kind: pki.RoleNode, Name: "n1"}, false, nil, log)
	require.NoError(t, err)
	d, err := New(Config{Name: "test", GRPCListen: "127.0.0.1:0", Security: sec}, log)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d, dir
}

// Every daemon exports the expiry of the certificate it serves with and
// presents as a client, as a Unix time: what the deploy alerts read.
func TestCertificateExpiryExported(t *testing.T) {
	d, dir := secureDaemon(t)
	kp, err := pki.LoadKeyPair(filepath.Join(dir, "node-n1.crt"), filepath.Join(dir, "node-n1.key"))
	require.NoError(t, err)
	leaf, err := pki.LeafOf(&kp)
	require.NoError(t, err)
	want := float64(leaf.NotAfter.Unix())
	mfs, err := d.Registry.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "zonefleet_tls_certificate_expiry_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			require.Len(t, m.GetLabel(), 1)
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{"server": want, "client": want}, got)

	// A plaintext daemon without certificates exports none.
	log, _ := NewLogger(io.Discard, "text", "error")
	plain, err := New(Config{Name: "plain", GRPCListen: "127.0.0.1:0"}, log)
	require.NoError(t, err)
	n, err := testutil.GatherAndCount(plain.Registry, "zonefleet_tls_certificate_expiry_timestamp_seconds")
	require.NoError(t, err)
	assert.Zero(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = plain.Run(ctx)
}

// A call the authenticator refuses never reaches a handler or the metrics
// interceptors; it is still counted in zonefleet_grpc_requests_total with
// its code, under a bounded method label.
func TestRefusalsCountedInRequestMetrics(t *testing.T) {
	d, dir := secureDaemon(t)
	anon, err := auth.Load(auth.Files{CA: filepath.Join(dir, auth.FileCA)})
	require.NoError(t, err)
	tc, err := anon.ClientTLS(&pki.Role{Kind: pki.RoleNode, Name: "n1"}, "")
	require.NoError(t, err)
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range []string{"/zonefleet.v1.ZonedDevice/Identify", "/zonefleet.v1.ZonedDevice/Identify", "/attacker.Chosen/Name"} {
		err = conn.Invoke(ctx, m, &emptypb.Empty{}, &emptypb.Empty{})
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%s: %v", m, err)
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(d.rpcm.requests.WithLabelValues("Identify", "Unauthenticated")))
	assert.Equal(t, 1.0, testutil.ToFloat64(d.rpcm.requests.WithLabelValues("unknown", "Unauthenticated")))
}
