package zns

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

type acked struct {
	lba uint64
	n   int
	tag byte
}

// crashWorkload: w writers append to their own zones, resetting when full;
// every acknowledged append is reported.
func crashWorkload(d *Device, w int, perWriter int, report func(acked)) {
	g := d.g
	var wg sync.WaitGroup
	for i := 0; i < w; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			zi := uint64(i)
			for k := 0; k < perWriter; k++ {
				n := 1 + k%5
				tag := byte(k)
				lba := zi * g.ZoneSize
				data := pattern(g.BlockSize, uint64(tag), n, tag)
				got, _, err := d.Append(bg, lba, data, Flags{})
				if err != nil {
					if d.closed.Load() {
						return
					}
					// zone full: move to the next zone of this writer
					zi += uint64(w)
					if zi >= g.Zones {
						return
					}
					continue
				}
				report(acked{got, n, tag})
				_ = k
			}
		}(i)
	}
	wg.Wait()
}

func verifyAcked(t *testing.T, d *Device, acks []acked) {
	for _, a := range acks {
		got, _, err := d.Read(bg, a.lba, uint64(a.n))
		require.NoError(t, err)
		want := pattern(d.g.BlockSize, uint64(a.tag), a.n, a.tag)
		require.Equal(t, want, got, "acked append at LBA %d (%d blocks) lost", a.lba, a.n)
	}
}

func TestCrashInProcess(t *testing.T) {
	cfg := testCfg()
	cfg.MaxOpenZones, cfg.MaxActiveZones = 0, 0
	d, p := newDev(t, cfg, clock.Off())
	var mu sync.Mutex
	var acks []acked
	done := make(chan struct{})
	go func() {
		crashWorkload(d, 4, 200, func(a acked) {
			mu.Lock()
			acks = append(acks, a)
			n := len(acks)
			mu.Unlock()
			if n == 150 {
				close(done)
			}
		})
	}()
	<-done
	mu.Lock()
	d.abandon() // no Close, no sync: like a killed process
	snapshot := append([]acked(nil), acks...)
	mu.Unlock()
	d2, err := Open(p, cfg, clock.Off())
	require.NoError(t, err)
	defer d2.Close()
	verifyAcked(t, d2, snapshot)
}

// TestCrashSubprocess SIGKILLs a child process mid-workload and checks that
// every append the child acknowledged reads back after reopen.
func TestCrashSubprocess(t *testing.T) {
	if p := os.Getenv("ZNS_CRASH_CHILD"); p != "" {
		d, err := Open(p, testCfgNoLimits(), clock.Off())
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(2)
		}
		var mu sync.Mutex
		crashWorkload(d, 4, 1<<30, func(a acked) {
			mu.Lock()
			fmt.Fprintf(os.Stdout, "%d %d %d\n", a.lba, a.n, a.tag)
			mu.Unlock()
		})
		select {} // wait to be killed
	}
	cfg := testCfgNoLimits()
	p := filepath.Join(t.TempDir(), "dev")
	d, err := Create(p, cfg, clock.Off())
	require.NoError(t, err)
	require.NoError(t, d.Close())
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSubprocess$")
	cmd.Env = append(os.Environ(), "ZNS_CRASH_CHILD="+p)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	var acks []acked
	for sc.Scan() && len(acks) < 200 {
		var a acked
		_, err := fmt.Sscanf(sc.Text(), "%d %d %d", &a.lba, &a.n, &a.tag)
		require.NoError(t, err, sc.Text())
		acks = append(acks, a)
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Len(t, acks, 200)
	d2, err := Open(p, cfg, clock.Off())
	require.NoError(t, err)
	defer d2.Close()
	verifyAcked(t, d2, acks)
}
