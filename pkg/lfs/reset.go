package lfs

import (
	"context"
)

// Resets of freed segments. A checkpoint frees the segments left with no
// valid block; their zones were reset inside the checkpoint, one Volume
// Reset (an arbiter transaction) after another with the checkpoint lock held
// exclusively, which stopped every writer for as long: a sequential
// overwrite of a 64 MiB file frees 32 segments at once, about a fifth of
// `zctl bench fs`'s sequential write time. Off the virtual clock they are
// now queued (FS.resetQ) once the checkpoint record is durable, and one
// background goroutine resets them while writers go on.
//
// The tables treat a queued zone as free (the record says so; freeSegments
// counts it, so recycling and threaded logging decide as if the reset had
// happened); only opening a zone has to wait for it: openZoneSeg waits for
// queued resets while every free segment is still queued. A queued zone
// waits for its segment's pins (readers that resolved a block before the
// checkpoint) before its reset, as the checkpoint did. A reset failing
// while a node is unavailable is deferred as before (zoneOp). After a crash
// the mount resets every zone its checkpoint does not use, queued or not.
// Unmount stops the goroutine and its checkpoint resets whatever is left in
// place; on the virtual clock resets stay in the checkpoint (reproducible
// runs).

// freedZone is a zone queued for its reset and the segment it was.
type freedZone struct {
	zone ZoneID
	seg  *segment
}

// queueResets queues the reset of the freed zones (fs.mu held, checkpoint
// record durable) and resets them in place when no reset goroutine runs.
func (fs *FS) queueResets(ctx context.Context, free []freedZone) {
	fs.resetQ = append(fs.resetQ, free...)
	if fs.resetKick == nil || fs.down.Load() {
		fs.drainResets(ctx, false)
		return
	}
	select {
	case fs.resetKick <- struct{}{}:
	default:
	}
}

// drainResets resets the queued zones in order (fs.mu held, released for
// each reset). With stoppable it returns early once background work stops.
func (fs *FS) drainResets(ctx context.Context, stoppable bool) {
	for len(fs.resetQ) > 0 && !(stoppable && fs.down.Load()) {
		f := fs.resetQ[0]
		fs.resetQ = fs.resetQ[1:]
		fs.resetting++ // (taken off the queue first: an in-place drain meanwhile takes the next one)
		for f.seg != nil && f.seg.pins > 0 {
			fs.pinCond.Wait() // a reader still reads a block it resolved before
		}
		// The zone is free in the checkpoint (a mount resets it); a reset
		// that fails while a node is unavailable is retried (zoneOp).
		fs.zoneOp(ctx, true, f.zone, "reset of a freed segment")
		fs.resetting--
		fs.resetCond.Broadcast()
	}
}

// startResetter starts the goroutine that resets queued zones (not on the
// virtual clock).
func (fs *FS) startResetter() {
	fs.resetKick = make(chan struct{}, 1)
	fs.bgWG.Add(1)
	go func() {
		defer fs.bgWG.Done()
		defer func() {
			fs.mu.Lock()
			fs.resetCond.Broadcast() // openZoneSeg resets in place from now on
			fs.mu.Unlock()
		}()
		for {
			select {
			case <-fs.wbStop:
				return
			case <-fs.resetKick:
			}
			fs.mu.Lock()
			fs.drainResets(context.Background(), true)
			fs.mu.Unlock()
		}
	}()
}

// awaitFreeZone waits, before a zone is opened, while every free segment is
// a zone still queued for its reset (fs.mu held, released while waiting),
// resetting in place when no reset goroutine runs.
func (fs *FS) awaitFreeZone(ctx context.Context) {
	for q := len(fs.resetQ) + fs.resetting; q > 0 && fs.freeSegments()-q <= 0; q = len(fs.resetQ) + fs.resetting {
		if len(fs.resetQ) > 0 && (fs.resetKick == nil || fs.down.Load()) {
			fs.drainResets(ctx, false)
			continue
		}
		fs.resetCond.Wait()
	}
}
