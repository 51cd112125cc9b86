package fusefs

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
)

// ExtraProcs is how many Go processors (GOMAXPROCS) ServingProcs adds to
// the default of a process that serves a mount.
//
// go-fuse reads /dev/fuse with blocking read(2) calls, and one or two of
// its reader goroutines sit in such a call whenever the mount is idle or
// between requests. A goroutine in a blocking system call keeps its Go
// processor (P) until the runtime's monitor hands the P to another thread
// (after 20 µs to 10 ms), so with GOMAXPROCS equal to the number of CPUs
// the idle readers hold most of the Ps of a small machine while the write-
// back, the client's gRPC and, in `zctl local up`, the nodes wait to be
// scheduled. Measured on the project's 2-core test machine with the
// in-process cluster of `zctl bench fs` (`BenchmarkSeqWriteCluster` with
// GOMAXPROCS=2 and 4 alternating, runtime/metrics /sched/latencies): the
// mean scheduling latency fell from 320–350 µs to 155–190 µs, fsync time
// from 1.4–1.7 s to 0.9–1.0 s per GiB, and sequential writes were faster in
// every one of five pairs (docs/benchmarks.md has the figures).
const ExtraProcs = 2

var procsOnce sync.Once
var procsFrom, procsTo int

// ServingProcs raises GOMAXPROCS by ExtraProcs for a process that serves a
// FUSE mount (zctl mount, zctl local up, zctl bench fs), once per process,
// and returns the value before and after. An explicit GOMAXPROCS in the
// environment is left alone (and reported as both). Setting it stops the
// runtime's own updates of GOMAXPROCS when the process's CPU limit (cgroup)
// changes; the raised value is computed from the limit at the first call.
func ServingProcs() (from, to int) {
	procsOnce.Do(func() {
		_, explicit := os.LookupEnv("GOMAXPROCS")
		procsFrom = runtime.GOMAXPROCS(0)
		procsTo = servingProcs(procsFrom, explicit)
		if procsTo != procsFrom {
			runtime.GOMAXPROCS(procsTo)
			slog.Info("GOMAXPROCS raised for serving FUSE (blocking /dev/fuse reads hold Go processors)",
				"from", procsFrom, "to", procsTo, "override", "set GOMAXPROCS")
		}
	})
	return procsFrom, procsTo
}

// servingProcs is the GOMAXPROCS a mount's process runs with, from the
// current value and whether the environment set it.
func servingProcs(cur int, explicit bool) int {
	if explicit || cur < 1 {
		return cur
	}
	return cur + ExtraProcs
}
