//go:build race

package paper

// raceDetector: the race detector makes the simulated drives about ten
// times slower, so under it TestDeterministic runs only raceDeterminism's
// figures twice, and Fig. 29's paper-parameter tests are not built
// (`make test` runs both without it).
const raceDetector = true
