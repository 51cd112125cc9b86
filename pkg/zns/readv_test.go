package zns

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// ReadInto and ReadV return what Read returns (written blocks, zeroes past
// the write pointer, ranges crossing zones), into a buffer full of
// garbage; bad buffers and ranges are typed errors; the host read counter
// counts every block once.
func TestReadIntoAndReadVMatchRead(t *testing.T) {
	d, _ := newDev(t, testCfgNoLimits(), clock.Off())
	bs := d.Identify().BlockSize
	zs := d.Identify().ZoneSize
	for z := uint64(0); z < 3; z++ {
		_, err := d.Write(bg, z*zs, pattern(bs, z*zs, 40, byte(z)), Flags{})
		require.NoError(t, err)
	}
	read := func(lba, n uint64) []byte {
		b, _, err := d.Read(bg, lba, n)
		require.NoError(t, err)
		return b
	}
	buf := bytes.Repeat([]byte{0xee}, 50*bs)
	_, err := d.ReadInto(bg, zs-10, buf) // the end of zone 0 (zeroes past its write pointer) and zone 1
	require.NoError(t, err)
	assert.Equal(t, read(zs-10, 50), buf)

	rs := []Range{{LBA: 2*zs + 5, Count: 10}, {LBA: 3, Count: 2}, {LBA: zs + 38, Count: 4}}
	before := d.Log().HostBlocksRead
	out := bytes.Repeat([]byte{0xee}, 16*bs)
	_, err = d.ReadV(bg, rs, out)
	require.NoError(t, err)
	assert.Equal(t, uint64(16), d.Log().HostBlocksRead-before)
	want := append(append(read(2*zs+5, 10), read(3, 2)...), read(zs+38, 4)...)
	assert.Equal(t, want, out)

	_, err = d.ReadInto(bg, 0, make([]byte, bs+1))
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.ReadInto(bg, 0, nil)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.ReadV(bg, nil, nil)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.ReadV(bg, rs, make([]byte, 15*bs))
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument, "buffer shorter than the ranges")
	_, err = d.ReadV(bg, []Range{{LBA: d.Identify().TotalLBAs, Count: 1}}, make([]byte, bs))
	assert.ErrorIs(t, err, zerr.ErrOutOfRange)
	_, err = d.ReadV(bg, []Range{{LBA: 0, Count: 0}}, nil)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}
