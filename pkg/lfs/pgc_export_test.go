package lfs

import "context"

// RecycleOnce runs one foreground recycling round (victim by the policy)
// whatever the free segments (tests of P-GC and the IZC-H / IZC-D choice).
func (fs *FS) RecycleOnce(ctx context.Context) (bool, error) {
	fs.gc.mu.Lock()
	defer fs.gc.mu.Unlock()
	return fs.gcOnce(ctx, true, false)
}

// DataZones lists the closed segments holding valid data blocks only.
func (fs *FS) DataZones() map[ZoneID]bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := map[ZoneID]bool{}
	for z, s := range fs.segs {
		if s.log >= 0 || !s.closed || s.nvalid == 0 {
			continue
		}
		data := true
		for off := uint64(0); off < s.wp; off++ {
			if s.isValid(off) && s.ofs[off] == ofsNode {
				data = false
				break
			}
		}
		if data {
			out[z] = true
		}
	}
	return out
}
