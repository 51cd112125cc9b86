package localcluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A second cluster on the same data directory fails at once, naming the
// process that holds it; once the first is closed the directory is free.
func TestSecondStartOnSameDirFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	cfg := Config{Dir: dir, Nodes: 1, Clock: "off", Device: TinyDevice(), AdminToken: "tok"}
	cl, err := Start(ctx, cfg)
	require.NoError(t, err)

	t0 := time.Now()
	_, err = Start(ctx, cfg)
	var inUse *DirInUseError
	require.ErrorAs(t, err, &inUse)
	assert.Equal(t, os.Getpid(), inUse.PID)
	assert.Contains(t, err.Error(), dir)
	assert.Less(t, time.Since(t0), 5*time.Second, "the second start must not wait on etcd's database lock")

	require.NoError(t, cl.Close())
	cl, err = Start(ctx, cfg)
	require.NoError(t, err, "the directory is free after Close")
	require.NoError(t, cl.Close())
}

func TestLockDirReleasedOnRelease(t *testing.T) {
	dir := t.TempDir()
	l, err := lockDir(dir)
	require.NoError(t, err)
	_, err = lockDir(dir)
	var inUse *DirInUseError
	require.ErrorAs(t, err, &inUse)
	l.release()
	l.release() // twice is harmless
	l2, err := lockDir(dir)
	require.NoError(t, err)
	l2.release()
}
