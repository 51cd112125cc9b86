package lfs

import (
	"context"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// TurnClock is a modelled clock whose running time its one driving
// goroutine may set, backwards too: a deterministic harness that plays
// several logical threads on one goroutine, each at its own modelled time
// (pkg/bench/znsplus). On such a clock P-GC's workers take turns on the
// recycler's goroutine instead of running as goroutines: every worker
// starts at the read phase's start, the worker whose modelled time is
// earliest issues its next read (ties to the lowest worker), and the read
// phase ends when the last worker's does. Their reads thus overlap in
// modelled time and contend for the drive's chips and link as concurrent
// requests do, and a run replays exactly.
//
// Only the goroutine that drives the clock may call SetNow, and the file
// system must be the only user of the clock while it recycles (the
// harness's one goroutine); a clock of KindVirtual that does not implement
// TurnClock keeps P-GC off.
type TurnClock interface {
	clock.Clock
	// SetNow makes t the running modelled time (what Now returns), firing
	// the timers due by t.
	SetNow(t time.Duration)
}

// turnClock is the file system's clock as a TurnClock, if it is one.
func (fs *FS) turnClock() (TurnClock, bool) {
	if fs.clk == nil || fs.clk.Kind() != clock.KindVirtual {
		return nil, false
	}
	tc, ok := fs.clk.(TurnClock)
	return tc, ok
}

// readVictimTurns is readVictim's P-GC on a TurnClock (fs.mu held on entry
// and return, released for each read): offs (increasing) cut into m
// contiguous shares, each share read in runs by its worker, the workers
// taking turns in modelled time.
func (fs *FS) readVictimTurns(ctx context.Context, tc TurnClock, s *segment, offs []uint64, m int) (map[uint64][]byte, error) {
	out := make(map[uint64][]byte, len(offs))
	start := tc.Now()
	type worker struct {
		runs [][]uint64
		at   time.Duration
	}
	ws := make([]worker, m)
	for w := range ws {
		ws[w] = worker{runs: victimRuns(offs[w*len(offs)/m : (w+1)*len(offs)/m]), at: start}
	}
	end := start
	for {
		next := -1
		for w := range ws {
			if len(ws[w].runs) > 0 && (next < 0 || ws[w].at < ws[next].at) {
				next = w
			}
		}
		if next < 0 {
			break
		}
		w := &ws[next]
		r := w.runs[0]
		w.runs = w.runs[1:]
		tc.SetNow(w.at)
		buf := make([]byte, len(r)*fs.bs)
		err := fs.readBlocks(ctx, MakeAddr(s.zone, r[0]), buf)
		w.at = tc.Now()
		end = max(end, w.at)
		if err != nil {
			tc.SetNow(end)
			return nil, err
		}
		for k, off := range r {
			out[off] = buf[k*fs.bs : (k+1)*fs.bs]
		}
	}
	tc.SetNow(end)
	return out, nil
}
