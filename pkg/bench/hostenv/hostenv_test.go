package hostenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sysfs lays out files (path relative to the root -> content) under a
// temporary root.
func sysfs(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(c), 0o644))
	}
	return root
}

const (
	// The balloon's features as this project's VM shows them: bits 1, 2
	// and 5 (reporting) among others.
	balloonReporting = "0110010100000000000000000000000010000000\n"
	balloonPlain     = "0110000100000000000000000000000010000000\n"
	blkFeatures      = "0010011001100100000000000000010010000000\n"
)

func TestReadPageReporting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		active  bool
		device  string
		order   int
		params  map[string]string
		errPath string
	}{
		{name: "bare metal: no virtio, no module", files: map[string]string{"kernel/x": ""}, order: -1},
		{name: "module without a balloon", files: map[string]string{
			"module/page_reporting/parameters/page_reporting_order": "9\n",
			"bus/virtio/devices/virtio1/device":                     "0x0002\n",
			"bus/virtio/devices/virtio1/features":                   blkFeatures,
		}, order: 9},
		{name: "balloon without the reporting feature", files: map[string]string{
			"module/page_reporting/parameters/page_reporting_order": "9\n",
			"bus/virtio/devices/virtio0/device":                     "0x0005\n",
			"bus/virtio/devices/virtio0/features":                   balloonPlain,
		}, order: 9},
		{name: "reporting, this project's VM", files: map[string]string{
			"module/page_reporting/parameters/page_reporting_order": "9\n",
			"module/page_reporting/parameters/min_free_ms":          "0\n",
			"module/page_reporting/parameters/max_waiting_mib":      "1024\n",
			"bus/virtio/devices/virtio0/device":                     "0x0005\n",
			"bus/virtio/devices/virtio0/features":                   balloonReporting,
			"bus/virtio/devices/virtio1/device":                     "0x0002\n",
			"bus/virtio/devices/virtio1/features":                   blkFeatures,
		}, active: true, device: "virtio0", order: 9, params: map[string]string{"min_free_ms": "0", "max_waiting_mib": "1024"}},
		{name: "reporting switched off by an order above the buddy allocator's", files: map[string]string{
			"module/page_reporting/parameters/page_reporting_order": "11\n",
			"bus/virtio/devices/virtio0/device":                     "0x0005\n",
			"bus/virtio/devices/virtio0/features":                   balloonReporting,
		}, device: "virtio0", order: 11},
		{name: "a device that vanished mid-scan is skipped", files: map[string]string{
			"module/page_reporting/parameters/page_reporting_order": "10\n",
			"bus/virtio/devices/virtio0/features":                   balloonReporting,
			"bus/virtio/devices/virtio3/device":                     "0x0005\n",
			"bus/virtio/devices/virtio3/features":                   balloonReporting,
		}, active: true, device: "virtio3", order: 10},
		{name: "a balloon that offers it, a kernel without the module", files: map[string]string{
			"bus/virtio/devices/virtio0/device":   "0x0005\n",
			"bus/virtio/devices/virtio0/features": balloonReporting,
		}, device: "virtio0", order: -1},
		{name: "garbage order", files: map[string]string{
			"module/page_reporting/parameters/page_reporting_order": "nine\n",
		}, order: -1, errPath: "page_reporting_order"},
		{name: "garbage features", files: map[string]string{
			"bus/virtio/devices/virtio0/device":   "0x0005\n",
			"bus/virtio/devices/virtio0/features": "01x001\n",
		}, order: -1, errPath: "features"},
		{name: "garbage device ID", files: map[string]string{
			"bus/virtio/devices/virtio0/device": "balloon\n",
		}, order: -1, errPath: "device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ReadPageReporting(sysfs(t, tc.files))
			if tc.errPath != "" {
				var pe *ParseError
				require.ErrorAs(t, err, &pe)
				assert.True(t, strings.HasSuffix(pe.Path, tc.errPath), pe.Path)
				assert.False(t, p.Active())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.active, p.Active())
			assert.Equal(t, tc.device, p.Device)
			assert.Equal(t, tc.order, p.Order)
			assert.Equal(t, tc.params, p.Params)
			s := p.String()
			assert.Equal(t, tc.active, ActiveDescription(s), s)
			if tc.active {
				assert.Contains(t, s, "active")
				assert.Contains(t, s, tc.device)
			} else {
				assert.NotContains(t, s, "active")
			}
		})
	}
}

// This machine's own sysfs parses (whatever it has): the kernel's files
// are what the parsers are for.
func TestReadLiveSysfs(t *testing.T) {
	if _, err := os.Stat("/sys/kernel"); err != nil {
		t.Skip("no sysfs")
	}
	p, err := ReadPageReporting("/sys")
	require.NoError(t, err)
	desc, active := Describe()
	assert.Equal(t, p.Active(), active)
	assert.Equal(t, p.String(), desc)
	t.Log(desc)
}

func TestBlockSize(t *testing.T) {
	assert.Equal(t, "2 MiB", blockSize(9))
	assert.Equal(t, "4 MiB", blockSize(10))
	assert.Equal(t, "512 KiB", blockSize(7))
	assert.Contains(t, PageReporting{Device: "virtio0", Order: 9}.String(), "blocks of 2 MiB")
}

func TestFeatureBit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bit  int
		want bool
		bad  bool
	}{
		{"000001", 5, true, false},
		{"000010", 5, false, false},
		{"0000", 5, false, false}, // short: the bit is not offered
		{"", 5, false, false},
		{"000001", -1, false, false},
		{"00000a", 5, false, true},
	} {
		got, err := FeatureBit(tc.in, tc.bit)
		if tc.bad {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

// The parsers take whatever a sysfs file holds: never a panic, and an
// accepted value is what the input says.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{"9", "11", "-1", "64", "0x5", "", balloonReporting, "01x"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, bit int) {
		if o, err := ParseOrder(s); err == nil {
			if o < 0 || o > 63 {
				t.Fatalf("ParseOrder(%q) = %d", s, o)
			}
		}
		on, err := FeatureBit(s, bit)
		if err == nil && on && s[bit] != '1' {
			t.Fatalf("FeatureBit(%q, %d) = true", s, bit)
		}
	})
}
