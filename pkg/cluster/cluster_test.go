package cluster

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func testDevice() DeviceInfo {
	return DeviceInfo{Index: 0, Channels: 8, Ways: 2, DZone: 4, FCGs: 4, MAR: 16, MOR: 16,
		BlockSize: 4096, PageSize: 16384, ZoneSize: 8192, ZoneCapacity: 8000, NumZones: 64, Media: "TLC"}
}

func TestKeys(t *testing.T) {
	assert.Equal(t, "/zonefleet/v1/nodes/n1", NodeKey("n1"))
	assert.Equal(t, "/zonefleet/v1/nodes/", NodesPrefix())
	assert.Equal(t, "/zonefleet/v1/grants/n1/", GrantsPrefix("n1"))
	k := GrantKey("n1", 2, 37)
	assert.Equal(t, "/zonefleet/v1/grants/n1/0002/00000037", k)
	pz, err := ParseGrantKey(k)
	require.NoError(t, err)
	assert.Equal(t, PhysZone{Node: "n1", Device: 2, Zone: 37}, pz)
	assert.Equal(t, k, pz.GrantKey())
	id, err := ParseNodeKey(NodeKey("n7"))
	require.NoError(t, err)
	assert.Equal(t, "n7", id)
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", "a/b", "n/1", "n/x/1", "n/1/-1", "/1/2", "n/1/2/3", "n/99999999999/1"} {
		_, err := ParsePhysZone(s)
		assert.ErrorIs(t, err, zerr.ErrInvalidArgument, s)
	}
	for _, k := range []string{"/other/grants/n/1/2", "/zonefleet/v1/grants/n/1"} {
		_, err := ParseGrantKey(k)
		assert.ErrorIs(t, err, zerr.ErrInvalidArgument, k)
	}
	for _, k := range []string{"/zonefleet/v1/nodes/", "/zonefleet/v1/nodes/a/b", "/x/n"} {
		_, err := ParseNodeKey(k)
		assert.ErrorIs(t, err, zerr.ErrInvalidArgument, k)
	}
}

func TestPhysZoneString(t *testing.T) {
	pz := PhysZone{Node: "node1", Device: 0, Zone: 7}
	assert.Equal(t, "node1/0/7", pz.String())
	back, err := ParsePhysZone(pz.String())
	require.NoError(t, err)
	assert.Equal(t, pz, back)
}

func TestZoneDies(t *testing.T) {
	d := testDevice()
	assert.Equal(t, uint32(16), d.Dies())
	tests := []struct {
		zone uint32
		want []uint32
	}{
		{0, []uint32{0, 1, 2, 3}},
		{1, []uint32{4, 5, 6, 7}},
		{3, []uint32{12, 13, 14, 15}},
		{4, []uint32{0, 1, 2, 3}},
		{63, []uint32{12, 13, 14, 15}},
		{64, nil},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, d.ZoneDies(tc.zone), "zone %d", tc.zone)
	}
	small := d
	small.DZone, small.FCGs = 1, 16
	assert.Equal(t, []uint32{5}, small.ZoneDies(21))
}

func TestDeviceValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*DeviceInfo)
		ok   bool
	}{
		{"good", func(*DeviceInfo) {}, true},
		{"no channels", func(d *DeviceInfo) { d.Channels = 0 }, false},
		{"dzone not divisor", func(d *DeviceInfo) { d.DZone = 3 }, false},
		{"fcgs wrong", func(d *DeviceInfo) { d.FCGs = 5 }, false},
		{"no mar", func(d *DeviceInfo) { d.MAR = 0 }, false},
		{"cap > size", func(d *DeviceInfo) { d.ZoneCapacity = d.ZoneSize + 1 }, false},
		{"no zones", func(d *DeviceInfo) { d.NumZones = 0 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := testDevice()
			tc.mod(&d)
			err := d.Validate()
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
			}
		})
	}
}

