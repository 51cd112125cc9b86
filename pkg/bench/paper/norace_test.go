//go:build !race

package paper

const raceDetector = false
