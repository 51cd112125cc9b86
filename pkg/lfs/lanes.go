package lfs

import (
	"context"
	"errors"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/bufpool"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// logSet is the logs component: the log heads, the extra write lanes of
// the data logs and the appends into them. mu[i] serializes appends to log
// i (a zone takes writes only at its write pointer); the rest is guarded
// by FS.mu.
type logSet struct {
	mu       [numTemps]rankedMutex
	n        int               // logs (numTemps, or 2 for few open zones)
	heads    []*segment        // each log's head segment
	xl       [numTemps][]xlane // extra write lanes of the data logs (lanes.go)
	lanes    int               // write lanes per data log
	laneCond *sync.Cond        // on FS.mu: an extra write lane was released
	gather   bufpool.Pool      // write-back buffers of a volume without VectorWriter (writeData), recycled after a write that landed
	vecw     VectorWriter      // the volume's vectored write, if it has one (write-back sends the pages as they are)
	opening  int               // OpenZone calls in flight (counted as used segments)
}

// Write lanes. A zone takes writes only at its write pointer, so appends to
// one segment are serialized (and the Volume below serializes the writes of
// one v-zone anyway): with one head per log, one write-back of a log is in
// flight at a time and the network and the drives idle while the next one is
// prepared. The file data logs (warm and cold data; the data log of a
// two-log layout) therefore have DefaultWriteLanes lanes: lane 0 is the
// log's own head (FS.lg.heads, under FS.lg.mu: what checkpoints record, what
// threaded logging and recycling use), lanes 1.. each write their own
// segment (xlane.seg, a fresh v-zone; never threaded logging), so two
// write-backs of the same log go to different v-zones concurrently. An
// append takes a free lane (lane 0 first) and keeps it for its whole
// Volume write; its blocks are placed (their metadata points at them) only
// after that write returned, whatever the lane, so nothing in the tables or
// in a node written later names a block whose write has not completed.
//
// An extra lane opens a segment only while the volume has an open zone to
// spare beyond every log head, both metadata zones, threaded logging's
// reserve and one v-zone opened ahead, and while free segments are plentiful
// (more than the GC reserve plus one per log): otherwise its appends go to
// lane 0 (the lane is left without a head until room returns). An extra
// lane's segment is an ordinary segment (log >= 0 while it is a head: no
// recycling victim, not freed); checkpoints list it with its write pointer,
// and a crash leaves it like any zone written since the checkpoint (the
// mount finishes it; roll-forward finds the blocks fsynced nodes name below
// its write pointer).
//
// Node logs, and with six logs the hot data log (directories' small
// dentry write-backs), keep one lane: fsync's ordering (direct nodes, Flush, then the
// marked inode) and roll-forward's scan from the checkpointed head rely on
// one head per node log. On the virtual clock every log has one lane (runs
// are reproducible: the power-loss tests replay a seed exactly).

// DefaultWriteLanes is the number of write lanes of a data log when
// Options.WriteLanes is 0.
const DefaultWriteLanes = 2

// xlane is an extra write lane of a data log (fs.mu guards it).
type xlane struct {
	busy bool     // an append holds it
	seg  *segment // its head segment (nil: none open)
}

// setupLanes gives the data logs their extra lanes (at mount, before any
// write-back runs).
func (fs *FS) setupLanes() {
	n := fs.opts.WriteLanes
	if n == 0 {
		n = DefaultWriteLanes
	}
	if fs.clk.Kind() == clock.KindVirtual {
		n = 1
	}
	fs.lg.lanes = max(n, 1)
	for l := 0; l < fs.lg.n; l++ {
		// (with six logs the hot data log, dentry blocks, keeps one: its
		// write-backs are small, an extra head would only hold a zone open)
		if fs.logIsNode(l) || fs.lg.lanes < 2 || fs.lg.n == numTemps && l == logHotData {
			fs.lg.xl[l] = nil
			continue
		}
		fs.lg.xl[l] = make([]xlane, fs.lg.lanes-1)
	}
}

// acquireLane takes a write lane of log l (fs.mu held on entry and return,
// released while waiting): lane 0 (fs.lg.mu[l]) when it is free, else a
// free extra lane, else it waits for one to be released.
func (fs *FS) acquireLane(l int) int {
	xl := fs.lg.xl[l]
	if len(xl) == 0 {
		fs.lockLog(l)
		return 0
	}
	for {
		if fs.lg.mu[l].TryLock() {
			return 0
		}
		for j := range xl {
			if !xl[j].busy {
				xl[j].busy = true
				return j + 1
			}
		}
		// every extra lane is busy: one of them is released (and
		// broadcasts) whatever holds lane 0
		fs.lg.laneCond.Wait()
	}
}

// releaseLane gives lane j of log l back (fs.mu held).
func (fs *FS) releaseLane(l, j int) {
	if j == 0 {
		fs.lg.mu[l].Unlock()
		return
	}
	fs.lg.xl[l][j-1].busy = false
	fs.lg.laneCond.Broadcast()
}

// laneHead is the head segment of lane j of log l (nil: none).
func (fs *FS) laneHead(l, j int) *segment {
	if j == 0 {
		return fs.lg.heads[l]
	}
	return fs.lg.xl[l][j-1].seg
}

// closeLane retires the head segment of lane j of log l.
func (fs *FS) closeLane(ctx context.Context, l, j int) {
	if j == 0 {
		fs.closeLog(ctx, l)
		return
	}
	x := &fs.lg.xl[l][j-1]
	s := x.seg
	if s == nil {
		return
	}
	x.seg = nil
	s.log = -1
	fs.retire(ctx, s)
}

// openLane opens a new head segment for extra lane j of log l. It returns
// nil and no error when there is no room for another open zone (the caller
// goes to lane 0): a volume refusing the open for lack of open or active
// zones counts as no room.
func (fs *FS) openLane(ctx context.Context, l, j int) (*segment, error) {
	if !fs.laneRoom() {
		return nil, nil
	}
	s, err := fs.openZoneSeg(ctx, l)
	var tmo *zerr.TooManyOpenError
	var tma *zerr.TooManyActiveError
	var nr *zerr.NoResourcesError
	if errors.As(err, &tmo) || errors.As(err, &tma) || errors.As(err, &nr) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fs.lg.xl[l][j-1].seg = s
	return s, nil
}

// openLanes is how many extra lanes have a head segment (fs.mu held).
func (fs *FS) openLanes() int {
	n := 0
	for l := range fs.lg.xl {
		for j := range fs.lg.xl[l] {
			if fs.lg.xl[l][j].seg != nil {
				n++
			}
		}
	}
	return n
}

// laneRoom reports whether an extra lane may open one more segment: an open
// zone to spare beyond the log heads, the extra heads, two metadata zones,
// the threaded-logging segments not yet recorded (plus one for the next),
// and one v-zone the Volume opens ahead; and free segments beyond the GC
// reserve plus one per log.
func (fs *FS) laneRoom() bool {
	open := 2 + fs.openLanes() + 1 // metadata zones, extra heads, the one asked for
	for _, s := range fs.lg.heads {
		if s != nil {
			open++
		}
	}
	if fs.tlOn() {
		open += fs.gc.tl.unrec + 1
	}
	return open+1 <= fs.geo.MaxOpen && fs.freeSegments() > fs.gcReserve()+fs.lg.n
}

// dropLanes forgets the extra lanes' heads (unmount: like the log heads,
// left for the next mount to finish).
func (fs *FS) dropLanes() {
	for l := range fs.lg.xl {
		for j := range fs.lg.xl[l] {
			fs.lg.xl[l][j].seg = nil
		}
	}
}

// logName is the metrics label of log l.
func (fs *FS) logName(l int) string {
	if fs.lg.n == numTemps {
		return logNames[l]
	}
	if l == 0 {
		return "node"
	}
	return "data"
}
