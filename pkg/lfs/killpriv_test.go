package lfs_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// What a write, truncate or chown takes from a file (the FUSE binding asks
// for it with HANDLE_KILLPRIV_V2): file capabilities on every write,
// truncate and chown; set-user-ID, and set-group-ID of a group-executable
// file, when the kernel says the caller lacks CAP_FSETID (or for a chown).
func TestKillPriv(t *testing.T) {
	fs := mkfsMount(t, newVol(t, 32, 8), lfs.Options{})
	t.Cleanup(func() { _ = fs.Unmount(bg) })
	for i, tc := range []struct {
		name     string
		mode     uint32
		caps     bool
		op       func(ino uint64, h lfs.Handle) error
		wantMode uint32
		wantCaps bool
	}{
		{"write", 0o6755, true, func(_ uint64, h lfs.Handle) error { _, err := fs.Write(bg, h, 0, []byte("x")); return err }, 0o6755, false},
		{"write, kill", 0o6755, true, func(_ uint64, h lfs.Handle) error { _, err := fs.WriteKillSUIDGID(bg, h, 0, []byte("x")); return err }, 0o0755, false},
		{"write, kill, sgid without g+x", 0o2745, false, func(_ uint64, h lfs.Handle) error { _, err := fs.WriteKillSUIDGID(bg, h, 0, []byte("x")); return err }, 0o2745, false},
		{"empty write, kill", 0o4755, true, func(_ uint64, h lfs.Handle) error { _, err := fs.WriteKillSUIDGID(bg, h, 0, nil); return err }, 0o4755, true},
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
			require.NoError(t, tc.op(a.Ino, h))
			after, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			assert.Equal(t, tc.wantMode, after.Mode&0o7777, "mode %o", after.Mode&0o7777)
			_, err = fs.Getxattr(bg, a.Ino, "security.capability")
			assert.Equal(t, tc.wantCaps, err == nil, "capabilities kept: %v", err)
		})
	}
}
