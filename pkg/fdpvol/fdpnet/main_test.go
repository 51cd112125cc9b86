package fdpnet_test

import (
	"testing"

	"github.com/zonefleet/zonefleet/internal/leakcheck"
)

// TestMain fails the run when a goroutine of the package's code outlives
// the tests (see internal/leakcheck): a lease's renewal loop, a client.
func TestMain(m *testing.M) {
	leakcheck.Main(m, nil)
}
