package etcdlocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestAutoCompaction: the embedded server compacts its history by itself,
// and not when auto-compaction is disabled. The two servers run side by
// side under the same writes: the disabled one is checked at the point the
// periodic one has compacted (etcd's compactor is wall-time driven and
// offers no event for "would have compacted by now").
func TestAutoCompaction(t *testing.T) {
	type server struct {
		srv     *Server
		cli     *clientv3.Client
		first   int64
		written int64
	}
	ctx := context.Background()
	start := func(retention time.Duration) *server {
		srv, err := StartWith(t.TempDir(), "", Options{AutoCompactionRetention: retention})
		require.NoError(t, err)
		t.Cleanup(func() { srv.Close() })
		cli, err := srv.Client()
		require.NoError(t, err)
		t.Cleanup(func() { cli.Close() })
		first, err := cli.Put(ctx, "/k", "0")
		require.NoError(t, err)
		return &server{srv: srv, cli: cli, first: first.Header.Revision}
	}
	// compacted writes a new revision and reports whether the first one
	// is compacted away
	compacted := func(s *server) (bool, error) {
		if _, err := s.cli.Put(ctx, "/k", fmt.Sprint(time.Now().UnixNano())); err != nil {
			return false, err
		}
		s.written++
		_, err := s.cli.Get(ctx, "/k", clientv3.WithRev(s.first))
		if err != nil && err.Error() == rpctypes.ErrCompacted.Error() {
			return true, nil
		}
		return false, err
	}
	periodic, disabled := start(time.Second), start(-1)
	require.Eventually(t, func() bool {
		ok, err := compacted(periodic)
		if err != nil {
			return false
		}
		_, _ = compacted(disabled) // the same history on the other server
		return ok
	}, 30*time.Second, 100*time.Millisecond, "the periodic server compacts")
	require.Positive(t, periodic.srv.DBSize())
	ok, err := compacted(disabled)
	require.NoError(t, err)
	assert.False(t, ok, "the server with auto-compaction disabled keeps its history (%d writes)", disabled.written)
}

func TestPicksPortAndAddrInUse(t *testing.T) {
	for addr, want := range map[string]bool{"": true, "127.0.0.1:0": true, "127.0.0.1:2379": false, "bad": false} {
		assert.Equal(t, want, picksPort(addr), addr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	require.Error(t, err)
	assert.True(t, addrInUse(err), "a real bind failure: %v", err)
	assert.False(t, addrInUse(errors.New("permission denied")))
	// a taken port given explicitly is not retried: the error comes back
	_, err = Start(t.TempDir(), l.Addr().String())
	require.Error(t, err)
	assert.True(t, addrInUse(err), "%v", err)
}

// etcd's records reach the process's slog logger from warn level on, with
// their fields.
func TestZapLogsToSlog(t *testing.T) {
	var buf bytes.Buffer
	lg := newZapLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), zapcore.WarnLevel, nil)
	lg.Info("routine")
	lg.With(zap.String("member", "m1")).Warn("disk slow", zap.Int("took_ms", 1500))
	lg.Error("cannot create WAL segment", zap.Error(errors.New("too many open files")))
	out := buf.String()
	assert.NotContains(t, out, "routine", "below warn is dropped")
	assert.Contains(t, out, `level=WARN msg="disk slow" etcd.member=m1 etcd.took_ms=1500`)
	assert.Contains(t, out, `level=ERROR msg="cannot create WAL segment" etcd.error="too many open files"`)
}

// A flood of connections to etcd's client port is held to MaxClientConns
// accepted connections (the rest wait in the kernel's queue, costing the
// process no file descriptor); the clients already connected are served,
// and the soft file limit is back at the hard limit after the start.
func TestClientConnectionLimit(t *testing.T) {
	srv, err := StartWith(t.TempDir(), "", Options{MaxClientConns: 8})
	require.NoError(t, err)
	defer srv.Close()
	var r syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r))
	assert.Equal(t, r.Max, r.Cur)
	limit := srv.ClientConnLimit()
	require.Positive(t, limit)
	require.Less(t, limit, int(r.Max)/4, "the limit etcd took is far below the process's")

	cli, err := srv.Client()
	require.NoError(t, err)
	defer cli.Close()
	ctx := context.Background()
	_, err = cli.Put(ctx, "/k", "before")
	require.NoError(t, err)

	flood := limit + 64
	before := openFDs()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", srv.Endpoints()[0])
		require.NoError(t, err)
		conns = append(conns, c)
	}
	// The flood's own descriptors plus those etcd accepted (up to its
	// limit, less the client's connection).
	require.Eventually(t, func() bool { return openFDs() >= before+flood+limit-1 }, 30*time.Second, 5*time.Millisecond)
	_, err = cli.Put(ctx, "/k", "during")
	require.NoError(t, err, "the connected client is served")
	assert.LessOrEqual(t, openFDs(), before+flood+limit+4, "etcd accepted past its limit")
}

// A message etcd repeats (once per rejected connection in a flood) is
// logged once a second with the count of those dropped.
func TestZapLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	lg := newZapLogger(slog.New(slog.NewTextHandler(&buf, nil)), zapcore.WarnLevel, nil)
	for range 1000 {
		lg.Warn("rejected connection on client endpoint")
	}
	lg.Warn("another")
	assert.Equal(t, 1, bytes.Count(buf.Bytes(), []byte("rejected connection")), buf.String())
	assert.Contains(t, buf.String(), "another")
}

// The single member takes no peer connections: its peer address (kept in
// its data) has no listener, so no flood can reach etcd's peer side.
func TestNoPeerListener(t *testing.T) {
	peer := "127.0.0.1:0"
	l, err := net.Listen("tcp", peer)
	require.NoError(t, err)
	peer = l.Addr().String()
	require.NoError(t, l.Close())
	dir := t.TempDir()
	srv, err := StartWith(dir, "", Options{PeerAddr: peer})
	require.NoError(t, err)
	cli, err := srv.Client()
	require.NoError(t, err)
	_, err = cli.Put(context.Background(), "/k", "v")
	require.NoError(t, err)
	_ = cli.Close()
	_, err = net.Dial("tcp", peer)
	assert.Error(t, err, "nothing listens on the peer address")
	srv.Close()

	// A restart over the same data keeps the member's peer URL.
	srv, err = StartWith(dir, "", Options{PeerAddr: peer})
	require.NoError(t, err)
	defer srv.Close()
	cli, err = srv.Client()
	require.NoError(t, err)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), "/k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	m, err := cli.MemberList(context.Background())
	require.NoError(t, err)
	require.Len(t, m.Members, 1)
	assert.Equal(t, []string{"http://" + peer}, m.Members[0].PeerURLs)
}
