package zctl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A --blocks-per-chip a drive cannot have is a usage error (exit 2) that
// names the flag and the range, and starts nothing: no data directory.
func TestLocalUpRejectsDriveSize(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"all spare", "2"},
		{"zero", "0"},
		{"negative", "-5"},
		{"past the bound", "4097"},
		{"huge", "1000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			_, stderr, code := run(t, "", "--config", filepath.Join(t.TempDir(), "c.yaml"), "local", "up", "--data", data, "--blocks-per-chip", tc.value)
			assert.Equal(t, ExitUsage, code, stderr)
			assert.Contains(t, stderr, "blocks-per-chip")
			assert.Contains(t, stderr, "want 3..4096")
			_, err := os.Stat(data)
			assert.True(t, os.IsNotExist(err), "nothing was created")
		})
	}
}

// A --zone-capacity above the zone size (or below zero) is a usage error
// that names the bound, and starts nothing.
func TestLocalUpRejectsZoneCapacity(t *testing.T) {
	for _, value := range []string{"1025", "-1"} {
		t.Run(value, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			_, stderr, code := run(t, "", "--config", filepath.Join(t.TempDir(), "c.yaml"), "local", "up", "--data", data, "--zone-capacity", value)
			assert.Equal(t, ExitUsage, code, stderr)
			assert.Contains(t, stderr, "zone_capacity")
			assert.Contains(t, stderr, "zone size 1024 blocks")
			_, err := os.Stat(data)
			assert.True(t, os.IsNotExist(err), "nothing was created")
		})
	}
}
