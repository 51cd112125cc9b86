// Package fioengine is the Go half of ZoneFleet's fio engine
// (cmd/zonefleet-fio): it presents a drive of a node, or a tenant's
// v-zones, as a host-managed zoned device to fio's --zonemode=zbd, and runs
// fio's I/O against it through pkg/client.
//
// # Targets
//
// A drive target (Options.Node or Addr, Device) is one drive, reached with
// the admin credential the way `zctl zone` reaches it: its zones are fio's
// zones, with the drive's zone size, zone capacity (which may be below the
// size: fio then writes only the capacity) and open-zone limit (MOR).
// Zones the arbiter granted to a namespace are the namespace's data: point
// a drive job at zones no namespace holds (fio's offset= and size=), or at
// a cluster used for nothing else.
//
// A v-zone target (Options.Namespace) is a namespace with the tenant's
// credential: zone i is v-zone i, every zone one v-zone's capacity. A write
// at the start of an empty zone opens that v-zone by id
// (client.OpenVZoneID); the write that reaches a zone's capacity finishes
// its v-zone, as a ZNS drive makes a full zone FULL, so the namespace's
// active v-zones are the zones fio has open; a reset (fio's reset_wp, or a
// trim) gives the v-zone back to the arbiter. The open limit is the
// namespace's grant, its max active v-zones.
//
// Connection settings resolve as zctl's do (Options.Resolve): options,
// ZONEFLEET_* variables, zctl's config file, the cluster.json of `zctl
// local up`. Jobs of one fio process that name the same target share one
// connection (Open, Release).
//
// # Concurrency
//
// Queue is one fio job's I/O queue. Reads, trims and flushes run
// concurrently on worker goroutines (as many as are in flight at once,
// kept for the job); the writes of one zone run one at a
// time in submission order on one goroutine per zone with writes pending,
// because the drive takes a zone's writes only at its write pointer (a
// kernel ZNS device needs mq-deadline's zone write locking for the same
// reason). Completions collect in a list that Wait drains. Buffers are
// fio's (C memory): the engine keeps none past its completion.
//
// # Failure
//
// Every error reaches fio as the errno a Linux zoned block device gives for
// the same condition (Errno): EIO for a write off the write pointer, so fio
// fails the job the way it fails against a kernel device. Transient node
// failures are retried by pkg/client within its deadline. A job fio forks
// instead of running it as a thread cannot run Go code (the runtime's
// threads stay in the parent): the engine fails it at init with an error
// that names --thread.
package fioengine
