//go:build race

package paper

// raceDetector: the race detector makes the simulated drives about ten
// times slower, so the figure tests take shorter configurations under it
// (testConfig* in the tests); without it they run the defaults.
const raceDetector = true
