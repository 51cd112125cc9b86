package fsvol_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// One mount writes a namespace at a time. A second mount is refused while
// the first holds the lease; a forced one takes it over, and the first
// stops writing (its file system turns read-only) at its next renewal;
// a clean close releases the lease; a mount that died holds it until its
// TTL ends, and the next mount waits for that. Before the lease, two mounts of one
// namespace both came up read-write and the second's recovery reset zones
// the first still wrote.
func TestOneMountPerNamespace(t *testing.T) {
	// the lease is the arbiter's, on the wall clock: a renewal must reach
	// it within two thirds of the TTL however busy the machine is (at 3 s,
	// renewals timed out at a load average of 35 on two cores)
	const mountTTL = 6 * time.Second
	ctx := context.Background()
	cl := testcluster.Start(t, localcluster.Config{Nodes: 3})
	testcluster.CreateNamespace(t, cl, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 8, ZonesPerVzone: 4})
	regA := prometheus.NewRegistry()
	newVol := func(holder string, force bool) (*fsvol.Volume, error) {
		c, err := client.New(ctx, cl.ClientConfig("fs"))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		var reg prometheus.Registerer
		if holder == "a" {
			reg = regA
		}
		return fsvol.New(ctx, c, fsvol.Options{MaxZones: 28, MountHolder: holder, ForceMount: force, MountTTL: mountTTL, Registerer: reg})
	}
	gauge := func(name string) float64 {
		mfs, err := regA.Gather()
		require.NoError(t, err)
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	va, err := newVol("a", false)
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, va, lfs.MkfsOptions{}))
	fa, err := lfs.Mount(ctx, va, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	write := func(fs *lfs.FS, name string) error {
		_, h, err := fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, os.O_RDWR)
		if err != nil {
			return err
		}
		defer fs.Release(ctx, h)
		if _, err := fs.Write(ctx, h, 0, make([]byte, 64<<10)); err != nil {
			return err
		}
		return fs.Fsync(ctx, h, false)
	}
	require.NoError(t, write(fa, "a1"))

	// a's renewals (every third of the TTL) keep the lease past its
	// first term
	require.Eventually(t, func() bool { return gauge("zonefleet_fs_mount_lease_renewals_total") >= 3 }, time.Minute, 10*time.Millisecond,
		"the mount renews its lease")
	_, err = newVol("b", false)
	require.Error(t, err, "a second mount is refused")
	assert.ErrorIs(t, err, zerr.ErrAlreadyExists)
	assert.Contains(t, err.Error(), `a (its lease ends`)
	require.NoError(t, write(fa, "a2"), "the first mount goes on")
	assert.Positive(t, gauge("zonefleet_fs_mount_lease_renewals_total"), "renewed")
	assert.Zero(t, gauge("zonefleet_fs_mount_fenced"))

	vb, err := newVol("b", true)
	require.NoError(t, err, "a forced mount takes the lease over")
	// The next renewal (within a third of the TTL) finds the lease taken;
	// the bound only turns a mount that never stops into a failure.
	var werr error
	i := 0
	require.Eventually(t, func() bool {
		i++
		werr = write(fa, "late"+string(rune('a'+i%26)))
		return werr != nil
	}, time.Minute, 50*time.Millisecond, "the first mount stops writing once its renewal finds the lease taken")
	var fe *fsvol.FencedError
	rofs := errors.As(werr, &fe) || lfs.Errno(werr) != 0
	assert.True(t, rofs, "%v", werr)
	assert.Equal(t, 1.0, gauge("zonefleet_fs_mount_fenced"), "the fence shows in the metrics")
	_ = fa.Unmount(ctx)
	_ = va.Close(ctx) // does not release b's lease

	_, err = newVol("c", false)
	assert.ErrorIs(t, err, zerr.ErrAlreadyExists, "b holds the lease")
	require.NoError(t, vb.Close(ctx))
	vc, err := newVol("c", false)
	require.NoError(t, err, "b's close released the lease")
	require.NoError(t, vc.Close(ctx))

	// A mount that died (no renewals, no release): the next one waits for
	// its lease to end and mounts.
	// Its TTL is short: the test waits it out. The lease ends deadTTL
	// after the arbiter granted it, which is after t0, so the next mount
	// comes up no sooner than deadTTL after t0 however slow the calls.
	const deadTTL = 2 * time.Second
	dead, err := client.New(ctx, cl.ClientConfig("fs"))
	require.NoError(t, err)
	defer dead.Close()
	t0 := time.Now()
	_, err = dead.AcquireMount(ctx, "killed", deadTTL, false)
	require.NoError(t, err)
	vd, err := newVol("d", false)
	require.NoError(t, err, "the dead mount's lease ended")
	assert.GreaterOrEqual(t, time.Since(t0), deadTTL, "it waited for the lease")
	require.NoError(t, vd.Close(ctx))
}

// A mount whose renewals stopped (the process was stopped past its TTL and
// its writers woke first) refuses to write once two thirds of the TTL passed
// since its last renewal, on the clock at the call: before, the fence came
// only from the renewal goroutine, so writers that ran before it wrote into
// a namespace another mount may own by then.
func TestStaleLeaseFencesWithoutTheRenewalGoroutine(t *testing.T) {
	ctx := context.Background()
	cl, _ := tenantCluster(t, 3, "fs", 8, 4)
	// the holder's lease age is on the client's clock: a virtual one, moved
	// past two thirds of the TTL by the test
	clk := clock.NewVirtual()
	c := testcluster.Client(t, cl, "fs", testcluster.WithClock(clk))
	const ttl = 3 * time.Second
	v, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 28, MountHolder: "frozen", MountTTL: ttl})
	require.NoError(t, err)
	z, err := v.OpenZone(ctx)
	require.NoError(t, err)
	bs := v.Geometry().BlockSize
	require.NoError(t, v.Write(ctx, z, 0, make([]byte, bs), false), "a fresh lease writes")

	fsvol.FreezeRenewals(v)
	require.NoError(t, v.Write(ctx, z, 1, make([]byte, bs), false), "a frozen lease writes until 2/3 of the TTL passed")
	clk.Advance(ttl * 2 / 3)
	err = v.Write(ctx, z, 2, make([]byte, bs), false)
	var fe *fsvol.FencedError
	require.ErrorAs(t, err, &fe, "a write after 2/3 of the TTL without a renewal is refused")
	assert.False(t, fe.Final)
	assert.ErrorIs(t, err, zerr.ErrZoneState, "lfs turns read-only on it")
	assert.ErrorAs(t, v.Flush(ctx), &fe)
	_, err = v.OpenZone(ctx)
	assert.ErrorAs(t, err, &fe)
	buf := make([]byte, bs)
	assert.NoError(t, v.Read(ctx, z, 0, buf), "reads go on")
}
