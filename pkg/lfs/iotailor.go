package lfs

// IOTailor (ZMS §4.1): a background write-back sends a zone whole
// superpages. A drive without power-loss protection buffers a zone's
// writes in a superpage-sized volatile buffer until the superpage is
// complete; a buffer that must be emptied early — another zone's write
// taking it, a flush — goes to SLC first, costing a program and wear. So
// with Options.IOTailor and a volume that reports its superpage
// (VolumeGeometry.SuperpageBlocks), a write-back batch is cut to end on a
// superpage boundary of the log head it goes to, and a file with fewer dirty
// pages than reach the boundary waits (its pages stay dirty) while the dirty
// pages stay within twice the budget (where writers are throttled). fsync
// and checkpoints write whatever is dirty, as without it.
//
// It needs to know where a batch lands: with more than one write lane per
// data log (lanes.go) it is off. Threaded-logging heads write into holes
// and are left alone.

// tailorBatch returns how many of in's dirty pages a write-back under
// memory pressure sends, given the batch it would send without IOTailor
// (0: all); false when it sends none now (in.mu and fs.mu held).
func (fs *FS) tailorBatch(in *inode, batch int) (int, bool) {
	sp := uint64(fs.geo.SuperpageBlocks)
	soft, _ := fs.wbBudget()
	if !fs.opts.IOTailor || sp <= 1 || fs.lg.lanes > 1 || fs.ic.dirtyPages > 2*soft {
		return batch, true
	}
	n := 0
	cold := false
	for _, p := range in.dirtyBlks {
		if p.dirty && !p.inflight {
			n++
			cold = cold || p.cold
		}
	}
	if batch > 0 {
		n = min(n, batch)
	}
	if n == 0 || cold {
		return batch, true // (recycled pages go to the cold data log: not planned here)
	}
	temp := logWarmData
	if in.isDir() {
		temp = logHotData
	} else if in.coldFile {
		temp = logColdData
	}
	var wp uint64
	if h := fs.lg.heads[fs.logFor(temp)]; h != nil && h.tl {
		return batch, true
	} else if h != nil && h.wp < h.cap {
		wp = h.wp
	}
	room := (sp - wp%sp) % sp // blocks to the next boundary
	if uint64(n) < room || room == 0 && uint64(n) < sp {
		return 0, false
	}
	return int(room + (uint64(n)-room)/sp*sp), true
}
