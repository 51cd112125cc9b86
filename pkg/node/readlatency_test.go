package node

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc/metadata"
)

// A read that waits for a device slot (the WRR) reports the wait plus the
// drive's latency: its latency counts from the slot request, as the NVMe
// command latency eZNS's read congestion control measures (§4.5.1). All
// times are the virtual clock's; the slot wait is a clock advance while the
// slot is held, so the expected latency is exact.
func TestReadLatencyIncludesTheSlotWait(t *testing.T) {
	for _, op := range []string{"Read", "ReadV"} {
		t.Run(op, func(t *testing.T) {
			clk := clock.NewVirtual()
			dev, err := zns.Create(filepath.Join(t.TempDir(), "dev0.zns"), testGeometry(), clk)
			require.NoError(t, err)
			svc, err := New(Config{ID: "lat", Standalone: true, QueueSlots: 1}, []*zns.Device{dev}, nil, quiet)
			require.NoError(t, err)
			t.Cleanup(func() {
				svc.Close()
				_ = dev.Close()
			})
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.NamespaceKey, "a")) // an in-process call as namespace a
			_, err = svc.Write(ctx, &v1.WriteRequest{Lba: 0, Data: randBlocks(t, 16)})
			require.NoError(t, err)
			clk.AdvanceTo(dev.Drained()) // every chip idle: each read below costs the same on the drive

			read := func() (time.Duration, error) {
				var r *v1.ReadResponse
				var err error
				if op == "Read" {
					r, err = svc.Read(ctx, &v1.ReadRequest{Lba: 0, Blocks: 16})
				} else {
					r, err = svc.ReadV(ctx, &v1.ReadVRequest{Ranges: []*v1.ReadRange{{Lba: 0, Blocks: 8}, {Lba: 8, Blocks: 8}}})
				}
				return time.Duration(r.GetLatencyNs()), err
			}
			drive, err := read() // a free slot: the drive's latency alone
			require.NoError(t, err)
			require.Positive(t, drive)

			// Hold the only slot; the read queues behind it while the clock
			// moves on by wait, then gets the slot.
			const wait = 3 * time.Millisecond
			d := svc.devs[0]
			require.NoError(t, d.wrr.Acquire(context.Background(), "holder"))
			type answer struct {
				lat time.Duration
				err error
			}
			got := make(chan answer, 1)
			go func() {
				lat, err := read()
				got <- answer{lat, err}
			}()
			require.Eventually(t, func() bool { return d.wrr.Waiting()["a"] == 1 }, 30*time.Second, time.Millisecond, "the read queues for the slot")
			clk.Advance(wait)
			d.wrr.Release()
			a := <-got
			require.NoError(t, a.err)
			assert.Equal(t, wait+drive, a.lat, "slot wait + drive latency")

			after, err := read() // the slot is free again
			require.NoError(t, err)
			assert.Equal(t, drive, after)
		})
	}
}

// FromSlotRequest moves a read's submission back to its slot request and
// leaves the off clock's zero result alone.
func TestFromSlotRequest(t *testing.T) {
	res := FromSlotRequest(2*time.Millisecond, zns.IOResult{Submitted: 5 * time.Millisecond, Completed: 6 * time.Millisecond})
	assert.Equal(t, 2*time.Millisecond, res.Submitted)
	assert.Equal(t, 4*time.Millisecond, res.Latency())
	assert.Zero(t, FromSlotRequest(0, zns.IOResult{}).Latency(), "off clock")
	assert.Equal(t, time.Millisecond, FromSlotRequest(7*time.Millisecond, zns.IOResult{Submitted: 5 * time.Millisecond, Completed: 6 * time.Millisecond}).Latency(),
		"a request time after the submission changes nothing")
}
