// Package hostenv reads properties of the machine that bias benchmark
// figures, so that a benchmark's output can say what it ran on.
//
// # Free page reporting
//
// A virtual machine whose virtio-balloon device offers free page reporting
// (VIRTIO_BALLOON_F_REPORTING, feature bit 5) hands the guest's free memory
// back to its host in blocks of 2^page_reporting_order pages, shortly after
// the blocks become free. The next allocation of such a page faults on the
// host, which costs several times the copy that fills it. Benchmarks that
// write through the page cache are exposed: whatever frees page cache (a
// file truncated, deleted or hole-punched, as a drive's flash block group
// is before reuse) hands pages to the host, and the next writes allocate
// pages again. On one of this project's 2-core VMs
// (page_reporting_order 9; freed blocks start going back within 0.2 s,
// most are gone after 2-5 s) writing 1 GiB into a file right after
// FALLOC_FL_ZERO_RANGE of it ran at 5,600-6,400 MiB/s, at 630-1,140 MiB/s
// two seconds later and at 315-350 five seconds later; with reporting
// switched off (order 11, above x86-64's largest buddy order 10) five
// seconds later at 2,800-6,700 MiB/s. On another (order 5, 128 KiB
// blocks) two seconds later 420-490 MiB/s against 8,900-10,500 with
// reporting off: twenty times. The order differs between machines of one
// kind, so it is read, never assumed. A benchmark on such a machine has
// samples several times slower than the rest for no reason of its own;
// PageReporting tells them apart.
//
// Everything here only reads sysfs; nothing is changed. Reading is
// best-effort: a machine without virtio (bare metal) has no reporting, and
// a file that cannot be parsed yields a ParseError naming it.
package hostenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// maxBuddyOrder is the largest buddy-allocator order on x86-64 (and
// arm64 with 4 KiB pages): a page_reporting_order above it never reports.
const maxBuddyOrder = 10

// balloonDevice is the virtio device ID of a memory balloon; reportingBit
// its free page reporting feature bit.
const (
	balloonDevice = 0x0005
	reportingBit  = 5
)

// ParseError is a sysfs file whose content is not what the kernel writes.
type ParseError struct {
	Path   string
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("hostenv: %s: %s", e.Path, e.Reason)
}

// PageReporting is the state of the guest's free page reporting.
type PageReporting struct {
	// Device is the virtio device (under /sys/bus/virtio/devices) of a
	// balloon that offers free page reporting; empty when none does.
	Device string `json:"device,omitempty"`
	// Order is page_reporting_order (-1 when the kernel has no
	// page_reporting module): blocks of 2^Order pages are reported.
	Order int `json:"order"`
	// Params are the module's other parameters as the kernel shows them
	// (some platforms add their own, e.g. a minimum free time).
	Params map[string]string `json:"params,omitempty"`
}

// Active reports whether free pages are handed back to the host.
func (p PageReporting) Active() bool {
	return p.Device != "" && p.Order >= 0 && p.Order <= maxBuddyOrder
}

// activePrefix starts String's description of active reporting.
const activePrefix = "active"

// ActiveDescription reports whether desc, a String or Describe result kept
// in a benchmark's output, describes active reporting.
func ActiveDescription(desc string) bool {
	return strings.HasPrefix(desc, activePrefix+" ")
}

// String is a one-line description for a benchmark's output.
func (p PageReporting) String() string {
	switch {
	case p.Active():
		return fmt.Sprintf(activePrefix+" (virtio-balloon %s, order %d: blocks of %s): pages freed, e.g. by truncating or deleting a file, go back to the host and cost several times the copy when allocated again; samples that write through the page cache can run 3-5x slower (docs/benchmarks.md, \"Virtual machines: free page reporting\")",
			p.Device, p.Order, blockSize(p.Order))
	case p.Device != "" && p.Order < 0:
		return fmt.Sprintf("off (virtio-balloon %s offers it, the kernel has no page_reporting module)", p.Device)
	case p.Device != "":
		return fmt.Sprintf("off (virtio-balloon %s offers it, page_reporting_order %d is above the largest buddy order)", p.Device, p.Order)
	default:
		return "none (no virtio balloon with free page reporting)"
	}
}

// blockSize is 2^order pages of 4 KiB, for people.
func blockSize(order int) string {
	kib := int64(4) << order
	if kib >= 1024 {
		return fmt.Sprintf("%d MiB", kib/1024)
	}
	return fmt.Sprintf("%d KiB", kib)
}

// ReadPageReporting reads the free page reporting state under sysRoot
// ("/sys" on a live machine).
func ReadPageReporting(sysRoot string) (PageReporting, error) {
	p := PageReporting{Order: -1}
	params := filepath.Join(sysRoot, "module", "page_reporting", "parameters")
	ents, err := os.ReadDir(params)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return p, err
	default:
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(params, e.Name()))
			if err != nil {
				continue // write-only or vanished: not needed
			}
			v := strings.TrimSpace(string(b))
			if e.Name() == "page_reporting_order" {
				o, err := ParseOrder(v)
				if err != nil {
					return p, &ParseError{Path: filepath.Join(params, e.Name()), Reason: err.Error()}
				}
				p.Order = o
				continue
			}
			if p.Params == nil {
				p.Params = map[string]string{}
			}
			p.Params[e.Name()] = v
		}
	}
	devs := filepath.Join(sysRoot, "bus", "virtio", "devices")
	ents, err = os.ReadDir(devs)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		id, err := os.ReadFile(filepath.Join(devs, n, "device"))
		if err != nil {
			continue
		}
		dev, err := strconv.ParseUint(strings.TrimSpace(string(id)), 0, 32)
		if err != nil {
			return p, &ParseError{Path: filepath.Join(devs, n, "device"), Reason: "not a device ID"}
		}
		if dev != balloonDevice {
			continue
		}
		f, err := os.ReadFile(filepath.Join(devs, n, "features"))
		if err != nil {
			continue
		}
		on, err := FeatureBit(strings.TrimSpace(string(f)), reportingBit)
		if err != nil {
			return p, &ParseError{Path: filepath.Join(devs, n, "features"), Reason: err.Error()}
		}
		if on {
			p.Device = n
			break
		}
	}
	return p, nil
}

// ParseOrder parses page_reporting_order: a small non-negative integer.
func ParseOrder(s string) (int, error) {
	o, err := strconv.Atoi(s)
	if err != nil || o < 0 || o > 63 {
		return 0, fmt.Errorf("order %q: want an integer from 0 to 63", s)
	}
	return o, nil
}

// FeatureBit reads bit from a virtio device's features file: one '0' or '1'
// per feature bit, bit 0 first.
func FeatureBit(features string, bit int) (bool, error) {
	for i, c := range features {
		if c != '0' && c != '1' {
			return false, fmt.Errorf("features: byte %d is %q, want 0 or 1", i, c)
		}
	}
	if bit < 0 || bit >= len(features) {
		return false, nil
	}
	return features[bit] == '1', nil
}

// Describe is ReadPageReporting("/sys") as one line for a benchmark's
// output, "unknown: ..." when sysfs could not be read.
func Describe() (string, bool) {
	p, err := ReadPageReporting("/sys")
	if err != nil {
		return "unknown: " + err.Error(), false
	}
	return p.String(), p.Active()
}
