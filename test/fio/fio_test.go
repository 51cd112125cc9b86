//go:build fio

// Package fio runs the fio job files of bench/fio/jobs through the ZoneFleet
// engine against `zctl local up` clusters of three nodes: real fio, the
// engine fio loads, real gRPC to real node processes. `make test-fio`
// builds the binaries and the engine and runs it; it needs fio on PATH,
// $ZONEFLEET_BIN_DIR (zctl) and $ZONEFLEET_FIO_ENGINE (the engine).
//
// The drive cluster's zones hold 3 MiB of their 4 MiB (--zone-capacity),
// so every zoned job also checks that fio keeps writes within a zone's
// capacity as the engine reports it.
package fio

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var binDir, engine, jobs string

func TestMain(m *testing.M) {
	binDir, engine = os.Getenv("ZONEFLEET_BIN_DIR"), os.Getenv("ZONEFLEET_FIO_ENGINE")
	if binDir == "" || engine == "" {
		fmt.Fprintln(os.Stderr, "test/fio: set ZONEFLEET_BIN_DIR (zctl) and ZONEFLEET_FIO_ENGINE (the engine's .so): make test-fio does")
		os.Exit(1)
	}
	if _, err := exec.LookPath("fio"); err != nil {
		fmt.Fprintln(os.Stderr, "test/fio: fio is not installed (apt-get install fio)")
		os.Exit(1)
	}
	abs, err := filepath.Abs("../../bench/fio/jobs")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	jobs = abs
	os.Exit(m.Run())
}

// cluster is a running `zctl local up`; env makes zctl and the engine find it.
type cluster struct {
	dir string
	env []string
}

// localUp starts a three-node local cluster with args and waits for its
// "Ready." line; the test's cleanup stops it with Ctrl-C.
func localUp(t testing.TB, args ...string) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{dir: dir, env: []string{"ZONEFLEET_CLUSTER=" + filepath.Join(dir, "data", "cluster.json"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "ZF_ENGINE=" + engine}}
	cmd := exec.Command(filepath.Join(binDir, "zctl"), append([]string{"local", "up", "--data", filepath.Join(dir, "data"), "--nodes", "3", "--clock", "off"}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	ready, done := make(chan struct{}), make(chan error, 1)
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Ready.") {
				close(ready)
			}
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("zctl local up exited: %v\n%s", err, logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("zctl local up not ready after 2 minutes:\n%s", logs.String())
	}
	return c
}

func (c *cluster) zctl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "zctl"), args...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "zctl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// result is what a fio run tells: its exit status, its JSON report, the
// zone resets of its normal report and its stderr.
type result struct {
	code   int
	report report
	resets []int // per job, in order
	normal string
	stderr string
}

type report struct {
	Jobs []struct {
		Name  string `json:"jobname"`
		Error int    `json:"error"`
		Read  ddir   `json:"read"`
		Write ddir   `json:"write"`
	} `json:"jobs"`
}

type ddir struct {
	IOBytes  int64   `json:"io_bytes"`
	TotalIOs int64   `json:"total_ios"`
	BW       float64 `json:"bw_bytes"`
	IOPS     float64 `json:"iops"`
	ClatNS   struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
	LatNS struct {
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	} `json:"lat_ns"`
}

var resetsRE = regexp.MustCompile(`; (\d+) zone resets`)

// fio runs a job file of bench/fio/jobs (or a job given as arguments) with
// env added.
func (c *cluster) fio(t testing.TB, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command("fio", append([]string{"--output-format=json,normal"}, args...)...)
	cmd.Env = append(append(os.Environ(), c.env...), env...)
	cmd.Dir = c.dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	r := result{stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	// JSON first (from a "{" line to a "}" line), then the normal report.
	text := string(out)
	begin, end := strings.Index(text, "\n{\n"), strings.Index(text, "\n}\n")
	if strings.HasPrefix(text, "{\n") {
		begin = -1
	}
	require.True(t, end > begin, "fio printed no JSON report:\n%s\nstderr:\n%s", text, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(text[begin+1:end+2]), &r.report), "fio's JSON:\n%s", text)
	r.normal = text[end+2:]
	for _, m := range resetsRE.FindAllStringSubmatch(r.normal, -1) {
		n, _ := strconv.Atoi(m[1])
		r.resets = append(r.resets, n)
	}
	if _, bench := t.(*testing.B); !bench {
		t.Logf("fio %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.normal, r.stderr)
	}
	return r
}

func job(name string) string { return filepath.Join(jobs, name) }

// clean asserts a run that succeeded: exit 0, no job error.
func clean(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, 0, r.code, "fio failed:\n%s\n%s", r.normal, r.stderr)
	for _, j := range r.report.Jobs {
		require.Zero(t, j.Error, "job %s", j.Name)
	}
}

