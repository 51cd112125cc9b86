package lfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Mode selects how the file system recycles segments (mount option).
type Mode int

const (
	// ModeMove (the zero value) recycles by compaction with Options.Move
	// (HostCopy or Compact) and never uses threaded logging.
	ModeMove Mode = iota
	// ModeZNS recycles by host copy (the ZNS baseline).
	ModeZNS
	// ModeIZC recycles by in-storage zone compaction (IZC).
	ModeIZC
	// ModeZNSPlus is ZNS+: threaded logging and hybrid segment recycling
	// (HSR) choosing between threaded logging and IZC per victim, with
	// periodic checkpoints bounding the pre-invalid blocks. It needs a Volume
	// that implements TLOpener; without one the mount falls back to ModeIZC
	// (and logs it).
	ModeZNSPlus
)

func (m Mode) String() string {
	switch m {
	case ModeZNS:
		return "zns"
	case ModeIZC:
		return "izc"
	case ModeZNSPlus:
		return "zns+"
	}
	return "move"
}

// ParseMode accepts zns, izc and zns+ (also znsplus).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "zns", "host-copy", "host_copy":
		return ModeZNS, nil
	case "izc":
		return ModeIZC, nil
	case "zns+", "znsplus", "zns-plus":
		return ModeZNSPlus, nil
	}
	return 0, &zerr.InvalidArgumentError{Field: "mode", Reason: fmt.Sprintf("%q is not zns, izc or zns+", s)}
}

// FeatureThreadedLog (incompat) says checkpoints may carry threaded-logging
// state: segments TL-opened (their zone's write pointer is below the
// segment's written range, new blocks sit in its holes) and a trailing list
// of them in every checkpoint record. An older build would take such a zone
// for a damaged one and misread the records: it must refuse the image. Set in
// the superblock by every zns+ mount before it writes anything (the mount's
// checkpoint rotates the metadata zone and writes the superblock).
const FeatureThreadedLog = 1 << 0

// Cost model constants of hybrid segment recycling (ZNS+ §3.3.2), per block
// and normalized to one on-demand in-storage copy.
const (
	costCopy  = 1.0
	costWrite = 1.0       // a node or metadata block written by the host: one program, like a copy
	costPlug  = 0.9       // f_plugging = 90 % of the on-demand copy cost (background plugging)
	alphaInit = 0.2       // (N_node + N_meta) / N_valid before any compaction was profiled (paper: ~20 %)
	betaInit  = 0.5       // share of cold blocks still valid at the next TL_open, before profiling
	ewma      = 0.2       // weight of a new sample
	tlMinHole = 1.0 / 8.0 // a victim needs at least this share of its blocks writable
)

// tlState is the file system's threaded-logging bookkeeping (fs.mu).
type tlState struct {
	vol        TLOpener
	alpha      float64 // α of data segments: (N_node + N_meta) / N_valid
	alphaNode  float64 // α of node segments: N_meta / N_valid (§3.3.2: N_node is 0 for a node victim)
	beta       float64
	thetaPI    uint64     // pre-invalid blocks that trigger a checkpoint
	preInvalid uint64     // blocks valid at the last checkpoint and invalid now
	unrec      int        // TL segments opened since the last checkpoint (not in any record)
	exhausted  []*segment // TL segments no longer log heads, left open until the next checkpoint
	wantCP     bool       // an exhausted segment waits for a checkpoint
	ready      bool       // the mount's checkpoint (with FeatureThreadedLog in its superblock) is written
}

// setupMode resolves opts.Mode against the volume (before mount writes).
func (fs *FS) setupMode(vol Volume) {
	switch fs.opts.Mode {
	case ModeZNS:
		fs.opts.Move = HostCopy
	case ModeIZC:
		fs.opts.Move = Compact
	case ModeZNSPlus:
		fs.opts.Move = Compact
		if r, ok := vol.(*retrying); ok {
			vol = r.Volume // TL_open is not retried: a lost answer leaves the zone's state unknown
		}
		tv, ok := vol.(TLOpener)
		if !ok {
			slog.Info("volume has no threaded logging (TL_open): mode zns+ falls back to izc")
			fs.opts.Mode = ModeIZC
			break
		}
		fs.gc.tl.vol = tv
	}
	if fs.opts.Policy == nil {
		fs.gc.pol = DefaultPolicy(fs.opts.Move)
	}
	fs.gc.tl.alpha, fs.gc.tl.alphaNode, fs.gc.tl.beta = alphaInit, alphaInit, betaInit
}

