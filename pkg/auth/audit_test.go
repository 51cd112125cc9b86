package auth

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Every refusal over real TLS gRPC is counted in
// zonefleet_auth_refusals_total with a reason from the fixed set and a
// bounded method; the refusals come back to the client as typed errors
// through the rpcerr table.
func TestRefusalsAreCountedByReason(t *testing.T) {
	c := startCluster(t)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c.auth))
	cc := c.dial(t, dialOpt{})
	tokA := c.token(t, c.issuer, "tenant-a", 0, 0)
	expired := c.token(t, c.oldIss, "tenant-a", 0, time.Minute)
	forged := c.token(t, c.otherIssuer, "tenant-a", 0, 0)
	dev := v1.ZonedDevice_Read_FullMethodName

	cases := []struct {
		md     []string
		reason string
		typed  error
	}{
		{nil, RefusedNoCredentials, zerr.ErrUnauthenticated},
		{bearer(expired), RefusedTokenExpired, zerr.ErrUnauthenticated},
		{bearer(forged), RefusedTokenInvalid, zerr.ErrUnauthenticated},
		{bearer("zfa_not-the-admin-token-0123456789abcdefghij"), RefusedUnknownBearer, zerr.ErrUnauthenticated},
		{cat(bearer(tokA), []string{NamespaceKey, "tenant-b"}), RefusedNamespace, zerr.ErrPermissionDenied},
	}
	for _, tc := range cases {
		err := rpcerr.FromError(read(cc, tc.md))
		require.Error(t, err, tc.reason)
		assert.ErrorIs(t, err, tc.typed, tc.reason)
		assert.Equal(t, 1.0, testutil.ToFloat64(c.auth.audit.refusals.WithLabelValues(tc.reason, dev)), tc.reason)
	}
	var pd *zerr.PermissionDeniedError
	require.True(t, errors.As(rpcerr.FromError(read(cc, cat(bearer(tokA), []string{NamespaceKey, "tenant-b"}))), &pd))
	assert.Equal(t, "namespace:tenant-a", pd.Identity)

	// A tenant calling an admin method; then a method nobody has: its name
	// is not a label value.
	_, err := v1.NewArbiterClient(cc).CreateNamespace(withMD(bearer(tokA)...), &v1.CreateNamespaceRequest{Name: "x"})
	assert.ErrorIs(t, rpcerr.FromError(err), zerr.ErrPermissionDenied)
	assert.Equal(t, 1.0, testutil.ToFloat64(c.auth.audit.refusals.WithLabelValues(RefusedPolicy, v1.Arbiter_CreateNamespace_FullMethodName)))
	require.Error(t, cc.Invoke(withMD(), "/attacker/chosen-"+strings.Repeat("x", 40), &v1.ReadRequest{}, &v1.ReadResponse{}))
	n, err := testutil.GatherAndCount(reg, "zonefleet_auth_refusals_total")
	require.NoError(t, err)
	assert.Equal(t, 7, n, "one series per (reason, method); the invented method is \"unknown\"")
	assert.Equal(t, 1.0, testutil.ToFloat64(c.auth.audit.refusals.WithLabelValues(RefusedNoCredentials, "unknown")))

	// A plaintext client on a server that requires TLS.
	pc := c.dial(t, dialOpt{plaintext: true, addr: c.plainAddr})
	assert.ErrorIs(t, rpcerr.FromError(read(pc, bearer(tokA))), zerr.ErrUnauthenticated)
	assert.Equal(t, 1.0, testutil.ToFloat64(c.auth.audit.refusals.WithLabelValues(RefusedPlaintext, dev)))
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// Refusals are logged at WARN, at most logBurst lines at once and logRate a
// second after that; the next line says how many were left out.
func TestRefusalLogIsRateLimited(t *testing.T) {
	c := &clk{t: time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)}
	var buf lockedBuf
	a := newAudit(slog.New(slog.NewTextHandler(&buf, nil)), c.now)
	refusal := refuse(RefusedNoCredentials, unauth("no credentials"))
	for i := 0; i < 100; i++ {
		a.refused("m", "/m", "call", refusal)
	}
	lines := strings.Count(buf.String(), "\n")
	assert.Equal(t, int(logBurst), lines)
	assert.Contains(t, buf.String(), "level=WARN")
	assert.Equal(t, 100.0, testutil.ToFloat64(a.refusals.WithLabelValues(RefusedNoCredentials, "m")), "every refusal is counted")
	c.add(time.Second)
	a.refused("m", "/m", "call", refusal)
	assert.Equal(t, lines+1, strings.Count(buf.String(), "\n"))
	assert.Contains(t, buf.String(), "suppressed_since_last=90")
}
