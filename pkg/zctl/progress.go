package zctl

// Progress of long operations on a terminal, the way pv, rsync
// --info=progress2 or docker pull show it: one status line on stderr,
// redrawn in place every redrawEvery, with a bar when the total is known, a
// counter otherwise, the rate and an ETA.
//
//	mkfs demo: resetting v-zones [=========>          ]  45%  18/40 v-zones  6.0/s  ETA 0:04
//	fsck demo: read 1.2 GiB  98.3 MiB/s  0:12
//	bench node [=====>              ]  28%  0:11 of about 0:40  ETA 0:29
//
// It is silent (draws nothing, starts no goroutine) when stderr is not a
// terminal or the output format is not the table (-o json, -o yaml): pipes,
// scripts and logs get only the result. The counters are atomics; Add may be
// called from any goroutine. The redraw runs on a clock.Clock timer (tests
// drive a virtual clock); Done stops it and leaves the final line.

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// redrawEvery is the redraw period of a progress line.
const redrawEvery = 200 * time.Millisecond

// Unit says how a progress counter is printed.
type Unit struct {
	Name  string // after a count: "v-zones"; empty for bytes
	Bytes bool   // counts bytes: printed as KiB, MiB…
}

var (
	unitBytes = Unit{Bytes: true}
)

// Progress is one live status line. The zero value is not usable; a nil
// *Progress is a silent one (every method is a no-op).
type Progress struct {
	w        io.Writer
	clk      clock.Clock
	label    string
	unit     Unit
	total    atomic.Int64 // 0: unknown
	done     atomic.Int64
	timed    bool          // shows the elapsed time, not a count
	estimate time.Duration // timed progress: the expected duration (0: unknown)
	start    time.Duration
	width    int // bar width in cells

	own *clock.RealtimeClock // the clock this progress started (stopped by Done)

	mu        sync.Mutex
	stopped   bool
	stopTimer func() bool
	lastLen   int
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// quiet reports whether progress output is off: stderr is no terminal, or
// the output is for programs.
func (g *Globals) quiet() bool {
	return g.Output != "table" || !(g.forceTTY || isTerminal(g.Err))
}

// progress prints one line to stderr when progress output is on.
func (g *Globals) progress(format string, a ...any) {
	if g.quiet() {
		return
	}
	fmt.Fprintf(g.Err, format+"\n", a...)
}

// startProgress starts a counter (total 0: unknown) on stderr; nil when quiet.
func (g *Globals) startProgress(label string, total int64, u Unit) *Progress {
	if g.quiet() {
		return nil
	}
	p := newProgress(g.Err, g.clock, label, u)
	p.total.Store(total)
	p.run()
	return p
}

// timed shows the time an operation of about estimate has run (estimate 0:
// unknown, a counter of the elapsed time); call the returned func when done.
func (g *Globals) timed(label string, estimate time.Duration) func() {
	if g.quiet() {
		return func() {}
	}
	p := newProgress(g.Err, g.clock, label, Unit{})
	p.timed, p.estimate = true, estimate
	p.run()
	return p.Done
}

func newProgress(w io.Writer, clk clock.Clock, label string, u Unit) *Progress {
	p := &Progress{w: w, clk: clk, label: label, unit: u, width: 24}
	if clk == nil {
		p.own = clock.Realtime(1)
		p.clk = p.own
	}
	p.start = p.clk.Now()
	return p
}

// Add counts n more units done.
func (p *Progress) Add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

// SetTotal sets the number of units the operation will do.
func (p *Progress) SetTotal(n int64) {
	if p != nil {
		p.total.Store(n)
	}
}

// SetLabel changes the text before the counters (a new phase).
func (p *Progress) SetLabel(label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.label = label
	p.mu.Unlock()
}

// run draws now and then every redrawEvery until Done.
func (p *Progress) run() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawLocked(false)
	p.armLocked()
}

func (p *Progress) armLocked() {
	if p.stopped {
		return
	}
	p.stopTimer = p.clk.AfterFunc(p.clk.Now()+redrawEvery, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stopped {
			return
		}
		p.drawLocked(false)
		p.armLocked()
	})
}

// Done draws the final line, ends it and stops redrawing.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.drawLocked(true)
	p.stopped = true
	if p.stopTimer != nil {
		p.stopTimer()
	}
	if p.own != nil {
		p.own.Stop()
	}
}

