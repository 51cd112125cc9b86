package client_test

import (
	"testing"

	"github.com/zonefleet/zonefleet/internal/leakcheck"
)

// TestMain fails the run when a goroutine of the package's code outlives
// the tests (see internal/leakcheck).
//
// The tests that start a cluster call t.Parallel: each has its own etcd,
// free ports and t.TempDir, and they spend most of their time waiting
// (leases, rebuilds, retries). TestParityPPLogWrapsAround sets a
// package-wide hook (SetPPTestHook) and runs alone, before them.
func TestMain(m *testing.M) {
	leakcheck.Main(m, nil)
}
