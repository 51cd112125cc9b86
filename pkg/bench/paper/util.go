package paper

import (
	"math"
	"os"
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
