package flagenv

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantA   string
		wantN   int
		wantD   time.Duration
		wantErr string
	}{
		{"defaults", nil, nil, "a", 1, time.Second, ""},
		{"env sets", nil, map[string]string{"ZONEFLEET_LISTEN_ADDR": "x:1", "ZONEFLEET_DEVICES": "4"}, "x:1", 4, time.Second, ""},
		{"flag wins", []string{"--listen-addr=y:2"}, map[string]string{"ZONEFLEET_LISTEN_ADDR": "x:1"}, "y:2", 1, time.Second, ""},
		{"duration", nil, map[string]string{"ZONEFLEET_TIMEOUT": "3s"}, "a", 1, 3 * time.Second, ""},
		{"bad value names the variable", nil, map[string]string{"ZONEFLEET_DEVICES": "many"}, "a", 1, time.Second, "ZONEFLEET_DEVICES"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			a := fs.String("listen-addr", "a", "address")
			n := fs.Int("devices", 1, "devices")
			d := fs.Duration("timeout", time.Second, "timeout")
			require.NoError(t, fs.Parse(tc.args))
			err := Apply(fs)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantA, *a)
			assert.Equal(t, tc.wantN, *n)
			assert.Equal(t, tc.wantD, *d)
		})
	}
}

func TestAnnotate(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("etcd-endpoints", "", "etcd")
	Annotate(fs)
	Annotate(fs) // idempotent
	assert.Equal(t, "etcd [$ZONEFLEET_ETCD_ENDPOINTS]", fs.Lookup("etcd-endpoints").Usage)
}
