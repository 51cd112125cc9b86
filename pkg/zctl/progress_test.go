package zctl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// trimPad drops the spaces a final line is padded with over a longer one.
func trimPad(s string) string { return regexp.MustCompile(` +\n`).ReplaceAllString(s, "\n") }

func TestRenderProgress(t *testing.T) {
	zones := Unit{Name: "v-zones"}
	for _, c := range []struct {
		name string
		s    progressState
		want string
	}{
		{"a bar with rate and ETA", progressState{Label: "mkfs a: resetting v-zones", Unit: zones, Done: 10, Total: 40, Elapsed: 2 * time.Second},
			"mkfs a: resetting v-zones [======>                 ]  25%  10/40 v-zones  5.0/s  ETA 0:06"},
		{"no rate yet", progressState{Label: "x", Unit: zones, Done: 0, Total: 40},
			"x [>                       ]   0%  0/40 v-zones  0.0/s  ETA -:--"},
		{"complete", progressState{Label: "x", Unit: zones, Done: 40, Total: 40, Elapsed: 4 * time.Second, Final: true},
			"x [========================] 100%  40/40 v-zones  10.0/s  in 0:04"},
		{"bytes, total unknown: a counter", progressState{Label: "fsck a: read", Unit: unitBytes, Done: 3 << 20, Elapsed: 2 * time.Second},
			"fsck a: read 3.0 MiB  1.5 MiB/s  0:02"},
		{"bytes, final", progressState{Label: "fsck a: read", Unit: unitBytes, Done: 3 << 30, Elapsed: 75 * time.Minute, Final: true},
			"fsck a: read 3.0 GiB  699.0 KiB/s  in 1:15:00"},
		{"fast counts", progressState{Label: "x", Unit: zones, Done: 1000, Total: 4000, Elapsed: time.Second},
			"x [======>                 ]  25%  1000/4000 v-zones  1000/s  ETA 0:03"},
		{"timed with an estimate", progressState{Label: "zctl bench node", Timed: true, Elapsed: 10 * time.Second, Estimate: 40 * time.Second},
			"zctl bench node [======>                 ]  25%  0:10 of about 0:40  ETA 0:30"},
		{"timed, over the estimate", progressState{Label: "b", Timed: true, Elapsed: 50 * time.Second, Estimate: 40 * time.Second},
			"b [========================] 100%  0:50 of about 0:40  ETA soon"},
		{"timed, done", progressState{Label: "b", Timed: true, Elapsed: 38 * time.Second, Estimate: 40 * time.Second, Final: true},
			"b [========================] 100%  0:38 of about 0:40"},
		{"timed, no estimate", progressState{Label: "zctl bench fs", Timed: true, Elapsed: 125 * time.Second},
			"zctl bench fs 2:05 elapsed"},
		{"timed, no estimate, done", progressState{Label: "zctl bench fs", Timed: true, Elapsed: 125 * time.Second, Final: true},
			"zctl bench fs 2:05"},
		{"more done than the total", progressState{Label: "x", Unit: zones, Done: 50, Total: 40, Elapsed: 5 * time.Second},
			"x [========================] 100%  50/40 v-zones  10.0/s  0:05"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := renderProgress(c.s, 24)
			assert.Equal(t, c.want, got)
			assert.NotContains(t, got, "\n")
		})
	}
}

// Not a terminal, or -o json / yaml: nothing is drawn and no timer runs.
func TestProgressSilent(t *testing.T) {
	for _, c := range []struct {
		name   string
		tty    bool
		output string
	}{
		{"not a terminal", false, "table"},
		{"json on a terminal", true, "json"},
		{"yaml on a terminal", true, "yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var errb bytes.Buffer
			clk := clock.NewVirtual()
			g := &Globals{Err: &errb, Output: c.output, forceTTY: c.tty, clock: clk}
			p := g.startProgress("x", 10, Unit{Name: "v-zones"})
			assert.Nil(t, p)
			p.Add(5) // a nil progress is a no-op
			p.SetTotal(20)
			clk.Advance(time.Second)
			p.Done()
			g.timed("bench", time.Minute)()
			g.progress("a line")
			assert.Empty(t, errb.String())
		})
	}
	// A bytes.Buffer is no terminal, an *os.File of a regular file neither.
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f))
	assert.False(t, isTerminal(&bytes.Buffer{}))
}