// Mode returns the recycling mode in effect (after any fallback).
func (fs *FS) Mode() Mode { return fs.opts.Mode }

// setThetaPI is Options.ThetaPIBlocks, or the paper's 128 MiB of a 16 GiB
// file system (1/128) scaled to this one, at least a quarter zone.
func (fs *FS) setThetaPI() {
	if fs.opts.ThetaPIBlocks > 0 {
		fs.gc.tl.thetaPI = fs.opts.ThetaPIBlocks
		return
	}
	fs.gc.tl.thetaPI = max(fs.sb.UserBlocks/128, fs.geo.ZoneBlocks/4, 1)
}

// tlOn reports whether threaded logging is in use.
func (fs *FS) tlOn() bool { return fs.gc.tl.vol != nil }

// tlWritable reports whether the log may write block off of TL segment s.
func (s *segment) tlWritable(off uint64) bool {
	return off < s.tlEnd && s.tlKeep[off/64]&(1<<(off%64)) == 0
}

// tlNextRun returns the next run of writable blocks at or after s.tlCur (n 0: none left).
func (s *segment) tlNextRun(max uint64) (off, n uint64) {
	off = s.tlCur
	for off < s.tlEnd && !s.tlWritable(off) {
		off++
	}
	for off+n < s.tlEnd && n < max && s.tlWritable(off+n) {
		n++
	}
	return off, n
}

// preInvalidIn counts the blocks of s that were valid at the last checkpoint
// and are invalid now (fs.mu held).
func (fs *FS) preInvalidIn(s *segment) uint64 {
	return fs.cp.touched.preInvalid(s.zone, s.valid)
}

// tlCosts is the HSR cost model for victim s (fs.mu held): C_TL =
// f_plug·(N_pre-invalid + N_valid), C_SC = f_copy·N_valid + f_write·α·N_valid
// − f_plug·β·N_cold.
func (fs *FS) tlCosts(s *segment, npre uint64) (ctl, csc float64) {
	nv := float64(s.nvalid)
	var ncold uint64
	if s.tlPrev != nil {
		for i, w := range s.valid {
			ncold += uint64(bits.OnesCount64(w & s.tlPrev[i]))
		}
	}
	fw := costWrite
	if c, w := fs.opts.HSRCopyCost, fs.opts.HSRWriteCost; c > 0 && w > 0 {
		fw = costCopy * float64(w) / float64(c)
	}
	alpha := fs.gc.tl.alpha
	if segIsNode(s) {
		alpha = fs.gc.tl.alphaNode
	}
	ctl = costPlug * (float64(npre) + nv)
	csc = costCopy*nv + fw*alpha*nv - costPlug*fs.gc.tl.beta*float64(ncold)
	return ctl, csc
}

// tlTry picks a victim for threaded logging for log li (fs.mu and the log's
// lock held) and TL-opens it, or returns nil: no candidate, hybrid segment
// recycling prefers compaction, the open-zone budget is used up, or the
// volume refused. The segment returned is log li's new head.
//
// The phases: the gate (tlGate: free segments short, open-zone budget),
// the victim (tlVictim), the cost model (tlCosts), the kept blocks and the
// segment's last hole (tlKeepMap), β (tlSampleBeta), TL_open, and the
// segment's new state (tlOpened).
func (fs *FS) tlTry(ctx context.Context, li int) *segment {
	if !fs.tlGate() {
		return nil
	}
	s, pre := fs.tlVictim(li)
	if s == nil {
		fs.stats.TLNoCandidate++
		return nil
	}
	ctl, csc := fs.tlCosts(s, pre)
	if ctl > csc && !fs.opts.NoHSR {
		fs.stats.HSRCompaction++
		return nil
	}
	keep, end, bm := tlKeepMap(fs, s)
	fs.tlSampleBeta(s)
	// claim it before the table lock is released: no recycling, freeing or
	// second TL_open picks it meanwhile
	s.log, s.kind, s.tl, s.stable = li, li, true, false
	z := s.zone
	err := fs.unlocked(func() error { return fs.gc.tl.vol.TLOpen(ctx, z, bm) })
	if err != nil {
		s.log, s.tl = -1, false
		if errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrTooManyActive) || errors.Is(err, zerr.ErrNoResources) || errors.Is(err, context.Canceled) {
			// refused before anything changed (no open resource, no spare
			// flash block group for the log): a fresh zone instead
			fs.stats.TLRefused++
			return nil
		}
		// the zone's state is unknown (TL_open may have happened)
		_ = fs.goReadOnly("TL_open", err)
		return nil
	}
	fs.tlOpened(li, s, keep, end)
	return s
}

