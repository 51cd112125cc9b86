package auth

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fuzzKey is fixed so seeds stay meaningful across runs.
var fuzzKey = ed25519.NewKeyFromSeed([]byte("zonefleet-fuzz-seed-0123456789ab"))

func fuzzSetup(f *testing.F) (*Issuer, *Verifier, string) {
	iss, err := NewIssuer(fuzzKey, nil)
	if err != nil {
		f.Fatal(err)
	}
	v, err := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{fuzzKey.Public().(ed25519.PublicKey)}})
	if err != nil {
		f.Fatal(err)
	}
	tok, _, err := iss.Issue(TokenRoleNamespace, "tenant-a", 3, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	return iss, v, tok
}

// FuzzVerify: any string either verifies into sane claims or fails with a
// token error; never a panic.
func FuzzVerify(f *testing.F) {
	_, v, tok := fuzzSetup(f)
	p := strings.Split(tok, ".")
	for _, s := range []string{tok, "", "zf1.", "zf1....", tok + ".", strings.Join(p[:3], "."),
		"zf1." + p[1] + "." + p[2] + "." + p[2], "zf1." + p[1] + ".e30." + p[3], "zf1.0000000000000000.e30.AA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := v.Verify(s)
		if err != nil {
			if _, ok := err.(*TokenError); !ok {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if ValidSubject(c.Subject) != nil || (c.Role != TokenRoleNamespace && c.Role != TokenRoleNode) || !c.ExpiresAt.After(c.IssuedAt) {
			t.Fatalf("accepted insane claims %+v from %q", c, s)
		}
	})
}

// FuzzAuthenticateMetadata: arbitrary authorization and namespace metadata
// values and method names yield either a refusal with UNAUTHENTICATED or
// PERMISSION_DENIED, or an identity whose namespace is what the handler sees.
func FuzzAuthenticateMetadata(f *testing.F) {
	_, v, tok := fuzzSetup(f)
	admin := "zfa_" + strings.Repeat("Qx7-", 10) + "Zp9aB3"
	a, err := New(Config{AdminToken: admin, Verifier: v, Insecure: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("Bearer "+tok, "tenant-a", "/zonefleet.v1.ZonedDevice/Read", true)
	f.Add("Bearer "+tok, "tenant-b", "/zonefleet.v1.Arbiter/ListVZones", true)
	f.Add("Bearer "+admin, "x/y", "/zonefleet.v1.ZonedDevice/Read", true)
	f.Add("Bearer "+admin, "", "/zonefleet.v1.Arbiter/DeleteNamespace", false)
	f.Add("bearer "+tok, "\x00", "", false)
	f.Add("Bearer ", "tenant-a", "/grpc.health.v1.Health/Check", false)
	f.Fuzz(func(t *testing.T, auth, ns, method string, withNS bool) {
		md := metadata.MD{}
		if auth != "" {
			md.Append(AuthorizationKey, auth)
		}
		if withNS {
			md.Append(NamespaceKey, ns)
		}
		var req any = &v1.ListVZonesRequest{Namespace: ns}
		ctx, err := a.Authenticate(metadata.NewIncomingContext(context.Background(), md), method, req)
		if err != nil {
			if c := status.Code(statusOf(err)); c != codes.Unauthenticated && c != codes.PermissionDenied {
				t.Fatalf("refusal with code %v: %v", c, err)
			}
			return
		}
		id, ok := FromContext(ctx)
		if !ok {
			if r := a.cfg.Policy[method]; !r.Public {
				t.Fatalf("non-public method %q passed without identity", method)
			}
			return
		}
		got, _ := metadata.FromIncomingContext(ctx)
		if len(got.Get(AuthorizationKey)) != 0 {
			t.Fatal("credential left in handler metadata")
		}
		vals := got.Get(NamespaceKey)
		if id.Namespace == "" && len(vals) != 0 || id.Namespace != "" && (len(vals) != 1 || vals[0] != id.Namespace) {
			t.Fatalf("handler metadata %q differs from identity namespace %q", vals, id.Namespace)
		}
		if id.Kind == KindNamespace && id.Namespace != "tenant-a" {
			t.Fatalf("tenant identity for %q from a tenant-a token", id.Namespace)
		}
	})
}
