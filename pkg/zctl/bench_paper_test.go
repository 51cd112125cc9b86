package zctl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func runPaper(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runBench(t, append([]string{"paper"}, args...)...)
}

func TestBenchPaperCmd(t *testing.T) {
	out, err := runPaper(t, "--list")
	require.NoError(t, err)
	for _, id := range []string{"fig26", "fig29a", "fig29b", "fig29c", "zns_plus"} {
		require.Contains(t, out, id)
	}
	// the figures that do not run are listed with their status
	require.Contains(t, out, "qblk_scaling")
	require.Contains(t, out, "pending")
	require.Contains(t, out, "not reproducible")

	// --doc needs the full run of every figure
	doc := filepath.Join(t.TempDir(), "doc.md")
	require.NoError(t, os.WriteFile(doc, []byte("x"), 0o644))
	_, err = runPaper(t, "fig26", "--short", "--doc", doc)
	require.Error(t, err)
	b, err := os.ReadFile(doc)
	require.NoError(t, err)
	require.Equal(t, "x", string(b), "a refused --doc changes nothing")

	dir := t.TempDir()
	out, err = runPaper(t, "fig26", "--short", "-o", "json", "--dir", t.TempDir(), "--out", dir)
	require.NoError(t, err)
	var figs map[string]struct {
		VZoneOverStatic map[string]float64 `json:"vzone_over_static"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &figs))
	require.Contains(t, figs, "fig26")
	require.Contains(t, figs["fig26"].VZoneOverStatic, "4")
	_, err = os.Stat(filepath.Join(dir, "fig26.png"))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)

	_, err = runPaper(t, "fig99")
	require.Error(t, err)
}