func (p *Progress) drawLocked(final bool) {
	line := renderProgress(progressState{Label: p.label, Unit: p.unit, Done: p.done.Load(), Total: p.total.Load(),
		Elapsed: p.clk.Now() - p.start, Timed: p.timed, Estimate: p.estimate, Final: final}, p.width)
	pad := ""
	if n := p.lastLen - len(line); n > 0 {
		pad = strings.Repeat(" ", n) // no escape sequences: works on any terminal
	}
	p.lastLen = len(line)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, pad, end)
}

// progressState is what one line shows.
type progressState struct {
	Label    string
	Unit     Unit
	Done     int64
	Total    int64 // 0: unknown
	Elapsed  time.Duration
	Timed    bool          // the elapsed time of an operation with no counter
	Estimate time.Duration // timed: the expected duration (0: unknown)
	Final    bool
}

// renderProgress is the text of one progress line (no control characters).
func renderProgress(s progressState, width int) string {
	var b strings.Builder
	b.WriteString(s.Label)
	secs := s.Elapsed.Seconds()
	switch {
	case s.Timed && s.Estimate > 0:
		frac := secs / s.Estimate.Seconds()
		if s.Final {
			frac = 1
		}
		fmt.Fprintf(&b, " %s %3.0f%%  %s of about %s", bar(frac, width), 100*min(frac, 1), clockTime(s.Elapsed), clockTime(s.Estimate))
		switch {
		case s.Final:
		case s.Elapsed < s.Estimate:
			fmt.Fprintf(&b, "  ETA %s", clockTime(s.Estimate-s.Elapsed))
		default:
			b.WriteString("  ETA soon")
		}
		return b.String()
	case s.Timed:
		fmt.Fprintf(&b, " %s", clockTime(s.Elapsed))
		if !s.Final {
			b.WriteString(" elapsed")
		}
		return b.String()
	}
	rate := 0.0
	if secs > 0 {
		rate = float64(s.Done) / secs
	}
	if s.Total > 0 {
		frac := float64(s.Done) / float64(s.Total)
		fmt.Fprintf(&b, " %s %3.0f%%  %s/%s", bar(frac, width), 100*min(frac, 1), amount(s.Done, s.Unit, false), amount(s.Total, s.Unit, true))
	} else {
		fmt.Fprintf(&b, " %s", amount(s.Done, s.Unit, true))
	}
	fmt.Fprintf(&b, "  %s", rateText(rate, s.Unit))
	switch {
	case s.Final:
		fmt.Fprintf(&b, "  in %s", clockTime(s.Elapsed))
	case s.Total > 0 && rate > 0 && s.Done < s.Total:
		fmt.Fprintf(&b, "  ETA %s", clockTime(time.Duration(float64(s.Total-s.Done)/rate*float64(time.Second))))
	case s.Total > 0 && s.Done < s.Total:
		b.WriteString("  ETA -:--")
	default:
		fmt.Fprintf(&b, "  %s", clockTime(s.Elapsed))
	}
	return b.String()
}

// bar draws [=====>    ] filled to frac (clamped to [0, 1]).
func bar(frac float64, width int) string {
	frac = max(0, min(frac, 1))
	n := int(frac * float64(width))
	if n >= width {
		return "[" + strings.Repeat("=", width) + "]"
	}
	return "[" + strings.Repeat("=", n) + ">" + strings.Repeat(" ", width-n-1) + "]"
}

// amount prints a count in its unit (withName: append the unit's name).
func amount(n int64, u Unit, withName bool) string {
	if u.Bytes {
		return bytesHuman(uint64(max(n, 0)))
	}
	if withName && u.Name != "" {
		return fmt.Sprintf("%d %s", n, u.Name)
	}
	return fmt.Sprint(n)
}

func rateText(r float64, u Unit) string {
	if u.Bytes {
		return bytesHuman(uint64(r)) + "/s"
	}
	if r >= 100 {
		return fmt.Sprintf("%.0f/s", r)
	}
	return fmt.Sprintf("%.1f/s", r)
}

// clockTime prints a duration as m:ss or h:mm:ss.
func clockTime(d time.Duration) string {
	s := int64(max(d, 0).Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
