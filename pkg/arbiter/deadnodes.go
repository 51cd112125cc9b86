package arbiter

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// nodeZones counts the zones allocated on each node.
func nodeZones(ix *index) map[string]int {
	out := map[string]int{}
	for z := range ix.owner {
		out[z.Node]++
	}
	return out
}

// CheckNodes marks every node whose registration has been gone for at least
// Config.NodeDownAfter (by Config.Now) as down, and removes the shadow record
// of every down node that holds no allocated zone (its zones were reset or
// its namespaces deleted). A node that registers again later joins afresh.
// The leader runs it every NodeDownAfter/4 (real time); tests call it directly.
func (a *Arbiter) CheckNodes(ctx context.Context) error {
	if a.cfg.NodeDownAfter < 0 {
		return nil
	}
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return err
	}
	now := a.cfg.Now()
	due := func(n *nodeState) bool {
		return !n.Available && !n.LostAt.IsZero() && now.Sub(n.LostAt) >= a.cfg.NodeDownAfter
	}
	found := false
	for _, n := range st.Nodes {
		found = found || due(n)
	}
	if !found {
		return nil
	}
	return a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		held := nodeZones(ix)
		fdpHeld := fdpGrantsByNode(st)
		for _, id := range sortedKeys(st.Nodes) {
			n := st.Nodes[id]
			if !due(n) {
				continue
			}
			if held[id] == 0 && len(fdpHeld[id]) == 0 {
				st.delNode(id)
				a.log.Info("removed a dead node without data", "node", id, "lost_at", n.LostAt)
				continue
			}
			if !n.Down {
				c := *n
				c.Down = true
				st.putNode(id, &c)
				a.log.Warn("node down: its lease is gone for too long; its records stay while it holds data", "node", id, "zones", held[id], "fdp_namespaces", len(fdpHeld[id]))
			}
		}
		return nil, nil
	})
}

// RemoveNode forgets a node for an operator: the node must not be registered
// (no live lease) and must hold no allocated zone (reset or delete what it
// holds first). A registered node is *zerr.InvalidArgumentError, a node that
// holds zones *zerr.ZoneStateError (one of its zones; FAILED_PRECONDITION on
// the wire), an unknown node *zerr.NotFoundError; a refusal changes nothing.
func (a *Arbiter) RemoveNode(ctx context.Context, id string) error {
	if err := validName("node id", id); err != nil {
		return err
	}
	var refused error
	err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		refused = nil
		n := st.Nodes[id]
		if n == nil {
			return nil, &zerr.NotFoundError{Kind: "node", Name: id}
		}
		if n.Available {
			return nil, &zerr.InvalidArgumentError{Field: "node", Reason: "node " + id + " is registered (stop it first)"}
		}
		if names := fdpGrantsByNode(st)[id]; len(names) > 0 {
			// Its FDP drives hold the namespaces' data: refused like zones,
			// the namespaces are deleted first.
			return nil, &zerr.ZoneStateError{Zone: uint64(st.Namespaces[names[0]].FDP.Device), State: "granted",
				Op: fmt.Sprintf("remove node %s (FDP capacity of its drives is granted to fdp namespaces %s: delete them, then remove it again)", id, strings.Join(names, ", "))}
		}
		if held := nodeZones(ix)[id]; held > 0 {
			// Declared lost by the operator: it is down at once, so the
			// copies it holds of mirrored legs are rebuilt elsewhere
			// (rebuild.go) without waiting for NodeDownAfter.
			if !n.Down {
				c := *n
				c.Down = true
				st.putNode(id, &c)
				a.log.Warn("node declared lost by an operator: marked down; copies of mirrored legs are rebuilt elsewhere", "node", id, "zones", held)
			}
			// A conflict with the node's zones, not a bad argument: the same
			// kind as deleting a namespace with open v-zones.
			first := uint64(0)
			found := false
			for z := range ix.owner {
				if z.Node == id && (!found || uint64(z.Zone) < first) {
					first, found = uint64(z.Zone), true
				}
			}
			refused = &zerr.ZoneStateError{Zone: first, State: "allocated",
				Op: fmt.Sprintf("remove node %s (it holds %d allocated zones: it is marked down and copies of mirrored legs and legs of raid5 groups are rebuilt on other nodes, see zctl cluster status; reset or delete the other v-zones, then remove it again)", id, held)}
			return nil, nil
		}
		st.delNode(id)
		a.log.Info("node removed by an operator", "node", id)
		return nil, nil
	})
	if err != nil {
		return err
	}
	if refused != nil {
		a.kickRebuild()
	}
	return refused
}

// kickRebuild runs a rebuild check now (after an operator declared a node
// lost), in the background on the leader's term context.
func (a *Arbiter) kickRebuild() {
	a.mu.RLock()
	t := a.term
	a.mu.RUnlock()
	if t == nil || t.session == nil {
		return
	}
	a.triggerRebuild(t.session.Ctx())
}