const (
	mib      = 1 << 20
	zoneSize = 4 * mib // LocalDevice: 256 pages of 16 KiB
	zoneCap  = 3 * mib // --zone-capacity 768 blocks
)

func TestDriveJobs(t *testing.T) {
	c := localUp(t, "--zone-capacity", "768", "--default-namespace", "")
	node := []string{"ZF_NODE=node-1"}

	t.Run("sequential write and verify over 16 zones, then random reads", func(t *testing.T) {
		r := c.fio(t, node, job("drive-seq-verify.fio"))
		clean(t, r)
		require.Len(t, r.report.Jobs, 2)
		w, rr := r.report.Jobs[0], r.report.Jobs[1]
		// fio writes each zone up to its capacity (3 of its 4 MiB) and reads
		// every written block back for verify.
		assert.Equal(t, int64(16*zoneCap), w.Write.IOBytes, "16 zones × their capacity")
		assert.Equal(t, int64(16*zoneCap), w.Read.IOBytes, "verify read everything written")
		assert.Equal(t, int64(8*mib), rr.Read.IOBytes)
		assert.Zero(t, rr.Write.IOBytes)
	})

	t.Run("zbd across 64 zones with resets and max_open_zones", func(t *testing.T) {
		r := c.fio(t, node, job("drive-zbd-resets.fio"))
		clean(t, r)
		require.Len(t, r.report.Jobs, 1)
		assert.Equal(t, int64(320*mib), r.report.Jobs[0].Write.IOBytes)
		require.Len(t, r.resets, 1)
		// 320 MiB into 64 zones of 3 MiB (192 MiB): fio had to reset zones.
		assert.Greater(t, r.resets[0], 0, "zone resets")
	})

	t.Run("iodepth 32", func(t *testing.T) {
		r := c.fio(t, node, job("drive-qd32.fio"))
		clean(t, r)
		w := r.report.Jobs[0]
		assert.Equal(t, int64(16*zoneCap), w.Write.IOBytes)
		assert.Equal(t, int64(16*zoneCap), w.Read.IOBytes, "verified")
	})

	t.Run("zone append", func(t *testing.T) {
		r := c.fio(t, node, job("drive-zone-append.fio"))
		clean(t, r)
		w := r.report.Jobs[0]
		assert.Equal(t, int64(4*zoneCap), w.Write.IOBytes)
		assert.Equal(t, int64(4*zoneCap), w.Read.IOBytes, "verified")
	})

	t.Run("busy polling for completions", func(t *testing.T) {
		r := c.fio(t, node, "--name=poll", "--thread", "--ioengine=external:"+engine, "--filename=zf", "--node=node-1",
			"--busy_poll=1", "--zonemode=zbd", "--direct=1", "--offset=140z", "--size=2z", "--rw=write", "--bs=256k",
			"--iodepth=4", "--verify=crc32c")
		clean(t, r)
		assert.Equal(t, int64(2*zoneCap), r.report.Jobs[0].Read.IOBytes, "verified")
	})

	t.Run("synchronous I/O through the completion queue (inline=0)", func(t *testing.T) {
		r := c.fio(t, node, "--name=queued", "--thread", "--ioengine=external:"+engine, "--filename=zf", "--node=node-1",
			"--inline=0", "--zonemode=zbd", "--direct=1", "--offset=122z", "--size=2z", "--rw=write", "--bs=128k",
			"--iodepth=1", "--verify=crc32c")
		clean(t, r)
		assert.Equal(t, int64(2*zoneCap), r.report.Jobs[0].Read.IOBytes, "verified")
	})

	t.Run("batched submission", func(t *testing.T) {
		r := c.fio(t, node, "--name=batch", "--thread", "--ioengine=external:"+engine, "--filename=zf", "--node=node-1",
			"--zonemode=zbd", "--direct=1", "--offset=124z", "--size=2z", "--rw=randwrite", "--bs=64k", "--iodepth=16",
			"--iodepth_batch_submit=8", "--iodepth_batch_complete_min=4", "--verify=crc32c")
		clean(t, r)
		assert.Equal(t, int64(2*zoneCap), r.report.Jobs[0].Write.IOBytes)
		assert.Equal(t, int64(2*zoneCap), r.report.Jobs[0].Read.IOBytes, "verified")
	})

	t.Run("a write off the write pointer fails the job with EIO", func(t *testing.T) {
		r := c.fio(t, node, job("drive-wp-violation.fio"))
		assert.NotEqual(t, 0, r.code, "fio must fail")
		require.Len(t, r.report.Jobs, 1)
		assert.Equal(t, int(syscall.EIO), r.report.Jobs[0].Error)
		assert.Contains(t, r.stderr, "write pointer", "the engine tells the cause")
	})

	t.Run("a forked job is refused with a clear error", func(t *testing.T) {
		r := c.fio(t, node, "--name=forked", "--ioengine=external:"+engine, "--filename=zf", "--node=node-1",
			"--rw=read", "--bs=4k", "--size=1z", "--thread=0")
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stderr, "--thread")
	})

	t.Run("a job without a target is refused", func(t *testing.T) {
		r := c.fio(t, nil, "--name=none", "--thread", "--ioengine=external:"+engine, "--filename=zf", "--rw=read", "--bs=4k")
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stderr, "give a drive")
	})
}

