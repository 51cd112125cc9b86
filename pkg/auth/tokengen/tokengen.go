// Package tokengen keeps the per-namespace token generations that revoke
// namespace tokens. A namespace token carries the generation
// current when it was issued (claim "gen"); the arbiter's RevokeTokens
// (`zctl token revoke NS`) bumps the namespace's generation in etcd at
// Key(ns), and every verifier refuses tokens of an older generation as
// UNAUTHENTICATED (auth.ErrTokenRevoked) as soon as its watch delivers the
// new value. A namespace without a key is at generation 0.
//
// Incarnations: deleting a namespace raises its generation in the same
// transaction (arbiter DeleteNamespace), and the record outlives the
// namespace, so a namespace created again under the same name starts above
// every token of the previous one: none of them is accepted, by nodes,
// arbiters or IssueToken (no renewal). The records of deleted namespaces
// stay (one small key per name the operator ever used).
//
// Table is the verifier's side: an in-memory map (one entry per namespace
// key in etcd, which only the arbiter writes on an admin's request, so it is
// bounded by the operator, not by callers) kept current by Follow: one
// consistent Get, then a watch from the next revision; after a watch break
// (etcd leader change, compaction) it loads the whole prefix again before
// applying more events. Revoked is lock-free on the data path (an atomic
// pointer to an immutable map, replaced on every change).
//
// Failure behaviour: before Follow has loaded, Revoked accepts every
// generation (a standalone node without etcd has nothing to follow); Follow
// returns only after the first load, and servers call it before serving. If
// etcd becomes unreachable the last known table stays in force: a
// revocation issued during the outage takes effect when the watch is back,
// bounded by the token lifetime (15 minutes by default).
//
// Only arbiters write generations: etcd's role-based access control
// (package etcdrbac) gives nodes read access to this prefix only, so a
// stolen node certificate cannot lower a generation (un-revoke).
package tokengen

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Prefix holds one Record per namespace whose tokens were ever revoked.
func Prefix() string { return cluster.Prefix + "tokengen/" }

// Key is the key of namespace ns's record.
func Key(ns string) string { return Prefix() + ns }

// Record is the stored value (JSON, versioned).
type Record struct {
	Version    int    `json:"version"`
	Generation uint64 `json:"generation"`
}

// RecordVersion is the current Record format.
const RecordVersion = 1

// Encode marshals a record of generation gen.
func Encode(gen uint64) []byte {
	b, _ := json.Marshal(Record{Version: RecordVersion, Generation: gen})
	return b
}

// Decode parses a stored record.
func Decode(key string, val []byte) (uint64, error) {
	var r Record
	if err := json.Unmarshal(val, &r); err != nil {
		return 0, &zerr.CorruptError{Path: key, Reason: "token generation: " + err.Error()}
	}
	if r.Version != RecordVersion {
		return 0, &zerr.CorruptError{Path: key, Reason: fmt.Sprintf("token generation record version %d, this build reads %d", r.Version, RecordVersion)}
	}
	return r.Generation, nil
}

// Current reads ns's generation with a linearizable read, and the key's mod
// revision (0: no key) for a compare-and-swap.
func Current(ctx context.Context, cli *clientv3.Client, ns string) (gen uint64, modRev int64, err error) {
	resp, err := cli.Get(ctx, Key(ns))
	if err != nil {
		return 0, 0, &zerr.UnavailableError{What: "etcd", Reason: "token generation: " + err.Error()}
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	gen, err = Decode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	return gen, resp.Kvs[0].ModRevision, err
}

// Bump raises ns's generation by one (compare-and-swap, retried on a
// concurrent bump) and returns the new generation: every token issued
// before is refused once verifiers see it.
func Bump(ctx context.Context, cli *clientv3.Client, ns string) (uint64, error) {
	for try := 0; try < 16; try++ {
		gen, rev, err := Current(ctx, cli, ns)
		if err != nil {
			return 0, err
		}
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(Key(ns)), "=", rev)).
			Then(clientv3.OpPut(Key(ns), string(Encode(gen+1)))).Commit()
		if err != nil {
			return 0, &zerr.UnavailableError{What: "etcd", Reason: "token generation: " + err.Error()}
		}
		if r.Succeeded {
			return gen + 1, nil
		}
	}
	return 0, &zerr.UnavailableError{What: "etcd", Reason: "token generation of " + ns + " keeps changing; retry"}
}

// Table is a verifier's view of every namespace's generation.
type Table struct {
	m      atomic.Pointer[map[string]uint64]
	loaded atomic.Bool
}

// New returns an empty table (every generation accepted until Follow loads).
func New() *Table {
	t := &Table{}
	t.m.Store(&map[string]uint64{})
	return t
}

// Generation is ns's current generation as far as the table knows.
func (t *Table) Generation(ns string) uint64 { return (*t.m.Load())[ns] }

// Revoked is auth.Config.Revoked: an error for a token of namespace ns and
// generation gen older than the namespace's current generation.
func (t *Table) Revoked(ns string, gen uint64) error {
	if cur := t.Generation(ns); gen < cur {
		return fmt.Errorf("namespace %q tokens before generation %d were revoked (this token: generation %d)", ns, cur, gen)
	}
	return nil
}

func (t *Table) set(ns string, gen uint64, del bool) {
	old := *t.m.Load()
	m := make(map[string]uint64, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if del {
		delete(m, ns)
	} else {
		m[ns] = gen
	}
	t.m.Store(&m)
}

func (t *Table) load(ctx context.Context, cli *clientv3.Client, log *slog.Logger) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(lctx, Prefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, &zerr.UnavailableError{What: "etcd", Reason: "load token generations: " + err.Error()}
	}
	m := make(map[string]uint64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		gen, err := Decode(string(kv.Key), kv.Value)
		if err != nil {
			log.Warn("ignoring malformed token generation", "key", string(kv.Key), "err", err)
			continue
		}
		m[strings.TrimPrefix(string(kv.Key), Prefix())] = gen
	}
	t.m.Store(&m)
	t.loaded.Store(true)
	return resp.Header.Revision, nil
}

// Loaded reports whether Follow has loaded the table.
func (t *Table) Loaded() bool { return t.loaded.Load() }

// Follow loads the table and keeps it current until ctx ends. It returns
// after the first load (or its error).
func (t *Table) Follow(ctx context.Context, cli *clientv3.Client, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	rev, err := t.load(ctx, cli, log)
	if err != nil {
		return err
	}
	go func() {
		for ctx.Err() == nil {
			for wr := range cli.Watch(clientv3.WithRequireLeader(ctx), Prefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				if wr.Err() != nil {
					log.Warn("token generation watch interrupted", "err", wr.Err())
					break
				}
				for _, ev := range wr.Events {
					ns := strings.TrimPrefix(string(ev.Kv.Key), Prefix())
					if ev.Type == clientv3.EventTypeDelete {
						t.set(ns, 0, true)
						continue
					}
					if gen, err := Decode(string(ev.Kv.Key), ev.Kv.Value); err == nil {
						t.set(ns, gen, false)
					}
				}
				rev = wr.Header.Revision
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			if r, err := t.load(ctx, cli, log); err == nil {
				rev = r
			}
		}
	}()
	return nil
}
