// Package leakcheck is the goroutine-leak check of the test mains
// (go.uber.org/goleak): after a package's tests, and after the package's
// shared fixtures (an embedded etcd) are closed, no goroutine of ZoneFleet's
// code may be left running. A leaked goroutine is a defect (a watch, a
// ticker, a retry loop that outlives its owner's Close) even when no test
// fails because of it.
//
// The goroutines of third-party libraries that they keep by design for the
// life of the process (gRPC's and etcd's process-wide workers) are ignored,
// each by the function at the top of its stack; nothing of this module's own
// packages is.
package leakcheck

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// ignored are the process-lifetime goroutines of third-party libraries.
var ignored = []goleak.Option{
	// the embedded etcd's and its client's process-wide loops
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).sendLoop"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3.(*watchGrpcStream).run"),
	// gRPC's process-wide resolver and balancer serializers wind down
	// asynchronously after a connection closes
	goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	// go-fuse's and the runtime's signal handling
	goleak.IgnoreAnyFunction("os/signal.signal_recv"),
}

// Options returns the ignore list plus extra options.
func Options(extra ...goleak.Option) []goleak.Option {
	return append(append([]goleak.Option(nil), ignored...), extra...)
}

// Main runs the package's tests, then cleanup (closing the shared fixtures;
// may be nil), then the leak check, and exits: a leak fails an otherwise
// green run.
func Main(m *testing.M, cleanup func(), extra ...goleak.Option) {
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	if code == 0 {
		if err := goleak.Find(Options(extra...)...); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines left running after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
