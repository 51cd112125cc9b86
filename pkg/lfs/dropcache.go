package lfs

import "math"

// DropCleanCache drops every clean page of the page cache (pages read from
// the drives, read ahead, or written back) and returns how many it dropped.
// Dirty pages and pages being written back stay: they hold data the drives
// do not have yet. Later reads go to the drives again, which is what a cold
// read measurement needs (the kernel's own page cache is separate: see
// /proc/sys/vm/drop_caches). Read-ahead state is reset with the pages, so a
// sequential read after it reads ahead again from its start.
func (fs *FS) DropCleanCache() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dropped := 0
	for _, in := range fs.ic.inodes {
		for _, b := range in.pages.blocks(0, math.MaxUint64) {
			if p := in.pages.get(b); p != nil && !p.dirty && !p.inflight {
				fs.dropPage(in, b)
				dropped++
			}
		}
		if !in.raBusy {
			in.raUntil = 0
		}
	}
	return dropped
}