// tlGate reports whether threaded logging may open a segment now: it is on
// and ready, free segments run short (F2FS's SSR / ZNS+ HSR point: a fresh
// zone is cheaper while there are plenty), and one more segment left open
// until the next checkpoint fits the volume's open zones (the log heads,
// the extra write lanes' heads and two metadata zones during a rotation).
func (fs *FS) tlGate() bool {
	if !fs.tlOn() || !fs.gc.tl.ready || fs.failed != nil {
		return false
	}
	if fs.freeSegments() > fs.gcReserve()+fs.lg.n {
		return false
	}
	if fs.gc.tl.unrec+1 > fs.geo.MaxOpen-fs.lg.n-2-fs.openLanes() {
		fs.gc.tl.wantCP = true
		fs.stats.TLNoBudget++
		return false
	}
	return true
}

// tlVictim picks the stable closed segment of log li's type with the
// fewest blocks to keep (valid or pre-invalid), holes enough, and returns
// it with its pre-invalid count (nil: none).
func (fs *FS) tlVictim(li int) (*segment, uint64) {
	pre := map[ZoneID]uint64{}
	for z := range fs.cp.touched.zones {
		if s := fs.segs[z]; s != nil {
			if n := fs.cp.touched.preInvalid(z, s.valid); n > 0 {
				pre[z] = n
			}
		}
	}
	var best *segment
	var bestKeep uint64
	for _, s := range fs.segs {
		if !s.stable || s.victim || s.tl || s.log >= 0 || !s.closed || s.pending > 0 || s.pins > 0 || s.wp != s.cap {
			continue
		}
		// §3.3.1 (reclaiming cost imbalance): threaded logging takes a
		// dirty segment of the log's own type only, so that it does not mix
		// types (hot/warm/cold, node/data) in a segment; a segment the mount
		// found (type unknown) must at least hold the same class of blocks
		if s.kind >= 0 && s.kind != li || s.kind < 0 && s.nvalid > 0 && segIsNode(s) != fs.logIsNode(li) {
			continue
		}
		keep := s.nvalid + pre[s.zone]
		if float64(s.cap-keep) < tlMinHole*float64(s.cap) {
			continue
		}
		if best == nil || keep < bestKeep || keep == bestKeep && s.zone < best.zone {
			best, bestKeep = s, keep
		}
	}
	if best == nil {
		return nil, 0
	}
	return best, pre[best.zone]
}

// tlKeepMap returns the blocks of s the drives keep (valid now, or valid at
// the last checkpoint: pre-invalid, a crash would bring the checkpoint's
// owner back), as words and as TL_open's bitmap, and where the log's
// writes end.
//
// Until a checkpoint records this segment, its last hole stays unwritten:
// the zone can then not turn full, and a mount tells a TL-opened zone by
// its open state and its write pointer below the segment's written range.
func tlKeepMap(fs *FS, s *segment) (keep []uint64, end uint64, bm []byte) {
	keep = make([]uint64, len(s.valid))
	copy(keep, s.valid)
	fs.cp.touched.wasValid(s.zone, keep)
	end = s.cap
	for end > 0 && keep[(end-1)/64]&(1<<((end-1)%64)) != 0 {
		end--
	}
	if end > 0 {
		end--
	}
	bm = make([]byte, (s.cap+7)/8)
	for i := uint64(0); i < s.cap; i++ {
		if keep[i/64]&(1<<(i%64)) != 0 {
			bm[i/8] |= 1 << (i % 8)
		}
	}
	return keep, end, bm
}

// tlSampleBeta updates β (§3.3.2): the share of a segment's cold blocks
// (unchanged across two consecutive TL recyclings of it) still valid when
// it is TL-opened again. Sampled on the cold set of its last TL_open; a
// segment TL-opened for the second time only has the blocks valid at its
// first one.
func (fs *FS) tlSampleBeta(s *segment) {
	set := s.tlCold
	if set == nil && s.tlPrev == nil {
		return
	}
	if set == nil {
		set = s.tlPrev
	}
	var prev, still uint64
	for i, w := range set {
		prev += uint64(bits.OnesCount64(w))
		still += uint64(bits.OnesCount64(w & s.valid[i]))
	}
	if prev > 0 {
		fs.gc.tl.beta = (1-ewma)*fs.gc.tl.beta + ewma*float64(still)/float64(prev)
	}
}

