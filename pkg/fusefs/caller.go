package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// capFSetID is CAP_FSETID's bit in a capability set (linux/capability.h).
const capFSetID = 4

// caller is the process behind a request, as lfs.Caller: whether it is in
// a group and holds CAP_FSETID decide whether a write, truncate, fallocate
// or chown clears set-group-ID (and, for fallocate, set-user-ID), which the
// kernel leaves to the file system under HANDLE_KILLPRIV_V2.
//
// The request header gives the thread's file-system gid and thread id; the
// supplementary groups and effective capabilities are read from
// /proc/<tid>/status, once, and only when a decision needs them (a file
// with set-group-ID whose group is not the caller's own, or a fallocate of
// a set-user/group-ID file). A thread that is gone, or outside the mount
// daemon's PID namespace (tid 0), counts as in no other group and without
// capabilities, so the bits are cleared: the safe side.
type caller struct {
	gid, tid uint32
	read     bool
	groups   []uint32
	capEff   uint64
	killed   bool // lfs cleared set-user/group-ID or capabilities (see FS.killed)
}

func newCaller(h *fuse.InHeader) *caller { return &caller{gid: h.Gid, tid: h.Pid} }

var _ lfs.Caller = (*caller)(nil)

// InGroup implements lfs.Caller.
func (c *caller) InGroup(gid uint32) bool {
	if gid == c.gid {
		return true
	}
	c.load()
	for _, g := range c.groups {
		if g == gid {
			return true
		}
	}
	return false
}

// CapFSetID implements lfs.Caller.
func (c *caller) CapFSetID() bool {
	c.load()
	return c.capEff&(1<<capFSetID) != 0
}

// Killed implements lfs.Caller.
func (c *caller) Killed() { c.killed = true }

func (c *caller) load() {
	if c.read {
		return
	}
	c.read = true
	if c.tid == 0 {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.tid))
	if err != nil {
		return
	}
	c.groups, c.capEff, _ = parseStatus(b)
}

// parseStatus reads the supplementary groups ("Groups:") and effective
// capabilities ("CapEff:") of a /proc/<pid>/status file. A malformed field
// is an error and reads as no groups / no capabilities.
func parseStatus(b []byte) (groups []uint32, capEff uint64, err error) {
	for len(b) > 0 { // (Groups may be longer than a bufio.Scanner's line)
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("Groups:")):
			for _, f := range bytes.Fields(line[len("Groups:"):]) {
				g, perr := strconv.ParseUint(string(f), 10, 32)
				if perr != nil {
					return nil, 0, fmt.Errorf("fusefs: /proc status Groups %q: %w", f, perr)
				}
				groups = append(groups, uint32(g))
			}
		case bytes.HasPrefix(line, []byte("CapEff:")):
			v, perr := strconv.ParseUint(string(bytes.TrimSpace(line[len("CapEff:"):])), 16, 64)
			if perr != nil {
				return nil, 0, fmt.Errorf("fusefs: /proc status CapEff: %w", perr)
			}
			capEff = v
		}
	}
	return groups, capEff, nil
}
