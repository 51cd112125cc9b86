package localcluster

import (
	"context"
	"os"
	"testing"

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

	// The directory lock refuses it before etcd opens its database (which
	// would wait on the first cluster's lock instead of failing).
	_, err = Start(ctx, cfg)
	var inUse *DirInUseError
	require.ErrorAs(t, err, &inUse)
	assert.Equal(t, os.Getpid(), inUse.PID)
	assert.Contains(t, err.Error(), dir)

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
