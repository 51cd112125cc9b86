package lfs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Errors of background work are counted per task and logged, at most one
// line per task per bgLogEvery; nil, cancellation and a closed file system
// are not errors.
func TestNoteBackground(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)

	reg := prometheus.NewRegistry()
	fs := &FS{bg: background{errs: bgCounter(reg)}}
	boom := &zerr.UnavailableError{What: "node-2", Reason: "connection refused"}
	for _, c := range []struct {
		task string
		err  error
	}{
		{bgCheckpoint, boom}, {bgCheckpoint, boom}, {bgCheckpoint, boom},
		{bgGC, errors.New("victim moved")},
		{bgFinish, nil}, {bgReset, context.Canceled}, {bgReset, &zerr.ClosedError{What: "file system"}},
	} {
		fs.noteBackground(c.task, c.err)
	}
	assert.Equal(t, 3.0, testutil.ToFloat64(fs.bg.errs.WithLabelValues(bgCheckpoint)))
	assert.Equal(t, 1.0, testutil.ToFloat64(fs.bg.errs.WithLabelValues(bgGC)))
	assert.Equal(t, 0.0, testutil.ToFloat64(fs.bg.errs.WithLabelValues(bgFinish)))
	assert.Equal(t, 0.0, testutil.ToFloat64(fs.bg.errs.WithLabelValues(bgReset)))
	out := buf.String()
	assert.Equal(t, 1, strings.Count(out, "task=checkpoint"), "rate-limited: one line per task: %s", out)
	assert.Equal(t, 1, strings.Count(out, "task=gc"), out)
	assert.Contains(t, out, "node-2")
	assert.NotContains(t, out, "task=reset")

	// a remount in the same process keeps counting in the registered collector
	fs2 := &FS{bg: background{errs: bgCounter(reg)}}
	fs2.noteBackground(bgCheckpoint, boom)
	assert.Equal(t, 4.0, testutil.ToFloat64(fs.bg.errs.WithLabelValues(bgCheckpoint)))
}
