package fdp

import (
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Stats is the FDP statistics log page (NVMe log 0x22) with the FTL's own
// counters. The three log page fields survive a clean close and every
// Flush; the FTL counters count since Open.
type Stats struct {
	HostBytesWritten  uint64 `json:"host_bytes_with_metadata_written"`  // HBMW
	MediaBytesWritten uint64 `json:"media_bytes_with_metadata_written"` // MBMW
	MediaBytesErased  uint64 `json:"media_bytes_erased"`                // MBE
	GCCopies          uint64 `json:"gc_copies"`                         // LBAs moved by garbage collection
	Copybacks         uint64 `json:"copybacks"`                         // pages moved on-chip
	RUsReclaimed      uint64 `json:"rus_reclaimed"`
	TrimmedBytes      uint64 `json:"trimmed_bytes"`
}

// WAF is the device write amplification, media over host bytes (0 before
// any host write).
func (s Stats) WAF() float64 {
	if s.HostBytesWritten == 0 {
		return 0
	}
	return float64(s.MediaBytesWritten) / float64(s.HostBytesWritten)
}

// EventType is an FDP event (TP4146 FDP events log page).
type EventType uint8

const (
	// EventRUNotFullyWritten: a reclaim unit was retired with unwritten
	// space (handle update, power cycle).
	EventRUNotFullyWritten EventType = 0x00
	// EventMediaReallocated: garbage collection moved valid data of a
	// reclaim unit (Count LBAs).
	EventMediaReallocated EventType = 0x80
)

func (t EventType) String() string {
	switch t {
	case EventRUNotFullyWritten:
		return "ru-not-fully-written"
	case EventMediaReallocated:
		return "media-reallocated"
	}
	return "unknown"
}

// MarshalText writes the event type's name.
func (t EventType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Event is one FDP event.
type Event struct {
	Seq    uint64        `json:"seq"`
	Type   EventType     `json:"type"`
	Group  uint16        `json:"group"`
	Handle int           `json:"handle"` // -1: the shared GC reclaim unit
	RU     uint64        `json:"reclaim_unit"`
	Count  uint64        `json:"count"` // LBAs unwritten or moved
	Time   time.Duration `json:"time_ns"`
}

// maxEvents bounds the event log (the oldest are dropped).
const maxEvents = 1024

func (d *Device) event(t EventType, r *ru, n uint64) {
	h := r.handle
	if h == gcShared {
		h = -1
	}
	d.evSeq++
	if len(d.events) == maxEvents {
		copy(d.events, d.events[1:])
		d.events = d.events[:maxEvents-1]
	}
	d.events = append(d.events, Event{Seq: d.evSeq, Type: t, Group: uint16(r.group), Handle: h, RU: r.id, Count: n, Time: d.now()})
}

// Stats returns the statistics log page.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st
}

// Events returns the events with a sequence number above after (0: all
// kept), oldest first.
func (d *Device) Events(after uint64) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Event
	for _, e := range d.events {
		if e.Seq > after {
			out = append(out, e)
		}
	}
	return out
}

// HandleUsage is one row of the reclaim unit handle usage log page: a
// placement handle in one reclaim group.
type HandleUsage struct {
	Group     uint16     `json:"group"`
	Handle    uint16     `json:"handle"`
	Type      HandleType `json:"type"`
	RU        int64      `json:"reclaim_unit"`       // referenced unit, -1 none
	Available uint64     `json:"available_bytes"`    // RUAMW: bytes the unit still takes
	HostBytes uint64     `json:"host_bytes_written"` // through this handle
	GCBytes   uint64     `json:"gc_bytes_moved"`     // of its data moved by GC
	RUsUsed   uint64     `json:"reclaim_units_used"` // units it has opened
	ValidLBAs uint64     `json:"valid_lbas"`         // its data in its own units
	GCUnitRU  int64      `json:"gc_reclaim_unit"`    // persistently isolated: its GC unit, else -1
}

// Usage returns the reclaim unit handle usage log page.
func (d *Device) Usage() []HandleUsage {
	d.mu.Lock()
	defer d.mu.Unlock()
	valid := map[[2]int]uint64{}
	for _, r := range d.rus {
		if r.handle != gcShared {
			valid[[2]int{r.group, r.handle}] += uint64(r.valid)
		}
	}
	var out []HandleUsage
	for gi, hs := range d.handles {
		for h := range hs {
			u := HandleUsage{Group: uint16(gi), Handle: uint16(h), Type: d.cfg.Handles[h], RU: -1, GCUnitRU: -1,
				HostBytes: hs[h].hostBytes, GCBytes: hs[h].gcInBytes, RUsUsed: hs[h].rusUsed, ValidLBAs: valid[[2]int{gi, h}]}
			if r := hs[h].cur; r != nil {
				u.RU = int64(r.id)
				u.Available = uint64(r.cap(d.g)-r.written) * uint64(d.g.bs)
			}
			if r := d.gcRU[gi][h]; r != nil && d.cfg.Handles[h] == PersistentlyIsolated {
				u.GCUnitRU = int64(r.id)
			}
			out = append(out, u)
		}
	}
	return out
}

