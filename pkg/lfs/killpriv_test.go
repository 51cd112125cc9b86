package lfs_test

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// caller is an lfs.Caller with fixed groups and CAP_FSETID.
type caller struct {
	groups []uint32
	fsetid bool
}

func (c caller) InGroup(gid uint32) bool { return slices.Contains(c.groups, gid) }
func (c caller) CapFSetID() bool         { return c.fsetid }
func (c caller) Killed()                 {}

// What a write, truncate, fallocate or chown takes from a file (the FUSE
// binding asks for it with HANDLE_KILLPRIV_V2): file capabilities always;
// set-user-ID, and set-group-ID of a group-executable file or of a file
// whose group the caller is not in, when the kernel says the caller lacks
// CAP_FSETID (or for a chown). The files belong to group 0.
func TestKillPriv(t *testing.T) {
	fs := mkfsMount(t, newVol(t, 32, 8), lfs.Options{})
	t.Cleanup(func() { _ = fs.Unmount(bg) })
	nonMember := caller{groups: []uint32{65534}}
	member := caller{groups: []uint32{65534, 0}}
	privileged := caller{groups: []uint32{65534}, fsetid: true}
	falloc := func(mode uint32, off, n uint64, c lfs.Caller) func(uint64, lfs.Handle) error {
		return func(ino uint64, _ lfs.Handle) error { return fs.Fallocate(bg, ino, mode, off, n, c) }
	}
	for i, tc := range []struct {
		name     string
		mode     uint32
		caps     bool
		op       func(ino uint64, h lfs.Handle) error
		wantMode uint32
		wantCaps bool
	}{
		{"write", 0o6755, true, func(_ uint64, h lfs.Handle) error { _, err := fs.Write(bg, h, 0, []byte("x")); return err }, 0o6755, false},
		{"write, kill", 0o6755, true, func(_ uint64, h lfs.Handle) error {
			_, err := fs.WriteKillSUIDGID(bg, h, 0, []byte("x"), nil)
			return err
		}, 0o0755, false},
		{"write, kill, sgid without g+x, no caller", 0o2745, false, func(_ uint64, h lfs.Handle) error {
			_, err := fs.WriteKillSUIDGID(bg, h, 0, []byte("x"), nil)
			return err
		}, 0o2745, false},
		{"write, kill, sgid without g+x, caller in the group", 0o2745, false, func(_ uint64, h lfs.Handle) error {
			_, err := fs.WriteKillSUIDGID(bg, h, 0, []byte("x"), member)
			return err
		}, 0o2745, false},
		{"write, kill, sgid without g+x, caller not in the group", 0o6745, false, func(_ uint64, h lfs.Handle) error {
			_, err := fs.WriteKillSUIDGID(bg, h, 0, []byte("x"), nonMember)
			return err
		}, 0o0745, false},
		{"empty write, kill", 0o4755, true, func(_ uint64, h lfs.Handle) error {
			_, err := fs.WriteKillSUIDGID(bg, h, 0, nil, nonMember)
			return err
		}, 0o4755, true},
		{"O_TRUNC, kill, caller not in the group", 0o2745, false, func(ino uint64, _ lfs.Handle) error {
			h, err := fs.OpenKillSUIDGID(bg, ino, syscall.O_WRONLY|syscall.O_TRUNC, nonMember)
			if err == nil {
				err = fs.Release(bg, h)
			}
			return err
		}, 0o0745, false},
		{"chown, kill, sgid without g+x, by a non-member", 0o2745, false, func(ino uint64, _ lfs.Handle) error {
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetGID | lfs.SetKillSUIDGID, GID: 65534, Caller: nonMember})
			return err
		}, 0o0745, false},
		{"chown, kill, sgid without g+x, by a CAP_FSETID caller", 0o6745, false, func(ino uint64, _ lfs.Handle) error {
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetUID | lfs.SetKillSUIDGID, UID: 7, Caller: privileged})
			return err
		}, 0o2745, false},
		{"fallocate by a privileged caller", 0o6755, true, falloc(0, 0, 8192, privileged), 0o6755, false},
		{"fallocate, no caller", 0o6755, true, falloc(lfs.FallocKeepSize, 0, 8192, nil), 0o6755, false},
		{"fallocate by a non-member", 0o6745, false, falloc(0, 0, 8192, nonMember), 0o0745, false},
		{"fallocate KEEP_SIZE by a member", 0o6745, false, falloc(lfs.FallocKeepSize, 0, 1<<20, member), 0o2745, false},
		{"punch hole by a non-member", 0o6777, true, falloc(lfs.FallocPunchHole|lfs.FallocKeepSize, 0, 4096, nonMember), 0o0777, false},
		{"zero range by a non-member", 0o4777, false, falloc(lfs.FallocZeroRange, 0, 4096, nonMember), 0o0777, false},
		{"truncate", 0o4755, true, func(ino uint64, _ lfs.Handle) error {
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 1})
			return err
		}, 0o4755, false},
		{"open O_TRUNC", 0o4755, true, func(ino uint64, _ lfs.Handle) error {
			h, err := fs.Open(bg, ino, syscall.O_WRONLY|syscall.O_TRUNC)
			if err == nil {
				err = fs.Release(bg, h)
			}
			return err
		}, 0o4755, false},
		{"truncate, kill", 0o6775, false, func(ino uint64, _ lfs.Handle) error {
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetSize | lfs.SetKillSUIDGID, Size: 1})
			return err
		}, 0o0775, false},
		{"chown, kill", 0o4755, true, func(ino uint64, _ lfs.Handle) error {
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetUID | lfs.SetKillSUIDGID, UID: 7})
			return err
		}, 0o0755, false},
		{"chmod with kill: the mode given wins", 0o0755, false, func(ino uint64, _ lfs.Handle) error {
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetMode | lfs.SetKillSUIDGID, Mode: 0o4711})
			return err
		}, 0o4711, false},
		{"kill alone", 0o6755, true, func(ino uint64, _ lfs.Handle) error {
			_, err := fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetKillSUIDGID})
			return err
		}, 0o0755, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, h, err := fs.Create(bg, lfs.RootIno, "f"+string(rune('a'+i)), tc.mode, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			defer fs.Release(bg, h)
			if tc.caps {
				require.NoError(t, fs.Setxattr(bg, a.Ino, "security.capability", []byte{1, 2, 3, 4}, 0))
			}
			before, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			require.Equal(t, tc.mode, before.Mode&0o7777)
			waitPastNs(t, before.Mtime) // a later mtime
			require.NoError(t, tc.op(a.Ino, h))
			after, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			if strings.HasPrefix(tc.name, "fallocate") || strings.Contains(tc.name, "range") || strings.Contains(tc.name, "hole") {
				assert.Greater(t, after.Mtime, before.Mtime, "fallocate updates mtime, as on ext4")
			}
			assert.Equal(t, tc.wantMode, after.Mode&0o7777, "mode %o", after.Mode&0o7777)
			_, err = fs.Getxattr(bg, a.Ino, "security.capability")
			assert.Equal(t, tc.wantCaps, err == nil, "capabilities kept: %v", err)
		})
	}
}

