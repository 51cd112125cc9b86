package zctl

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/bench/hostenv"
)

func runBench(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := runBenchStderr(t, args...)
	return out, err
}

// runBenchStderr is runBench with what the command wrote to stderr.
func runBenchStderr(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	t.Setenv("ZONEFLEET_CONFIG", filepath.Join(t.TempDir(), "none.yaml")) // never the user's config
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetArgs(append([]string{"bench"}, args...))
	err := root.Execute()
	return out.String(), errOut.String(), err
}

// --runs below 1 is a usage error before anything runs, for both benches
// that take it.
func TestBenchRunsRefused(t *testing.T) {
	for _, tc := range []struct{ name, bench, runs string }{
		{"node zero", "node", "0"},
		{"node negative", "node", "-2"},
		{"fs zero", "fs", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runBench(t, tc.bench, "--runs", tc.runs, "--dir", t.TempDir())
			require.Error(t, err)
			assert.Equal(t, ExitUsage, ExitCode(err))
			assert.Contains(t, err.Error(), "runs")
		})
	}
}

// --runs reaches the node bench: one timed sample per point. The result
// and stderr say whether this machine hands freed pages to its host.
func TestBenchNodeRuns(t *testing.T) {
	out, stderr, err := runBenchStderr(t, "node", "--runs", "1", "--write-bytes", "1048576", "--clients", "1", "--admission=false", "-o", "json", "--dir", t.TempDir())
	require.NoError(t, err)
	var res struct {
		Config  map[string]string    `json:"config"`
		Samples map[string][]float64 `json:"samples_mib_per_second"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Equal(t, "1", res.Config["runs"])
	require.Contains(t, res.Samples, "grpc_stream")
	assert.Len(t, res.Samples["grpc_stream"], 1)
	desc, active := hostenv.Describe()
	assert.Equal(t, desc, res.Config["host_page_reporting"])
	if active {
		assert.Contains(t, stderr, "warning: host free page reporting is active")
	} else {
		assert.NotContains(t, stderr, "page reporting")
	}
}
