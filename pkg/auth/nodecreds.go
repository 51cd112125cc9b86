package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"

	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// NodeCredentials are the transport credentials of a connection to one
// node, named by its id: TLS over base (the cluster CA, the caller's own
// certificate if any) that accepts only a server whose verified certificate
// carries the role node:<id>. The address comes from the node's etcd record,
// which is not trusted: a record rewritten to point at another server
// (another node with a stolen certificate, anything else with a certificate
// of the cluster) fails the handshake, so no byte of a call — no token, no
// data — reaches it.
//
// The refusal is remembered (Refused) because gRPC reports a failed
// handshake only as UNAVAILABLE with text: a caller that sees UNAVAILABLE
// asks Refused and returns the *zerr.PeerIdentityError instead of retrying.
// A later successful handshake clears it. Safe for concurrent use.
type NodeCredentials struct {
	credentials.TransportCredentials
	node    string
	refused *atomic.Pointer[zerr.PeerIdentityError]
}

// NewNodeCredentials returns credentials pinned to node:<node>. base must
// carry the cluster CA (RootCAs); it is cloned, not changed.
func NewNodeCredentials(base *tls.Config, node string) (*NodeCredentials, error) {
	want := pki.Role{Kind: pki.RoleNode, Name: node}
	if err := want.Validate(); err != nil || node == "" {
		return nil, &zerr.InvalidArgumentError{Field: "node id", Reason: "a node is dialled by its id, which its certificate must name"}
	}
	if base == nil || base.RootCAs == nil {
		return nil, &zerr.InvalidArgumentError{Field: "tls", Reason: "dialling a node needs the cluster CA"}
	}
	conf := base.Clone()
	prev := base.VerifyConnection
	conf.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return &zerr.PeerIdentityError{Want: want.String(), Got: "an unverified certificate"}
		}
		got, err := pki.RoleOf(cs.VerifiedChains[0][0])
		if err != nil {
			return &zerr.PeerIdentityError{Want: want.String(), Got: "no role (" + err.Error() + ")"}
		}
		if got != want {
			return &zerr.PeerIdentityError{Want: want.String(), Got: got.String()}
		}
		return nil
	}
	return &NodeCredentials{TransportCredentials: credentials.NewTLS(conf), node: node,
		refused: new(atomic.Pointer[zerr.PeerIdentityError])}, nil
}

// ClientHandshake runs the TLS handshake and remembers an identity refusal.
func (n *NodeCredentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := n.TransportCredentials.ClientHandshake(ctx, authority, raw)
	var pe *zerr.PeerIdentityError
	switch {
	case errors.As(err, &pe):
		c := *pe
		c.Addr = raw.RemoteAddr().String()
		n.refused.Store(&c)
		return nil, nil, &c
	case err == nil:
		n.refused.Store(nil)
	}
	return conn, info, err
}

// Clone keeps the pin and shares the remembered refusal.
func (n *NodeCredentials) Clone() credentials.TransportCredentials {
	return &NodeCredentials{TransportCredentials: n.TransportCredentials.Clone(), node: n.node, refused: n.refused}
}

// Node is the id the credentials are pinned to.
func (n *NodeCredentials) Node() string { return n.node }

// Refused is the last handshake's identity refusal, nil when the last
// handshake succeeded or none failed that way.
func (n *NodeCredentials) Refused() error {
	if pe := n.refused.Load(); pe != nil {
		return pe
	}
	return nil
}

// RefusedOr returns the remembered identity refusal when err is the
// UNAVAILABLE a failed handshake gives (a status or its zerr form), err
// otherwise.
func (n *NodeCredentials) RefusedOr(err error) error {
	if n == nil || err == nil || (!errors.Is(err, zerr.ErrUnavailable) && status.Code(err) != codes.Unavailable) {
		return err
	}
	if r := n.Refused(); r != nil {
		return r
	}
	return err
}

// UnaryInterceptor returns the identity refusal instead of the UNAVAILABLE
// of a refused handshake (install it with grpc.WithChainUnaryInterceptor on
// the connection these credentials secure).
func (n *NodeCredentials) UnaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return n.RefusedOr(inv(ctx, method, req, reply, cc, opts...))
}
