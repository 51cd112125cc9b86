// Package lfs is ZoneFleet's log-structured file system: an F2FS-like LFS over
// one namespace's v-zones, reached only through the Volume interface. It knows
// nothing about FUSE or gRPC; its FS API (inode numbers, Lookup/Getattr/...,
// errors as syscall.Errno via Errno) is shaped for a go-fuse binding.
//
// Layout. Segments are v-zones. Six active logs (hot/warm/cold x node/data,
// F2FS temperature rules; two logs when fewer than 8 zones may be open).
// Block addresses are (zone, offset) (Addr; 0 = hole). Node ids are
// ino<<24 | idx: idx 0 is the inode block (attributes, inline xattrs),
// idx k the k-th direct node (a block of addresses), so a file maps up to
// 2^24 direct nodes (32 TiB with 4 KiB blocks) without indirect nodes. The NAT
// maps node id -> address; the SIT keeps each segment's valid bitmap; the SSA
// (owner of each block) is kept in memory and rebuilt at mount from the nodes.
// Directories are dentry blocks (the directory's data) with an in-memory
// name index: one entry change rewrites one block.
//
// Metadata is only ever appended: every metadata zone starts with the
// superblock record (format version, geometry, over-provisioning) and a full
// snapshot (NAT, SIT bitmaps, segments, log heads, orphans), followed by
// checkpoint records carrying NAT and SIT deltas; each record is checksummed
// (CRC32C) and written with FUA. When the zone fills (or every 256
// checkpoints, and at every mount) a new metadata zone is opened with a fresh
// snapshot and the previous one reset: two zones are reserved for this
// rotation. Mount takes the newest zone whose snapshot is complete, replays
// its deltas up to the first torn record, rolls forward the node blocks
// written after that checkpoint by fsync (fsync mark, checkpoint version and
// sequence in every node header; an inode marked nodeFlagBatch counts only
// when the direct nodes written with it, the Batch sequence numbers before
// its own, are all there: incompat superblock bit FeatureFsyncBatch, set by
// mkfs and every mount, so a build that would trust the inode alone refuses
// the image), deletes orphans and checkpoints.
//
// Files. Regular files, directories, symlinks and special files: FIFOs,
// sockets, character and block devices (Mknod; a device's number is a u64
// after the inode's xattrs, flagged in the inode and announced by the
// compat superblock bit FeatureInodeRdev, so older images read as rdev 0 and
// older builds can still mount). The inode also keeps the count of its
// mapped data blocks (st_blocks; same trailer scheme): it changes where a
// direct-node entry goes from hole to block and back (write-back commit,
// truncate, punch hole), dirty pages over holes are added when reported
// (delayed allocation), an inode written without the count (older builds)
// is counted from its direct nodes when first stat'ed, and roll-forward
// recounts the inodes it recovered (their nodes may come from a torn
// fsync). Holes are simply unmapped entries: SEEK_DATA/SEEK_HOLE walk the
// direct nodes (skipping a missing node's whole reach), and fallocate's
// PUNCH_HOLE and ZERO_RANGE unmap whole blocks (invalidating them in the
// SIT, so recycling reclaims their segments) and zero the partial edge
// blocks in the page cache. O_TMPFILE files are orphan inodes without a
// name until Link gives them one.
//
// Space. Users may fill sb.UserBlocks (over-provisioning and the GC reserve
// segments are outside it); fallocate reservations count as used until
// written (space.go), and Statfs derives what is available from what a
// fill can store. A root-reserved share (rootreserve.go) is kept from
// callers whose context lacks WithRootReserve. Write keeps a write-back reserve
// (Options.WriteReserveBlocks) free: it is for WriteBack, the kernel's
// write-back of pages dirtied through shared mappings, whose stores could
// not be refused (FUSE has no page_mkwrite). A WriteBack that fails anyway
// sets a sticky error on the inode that every fsync returns until the last
// close (no fsync ever acknowledges a lost page), and StaleCache tells the
// binding to drop the kernel's cached pages at the next open.
//
// Recycling (gc.go) is a RecyclePolicy: victim selection (greedy, cost-benefit)
// and the move method (HostCopy or Compact = IZC, with copyback-aware
// destination allocation); host-cached dirty blocks are always written from
// the host, clean cached ones per Options.CachedWrite (every one from the
// host), per Options.CachedChunks (IZC-H: a chunk whose valid blocks are all
// cached from the host; IZC-D: all on the device), or per block by cost
// (Options.FlashReadCost and HostWriteCost: from the host when every valid
// block of the block's chunk is cached and writing the chunk's clean ones
// costs less than the chip read the device copy needs). Host copy reads a victim's uncached valid
// blocks up front in runs; with P-GC (Options.PGCWorkers, default 2 as in
// seeds/004 Algorithm 1) a victim whose valid blocks exceed half of its
// blocks has them cut into that many contiguous shares read in parallel,
// and the moves are then committed one by one as without it. Free segments
// come from Volume.OpenZone, which finds an empty zone wherever it is
// (devvol: every empty zone of each drive, the drives in turn; fsvol: the
// arbiter), so the forward-only search seeds/004 §3.2 had to make wrap
// around cannot fail while a zone is free. Every recycling round ends with
// a checkpoint, after which the emptied victims are reset, all with one call
// when the volume resets several zones at once (ZonesResetter; fsvol: one
// arbiter state change for all of them). Volume.Compact may
// return before the drives finished the copies (zone_compaction is
// asynchronous, ZNS+ §3.2.1): the checkpoint's node writes overlap them, and
// its Flush, before the record, waits for them. Stats.CompactionPhases splits
// compaction time as ZNS+ Fig. 6 does: init (selection, bitmaps, nodes), read
// (host copy's victim reads), copy (IZC: submission plus the checkpoint
// Flush's wait for the copies), write (the checkpoint's data write-back) and
// checkpoint (nodes, metadata, record).
//
// Modes (Options.Mode, tl.go): zns (host copy), izc (zone_compaction) and
// zns+ (threaded logging + hybrid segment recycling + IZC, ZNS+ §3.2.2,
// §3.3.2). zns+ needs a Volume that implements TLOpener and falls back to
// izc (with a log line) otherwise; `zctl mount --gc` defaults to zns+.
//
// Threaded logging. When a log needs a new segment and free segments run
// short (at most the GC reserve plus one per log), hybrid segment recycling
// takes the dirty segment of the log's own type (the log that last wrote it;
// for a segment found by the mount, node vs data by its blocks: ZNS+ §3.3.1,
// threaded logging must not mix types) that keeps the fewest blocks and
// compares C_TL =
// f_plug·(N_pre-invalid + N_valid) with C_SC = f_copy·N_valid +
// f_write·α·N_valid − f_plug·β·N_cold (per-block costs normalized to one
// on-demand in-storage copy; f_plug = 0.9; f_write = 1 or, with
// Options.HSRCopyCost and HSRWriteCost, the drive's host-write to copy cost
// ratio; N_cold, the valid blocks unchanged since the segment's previous
// TL_open; α, the node and metadata blocks a compaction's checkpoint writes
// per valid block moved, kept apart for node and data victims (§3.3.2: no
// node blocks change when a node segment moves), and β, the share of a segment's cold set at its
// last TL_open still valid at the next one, are profiled at run time as
// moving averages). Stats count why TL was not used: the cost model chose
// compaction (HSRCompaction), the volume refused TL_open (TLRefused), the
// open-zone budget until the next checkpoint was used up (TLNoBudget), no
// segment had enough holes (TLNoCandidate). If TL is
// cheaper the segment is TL-opened with the bitmap of the blocks the drives
// must keep — valid now, or valid at the last checkpoint (pre-invalid: a
// crash would bring their owners back) — and becomes the log's head: the log
// writes runs of the other blocks (holes) in increasing order, the drives
// plug the kept blocks they skip. Only segments closed at the last checkpoint
// and unwritten since ("stable") are candidates, so every kept block is older
// than the checkpoint. Otherwise a fresh v-zone is opened, and compaction
// (the foreground GC, which in zns+ keeps only half the reserve) recycles.
// Pre-invalid blocks are counted; a checkpoint is taken when they reach
// θ_PI (the paper's 128 MiB of 16 GiB, i.e. 1/128 of the user blocks, at
// least a quarter zone) — periodic checkpointing. Compaction destinations
// (IZC) never go to a TL segment (zone_compaction writes at the write
// pointer).
//
// TL crash safety. A TL segment keeps wp = capacity in the tables (every block
// below reads back: valid data or what the log wrote since). A checkpoint
// record lists the TL-opened log heads (a trailing list under the incompat
// superblock bit FeatureThreadedLog, set by every zns+ mount before it writes;
// old builds refuse the image); the head's log position is its cursor, and
// roll-forward scans from it (kept blocks are older than the checkpoint and
// fail the node header's version check). A segment TL-opened after the last
// checkpoint keeps its last hole unwritten until a record names it, so its
// zone can never turn full: the mount recognizes it as an open zone whose
// write pointer is below the segment's written range and scans it whole.
// When a TL head runs out of holes it is finished at once if a record named
// it; otherwise it stays open until the next checkpoint (which writers then
// take) — at most MaxOpen − logs − 2 such segments exist, and TL_open is
// not tried beyond that. A TL_open the volume refuses before changing
// anything (no open zone, no spare flash block group) falls back to a fresh
// zone; any other TL_open error turns the file system read-only.
//
// # Components
//
// FS is a coordinator: it holds the tables (segments with their SIT and
// SSA, the NAT, the inode and page cache, handles, counters) under its
// table lock FS.mu, and delegates to five components, each a field of FS
// with its own lock (or, for write-back, its own condition on FS.mu):
//
//	         FS API (ops.go, file.go, dir.go, sparse.go)
//	           |  admit, begin            |  fsync, checkpointAfter
//	           v                          v
//	+------------------+        +----------------------+
//	| wbScheduler      |        | checkpointer         |  cp.mu (RW)
//	| writeback.go     |        | checkpoint.go        |
//	| budget, tickets, |        | NAT/SIT deltas,      |
//	| flights, flusher,|        | metadata zones,      |
//	| wbOne            |        | recover.go (phases), |
//	+--------+---------+        | fsck.go (checks)     |
//	         | write-back       +----------+-----------+
//	         v                             | node write-back, record
//	+------------------+                   v
//	| logSet           | <-----------------+
//	| seg.go, lanes.go |  lg.mu[log]    +----------------------+
//	| heads, lanes,    | <--------------| recycler             |  gc.mu
//	| appendBlocks,    |  moved blocks  | gc.go, move.go, tl.go|
//	| segment alloc    |                | victims, host copy,  |
//	+--------+---------+                | IZC, threaded        |
//	         |                          | logging, P-GC        |
//	         v                          +----------------------+
//	      Volume  (Write, Compact, OpenZone, Finish, Reset, TLOpen)
//
//	background (health.go, metrics.go): timer (bg.mu), idle recycling
//	and periodic checkpoints through the recycler and the checkpointer.
//
// fsck (fsck.go) is a list of named invariant checks (fsckChecks) run in
// one walk; recovery (recover.go) is a list of named phases
// (recoveryPhases); a recycling move (move.go) and a TL_open (tl.go) are
// named phases too.
//
// The locks in order (taken top to bottom, never upwards):
//
//	gc.mu  ->  cp.mu  ->  renameMu  ->  inode.mu  ->  lg.mu[i]  ->  FS.mu
//	(round)   (checkpoint) (tree)       (per inode)   (per log)      (tables)
//
// The order is checked at run time in tests (lockrank.go): the ranked locks
// record their holder goroutine, and one that blocks on a lock ranked at or
// above one it holds panics. The concurrent stress test runs under the
// checker; ZONEFLEET_LFS_LOCKRANK=1 turns it on for every test of the
// package (it costs microseconds per lock). TryLock is exempt (it never
// waits); inode locks are not ranked.
//
// # Concurrency
//
// Operations on different files run in parallel, and no lock that another
// file's operation, a reader, recycling or a checkpoint needs is held across
// a Volume call on a shared path. The locks, in the only order in which they
// are ever taken (a goroutine holding one never waits for one listed above
// it):
//
//  1. FS.gc.mu: one recycling round at a time. Foreground recycling waits for
//     it (a writer that finds the reserve short waits for the round in
//     progress); background recycling only tries it.
//  2. FS.cp.mu, the checkpoint lock (RWMutex). Every mutating operation and
//     recycling's move phase hold it shared for their whole duration,
//     including their I/O; a checkpoint holds it exclusively, so it sees no
//     half-done operation (the checkpoint record, the NAT and SIT deltas and
//     the node blocks it wrote agree). Readers (Lookup, Getattr, Read,
//     Readdir, Readlink, Getxattr, Listxattr, Statfs, Open without O_TRUNC)
//     never take it: checkpoints and recycling never block reads.
//  3. FS.renameMu: renames, so that the tree's shape does not change while a
//     rename locks its parents.
//  4. inode.mu, per inode: serializes the operations that change one inode
//     (its attributes, names, pages, direct nodes). Parent directory before
//     child; a rename locks the two parents ancestor first (otherwise by
//     inode number), then the source and the replaced target by inode
//     number. Recycling holds one inode lock at a time, to commit one block.
//     An operation holds its inode locks across its own I/O (a miss on a
//     node, a read-modify-write of a partial page, its fsync): that waits
//     only for operations on the same inodes, never readers.
//  5. FS.lg.mu, per log: appends to one log's zone, which takes writes only
//     at its write pointer (or, threaded logging, into its holes in
//     order). Held across that log's Write or Compact (and the
//     OpenZone/Finish of its segments, or the TL_open of a dirty segment
//     the log takes over: it is claimed as the head under fs.mu first, so
//     recycling, freeing and other logs keep off it), never by readers.
//     It is lane 0 of the log; a data log's extra write lanes (lanes.go)
//     are held the same way but marked busy under fs.mu (xlane.busy, a
//     cond on fs.mu), so an append waiting for a lane holds no other lock
//     of this list but the checkpoint lock shared.
//  6. FS.mu, the table lock (inode cache, NAT, SIT/SSA, segments, log heads,
//     handles, counters, page cache maps and contents). Short, CPU-only
//     critical sections: FS.unlocked releases it around EVERY Volume call.
//
// What the released table lock means for each kind of state:
//
//   - Blocks being read are pinned (segment.pins): a checkpoint that frees
//     a segment waits for its pins to drop before resetting the zone, so a
//     reader that resolved a block address and then lost the race with a
//     writer or with recycling reads the old, still intact block.
//   - Write-back. A write copies into the page cache and returns. Once a
//     batch (one zone, at most 4 MiB) of dirty pages is not yet in flight, the write-back
//     goroutines (one per write lane) are woken; each writes back one batch
//     at a time while there is one, so with two lanes two write-backs of
//     one log are in flight on different segments while writers copy. A
//     write is admitted, before it takes any lock, only while the dirty
//     pages plus the pages of the writes admitted before it stay within
//     twice the dirty budget (a quarter of Options.CacheBlocks, at most one
//     zone per lane), in arrival order (a large write is not starved by
//     small ones); the writer at the head waits for a write-back in flight
//     to commit or an admitted write to end, or writes back one batch
//     itself when neither runs. So dirty pages stay bounded however many writers
//     run at once, and twice the budget is kept two segments below the GC
//     reserve: the bulk write-backs of fsync and the checkpoint run under
//     the checkpoint lock and cannot recycle, so the dirty pages must fit
//     in the reserved segments. The write-back goroutines check the reserve
//     (foreground GC) before every batch, as writers do before every
//     operation.
//     Write-back takes an inode's lock only to take its dirty pages'
//     buffers, per log, and mark them in flight (page.inflight, version
//     page.gen). It makes no copy: a page buffer never changes once cached
//     (a write swaps in a new one, setPage), so the buffers are handed to
//     the volume as they are (VectorWriter; a volume without it gets them
//     gathered into a pooled buffer, pkg/bufpool, given back after a write
//     that succeeded) and may be read by the volume after the write-back
//     ended (an abandoned network attempt). It writes with no inode lock (a
//     lane of the log and the checkpoint lock shared only), then retakes
//     the inode lock to commit: a page still cached is repointed at its new
//     block and is clean unless it changed since it was taken; a page truncated
//     or deleted meanwhile leaves its block invalid. Until the commit the
//     written blocks' segment counts them as pending and is no recycling
//     candidate, and readers read the dirty page from the cache. fsync
//     waits for the write-backs of its inode in flight (inode.flights: on
//     whatever lane, each has committed, so its blocks are on the drives
//     modulo the Flush that follows and its direct nodes dirty), then
//     writes what is still dirty, flushes the volume, and only then writes
//     its dirty direct nodes and the inode with the fsync mark, in one
//     write with FUA (F2FS's PREFLUSH and FUA on the last node: one round
//     trip instead of a write and a second Flush): a power loss may keep
//     any subset of the blocks written since the last Flush, roll-forward
//     trusts the block addresses of every node up to the marked one, and it
//     takes the marked inode only when every direct node of its write
//     survived (nodeFlagBatch; else the inode stops at its previous fsync).
//     When the inode's dirty nodes go to different node logs (a direct node
//     moved by recycling lives in the cold node log), the direct nodes are
//     written before the Flush and the marked inode alone after it. No
//     other node of the inode can be written between the Flush and the
//     marked inode (fsync holds the inode's lock and the checkpoint lock
//     shared; recycling skips a locked inode), so the nodes of that last
//     write are all that still needs to reach stable media. It
//     returns once everything it covers is on the drives. A file whose names changed
//     since the last checkpoint (created, linked, renamed, unlinked) and a
//     directory need a checkpoint instead (roll-forward does not rebuild
//     directory entries); it runs once the operation released its locks,
//     and concurrent requests share it (checkpointAfter: a checkpoint begun
//     after a request's changes answers it; group commit,
//     zonefleet_fs_checkpoint_requests_shared_total). A file with no name
//     left (unlinked while open, O_TMPFILE not linked yet) only has its
//     data written and flushed: no crash brings it back. On the virtual clock there is
//     no write-back goroutine, one lane per log and no read-ahead
//     (reproducible runs: the power-loss tests replay a seed's crash
//     points exactly).
//   - Write lanes (lanes.go). The file data logs (warm and cold data) have
//     Options.WriteLanes lanes (two by default): lane 0 is the log's head,
//     each extra lane writes its own fresh segment, opened only while the
//     volume has an open zone and free segments to spare (else its appends
//     go to lane 0). A block is placed
//     (mapped, valid, in the SSA) only after the Write that carried it
//     returned, under fs.mu, whatever the lane: no node, checkpoint or
//     reader ever sees an address whose write is still in flight, and a
//     write that fails closes that lane's segment only. Checkpoints record
//     lane 0 as the log head and the extra lanes' segments as ordinary
//     segments with their write pointers; after a crash the mount finishes
//     them like any zone written since the checkpoint, and roll-forward
//     accepts the blocks fsynced nodes name below their zones' write
//     pointers. zonefleet_fs_log_writes_in_flight{log} counts the Volume
//     writes in flight per log.
//   - Page contents are never changed in place once cached: a write,
//     truncate or punch hole puts a new buffer in the page (setPage). So a
//     read takes the page references under the table lock and copies large
//     runs (64 KiB and more) with it released, ReadVec hands the references
//     themselves out (the FUSE binding writes them to the kernel with one
//     writev, no copy in between: a page buffer, once cached, is never
//     written again nor reused, and the garbage collector frees it when the
//     last reader lets go), and write-back scans only the inode's dirty pages
//     (inode.dirtyBlks), not every cached page, and finds the inodes that
//     have any in an index sorted by inode number (dirtyidx.go), kept under
//     the table lock where an inode's first page becomes dirty and its last
//     one clean or dropped, not by scanning the inode cache.
//   - Read-ahead (readahead.go): a sequential read starts one goroutine per
//     inode that reads the next window (Options.ReadAheadBlocks, 1 MiB by
//     default) with no lock held and inserts clean pages only where no page
//     is cached and the file still maps the block read; the page cache
//     stays bounded (clean pages are dropped first). The window starts past
//     the blocks already cached: re-reading a cached file starts nothing.
//   - Cache misses (inodes, direct nodes, directory indexes) read with the
//     table lock released and then revalidate: what another goroutine loaded
//     meanwhile wins, and a NAT entry that moved means reading again.
//   - Recycling reads victim blocks with no lock held (P-GC: its workers,
//     started and waited for by the GC goroutine with fs.mu released and the
//     victim pinned, call only Volume.Read and fill their own buffers; the
//     first error cancels the others and fails the round, which keeps the
//     victim; on a modelled clock that is an lfs.TurnClock the workers take
//     turns on the GC goroutine, each at its own modelled time, so their
//     reads overlap in modelled time and runs stay reproducible; on another
//     virtual clock the reads are never split), then, for each block,
//     takes the owning inode's lock and the table lock and checks that the
//     block is still valid, still owned by the same node entry and still
//     mapped at the victim; only then does it mark the page dirty (host copy)
//     or repoint the mapping at the device-side copy (IZC). A block
//     overwritten, truncated or deleted meanwhile is not moved (its IZC copy
//     stays an invalid block). Writers keep writing during the move; only
//     the checkpoint that closes the round excludes them briefly.
//   - The inode cache never drops an inode an operation holds or waits for
//     (inode.busy); a deleted inode is marked gone and an operation that
//     locked it starts over (ENOENT).
//
// Background work (idle recycling, periodic checkpoints) runs on one
// background goroutine on a real clock. On the virtual clock a tick fires
// inside whatever goroutine advances the clock (possibly an operation's own
// I/O wait), so it runs the work in place only if it gets the GC and
// checkpoint locks without waiting, and skips the tick otherwise.
//
// # Failure behaviour
//
// Read-only fallback (readonly.go): when a write or metadata call fails in a
// way that would let the tables diverge from the drives — a checkpoint or
// snapshot record that cannot be written, the reset of the previous
// metadata zone or of a freed segment, the Finish of a segment (or of a TL
// segment), a TL_open in an unknown state, a roll-forward that finds the
// drives disagreeing with the checkpoint (the newest checkpoint is then
// mounted read-only) — the file system goes read-only: every mutating
// operation returns a *ReadOnlyError (EROFS), reads keep working, background
// work stops, zonefleet_fs_read_only is 1 and one ERROR line says why
// (Stats.ReadOnly, `zctl fs stat`). Nothing acknowledged is lost; unmount
// and mount again once the fault is fixed. Cancellation and a closed volume
// are not reasons (the process is going away), and neither is a node that
// stays unavailable past the retry deadline (zerr.ErrUnavailable, a
// deadline): such a checkpoint record write fails the fsync or checkpoint
// that asked for it and the next checkpoint starts a new metadata zone with
// a full snapshot (the record may or may not have landed; both are
// checkpoints of states that existed, and the segments it frees are kept
// away from threaded logging until a checkpoint succeeds); such a Finish or
// Reset is deferred and retried at every checkpoint, a zone waiting for its
// reset counted as used (ENOSPC rather than EROFS when an outage lasts).
// The file system then recovers by itself when the node returns.
//
// A Volume error in a write-back or checkpoint leaves the pages dirty and
// the old mapping in place: the operation returns EIO and nothing that was
// acknowledged by fsync is lost. A checkpoint that fails after writing
// nodes (unmarked, and covered only by its record, which may be lost) marks
// their inodes dirty again, so that the next fsync writes them with the
// fsync mark rather than finding nothing to write. A write that failed
// part-way closes that log's zone (its write pointer is unknown) and
// continues in a new one. A mirrored v-zone that lost a copy answers
// writes with a degraded zerr.ZoneStateError: the write continues in a new
// segment at once (retried with short waits while the arbiter may still
// place new segments on the lost node), so writes ride through the loss of
// a node. A failed IZC copy closes the destination zone; the victim keeps its blocks
// and is chosen again later. Retrying transient Volume errors
// (zerr.ErrUnavailable) happens in one wrapper around the Volume.
package lfs
