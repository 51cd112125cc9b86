package lfs_test

import (
	"testing"

	"github.com/zonefleet/zonefleet/internal/leakcheck"
)

// TestMain fails the run when a goroutine of the package's code (a
// write-back flusher, a background GC or checkpoint, a read-ahead) outlives
// the tests: every mounted file system is unmounted or abandoned (see
// internal/leakcheck).
func TestMain(m *testing.M) {
	leakcheck.Main(m, nil)
}
