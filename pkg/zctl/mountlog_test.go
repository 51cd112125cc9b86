package zctl

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A background mount's log is created 0600 in the state directory by
// default, and never opened through a symbolic link, on a FIFO or device,
// or on a second name of another file.
func TestMountLogOpen(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	dir, err := stateDir()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(state, "zonefleet"), dir)
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	p := filepath.Join(dir, "mount-"+safeName("a/../b")+".log")
	assert.Equal(t, dir, filepath.Dir(p), "a namespace cannot leave the directory")
	f, err := openLog(p)
	require.NoError(t, err)
	_, err = f.WriteString("hello\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	st, err = os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// An existing log with a wider mode is narrowed.
	require.NoError(t, os.Chmod(p, 0o644))
	f, err = openLog(p)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	st, _ = os.Stat(p)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o644))
	link := filepath.Join(dir, "link.log")
	require.NoError(t, os.Symlink(victim, link))
	hard := filepath.Join(dir, "hard.log")
	require.NoError(t, os.Link(victim, hard))
	fifo := filepath.Join(dir, "fifo.log")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, bad := range []string{link, hard, fifo} {
		f, err := openLog(bad)
		if f != nil {
			f.Close()
		}
		if bad == fifo {
			assert.Error(t, err, "a FIFO without a reader is refused by the open itself (ENXIO), one with a reader by the check")
			continue
		}
		assert.ErrorIs(t, err, zerr.ErrInvalidArgument, bad)
	}
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(got), "the file behind the links is unchanged")
	st, _ = os.Stat(victim)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), "and keeps its mode")
}
