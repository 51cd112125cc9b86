// Package peerdial is how a node reaches another node (ZoneCompaction's
// PeerWrite, a rebuild's PeerRead) by id: never to an address a request
// names, never with a bearer token, never with an unbounded connection
// cache.
//
// A Pool is asked for a node by id, never by address. It resolves the
// address through a Resolver that must answer from the registered node
// records (the node's etcd watch of /nodes), dials with TLS pinned to the
// certificate role node:<id> (pki.ClientOptions.WantRole) and the dialling
// node's own certificate, and attaches no bearer token. A tenant that puts
// its own server's address into a request therefore gets nothing: the
// address is never read, and a registered record that points at a
// non-node fails the TLS handshake before any call is sent.
//
// Bounded: at most Max connections are kept; the least recently used one is
// closed when another is needed, and a connection whose node moved to
// another address is replaced. Closing happens outside the pool's lock.
//
// Concurrency: Get is safe for concurrent use; it holds the pool's mutex
// only for map operations (grpc.NewClient does not do I/O; connecting
// happens lazily on the first call).
package peerdial

import (
	"container/list"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Resolver returns the registered address of a node id, or a
// *zerr.NotFoundError. It must answer from the registered node records.
type Resolver func(ctx context.Context, nodeID string) (addr string, err error)

// Config of a Pool.
type Config struct {
	Resolve Resolver
	// Roots and Cert are the cluster CA and this node's certificate. Both
	// are required unless Insecure.
	Roots *x509.CertPool
	Cert  *tls.Certificate
	// Insecure dials plaintext (explicit --insecure clusters only).
	Insecure bool
	// Max connections kept (64).
	Max int
	// Extra dial options (message sizes, rpcerr interceptors).
	Options []grpc.DialOption
}

// Pool holds connections to peer nodes.
type Pool struct {
	cfg Config

	mu    sync.Mutex
	ll    *list.List // of *entry, most recent first
	byID  map[string]*list.Element
	close bool
}

type entry struct {
	id, addr string
	cc       *grpc.ClientConn
}

// New returns a pool.
func New(cfg Config) (*Pool, error) {
	if cfg.Resolve == nil {
		return nil, errors.New("peerdial: a resolver over the registered node records is required")
	}
	if !cfg.Insecure && (cfg.Roots == nil || cfg.Cert == nil) {
		return nil, errors.New("peerdial: TLS needs the cluster CA and this node's certificate (or --insecure)")
	}
	if cfg.Max <= 0 {
		cfg.Max = 64
	}
	return &Pool{cfg: cfg, ll: list.New(), byID: map[string]*list.Element{}}, nil
}

// Get returns a connection to node id, dialled to its registered address
// with the peer's certificate pinned to node:<id>.
func (p *Pool) Get(ctx context.Context, id string) (*grpc.ClientConn, error) {
	role := pki.Role{Kind: pki.RoleNode, Name: id}
	if err := role.Validate(); err != nil {
		return nil, &zerr.InvalidArgumentError{Field: "peer node id", Reason: err.Error()}
	}
	addr, err := p.cfg.Resolve(ctx, id)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, &zerr.UnavailableError{What: "node " + id, Reason: "registered without an address"}
	}
	var toClose []*grpc.ClientConn
	defer func() {
		for _, c := range toClose {
			_ = c.Close()
		}
	}()
	p.mu.Lock()
	if p.close {
		p.mu.Unlock()
		return nil, &zerr.ClosedError{What: "peer pool"}
	}
	if el, ok := p.byID[id]; ok {
		e := el.Value.(*entry)
		if e.addr == addr {
			p.ll.MoveToFront(el)
			p.mu.Unlock()
			return e.cc, nil
		}
		// The node moved: drop the old connection.
		p.ll.Remove(el)
		delete(p.byID, id)
		toClose = append(toClose, e.cc)
	}
	p.mu.Unlock()

	cc, err := p.dial(id, addr)
	if err != nil {
		return nil, err
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.close {
		toClose = append(toClose, cc)
		return nil, &zerr.ClosedError{What: "peer pool"}
	}
	if el, ok := p.byID[id]; ok && el.Value.(*entry).addr == addr {
		// Another caller won the race; use its connection.
		toClose = append(toClose, cc)
		p.ll.MoveToFront(el)
		return el.Value.(*entry).cc, nil
	} else if ok {
		p.ll.Remove(el)
		delete(p.byID, id)
		toClose = append(toClose, el.Value.(*entry).cc)
	}
	for p.ll.Len() >= p.cfg.Max {
		old := p.ll.Back()
		p.ll.Remove(old)
		oe := old.Value.(*entry)
		delete(p.byID, oe.id)
		toClose = append(toClose, oe.cc)
	}
	p.byID[id] = p.ll.PushFront(&entry{id: id, addr: addr, cc: cc})
	return cc, nil
}

func (p *Pool) dial(id, addr string) (*grpc.ClientConn, error) {
	opts := append([]grpc.DialOption{}, p.cfg.Options...)
	opts = append(opts, wire.TransportDialOptions(!p.cfg.Insecure)...)
	if p.cfg.Insecure {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		want := pki.Role{Kind: pki.RoleNode, Name: id}
		conf := pki.ClientConfig(pki.ClientOptions{Roots: p.cfg.Roots, Cert: p.cfg.Cert, WantRole: &want})
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, &zerr.UnavailableError{What: fmt.Sprintf("node %s at %s", id, addr), Reason: err.Error()}
	}
	return cc, nil
}

// Len is the number of connections held.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ll.Len()
}

// Close closes every connection; later Gets fail.
func (p *Pool) Close() {
	p.mu.Lock()
	p.close = true
	var all []*grpc.ClientConn
	for el := p.ll.Front(); el != nil; el = el.Next() {
		all = append(all, el.Value.(*entry).cc)
	}
	p.ll.Init()
	clear(p.byID)
	p.mu.Unlock()
	for _, c := range all {
		_ = c.Close()
	}
}
