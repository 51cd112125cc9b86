package client

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
)

// PeerWrite grants of the compactions this client asks for. A compaction
// that copies to another node makes the source node PeerWrite into the
// destination zones; the destination accepts that only with a grant the
// arbiter signed for the source node and those zones (auth.CheckPeerWrite).
// The client asks the arbiter for one (IssueToken with peer_write), sends
// it with ZoneCompaction, and reuses it for later compactions from the same
// node into zones it covers, for a third of its lifetime (measured here, so
// no clock is compared with the arbiter's). Plaintext clusters check no
// grants: none is asked for.

// grantReuse is how long a grant is reused after it was obtained.
const grantReuse = auth.PeerGrantTTL / 3

type peerGrant struct {
	token string
	zones []string
	got   time.Time
}

type peerGrants struct {
	mu sync.Mutex
	by map[string]peerGrant // by source node; one per node this client compacts from
}

// peerWriteGrant is the grant for src to PeerWrite into zones (at most
// auth.MaxGrantZones), "" when the cluster checks none.
func (c *Client) peerWriteGrant(ctx context.Context, src string, zones []string) (string, error) {
	if c.cfg.TLS == nil || len(zones) == 0 {
		return "", nil
	}
	c.grants.mu.Lock()
	g, ok := c.grants.by[src]
	c.grants.mu.Unlock()
	if ok && time.Since(g.got) < grantReuse && !slices.ContainsFunc(zones, func(z string) bool { return !slices.Contains(g.zones, z) }) {
		return g.token, nil
	}
	resp, err := arbiterCall(ctx, c, "peer write grant", func(ctx context.Context, a v1.ArbiterClient) (*v1.IssueTokenResponse, error) {
		return a.IssueToken(ctx, &v1.IssueTokenRequest{Namespace: c.cfg.Namespace, PeerWrite: &v1.PeerWriteScope{SourceNode: src, Zones: zones}})
	})
	if err != nil {
		return "", err
	}
	c.grants.mu.Lock()
	if c.grants.by == nil {
		c.grants.by = map[string]peerGrant{}
	}
	c.grants.by[src] = peerGrant{token: resp.GetToken(), zones: slices.Clone(zones), got: time.Now()}
	c.grants.mu.Unlock()
	return resp.GetToken(), nil
}