// ConfigLog is the FDP configurations log page (one configuration).
type ConfigLog struct {
	ReclaimGroups   int          `json:"reclaim_groups"`
	Handles         []HandleType `json:"handles"`
	RUChips         int          `json:"ru_chips"`
	RUBytes         uint64       `json:"reclaim_unit_nominal_bytes"` // RUNS
	ChipsPerGroup   int          `json:"chips_per_group"`
	BlockSize       int          `json:"block_size"`
	LBAs            uint64       `json:"lbas"`
	PhysicalBytes   uint64       `json:"physical_bytes"`
	OverProvision   float64      `json:"over_provision"`
	Victim          VictimPolicy `json:"victim"`
	MaxPlacementIDs int          `json:"max_placement_ids"`
	PageSize        int          `json:"page_size"` // bytes of a flash page: a reclaim unit stripes pages over its chips
}

// Configs returns the configuration log page.
func (d *Device) Configs() ConfigLog {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.width()
	return ConfigLog{ReclaimGroups: d.g.groups, Handles: append([]HandleType(nil), d.cfg.Handles...), RUChips: w,
		RUBytes: uint64(w * d.g.slotsPerBlock * d.g.bs), ChipsPerGroup: d.g.chipsPerGroup, BlockSize: d.g.bs,
		LBAs: d.g.lbas, PhysicalBytes: uint64(d.g.slots) * uint64(d.g.bs), OverProvision: d.cfg.OverProvision,
		Victim: d.victim, MaxPlacementIDs: d.g.groups * len(d.cfg.Handles), PageSize: d.g.chunk * d.g.bs}
}

// Status is the drive's FDP state at a glance.
type Status struct {
	Enabled      bool    `json:"enabled"`
	FreeRUs      []int   `json:"free_reclaim_units"` // per group, in current-size units
	FreeBlocks   []int   `json:"free_blocks"`        // per group
	ClosedRUs    int     `json:"closed_reclaim_units"`
	MappedLBAs   uint64  `json:"mapped_lbas"`
	WAF          float64 `json:"waf"`
	ReadOnly     bool    `json:"read_only"`
	ChipBusyNs   []int64 `json:"chip_busy_ns,omitempty"`
	ModelledTime int64   `json:"modelled_time_ns"`
}

// Status returns the drive's state.
func (d *Device) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Status{Enabled: true, WAF: d.st.WAF(), ReadOnly: d.failed != nil, ModelledTime: int64(d.now())}
	w := d.width()
	for _, n := range d.nfree {
		s.FreeBlocks = append(s.FreeBlocks, n)
		s.FreeRUs = append(s.FreeRUs, n/w)
	}
	for _, r := range d.rus {
		if !r.open {
			s.ClosedRUs++
		}
	}
	s.MappedLBAs = d.mapped
	if d.model != nil {
		for c := range d.g.chips {
			s.ChipBusyNs = append(s.ChipBusyNs, int64(d.model.ChipBusy(c)))
		}
	}
	return s
}

// LBARange is a run of LBAs.
type LBARange struct {
	LBA   uint64 `json:"lba"`
	Count uint64 `json:"count"`
}

// MaxStatusLBAs bounds one LBAStatus query.
const MaxStatusLBAs = 1 << 24

// LBAStatus reports which of the n LBAs from lba are mapped (hold data
// written and not trimmed since), as runs in increasing order, in the
// spirit of NVMe Get LBA Status: a host that keeps no map of its own
// (a zoned file system's write pointers over a conventional namespace)
// derives it from the drive. It reads only the mapping: no flash time is
// booked and nothing changes. After Open the mapping is the recovered one,
// so the runs are what survived the last power loss.
func (d *Device) LBAStatus(lba, n uint64) ([]LBARange, error) {
	if err := d.checkRange(lba, n); err != nil {
		return nil, err
	}
	if n > MaxStatusLBAs {
		return nil, &zerr.InvalidArgumentError{Field: "count", Reason: fmt.Sprintf("an LBA status query covers at most %d LBAs", MaxStatusLBAs)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, &zerr.ClosedError{What: "fdp device " + d.path}
	}
	var out []LBARange
	for l := lba; l < lba+n; l++ {
		if d.l2p[l] < 0 {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].LBA+out[k].Count == l {
			out[k].Count++
		} else {
			out = append(out, LBARange{LBA: l, Count: 1})
		}
	}
	return out, nil
}
