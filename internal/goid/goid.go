// Package goid returns the calling goroutine's id, parsed from the header
// of its stack trace ("goroutine N [...]"). It is for bookkeeping keyed by
// goroutine in checks and tests (lock-rank checking, per-goroutine test
// clocks), never for program logic: the runtime gives goroutines no
// identity on purpose. It costs a runtime.Stack call (about a microsecond).
package goid

import (
	"bytes"
	"runtime"
	"strconv"
)

// Get is the calling goroutine's id (0 if the header cannot be parsed).
func Get() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	n, _ := strconv.ParseUint(string(b), 10, 64)
	return n
}
