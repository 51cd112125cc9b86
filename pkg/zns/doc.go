// Package zns is the ZNS+ drive emulator: a real, file-backed zoned SSD with
// the NVMe ZNS command set plus the ZNS+ extensions (identify_mapping,
// zone_compaction, TL_open), budget-based in-place updates (ZMS) and a
// FEMU-style timing model. It knows nothing of gRPC, etcd or Prometheus; the
// node service maps its RPCs 1:1 onto Device methods. Errors are pkg/zerr
// typed errors; bad input never panics and changes nothing.
//
// # Model
//
// Geometry (pkg/flash.Config): channels x ways chips; each chip has
// blocks_per_chip flash blocks of pages_per_block pages of page_size bytes (a
// page is a chunk, the copyback unit, page_size/block_size logical blocks).
// Chips are split into N_FCG = chips/d_zone flash chip groups; zone i lives in
// FCG i mod N_FCG, on one flash block group (FBG: the same block index on each
// of the FCG's d_zone chips). Chunk j of a zone is on chip (j mod d_zone) of its
// FCG, page j div d_zone (ZNS+ §2.2). FBGs are allocated when a zone first
// opens (least-erased free FBG: wear levelling) and released on reset; the
// release is cheap for the host (reset_latency) while the erase is booked on
// the chips in the background (lazy erase, eZNS §3.7). spare_blocks_per_chip
// FBGs per FCG are not exposed as zones: they hold TL LogFBGs. IdentifyMapping
// returns the chunk-address bit fields (chip ID, FCG ID) so a host can tell
// which chip a chunk is on without knowing the FBG mapping.
//
// Zone states and transitions follow NVMe ZNS: empty, implicitly/explicitly
// open, closed, full, read-only, offline. Writes to empty or closed zones
// open them implicitly; MOR/MAR (max_open_zones/max_active_zones) are checked
// on every open (implicit opens count) and a write that would exceed them
// fails with zerr.TooManyOpenError/TooManyActiveError (the device never closes
// a zone by itself). ActionReadOnly and ActionOffline are fault injections.
// Close of an open zone whose write pointer is at the start makes it empty.
//
// Reads: any LBA of a non-offline zone may be read. Blocks at or above the
// write pointer, or never programmed below it (after a finish, or a gap left
// by zone_compaction), read as ZEROES, not an error. In a TL_opened zone the
// blocks at or above the write pointer still read from the original FBG.
// ReadInto reads into the caller's buffer (a server's pooled buffers);
// ReadV reads several ranges into one buffer as one command with a scatter
// list: their flash reads are modelled from one submission time and the
// call waits once, for the slowest.
//
// zone_compaction (ZoneCompaction/WaitCompaction): whole chunks whose source
// and destination are on the same chip are copied by copyback unless the
// page's consecutive-copyback count reached copyback_threshold (or
// disable_copyback is set), everything else by read and program. The data
// moves when the command is submitted, staged in runs of up to 1 MiB: a read
// per source chunk under the source zone's lock, then one write and one
// write-pointer slot per contiguous destination run (readers of a
// destination zone see its write pointer advance run by run); its flash work is an asynchronous job
// booked on the clock one destination chunk at a time per destination chip
// (sched.go), so user requests to the same chips are served between the
// pieces instead of waiting for the whole compaction, and the compaction's
// completion includes the time it yielded to them. The destination zones
// refuse host writes until the job ends (ZoneStateError) but serve reads;
// other zones are unaffected. WaitCompaction drives the virtual clock to
// the job's end; under NoWait the rest of the job is booked at once. The
// plugging that ends threaded logging (close, finish, a full TL zone) is
// such a background job too; on-demand plugging inside a host write is
// booked with the write, which completes after it.
//
// TL_open (ZNS+ §3.2.2): a LogFBG is allocated and the write pointer goes back
// to the zone start. LogFBGs come from the FCG's spares only: once each spare
// holds one, TL_open is refused with zerr.NoResourcesError and changes
// nothing, so every zone of the FCG that holds no FBG (empty, or finished
// empty) still opens; the host logs to a fresh zone instead. Host writes must be at or above the write pointer and
// only touch blocks not marked valid (else zerr.TLViolationError). Skipped
// valid blocks are plugged: LBA-ordered mode plugs the run of valid blocks
// after each write (the write pointer moves past it); PPA-ordered mode also
// copies fully valid chunks ahead of the write pointer in the background when
// their chip is idle and the lower pages of that flash block are programmed.
// Close, finish, set read-only (and a reopen after a crash) finish the TL
// zone: remaining valid blocks are plugged, the LogFBG becomes the zone's FBG
// and the write pointer moves past the last valid block (or stays at the
// last acknowledged write, if that is further); invalid blocks never
// written since TL_open read as zeros from then on.
//
// Reopen: a zone whose threaded logging the host ended (finish, or a write
// filling it), durably (a later Flush or FUA write) or before a process
// kill, reopens full with the LogFBG's data. One still TL_opened when the
// process died or the power went out reopens closed and no longer
// TL_opened, its write pointer past the last valid block and every write
// that survived (after a kill every acknowledged one, after a power loss at
// least the durable ones). It stays closed even when that is the capacity
// (only a finish, or a host write reaching the capacity, makes a zone
// full), so a host can tell a zone whose threaded logging the reopen ended
// from one it finished itself (pkg/lfs's mount relies on it). Every valid
// block and every hole write made durable (FUA or a Flush) reads back;
// TestTLReopen and the seeded crash-point test TestTLCrashPoints check this
// at random file operations (power loss and kill).
//
// IPU blocks of a TL_opened zone stay counted until the host overwrites them
// or threaded logging ends.
//
// In-place update (Flags.Overwrite to written blocks of a sequential zone)
// goes to a page-mapped SLC region of ipu_region_blocks while the number of
// valid IPU blocks stays within ipu_budget_blocks, else zerr.IPUBudgetError.
// The per-zone map is multi-granularity: a chunk whose blocks map to an
// aligned run of region slots is one chunk entry, the rest page entries.
// An in-place update is durable when it returns, FUA or not (it serves
// fsync): its slots are synced before the journal records that map them,
// and the records are synced before the slots they supersede are freed for
// reuse, so a power loss at any point leaves each block its old or its new
// contents.
//
// L2P cache model (WithL2P): the emulator keeps its maps in memory, but a
// mobile-class controller has a few MiB of SRAM and loads its map on
// demand (ZMS §2.1). With WithL2P every read first looks up the map pages
// of its blocks in an LRU of L2PConfig.CacheBytes; each miss is a flash read
// of the map page (on chip page mod chips) before the data reads start.
// The granularity sets how many blocks one entry covers: page (the
// block-interface baseline), chunk, or zone (what sequential zones need;
// in-place updated blocks have their own small, resident IPU map). Log's
// L2PLookups and L2PMisses count them.
//
// Write-buffer model (WithWriteBuffers): n volatile superpage buffers and
// no power-loss protection. What a buffer holds when a FUA write, a Flush
// or another zone's write empties it early is programmed to SLC first
// (Log.SLCBufferedBlocks) and the operation waits for those programs; a
// zone written in whole superpages never is. Off by default.
//
// # Timing
//
// With a virtual or realtime clock every chip and channel has a next-free
// time (lock-free CAS); an operation starts at max(ready, free). Reads: page
// read on the chip then DMA on its channel, then the host link. Writes: host
// link, admission into the shared write cache (a write waits when the cache
// is full until enough earlier data has been programmed; with
// write_cache_die_bytes also until each die it writes has room: its bytes
// per chip go to flash.Model.CacheAdmitDies; with write_cache_queues only
// until the queue of its zone, zone index mod queues, has room: each queue
// has its own lock, so writers of different zones do not serialize on
// the cache), then one program
// per completed chunk on its chip; the write completes at admission (at the
// last program with FUA or without a cache). Copyback holds the chip for
// copyback_ratio x (read + program) and never uses the channel; read and
// program is chip read, channel DMA out, channel DMA in, chip program (see
// pkg/flash). disable_copyback copies every chunk by read and program. Each call returns an IOResult
// (modelled submit/complete) and waits on the Clock until the completion,
// except under NoWait(ctx). The off clock skips the model entirely.
//
// # Concurrency of the write path
//
// A write holds its zone's lock (zone.mu) from the write-pointer check to
// the write-pointer slot: writes to one zone are serialized, writes to
// different zones run side by side. Below it the write path takes a
// device-wide lock only when a zone changes state (resMu for the open and
// active counts, an FCG's allocator for a new FBG, the journal's lock for
// the record), not per write; the chip, channel and host-link bookings are
// lock-free (pkg/flash). What remained per write was the model's write
// cache, one mutex per drive: with write_cache_queues the zone's write
// takes only its queue's (zone index mod queues; the zone's admissions and
// releases all go to that queue, so its accounting never mixes with
// another's). Writes to the same queue keep their arrival order; the
// bytes a zone's write stores and when it is acknowledged or durable do
// not depend on the cache at all (the data file and the write-pointer
// slot are written before the timing is modelled).
//
// # Persistence
//
// The store reaches its files only through a vfs.FS (WithFS; the operating
// system by default, vfs.NewCrashableMem and vfs.WithErrors in tests). path
// holds a 4 KiB header (magic, format version, device UUID, geometry,
// compat/ro_compat/incompat feature bits, CRC32C), a write-pointer table (two
// CRC32C slots per zone, written after the data of every write: the
// acknowledgement point; the in-memory write pointer moves only once its
// slot is written), the IPU region and the flash blocks at fixed offsets
// (by flash block group, its chips' pages interleaved, so that a zone is
// contiguous in the file and one write of it is one pwrite whatever its
// stripe — incompat feature bit 0; a drive made before it keeps its
// chip-major layout, see layout.off; sparse; an FBG that may hold data of an earlier life is zeroed —
// fallocate ZERO_RANGE, see vfs.OS — and synced when it is allocated, so a block below a write pointer never reads
// as another zone's old data, even after a power loss; a released FBG keeps
// its data, and its page cache, until then, or until an allocation that
// takes a clean FBG punches it: pages freed just before the new zone's
// writes need as many, which a VM that hands freed memory to its host would
// otherwise make those writes fault in again, see Device.allocFBG). path.journal holds
// records of zone state changes, FBG erase counts and IPU mappings in frames
// carrying a length, a sequence number and a CRC32C over the journal's epoch,
// the sequence number and the payload; its header has the format version,
// UUID, feature bits and epoch. Open checks the header (a foreign file or
// bad checksum is a zerr.CorruptError, other geometry a
// zerr.GeometryMismatchError, unknown incompat or ro_compat feature bits an
// ondisk.FeatureError; unknown compat bits are ignored), replays the journal
// up to its first short, mis-sequenced or mis-checksummed frame (a torn,
// zero-filled or garbage tail is the end of the log, logged and counted in
// Log.JournalTailsDropped; a frame that checks but does not decode is
// corruption), verifies the write pointers against the journal (generation,
// capacity, state; a slot ahead of an open record that never reached the
// disk is ignored, and the zone moves to a new generation so that the slot
// never counts again, even if a later incarnation loses its own slots),
// re-plugs the valid blocks of TL zones below their write
// pointer from the original FBG (the slot may have reached the disk before
// the plugged copies), ends their threaded logging (see Reopen above),
// closes zones that were open, and rewrites a compacted journal (a new
// epoch). TL crash safety rests on three orderings: the journal record of
// TL_open (the new generation, LogFBG and original FBG, bitmap) is durable
// before the first write-pointer slot of that generation; ending threaded
// logging fdatasyncs the plugged copies, then journals (and syncs, through
// the new generation's first slot) the zone without its original FBG, and
// only then releases that FBG (punched when allocated again, above); a freshly allocated LogFBG is scrubbed
// (see below), so a hole that was never written reads as zeros, not as data
// of the FBG's earlier life. Version 1
// devices (no feature bits, unsequenced frames) are read and upgraded.
//
// Durability: an acknowledged write is in the page cache (it survives a
// killed process). Flush, and Write/Append with FUA, fdatasync the data file
// and, when it has records no sync covers yet, the journal, both at once (one
// round of host syncs, not two in a row): everything acknowledged before
// survives a power loss once both returned. No journal record relies on
// the data file being synced first: the kernel may write a journal page
// back before the data at any time, so a record that needs its data durable
// first (an IPU mapping, TL finish, a reused FBG) syncs that data itself
// before it is appended, and a power loss between the two syncs of a round
// leaves what an unsynced write-back may leave anyway (TestPowerLossBetweenSyncs
// cuts the power there, in both orders and with the syncs concurrent).
// Without them a power loss may keep any subset of the unflushed writes; the
// device still opens, with write pointers no further than data of the
// current zone generation. Some commands sync on their own: a reset syncs
// the data file, then its journal record (a reset is durable when it
// returns; the data file was just synced, so the journal sync has nothing
// queued in front of it); the first write of a generation made by TL_open
// or TL finish waits for the journal record of the generation; TL finish
// syncs the plugged copies before dropping the original FBG. The first
// write after a reset does not wait: the record of the flash blocks it
// opens the zone on is synced by the next Flush, FUA write or SyncZone,
// and a power loss before that drops the write-pointer slot ahead of the
// (durably) empty zone — never the reset, so never the old data back.
// Every WithWritebackKick bytes written (4 MiB by default) the device starts
// the data file's write-back to the disk without waiting (sync_file_range),
// on a goroutine, one at a time: a hint that changes when the disk works,
// not what survives, so that a Flush after a large write has less to write.
// Journal checkpoints snapshot the state with every zone locked (memory
// only), write and sync the new file with no lock held, then, under the
// journal lock, copy the records appended meanwhile, rename and sync the
// directory. Copyback chain counts and PPA-plugged-ahead chunks are not
// persisted.
//
// Failures: see IOError. A failed write of a zone's data, slot or IPU block
// makes that zone read-only at its old write pointer; a failed journal
// append, fsync or journal directory sync makes the device read-only; a
// failed read changes nothing. The caller gets an *IOError (errors.As finds
// a *zerr.UnavailableError), Log counts io_errors, zones_failed,
// journal_checkpoint_failures and read_only, and one slog error line is
// written.
//
// # Knobs
//
// Every field of flash.Config is a JSON field and can be a CLI flag; geometry
// fields are fixed at Create, the rest (limits, latencies, cache size, IPU
// budget, copyback threshold, host link) can change at Open or with SetConfig.
// Media presets TLC/MLC/ZNAND fill zero latencies from ZNS+ Table 2.
package zns
