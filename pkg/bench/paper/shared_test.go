package paper

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// shortRuns holds one run of each figure's short configuration, made the
// first time a test asks for it and shared by the tests that assert on it:
// TestDeterministic compares it byte for byte with a second, fresh run;
// TestOutput writes it out; TestFig27 and TestZNSPlusFigure assert the
// paper's effects on it. Every figure thus runs its short configuration
// twice in the package's tests, not four or five times.
var shortRuns = struct {
	sync.Mutex
	m map[string]*shortRun
}{m: map[string]*shortRun{}}

type shortRun struct {
	once sync.Once
	res  *Result
	json []byte
	err  error
}

// runShort runs figure id's short configuration (fresh, not cached) and
// returns the result and its JSON.
func runShort(id string) (*Result, []byte, error) {
	dir, err := os.MkdirTemp("", "zonefleet-paper-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	res, err := Run(context.Background(), dir, []string{id}, Options{Short: true})
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(res.Figures)
	return res, b, err
}

// sharedShort is the shared short run of figure id.
func sharedShort(t *testing.T, id string) (*Result, []byte) {
	t.Helper()
	shortRuns.Lock()
	r := shortRuns.m[id]
	if r == nil {
		r = &shortRun{}
		shortRuns.m[id] = r
	}
	shortRuns.Unlock()
	r.once.Do(func() { r.res, r.json, r.err = runShort(id) })
	require.NoError(t, r.err, id)
	return r.res, r.json
}

// sharedShortAll merges the shared short runs of every figure into one
// Result, as Run(ctx, dir, nil, Options{Short: true}) returns it.
func sharedShortAll(t *testing.T) *Result {
	t.Helper()
	all := &Result{Figures: map[string]any{}, Lines: map[string][]Line{}}
	for _, id := range IDs() {
		r, _ := sharedShort(t, id)
		all.Figures[id] = r.Figures[id]
		all.Lines[id] = r.Lines[id]
		all.Order = append(all.Order, r.Order...)
	}
	return all
}