// On a terminal: a first line at once, a redraw every redrawEvery (\r, the
// line padded over a longer one), the final line ended by a newline, nothing
// after Done.
func TestProgressTerminal(t *testing.T) {
	var errb syncBuffer
	clk := clock.NewVirtual()
	g := &Globals{Err: &errb, Output: "table", forceTTY: true, clock: clk}
	p := g.startProgress("resetting", 40, Unit{Name: "v-zones"})
	require.NotNil(t, p)
	assert.Equal(t, "\rresetting [>                       ]   0%  0/40 v-zones  0.0/s  ETA -:--", errb.String())

	p.Add(10)
	clk.Advance(redrawEvery - time.Millisecond)
	assert.Equal(t, 1, strings.Count(errb.String(), "\r"), "no redraw before the period")
	clk.Advance(time.Millisecond)
	assert.Equal(t, 2, strings.Count(errb.String(), "\r"))
	assert.True(t, strings.HasSuffix(errb.String(), "\rresetting [======>                 ]  25%  10/40 v-zones  50.0/s  ETA 0:01"), errb.String())

	p.Add(30)
	clk.Advance(redrawEvery)
	p.Done()
	out := errb.String()
	assert.True(t, strings.HasSuffix(trimPad(out), "\rresetting [========================] 100%  40/40 v-zones  100/s  in 0:00\n"), out)
	clk.Advance(10 * redrawEvery)
	p.Done()
	assert.Equal(t, out, errb.String(), "nothing after Done")

	// A shorter line blanks the rest of a longer one.
	errb = syncBuffer{}
	q := g.startProgress("fsck", 0, unitBytes)
	q.Add(123456789)
	clk.Advance(redrawEvery)
	q.SetLabel("f")
	q.Add(-123456789)
	clk.Advance(redrawEvery)
	q.Done()
	lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\r")
	require.GreaterOrEqual(t, len(lines), 3)
	last, prev := lines[len(lines)-1], lines[len(lines)-2]
	assert.GreaterOrEqual(t, len(last), len(strings.TrimRight(prev, " ")), "the final line covers the previous one")

	// timed: redrawn as time passes.
	errb = syncBuffer{}
	done := g.timed("bench", 4*time.Second)
	clk.Advance(time.Second)
	assert.True(t, strings.HasSuffix(errb.String(), "\rbench [======>                 ]  25%  0:01 of about 0:04  ETA 0:03"), errb.String())
	done()
	assert.True(t, strings.HasSuffix(trimPad(errb.String()), "100%  0:01 of about 0:04\n"), errb.String())
}

// mkfs --force and fsck draw their progress on a terminal and print nothing
// but their result with -o json.
func TestMkfsFsckProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	dir := t.TempDir()
	isolate(t, dir)
	cl, err := localcluster.Start(context.Background(), localcluster.Config{Dir: dir, Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	info := cl.Info()
	require.NoError(t, localcluster.WriteInfo(info))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))

	runTTY := func(tty bool, args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		root, g := newRoot(&out, &errb)
		g.forceTTY = tty
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		if err != nil {
			errb.WriteString(errorLine(err) + "\n")
		}
		return out.String(), errb.String(), ExitCode(err)
	}
	_, errOut, code := runTTY(false, "ns", "create", "fs", "--max-active-vzones", "4", "--zones-per-vzone", "2")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = runTTY(true, "mkfs", "--ns", "fs")
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut, "nothing to reset on a fresh namespace")

	// --force resets the v-zones the first mkfs wrote.
	out, errOut, code := runTTY(true, "mkfs", "--ns", "fs", "--force")
	require.Equal(t, 0, code, errOut)
	errOut = trimPad(errOut)
	assert.Contains(t, out, "formatted namespace fs")
	assert.Regexp(t, `^\rmkfs fs: resetting v-zones \[`, errOut)
	assert.Regexp(t, `\r`+`mkfs fs: resetting v-zones \[=+\] 100%  (\d+)/(\d+) v-zones  [0-9.]+/s  in 0:0\d\n$`, errOut)

	out, errOut, code = runTTY(true, "fsck", "--ns", "fs")
	require.Equal(t, 0, code, errOut)
	errOut = trimPad(errOut)
	assert.Contains(t, out, "fs: clean")
	assert.Regexp(t, `\rfsck fs: read \d+(\.\d)? [KM]?i?B  .*/s  in 0:0\d\n$`, errOut)

	// -o json: the JSON only, on a terminal too.
	out, errOut, code = runTTY(true, "fsck", "--ns", "fs", "-o", "json")
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut)
	assert.Contains(t, out, `"clean": true`)
	_, errOut, code = runTTY(true, "mkfs", "--ns", "fs", "--force", "-o", "json")
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut)
	// Not a terminal: nothing either.
	_, errOut, code = runTTY(false, "mkfs", "--ns", "fs", "--force")
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut)
}
