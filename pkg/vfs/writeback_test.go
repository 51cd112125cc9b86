package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The operating system's files start their write-back (sync_file_range);
// the test file systems do not offer it; a closed file refuses it instead
// of reaching whatever file took its descriptor number.
func TestStartWriteback(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := Default.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	ws, ok := f.(WritebackStarter)
	require.True(t, ok, "the OS file system's files start write-back")
	_, err = f.WriteAt(fill(1<<20, 7), 4096)
	require.NoError(t, err)
	require.NoError(t, ws.StartWriteback())
	require.NoError(t, f.Datasync())
	got := make([]byte, 1<<20)
	_, err = f.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, fill(1<<20, 7), got)
	require.NoError(t, f.Close())
	err = ws.StartWriteback()
	require.Error(t, err)
	require.True(t, errors.Is(err, os.ErrClosed), "%v", err)

	for name, fs := range map[string]FS{"mem": NewCrashableMem(), "errors": WithErrors(NewCrashableMem(), InjectorFunc(func(Op) error { return nil }))} {
		f, err := fs.OpenFile("/x", os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(t, err, name)
		_, ok := f.(WritebackStarter)
		require.False(t, ok, "%s: a test file system has no write-back to start", name)
		require.NoError(t, f.Close())
	}
}
