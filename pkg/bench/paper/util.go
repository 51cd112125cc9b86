package paper

import (
	"math"
	"os"
	"runtime"
	"sync"
)

func round(x float64) float64 { return math.Round(x*1000) / 1000 }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a / b)
}

func subdir(dir string) (string, error) { return os.MkdirTemp(dir, "run-") }

func removeAll(d string) { _ = os.RemoveAll(d) }

// parallel calls run(0) ... run(n-1), at most GOMAXPROCS at a time, and
// returns the error of the lowest index that failed. Each call must be an
// independent simulation (its own sim, drive and meters) writing only its
// own result slot, so the results do not depend on the interleaving: the
// figures stay byte-identical, only the wall time shrinks.
func parallel(n int, run func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = run(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
