package paper

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestOutput(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	o := Options{Short: true}
	res := sharedShortAll(t)
	require.Equal(t, IDs(), res.Order)

	var tab bytes.Buffer
	require.NoError(t, res.WriteTable(&tab))
	for _, id := range IDs() {
		require.Contains(t, tab.String(), id)
	}
	require.Contains(t, tab.String(), "vzone_over_static, 4 writers")

	out := t.TempDir()
	m, err := res.WriteOut(out, o)
	require.NoError(t, err)
	require.Len(t, m.Files, len(IDs()))
	for _, f := range m.Files {
		fh, err := os.Open(filepath.Join(out, f))
		require.NoError(t, err)
		img, err := png.Decode(fh)
		fh.Close()
		require.NoError(t, err, f)
		require.Greater(t, img.Bounds().Dx(), 100)
	}
	b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	require.NoError(t, err)
	var back struct {
		Figures []string                   `json:"figures"`
		Seed    int64                      `json:"seed"`
		Config  map[string]json.RawMessage `json:"config"`
		Results map[string]json.RawMessage `json:"results"`
		Model   []ModelChoice              `json:"ezns_model"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, IDs(), back.Figures)
	require.Equal(t, Seed, back.Seed)
	var fig26 Fig26Result
	require.NoError(t, json.Unmarshal(back.Results["fig26"], &fig26))
	require.Contains(t, fig26.VZoneOverStatic, "4")
	require.Contains(t, string(back.Config["fig29b"]), `"regular_width": 8`)
	require.Equal(t, EZNSModel(), back.Model, "the manifest states the eZNS model's choices")
}

// Run runs the figures asked for in the registry's order (TestOutput checks
// the whole set through the shared runs; here Run itself, on two cheap ones).
func TestRunOrder(t *testing.T) {
	res, err := Run(context.Background(), t.TempDir(), []string{"fig29c", "fig26"}, Options{Short: true})
	require.NoError(t, err)
	require.Equal(t, []string{"fig26", "fig29c"}, res.Order)
	require.Len(t, res.Figures, 2)
	require.NotEmpty(t, res.Lines["fig26"])
}

func TestUnknownFigure(t *testing.T) {
	_, err := Run(context.Background(), t.TempDir(), []string{"fig99"}, Options{})
	var ia *zerr.InvalidArgumentError
	require.ErrorAs(t, err, &ia)
}