func TestTenantJobs(t *testing.T) {
	c := localUp(t, "--zone-capacity", "768", "--default-namespace", "")
	for _, ns := range []string{"tenant-a", "tenant-b"} {
		c.zctl(t, "ns", "create", ns, "--vzones", "24", "--max-active-vzones", "4", "--zones-per-vzone", "2")
		c.zctl(t, "token", "issue", ns, "--ttl", "1h", "--file", filepath.Join(c.dir, ns+".token"))
	}
	tokens := []string{"ZF_TOKENS=" + c.dir}
	const vzone = 2 * zoneCap // a v-zone: two physical zones' capacity

	t.Run("zone-sized sequential writes per tenant, verified", func(t *testing.T) {
		r := c.fio(t, tokens, job("tenants-seq.fio"))
		clean(t, r)
		require.Len(t, r.report.Jobs, 2)
		for _, j := range r.report.Jobs {
			assert.Equal(t, int64(4*vzone), j.Write.IOBytes, j.Name)
			assert.Equal(t, int64(4*vzone), j.Read.IOBytes, "%s verified", j.Name)
		}
		// The v-zones fio filled are full (finished) at the arbiter.
		out := c.zctl(t, "-n", "tenant-a", "vzone", "list", "-o", "json")
		assert.Equal(t, 4, strings.Count(out, `"VZONE_STATE_FULL"`), out)
	})

	t.Run("random reads under writes", func(t *testing.T) {
		r := c.fio(t, tokens, job("tenants-read-under-write.fio"))
		clean(t, r)
		require.Len(t, r.report.Jobs, 3)
		assert.Equal(t, int64(4*vzone), r.report.Jobs[0].Write.IOBytes)
		assert.Equal(t, int64(4*vzone), r.report.Jobs[1].Write.IOBytes)
		assert.Equal(t, int64(8*mib), r.report.Jobs[2].Read.IOBytes)
	})

	t.Run("another tenant's token cannot reach the namespace", func(t *testing.T) {
		r := c.fio(t, nil, "--name=stranger", "--thread", "--ioengine=external:"+engine, "--filename=zf",
			"--namespace=tenant-a", "--token_file="+filepath.Join(c.dir, "tenant-b.token"),
			"--zonemode=zbd", "--direct=1", "--rw=read", "--bs=4k", "--size=1z")
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stderr, "permission denied")
	})
}