// A fallocate that fails changes nothing: mode, capabilities and mtime stay.
func TestFailedFallocateKillsNothing(t *testing.T) {
	fs := mkfsMount(t, newVol(t, 32, 8), lfs.Options{})
	t.Cleanup(func() { _ = fs.Unmount(bg) })
	a, h, err := fs.Create(bg, lfs.RootIno, "f", 0o6777, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	defer fs.Release(bg, h)
	require.NoError(t, fs.Setxattr(bg, a.Ino, "security.capability", []byte{1, 2, 3, 4}, 0))
	before, err := fs.Getattr(bg, a.Ino)
	require.NoError(t, err)
	waitPastNs(t, before.Mtime) // an mtime update would show
	c := caller{groups: []uint32{65534}}
	require.ErrorIs(t, fs.Fallocate(bg, a.Ino, 0x08 /* collapse range */, 0, 4096, c), syscall.EOPNOTSUPP)
	require.ErrorIs(t, fs.Fallocate(bg, a.Ino, 0, 0, 0, c), syscall.EINVAL)
	require.ErrorIs(t, fs.Fallocate(bg, a.Ino, 0, 0, 1<<40, c), syscall.ENOSPC)
	after, err := fs.Getattr(bg, a.Ino)
	require.NoError(t, err)
	assert.Equal(t, before.Mode, after.Mode)
	assert.Equal(t, before.Mtime, after.Mtime)
	assert.Equal(t, before.Ctime, after.Ctime)
	_, err = fs.Getxattr(bg, a.Ino, "security.capability")
	assert.NoError(t, err)
}

// countingCaller counts Killed calls.
type countingCaller struct {
	caller
	killed int
}

func (c *countingCaller) Killed() { c.killed++ }

// The caller hears of every change that cleared something (the FUSE
// binding then invalidates the kernel's cached attributes), and only then.
func TestKillPrivTellsTheCaller(t *testing.T) {
	fs := mkfsMount(t, newVol(t, 32, 8), lfs.Options{})
	t.Cleanup(func() { _ = fs.Unmount(bg) })
	a, h, err := fs.Create(bg, lfs.RootIno, "f", 0o6745, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	defer fs.Release(bg, h)
	c := &countingCaller{caller: caller{groups: []uint32{65534}}}
	_, err = fs.WriteKillSUIDGID(bg, h, 0, []byte("x"), c)
	require.NoError(t, err)
	assert.Equal(t, 1, c.killed, "set-user/group-ID cleared")
	_, err = fs.WriteKillSUIDGID(bg, h, 1, []byte("y"), c)
	require.NoError(t, err)
	assert.Equal(t, 1, c.killed, "nothing left to clear")
	require.NoError(t, fs.Setxattr(bg, a.Ino, "security.capability", []byte{1, 2, 3, 4}, 0))
	p := &countingCaller{caller: caller{fsetid: true}}
	require.NoError(t, fs.Fallocate(bg, a.Ino, 0, 0, 8192, p))
	assert.Equal(t, 1, p.killed, "capabilities dropped")
	require.NoError(t, fs.Fallocate(bg, a.Ino, 0, 0, 8192, p))
	assert.Equal(t, 1, p.killed)
}

// waitPastNs returns once the wall clock (what timestamps come from) is past
// ns, so an operation from now on stamps a later time.
func waitPastNs(t *testing.T, ns int64) {
	t.Helper()
	require.Eventually(t, func() bool { return time.Now().UnixNano() > ns }, time.Minute, 10*time.Microsecond, "the wall clock passes %d", ns)
}
