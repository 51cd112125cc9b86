package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DirInUseError: another process runs a local cluster on the same data
// directory. Two clusters on one directory would share etcd's database
// (embedded etcd blocks forever on its bolt lock) and the drives' backing
// files, so the second start fails at once instead.
type DirInUseError struct {
	Dir string
	PID int // 0 when the holder could not be identified
}

func (e *DirInUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("data directory %s is in use by process %d (another `zctl local up`?); stop it first or use another --data", e.Dir, e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by another process; stop it first or use another --data", e.Dir)
}

// dirLock holds an exclusive flock on DIR/lock for the life of the cluster;
// the kernel drops it when the process dies, so a killed cluster never leaves
// a stale lock behind. The file records the holder's PID for the message.
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	p := filepath.Join(dir, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, &DirInUseError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
