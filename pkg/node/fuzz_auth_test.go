package node

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// One secure node (real gRPC over TLS, the authenticator in front), shared by
// the fuzz iterations.
var fuzzNode struct {
	once sync.Once
	err  error
	cc   *grpc.ClientConn
	tok  string // a valid namespace token for "tenant"
	stop func() // ends the node (the test main calls it after the tests)
}

func secureNode(f *testing.F) (v1.ZonedDeviceClient, string) {
	fuzzNode.once.Do(func() {
		fuzzNode.err = func() error {
			dir := f.TempDir()
			pkiDir := filepath.Join(dir, "pki")
			if _, err := auth.InitDir(auth.InitOptions{Dir: pkiDir, Nodes: []string{"fz"}, Hosts: []string{"127.0.0.1"}}); err != nil {
				return err
			}
			sec, err := daemon.LoadSecurity(daemon.SecurityFlags{PKIDir: pkiDir}, pki.Role{Kind: pki.RoleNode, Name: "fz"}, false, nil, quiet)
			if err != nil {
				return err
			}
			d, err := zns.Create(filepath.Join(dir, "dev"), flash.Small(), clock.Off())
			if err != nil {
				return err
			}
			svc, err := New(Config{ID: "fz", Standalone: true}, []*zns.Device{d}, nil, quiet)
			if err != nil {
				return err
			}
			dm, err := daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0", Security: sec}, quiet)
			if err != nil {
				return err
			}
			RegisterGRPC(dm.GRPC, svc)
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { defer close(ran); _ = dm.Run(ctx) }() // lives until the test main's cleanup
			fuzzNode.stop = func() {
				if fuzzNode.cc != nil {
					_ = fuzzNode.cc.Close()
				}
				cancel()
				<-ran
				svc.Close()
				_ = d.Close()
			}
			b, err := auth.Load(auth.DirFiles(pkiDir, pki.Role{Kind: pki.RoleAdmin}, true, false))
			if err != nil {
				return err
			}
			c, err := b.ClientTLS(nil, "")
			if err != nil {
				return err
			}
			c.GetClientCertificate = nil // a tenant: no certificate
			if fuzzNode.cc, err = grpc.NewClient(dm.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(c))); err != nil {
				return err
			}
			fuzzNode.tok, _, err = b.Issuer.Issue(auth.TokenRoleNamespace, "tenant", 0, time.Hour)
			return err
		}()
	})
	require.NoError(f, fuzzNode.err)
	return v1.NewZonedDeviceClient(fuzzNode.cc), fuzzNode.tok
}

// FuzzMetadataValues sends arbitrary authorization and namespace metadata to a
// secure node. A call succeeds only with the valid token and no other
// namespace claimed; everything else is UNAUTHENTICATED or PERMISSION_DENIED
// (never Internal/Unknown, never a crash of the server).
func FuzzMetadataValues(f *testing.F) {
	dev, tok := secureNode(f)
	f.Add("Bearer "+tok, "tenant")
	f.Add("Bearer "+tok, "other")
	f.Add("Bearer "+tok, "")
	f.Add("Bearer "+tok+"x", "tenant")
	f.Add("Bearer zfa_"+tok, "")
	f.Add("bearer "+tok, "tenant")
	f.Add("", "tenant")
	f.Add("Bearer ", "../../etc")
	f.Add("Basic dXNlcjpwYXNz", "tenant\x00")
	f.Fuzz(func(t *testing.T, authz, ns string) {
		if !utf8.ValidString(authz) || !utf8.ValidString(ns) {
			t.Skip("gRPC metadata values are strings")
		}
		md := metadata.MD{}
		if authz != "" {
			md.Append(auth.AuthorizationKey, authz)
		}
		if ns != "" {
			md.Append(auth.NamespaceKey, ns)
		}
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
		defer cancel()
		_, err := dev.ReportZones(ctx, &v1.ReportZonesRequest{MaxZones: 1})
		valid := authz == "Bearer "+tok && (ns == "" || ns == "tenant")
		if valid {
			require.NoError(t, err)
			return
		}
		require.Error(t, err)
		code := status.Code(err)
		if code == codes.Internal && !validHeader(authz, ns) {
			t.Skip("the transport refused a header value it cannot carry")
		}
		require.Contains(t, []codes.Code{codes.Unauthenticated, codes.PermissionDenied}, code, "%v", err)
	})
}

// validHeader: gRPC sends only printable ASCII in metadata values; other
// values fail on the client before the server sees them.
func validHeader(vals ...string) bool {
	for _, v := range vals {
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return false
			}
		}
	}
	return true
}
