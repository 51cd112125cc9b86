package lfs

import (
	"context"
	"errors"
	"syscall"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Errno maps any error of this package to the errno a POSIX caller sees. It is
// the only place that does so. Volume errors reach it after the file system
// has retried zerr.ErrUnavailable; what is left is EIO, except space (ENOSPC),
// damaged metadata (EUCLEAN), a file system that went read-only
// (EROFS, ReadOnlyError) and cancellation.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var ro *ReadOnlyError
	if errors.As(err, &ro) {
		return syscall.EROFS
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, zerr.ErrNoResources), errors.Is(err, zerr.ErrZoneFull),
		errors.Is(err, zerr.ErrTooManyOpen), errors.Is(err, zerr.ErrTooManyActive):
		return syscall.ENOSPC
	case errors.Is(err, zerr.ErrCorrupt):
		return syscall.EUCLEAN
	case errors.Is(err, zerr.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, zerr.ErrAlreadyExists):
		return syscall.EEXIST
	case errors.Is(err, zerr.ErrInvalidArgument):
		return syscall.EINVAL
	case errors.Is(err, zerr.ErrUnauthenticated), errors.Is(err, zerr.ErrNotOwner):
		return syscall.EACCES
	case errors.Is(err, zerr.ErrClosed):
		return syscall.ESHUTDOWN
	}
	return syscall.EIO
}