// tlOpened makes the TL-opened segment s log li's head: its kept blocks,
// cursor and end, its cold set for β, and the counters.
func (fs *FS) tlOpened(li int, s *segment, keep []uint64, end uint64) {
	s.tlKeep, s.tlCur, s.tlEnd, s.tlRec = keep, 0, end, false
	if s.tlPrev != nil {
		cold := make([]uint64, len(s.valid))
		for i, w := range s.valid {
			cold[i] = w & s.tlPrev[i]
		}
		s.tlCold = cold
	}
	s.tlPrev = append([]uint64(nil), s.valid...)
	s.closed = false
	s.mtime = fs.count.nodeSeq
	var nkeep uint64
	for _, w := range keep {
		nkeep += uint64(bits.OnesCount64(w))
	}
	s.tlPlug = nkeep
	fs.gc.tl.unrec++
	fs.stats.TLRecycledSegments++
	fs.m.recycled.WithLabelValues("tl").Inc()
	fs.lg.heads[li] = s
	fs.m.segOpened()
}

// tlRetire ends log use of TL segment s (fs.mu held; s is no longer a head).
// A segment some checkpoint recorded is finished now (the drives plug what
// is left); one no record knows stays open until the next checkpoint, whose
// record then covers its blocks (see tlTry).
func (fs *FS) tlRetire(ctx context.Context, s *segment) {
	if !s.tlRec {
		fs.gc.tl.exhausted = append(fs.gc.tl.exhausted, s)
		fs.gc.tl.wantCP = true
		return
	}
	fs.tlFinish(ctx, s)
}

// tlFinish finishes TL segment s (fs.mu held).
func (fs *FS) tlFinish(ctx context.Context, s *segment) {
	if !s.tl {
		return
	}
	// kept blocks at or past the log's cursor are plugged by the finish (in
	// the background); those before it were plugged on demand by the writes
	var bg uint64
	for off := s.tlCur; off < s.cap; off++ {
		if s.tlKeep[off/64]&(1<<(off%64)) != 0 {
			bg++
		}
	}
	fs.stats.PluggedBackground += bg
	fs.stats.PluggedOnDemand += s.tlPlug - min(bg, s.tlPlug)
	fs.m.plugged.WithLabelValues("background").Add(float64(bg))
	fs.m.plugged.WithLabelValues("on_demand").Add(float64(s.tlPlug - min(bg, s.tlPlug)))
	s.tl, s.tlKeep = false, nil
	z := s.zone
	fs.zoneOp(ctx, false, z, "finish of a threaded-logging segment")
}

// tlAfterCheckpoint runs once a checkpoint record is durable (fs.mu held):
// TL heads are recorded now, and exhausted TL segments can be finished.
func (fs *FS) tlAfterCheckpoint(ctx context.Context) {
	fs.gc.tl.preInvalid = 0
	if !fs.tlOn() {
		return
	}
	for _, s := range fs.lg.heads {
		if s != nil && s.tl {
			s.tlRec, s.tlEnd = true, s.cap // recorded: the last hole may be written too
		}
	}
	ex := fs.gc.tl.exhausted
	fs.gc.tl.exhausted, fs.gc.tl.unrec, fs.gc.tl.wantCP = nil, 0, false
	for _, s := range ex {
		s.tlRec = true
		if fs.segs[s.zone] == s {
			fs.tlFinish(ctx, s)
		}
	}
}

// tlZones lists the TL segments a checkpoint records (log heads; fs.mu held).
func (fs *FS) tlZones() []ZoneID {
	var out []ZoneID
	for _, s := range fs.lg.heads {
		if s != nil && s.tl {
			out = append(out, s.zone)
		}
	}
	return out
}

// profileAlpha feeds one compaction round of a node or a data segment into
// its α: the node and metadata blocks its checkpoint wrote per valid block
// moved.
func (fs *FS) profileAlpha(node bool, moved, written uint64) {
	if moved == 0 {
		return
	}
	a := min(float64(written)/float64(moved), 4)
	if node {
		fs.gc.tl.alphaNode = (1-ewma)*fs.gc.tl.alphaNode + ewma*a
		return
	}
	fs.gc.tl.alpha = (1-ewma)*fs.gc.tl.alpha + ewma*a
}

// gcReserve is the number of free segments below which writers recycle by
// compaction (foreground GC). With threaded logging the logs reuse dirty
// segments without consuming free ones, and compaction only needs free
// segments for its two cold logs: half the superblock's reserve (plus one)
// is kept, so that hybrid segment recycling, not the reserve, decides.
func (fs *FS) gcReserve() int {
	r := int(fs.sb.ReserveSegs)
	if fs.tlOn() {
		r = r/2 + 1
	}
	return r
}
