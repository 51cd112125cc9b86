// Package benchstat holds the small statistics the wall-time benchmarks
// share, and the process CPU time they read them against.
package benchstat

import (
	"sort"
	"syscall"
	"time"
)

// ProcessCPU is the process's user and system CPU time so far (getrusage;
// 0 if it fails): over a timed point, the CPU every goroutine of the
// process spent on it, in-process servers and the kernel's work on their
// behalf included.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Median is the median of xs (the mean of the two middle values for an even
// count; 0 for none). xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