func TestEncodeDecode(t *testing.T) {
	n := NodeRecord{ID: "n1", Addr: "127.0.0.1:9000", Version: "v0", Devices: []DeviceInfo{testDevice()},
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b, err := EncodeNode(n)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"zone_capacity":8000`)
	assert.Contains(t, string(b), `"block_size":4096`)
	back, err := DecodeNode(NodeKey("n1"), b)
	require.NoError(t, err)
	assert.Equal(t, n, back)

	g := Grant{Namespace: "ns", VZone: 3, Group: 1, Generation: 9}
	gb, err := EncodeGrant(g)
	require.NoError(t, err)
	gback, err := DecodeGrant("k", gb)
	require.NoError(t, err)
	assert.Equal(t, g, gback)

	for _, bad := range [][]byte{[]byte("{"), []byte(`{"id":""}`), []byte(`[1]`)} {
		_, err := DecodeNode("k", bad)
		var ce *zerr.CorruptError
		assert.True(t, errors.As(err, &ce), "%s: %v", bad, err)
	}
	_, err = DecodeGrant("k", []byte(`{"vzone":1}`))
	assert.ErrorIs(t, err, zerr.ErrCorrupt)
	_, err = DecodeGrant("k", []byte(`nope`))
	assert.ErrorIs(t, err, zerr.ErrCorrupt)
}

func TestParseRedundancy(t *testing.T) {
	for _, tc := range []struct {
		in     string
		copies uint32
		canon  string
		bad    bool
		parity bool
	}{
		{"", 1, "none", false, false},
		{"none", 1, "none", false, false},
		{"mirror:2", 2, "mirror:2", false, false},
		{"mirror:4", 4, "mirror:4", false, false},
		{"mirror:1", 0, "", true, false},
		{"mirror:5", 0, "", true, false},
		{"mirror:", 0, "", true, false},
		{"mirror:-2", 0, "", true, false},
		{"mirror:2x", 0, "", true, false},
		{"raid5", 1, "raid5", false, true},
		{"raid6", 0, "", true, false},
		{"raid5:3", 0, "", true, false},
		{"parity", 0, "", true, false},
		{"Mirror:2", 0, "", true, false},
		{"mirror:99999999999999999999", 0, "", true, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseRedundancy(tc.in)
			if tc.bad {
				require.ErrorIs(t, err, zerr.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.copies, r.Copies)
			require.Equal(t, tc.parity, r.Parity)
			require.Equal(t, tc.canon, r.String())
			if tc.parity {
				require.Equal(t, ParityMinNodes, r.MinNodes())
			} else {
				require.Equal(t, int(tc.copies), r.MinNodes())
			}
			back, err := ParseRedundancy(r.String())
			require.NoError(t, err)
			require.Equal(t, r, back)
		})
	}
}

func FuzzParseRedundancy(f *testing.F) {
	for _, s := range []string{"", "none", "mirror:2", "mirror:9", "raid5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRedundancy(s)
		if err != nil {
			require.ErrorIs(t, err, zerr.ErrInvalidArgument)
			return
		}
		require.True(t, r.Copies >= 1 && r.Copies <= MaxCopies)
		require.False(t, r.Parity && r.Copies != 1, "parity is never combined with copies")
		back, err := ParseRedundancy(r.String())
		require.NoError(t, err)
		require.Equal(t, r, back)
	})
}

// A record keeps the redundancy as its canonical text and leaves none out
// (as records written before it was typed); a record without the field,
// or with "", reads back as none; a bad value fails to decode, typed.
func TestRedundancyInRecords(t *testing.T) {
	type rec struct {
		R Redundancy `json:"redundancy,omitzero"`
	}
	for _, tc := range []struct {
		r    Redundancy
		json string
	}{
		{None, `{}`},
		{Redundancy{}, `{}`},
		{Redundancy{Copies: 3}, `{"redundancy":"mirror:3"}`},
		{Redundancy{Copies: 1, Parity: true}, `{"redundancy":"raid5"}`},
	} {
		b, err := json.Marshal(rec{tc.r})
		require.NoError(t, err)
		assert.Equal(t, tc.json, string(b))
		var back rec
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, tc.r.Normal(), back.R.Normal())
	}
	for _, old := range []string{`{}`, `{"redundancy":""}`, `{"redundancy":"none"}`} {
		var r rec
		require.NoError(t, json.Unmarshal([]byte(old), &r), old)
		assert.Equal(t, None, r.R.Normal(), old)
	}
	var r rec
	err := json.Unmarshal([]byte(`{"redundancy":"mirror:9"}`), &r)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}
