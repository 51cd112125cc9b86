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
// sequence in every node header), deletes orphans and checkpoints.
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
// segments are outside it). Write keeps a write-back reserve
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
// the host, clean cached ones per Options.CachedWrite (IZC-H) or copied on the
// device (IZC-D). Every recycling round ends with a checkpoint, after which the
// emptied victims are reset.
//
// # Concurrency
//
// Operations on different files run in parallel, and no lock that another
// file's operation, a reader, recycling or a checkpoint needs is held across
// a Volume call on a shared path. The locks, in the only order in which they
// are ever taken (a goroutine holding one never waits for one listed above
// it):
//
//  1. FS.gcMu: one recycling round at a time. Foreground recycling waits for
//     it (a writer that finds the reserve short waits for the round in
//     progress); background recycling only tries it.
//  2. FS.cpMu, the checkpoint lock (RWMutex). Every mutating operation and
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
//  5. FS.logMu, per log: appends to one log's zone, which takes writes only
//     at its write pointer. Held across that log's Write or Compact (and the
//     OpenZone/Finish of its segments), never by readers.
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
//   - Write-back. A write copies into the page cache and returns. Past the
//     dirty budget (a quarter of Options.CacheBlocks, at most one zone) the
//     write-back goroutine is woken; past twice the budget a writer writes
//     back itself (so dirty pages stay bounded). Write-back takes an inode's
//     lock only to copy its dirty pages into one buffer per log and mark them
//     in flight (page.inflight, version page.gen), writes with no inode lock
//     (the log's lock and the checkpoint lock shared only), then retakes the
//     inode lock to commit: a page still cached is repointed at its new
//     block and is clean unless it changed since the copy; a page truncated
//     or deleted meanwhile leaves its block invalid. Until the commit the
//     written blocks' segment counts them as pending and is no recycling
//     candidate, and readers read the dirty page from the cache. fsync
//     waits for the write-backs of its inode in flight (inode.flights), then
//     writes what is still dirty and the dirty direct nodes, flushes the
//     volume, and only then writes the inode with the fsync mark and
//     flushes again (F2FS's PREFLUSH on the last node): a power loss may
//     keep any subset of the blocks written since the last Flush, and
//     roll-forward trusts every node up to the marked one. It returns once
//     everything it covers is on the drives. On the virtual clock there is
//     no write-back goroutine and no read-ahead (reproducible runs: the
//     power-loss tests replay a seed's crash points exactly).
//   - Read-ahead (readahead.go): a sequential read starts one goroutine per
//     inode that reads the next window (Options.ReadAheadBlocks, 1 MiB by
//     default) with no lock held and inserts clean pages only where no page
//     is cached and the file still maps the block read; the page cache
//     stays bounded (clean pages are dropped first).
//   - Cache misses (inodes, direct nodes, directory indexes) read with the
//     table lock released and then revalidate: what another goroutine loaded
//     meanwhile wins, and a NAT entry that moved means reading again.
//   - Recycling reads victim blocks with no lock held, then, for each block,
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
// A Volume error in a write-back or checkpoint leaves the pages dirty and
// the old mapping in place: the operation returns EIO and nothing that was
// acknowledged by fsync is lost. A write that failed part-way closes that
// log's zone (its write pointer is unknown) and continues in a new one. A
// failed IZC copy closes the destination zone; the victim keeps its blocks
// and is chosen again later. Retrying transient Volume errors
// (zerr.ErrUnavailable) happens in one wrapper around the Volume.
package lfs
