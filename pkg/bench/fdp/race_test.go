//go:build race

package fdpbench

// raceDetector: the race detector makes the simulated drives about ten
// times slower, so the lfs figure test takes a shorter configuration under
// it; without it the test runs the larger one.
const raceDetector = true
