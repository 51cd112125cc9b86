//go:build overload

package localcluster

// The overload drill: a `zctl local up` cluster (TLS, every call over TCP)
// under the attacks the server limits answer, each measured against a
// victim tenant's read rate in the same run. It reports figures; it
// asserts only that the process survives and the victim is served.
//
//	go test -tags overload -run TestOverloadDrill -v -timeout 30m ./pkg/localcluster
//
// The idle-connection flood runs in child processes (this test binary
// again, TestOverloadFloodChild): each connection is a file descriptor on
// both ends, and one process cannot hold 20,000 of each.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

const drillWindow = 5 * time.Second

// victimRateWorst is the victim's 64 KiB reads per second over the window
// and its slowest read.
func victimRateWorst(t *testing.T, vz *client.VZone, blocks uint64) (float64, time.Duration) {
	t.Helper()
	ctx := context.Background()
	n := 0
	var worst time.Duration
	start := time.Now()
	for time.Since(start) < drillWindow {
		off := rand.Uint64N(blocks-16) / 16 * 16
		t0 := time.Now()
		_, err := vz.Read(ctx, off, 16)
		require.NoError(t, err, "the victim is served")
		worst = max(worst, time.Since(t0))
		n++
	}
	return float64(n) / time.Since(start).Seconds(), worst
}

var children []func()

func stopChildren(t *testing.T) {
	for _, stop := range children {
		stop()
	}
	children = nil
}

func rssMiB() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

func TestOverloadDrill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cl, err := Start(ctx, Config{Dir: t.TempDir(), Nodes: 3, TCPOnly: true, Device: LocalDevice()})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	for _, ns := range []string{"victim", "attacker"} {
		_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: 4, ZonesPerVzone: 1})
		require.NoError(t, err)
	}
	victim, err := client.New(ctx, cl.ClientConfig("victim"))
	require.NoError(t, err)
	defer victim.Close()
	vz, err := victim.OpenVZone(ctx)
	require.NoError(t, err)
	const blocks = 256 // 1 MiB
	require.NoError(t, vz.Write(ctx, 0, bytes.Repeat([]byte("v"), blocks*4096)))
	node := cl.Info().Nodes[0].GRPC

	base, worst := victimRateWorst(t, vz, blocks)
	t.Logf("victim unloaded: %.0f reads/s (64 KiB), slowest read %v, RSS %.0f MiB", base, worst, rssMiB())

	// 1. 20,000 idle connections: 10,000 TLS+HTTP/2 to a node, 10,000 TCP
	// to etcd's client port.
	held := floodChildren(t, map[string]string{"tls": node, "tcp": strings.TrimPrefix(cl.Info().Etcd[0], "https://")}, 10000)
	r, worst := victimRateWorst(t, vz, blocks)
	_, err = admin.ClusterStatus(ctx)
	require.NoError(t, err, "the cluster is up")
	t.Logf("20,000 idle connections (%s): victim %.0f reads/s = %.0f %% of unloaded, slowest read %v, RSS %.0f MiB", held(), r, 100*r/base, worst, rssMiB())
	stopChildren(t)

	// 2. 32 connections sending 15 MiB header blocks, again and again (a
	// child process: the attacker's CPU and memory are not the cluster's).
	held = floodChildren(t, map[string]string{"headers": node}, 32)
	r, worst = victimRateWorst(t, vz, blocks)
	t.Logf("32 × 15 MiB header blocks (%s): victim %.0f reads/s = %.0f %% of unloaded, slowest read %v, RSS %.0f MiB", held(), r, 100*r/base, worst, rssMiB())
	stopChildren(t)

	// 3. 1,000 WriteStreams of one tenant that send 1020 KiB and go silent.
	conn, err := grpc.NewClient(node, append(rpcerr.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cl.ClientTLS())),
		grpc.WithPerRPCCredentials(auth.PerRPC(cl.TokenSource("attacker"), false)),
		grpc.WithDefaultCallOptions(append(wire.CallOptions(), wire.CallSizeOptions()...)...))...)
	require.NoError(t, err)
	defer conn.Close()
	sctx, scancel := context.WithCancel(ctx)
	payload := make([]byte, 255*4096)
	var ended atomic.Int64
	var firstErr atomic.Value
	opened := 0
	rss0 := rssMiB()
	for range 1000 {
		ws, err := v1.NewZonedDeviceClient(conn).WriteStream(sctx)
		if err == nil {
			err = ws.Send(&v1.WriteRequest{Lba: 0, Data: payload})
		}
		if err != nil {
			firstErr.CompareAndSwap(nil, err.Error())
			ended.Add(1)
			continue
		}
		opened++
		go func() { // learns of a refusal
			if err := ws.RecvMsg(new(v1.WriteResponse)); err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
			}
			ended.Add(1)
		}()
	}
	time.Sleep(2 * time.Second) // let the node take what it takes (a drill, not a test: figures only)
	r, worst = victimRateWorst(t, vz, blocks)
	t.Logf("1,000 stalled WriteStreams of one tenant (%d sent, %d ended by the node, first error %v): victim %.0f reads/s = %.0f %% of unloaded, slowest read %v, RSS %.0f -> %.0f MiB",
		opened, ended.Load(), firstErr.Load(), r, 100*r/base, worst, rss0, rssMiB())
	scancel()
	_, err = admin.ClusterStatus(ctx)
	require.NoError(t, err)
}

