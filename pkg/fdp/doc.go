// Package fdp is an NVMe Flexible Data Placement (TP4146) SSD emulator: a
// file-backed, page-mapped FTL for a conventional (random-write)
// namespace, on the same flash geometry and timing model (pkg/flash) and
// the same file layer (pkg/vfs) as the zoned drive of pkg/zns. It knows
// nothing of gRPC or etcd. Errors are pkg/zerr typed errors; bad input
// never panics and changes nothing.
//
// # Model
//
// The chips (channels x ways, pkg/flash.Config) are split into
// ReclaimGroups reclaim groups of consecutive chips. A reclaim unit (RU)
// is one flash block on each of RUChips chips of a group (0: all of
// them), filled chunk by chunk across its chips (chunk j on chip j mod
// width, page j div width: the striping of a zone); its blocks are the
// least-erased free blocks of the chips with the most free blocks. RUChips
// can change at run time (SetRUChips): units opened later take the new
// size, so the reclaim unit nominal size of the configuration log page is
// the current one. Config.Handles are the reclaim unit handles, the same
// set in every group; a write names a placement identifier (group,
// handle) and goes to the unit that handle of that group references,
// which opens a fresh unit when it fills. UpdateHandles points handles at
// fresh units (I/O Management Send, RUH Update); a unit retired unfilled is
// an EventRUNotFullyWritten.
//
// Garbage collection is device-side and foreground: before a handle opens
// a unit, its group collects until it keeps (2 + 1) x width free blocks.
// The victim is a closed unit of the group with no write in flight:
// greedy (fewest valid LBAs) or cost-benefit (largest age x (1-u)/2u, age
// in host writes since the unit was last written; SetVictimPolicy). Valid
// data moves per handle type: an initially isolated handle's data goes to
// the group's one shared GC unit (mixed with the other initially isolated
// handles' data), a persistently isolated handle's to that handle's own
// GC unit, so its data never shares a unit with other data. A move is a
// copyback when source and destination are on one chip (unless
// DisableCopyback), else a read and program; every victim with data moved
// is an EventMediaReallocated. Over-provisioning (OverProvision) is the
// flash outside the LBAs; Validate and SetRUChips refuse a configuration
// whose spare flash cannot hold every open unit plus the reserve.
//
// Counters: the statistics log page (host bytes written, media bytes
// written, media bytes erased; WAF = media / host), GC copies and
// copybacks, per-handle usage (host bytes, GC bytes moved, units used,
// valid LBAs, the referenced unit and its remaining bytes) and a bounded
// event log (the newest 1024). LBAStatus reports which LBAs are mapped,
// as runs (in the spirit of NVMe Get LBA Status): read-only, no flash time.
//
// # Timing
//
// With a virtual or realtime clock, a write books the host link, the
// shared write cache and one program per completed chunk on its chip
// (FUA: also the partial last chunk, and the write completes at the
// program); GC moves and erases are booked at the write's arrival and the
// write completes after them. A read books a page read per distinct page
// and the host link. The drive models a power-loss-protected write buffer:
// a flush does not pad partial pages. Calls wait on the Clock for the
// modelled completion except under NoWait.
//
// # Persistence
//
// The data file holds a 4 KiB header (magic, format version, UUID,
// geometry, handle types, compat/ro_compat/incompat feature bits of
// pkg/ondisk, CRC-32C), an out-of-band table (64 bytes per physical LBA:
// the LBA, the sequence number of the host write the data came from, the
// reclaim unit, group, handle, a GC-move count, the data's CRC-32C and
// the record's own) and the flash, one block per physical LBA. A write
// puts its data and out-of-band records in the file before it is
// acknowledged: a killed process loses nothing acknowledged. path.journal
// holds a header (magic, version, UUID, feature bits, CRC-32C) and 32-byte
// checksummed records: trims (range and sequence number) and the
// statistics at every Flush. Flush and FUA fdatasync the data file, then
// the journal: everything acknowledged before survives a power loss.
//
// Open rebuilds the mapping from the flash, as a drive rebuilds its map
// from its pages' spare areas: an intact out-of-band record whose data
// matches its checksum is a candidate for its LBA; the newest (sequence
// number, then GC moves: a moved copy beats its source) wins; a trim
// record newer than the winner unmaps the LBA. A torn record or torn data
// is no candidate, so after a power loss every LBA holds its last durable
// content or a newer acknowledged one. This rests on one ordering, the
// erase barrier: garbage collection fdatasyncs its copies and the journal
// before it frees the blocks they came from, so a block is rewritten only
// once every LBA it held has a newer durable winner. GC copies keep the
// sequence number of the host write, so a write in flight while its LBA
// is moved still wins. Blocks holding no winner are free; the others form
// closed reclaim units (by reclaim unit id), each unfilled one an event.
// Open and Close then write a compacted journal (statistics and, at a new
// sequence number, a trim of every unmapped LBA) atomically. Erase counts
// and the FTL counters other than the statistics log page start again at
// Open.
//
// # Concurrency
//
// One mutex guards the maps, the reclaim units and the counters. Host
// writes take slots and sequence numbers under it, write data and
// out-of-band records with no lock held (a unit with writes in flight is
// never a GC victim) and publish the mapping under it (an older sequence
// number never replaces a newer one). Reads look up and pin the blocks
// under it and read the file with no lock held; a block erased while
// pinned is freed by its last reader. Garbage collection runs inside the
// write that needs space (foreground, as on a real drive: that writer
// waits for it), one collector per reclaim group; a writer of the same
// group that needs a unit meanwhile waits for it, every other command
// goes on. A collection snapshots its victim's valid LBAs and takes their
// GC slots under the mutex, copies the data and out-of-band records with
// no lock held (the victim is closed and only its collector erases it,
// so its data stays readable), publishes under the mutex each copy whose
// LBA still maps to the slot it was copied from (an LBA written or
// trimmed meanwhile keeps the newer content, which also has the higher
// sequence number at recovery), and makes the erase barrier durable with
// no lock held before it frees the victim's blocks. Trims append their
// journal record under the mutex. Close waits for the commands in flight.
//
// # ZNS and FDP on one drive (design)
//
// The drive and pkg/zns share the flash geometry, the timing model and the
// file layer. WithModel makes the device book on another device's
// flash.Model (same chips, channels and chunk size): its reads, programs,
// GC copies and erases queue behind the other device's operations on each
// chip and channel, on the host link and in the write cache, and the
// reverse (the model's resources are CAS-booked FIFOs). The chips' time is
// then shared; their blocks are not: each device keeps its own backing
// file and block pool, as a drive that partitions every die's blocks
// between its namespaces. Serving zoned and FDP namespaces from one drive
// over one chip pool and one garbage collector takes further:
//
//   - The zoned drive's model handed to the FDP device on one clock: done
//     by the node's --fdp-on-zoned (zns.Device.Model). The FDP collector
//     books a victim's copies at once, at the collecting write's arrival;
//     pkg/zns books its compaction piecewise, which would interleave the
//     two devices' work more finely.
//   - One block allocator: a chip's flash blocks are handed out to zone
//     FBGs (whole block groups across d_zone chips) or to reclaim units
//     (one block per chip) from one free list with erase counts, so wear
//     levelling and the spare pool are the drive's, and a namespace's
//     capacity is a block budget. The backing file keeps one flash region;
//     the out-of-band table covers it, zoned blocks marked by a record
//     kind so that Open's scan leaves them to the zoned journal.
//   - One collector: zoned namespaces have no device GC (the host resets
//     and compacts zones); the FDP collector works only on reclaim units,
//     but its free-block target counts the zoned namespaces' pending lazy
//     erases, and its copies use copyback when source and destination are
//     on one chip, as zone_compaction does.
//   - Namespaces, as they are on an FDP drive of its own (pkg/arbiter's
//     fdp.go): `zctl ns create --kind fdp --capacity ... --handles ...`
//     grants an LBA range of one drive and exclusive placement handles (a
//     tenant's placement ids map to the drive's handles, so two tenants
//     never share one), enforced by the node; pkg/client writes with a
//     placement id. On a shared chip pool the grant would be a block
//     budget instead of an LBA range. lfs would map its logs (hot/warm/cold
//     node and data) to placement ids, as F2FS maps write hints to
//     streams, through an lfs.Volume over an FDP namespace.
//
// # Failure
//
// A failed file write or sync makes the device read-only: every later
// write, trim and flush returns a zerr.UnavailableError, and Open
// recovers from what reached the file. A failed read returns an error and
// changes nothing. Bad arguments (LBA range, placement identifier, sizes,
// configuration) are zerr.OutOfRangeError or zerr.InvalidArgumentError.
package fdp
