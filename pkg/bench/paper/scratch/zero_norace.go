//go:build !race

package scratch

import "bytes"

// allZero reports whether p holds only zeros.
func allZero(p []byte) bool { return bytes.Equal(p, zeroPage[:len(p)]) }