// floodChildren starts one child per target (kind → address) holding n
// connections each; it returns a summary of what they hold. The children
// end with the test.
func floodChildren(t *testing.T, targets map[string]string, n int) func() string {
	var lines []string
	for kind, addr := range targets {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOverloadFloodChild$", "-test.v")
		cmd.Env = append(os.Environ(), "ZF_FLOOD_KIND="+kind, "ZF_FLOOD_ADDR="+addr, "ZF_FLOOD_N="+strconv.Itoa(n))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		stop := func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }
		children = append(children, stop)
		t.Cleanup(stop)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "FLOOD "); ok {
				lines = append(lines, kind+" "+addr+": "+l)
				break
			}
		}
		go func() { _, _ = io.Copy(io.Discard, out) }()
	}
	return func() string { return strings.Join(lines, "; ") }
}

// TestOverloadFloodChild is the flood's child process (see floodChildren).
func TestOverloadFloodChild(t *testing.T) {
	kind, addr := os.Getenv("ZF_FLOOD_KIND"), os.Getenv("ZF_FLOOD_ADDR")
	if kind == "" {
		t.Skip("runs as a child of TestOverloadDrill")
	}
	n, _ := strconv.Atoi(os.Getenv("ZF_FLOOD_N"))
	if kind == "headers" {
		stop := make(chan struct{})
		var sent, conns atomic.Int64
		for range n {
			go headerFlood(addr, &tls.Config{InsecureSkipVerify: true}, stop, &sent, &conns) // an attacker verifies nothing
		}
		fmt.Printf("FLOOD %d senders started\n", n)
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
		return
	}
	var conns []net.Conn
	failed := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil && kind == "tls" {
				tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) // an attacker verifies nothing
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				if err = tc.Handshake(); err == nil {
					_, err = io.WriteString(tc, http2.ClientPreface)
				}
				if err == nil {
					err = http2.NewFramer(tc, tc).WriteSettings()
				}
				_ = tc.SetDeadline(time.Time{})
				c = tc
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if c != nil {
					_ = c.Close()
				}
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	// Count those still open (the server closes those past its limits).
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			open++
		}
	}
	fmt.Printf("FLOOD opened %d, failed %d, still open %d\n", len(conns), failed, open)
	_, _ = io.Copy(io.Discard, os.Stdin) // hold them until the parent ends
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// headerFlood sends 15 MiB header blocks on new TLS connections to addr
// until stop closes.
func headerFlood(addr string, base *tls.Config, stop <-chan struct{}, sent, conns *atomic.Int64) {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", "/zonefleet.v1.ZonedDevice/Read"},
		{":authority", "n"}, {"content-type", "application/grpc"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := 0; block.Len() < 15<<20; i++ {
		_ = enc.WriteField(hpack.HeaderField{Name: "x-pad", Value: fmt.Sprintf("%08d", i) + strings.Repeat("a", 8184), Sensitive: true})
	}
	b := block.Bytes()
	for {
		select {
		case <-stop:
			return
		default:
		}
		tc := base.Clone()
		tc.NextProtos = []string{"h2"}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		conns.Add(1)
		go func() { _, _ = io.Copy(io.Discard, c) }()
		_, _ = io.WriteString(c, http2.ClientPreface)
		fr := http2.NewFramer(c, c)
		_ = fr.WriteSettings()
		for id := uint32(1); ; id += 2 {
			rest := b
			first := rest[:16<<10]
			rest = rest[len(first):]
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true}) != nil {
				break
			}
			ok := true
			for len(rest) > 0 && ok {
				k := min(16<<10, len(rest))
				ok = fr.WriteContinuation(id, k == len(rest), rest[:k]) == nil
				rest = rest[k:]
			}
			if !ok {
				break
			}
			sent.Add(1)
			select {
			case <-stop:
				_ = c.Close()
				return
			default:
			}
		}
		_ = c.Close()
	}
}
