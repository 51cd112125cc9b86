package paper

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFidelityRows(t *testing.T) {
	r := &Result{Order: []string{"a", "b"}, Lines: map[string][]Line{
		"a": {{Label: "x", Ours: 1.1, Ref: 1.0}, {Label: "no ref", Ours: 3}},
		"b": {{Label: "y", Ours: -0.2, Ref: -0.5}, {Label: "z", Ours: 0.8, Ref: 1.0}},
	}}
	rows := r.Fidelity()
	require.Len(t, rows, 3)
	for _, tc := range []struct {
		label  string
		ratio  float64
		within bool
	}{{"x", 1.1, true}, {"y", 0.4, false}, {"z", 0.8, true}} {
		var got *FidelityRow
		for i := range rows {
			if rows[i].Label == tc.label {
				got = &rows[i]
			}
		}
		require.NotNil(t, got, tc.label)
		require.InDelta(t, tc.ratio, got.Ratio, 1e-9, tc.label)
		require.Equal(t, tc.within, got.Within, tc.label)
	}
	require.InDelta(t, 2.0/3, FidelityShare(rows), 1e-9)

	md := FidelityMarkdown(rows)
	doc := []byte("head\n" + FidelityBegin + "\nold\n" + FidelityEnd + "\ntail\n")
	out, err := SpliceFidelity(doc, md)
	require.NoError(t, err)
	got, err := FidelityBlock(out)
	require.NoError(t, err)
	require.Equal(t, md[:len(md)-1], got)
	require.Contains(t, string(out), "tail\n")
	_, err = SpliceFidelity([]byte("no markers"), md)
	require.Error(t, err, "a doc without the markers is refused")
}

// TestFidelityDocCurrent: docs/paper-figures.md's fidelity table is the one
// the committed full run (docs/figures/paper/manifest.json) generates.
// Regenerate both with `zctl bench paper --out docs/figures/paper --doc
// docs/paper-figures.md`.
func TestFidelityDocCurrent(t *testing.T) {
	b, err := os.ReadFile("../../../docs/figures/paper/manifest.json")
	require.NoError(t, err)
	var m Manifest
	require.NoError(t, json.Unmarshal(b, &m))
	require.NotEmpty(t, m.Fidelity, "the manifest carries the fidelity rows")
	doc, err := os.ReadFile("../../../docs/paper-figures.md")
	require.NoError(t, err)
	got, err := FidelityBlock(doc)
	require.NoError(t, err)
	want := FidelityMarkdown(m.Fidelity)
	require.Equal(t, want[:len(want)-1], got, "regenerate: zctl bench paper --out docs/figures/paper --doc docs/paper-figures.md")
}

func TestCatalog(t *testing.T) {
	seen := map[string]bool{}
	status := map[string]Status{}
	for _, e := range Catalog() {
		require.False(t, seen[e.ID], "duplicate id %s", e.ID)
		seen[e.ID] = true
		status[e.ID] = e.Status
		if e.Status != Runs {
			require.NotEmpty(t, e.Reason, "%s says why it does not run", e.ID)
		}
	}
	for _, id := range IDs() {
		require.Equal(t, Runs, status[id], id)
	}
	require.Equal(t, Pending, status["qblk_scaling"])
	for _, id := range []string{"pgc", "zms_ipu", "zms_l2p", "zms_iotailor"} {
		require.Equal(t, Runs, status[id], id)
	}
}
