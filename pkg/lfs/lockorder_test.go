package lfs_test

import (
	"testing"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestStressLockOrder runs the concurrent stress test (every operation,
// write-back, foreground and background recycling, periodic checkpoints)
// with the lock-order checker on: a goroutine blocking on a lock ranked at
// or above one it holds panics.
func TestStressLockOrder(t *testing.T) {
	lfs.CheckLockOrder(t)
	stressConcurrentOps(t)
}
