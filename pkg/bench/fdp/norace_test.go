//go:build !race

package fdpbench

const raceDetector = false
