package arbiter

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// NewInMemory returns an arbiter that leads an in-memory state from the
// start: no etcd, no election, no background work (node watch, reclaim
// ticker, compaction). Every operation runs the same code as on a leader —
// mutations on a fork of the state, the allocation policy (local and global
// overdrive, recalls), CheckReclaim with comp — and "commits" by publishing
// the fork instead of writing it to etcd. Grants are not stored anywhere.
//
// It exists for deterministic experiments (zctl bench paper, Fig. 27–28): the
// caller drives it from one goroutine at a time and sets Config.Now to its
// simulated clock; with the same calls in the same order it makes the same
// decisions. nodes are registered as with a leader's first node sync. It is
// not a replica: nothing persists and nothing else can read its state.
func NewInMemory(cfg Config, nodes []cluster.NodeRecord, comp Compactor) (*Arbiter, error) {
	if cfg.Addr == "" {
		cfg.Addr = "in-memory"
	}
	cfg.ReclaimInterval, cfg.CompactInterval, cfg.NodeDownAfter = -1, -1, -1
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(nil)
	if err != nil {
		return nil, err
	}
	up := map[string]cluster.NodeRecord{}
	for _, n := range nodes {
		if err := n.Validate(); err != nil {
			return nil, err
		}
		if _, dup := up[n.ID]; dup {
			return nil, &zerr.InvalidArgumentError{Field: "nodes", Reason: fmt.Sprintf("node %q listed twice", n.ID)}
		}
		up[n.ID] = n
	}
	a := &Arbiter{cfg: cfg, comp: comp, log: cfg.Logger.With("arbiter", cfg.Addr), m: m, lastWrite: map[string]time.Time{}}
	st := newState()
	a.term = &term{state: st, ix: buildIndex(st), revs: map[string]int64{}}
	if err := a.syncNodes(context.Background(), maps.Clone(up), nil, false); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.term.ready = true
	a.mu.Unlock()
	return a, nil
}

// inMemory: the term commits to memory only (NewInMemory).
func (t *term) inMemory() bool { return t.election == nil }
