package fsbench

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// varmail is filebench's varmail personality in small (the mail server of
// the ZNS+ and F2FS evaluations): each thread, in its own directory, creates
// a 16 KiB mail, fsyncs it, appends 16 KiB, fsyncs again, and deletes the
// mail it wrote eight mails before, for d. Every first fsync is of a file
// created since the last checkpoint, so it needs one (roll-forward does not
// rebuild directory entries): concurrent threads share them (group commit).
// It returns mails per second.
func varmail(dir string, threads int, d time.Duration) (float64, error) {
	var mails atomic.Int64
	buf := make([]byte, 16<<10)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	stop := time.Now().Add(d)
	errs := make([]error, threads)
	var wg sync.WaitGroup
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			td := filepath.Join(dir, fmt.Sprintf("t%d", i))
			if errs[i] = os.MkdirAll(td, 0o755); errs[i] != nil {
				return
			}
			mail := func(k int) error {
				f, err := os.Create(filepath.Join(td, fmt.Sprintf("m%d", k)))
				if err != nil {
					return err
				}
				defer f.Close()
				for range 2 {
					if _, err := f.Write(buf); err != nil {
						return err
					}
					if err := f.Sync(); err != nil {
						return err
					}
				}
				if k >= 8 {
					return os.Remove(filepath.Join(td, fmt.Sprintf("m%d", k-8)))
				}
				return nil
			}
			for k := 0; time.Now().Before(stop); k++ {
				if errs[i] = mail(k); errs[i] != nil {
					return
				}
				mails.Add(1)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(mails.Load()) / d.Seconds(), nil
}

// BenchmarkVarmailCluster runs varmail with one and with 16 threads on the
// mount over an in-process cluster (`zctl local up`'s geometry, nodes on
// their unix sockets), 10 s each, and reports mails/s and the checkpoints
// that fsyncs shared.
//
//	go test ./pkg/bench/fs -run '^$' -bench VarmailCluster -benchtime 1x
func BenchmarkVarmailCluster(b *testing.B) {
	for i := 0; i < b.N; i++ {
		m, done := mountCluster(b)
		one, err := varmail(filepath.Join(m.dir, "one"), 1, 10*time.Second)
		require.NoError(b, err)
		s0 := m.fs.Stats()
		many, err := varmail(filepath.Join(m.dir, "many"), 16, 10*time.Second)
		require.NoError(b, err)
		s := m.fs.Stats()
		b.ReportMetric(one, "mails/s-1thread")
		b.ReportMetric(many, "mails/s-16threads")
		b.ReportMetric(float64(s.CheckpointsByCause["fsync"]-s0.CheckpointsByCause["fsync"]), "fsync-checkpoints-16threads")
		b.ReportMetric(float64(s.CheckpointsShared-s0.CheckpointsShared), "shared-16threads")
		done()
	}
}
