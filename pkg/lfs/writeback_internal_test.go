package lfs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWBSchedulerTickets: tickets are served in order; a writer that gives
// up before its turn is skipped when the queue reaches it.
func TestWBSchedulerTickets(t *testing.T) {
	w := wbScheduler{admitGone: map[uint64]bool{}}
	a, b, c, d := w.ticket(), w.ticket(), w.ticket(), w.ticket()
	require.Equal(t, []uint64{0, 1, 2, 3}, []uint64{a, b, c, d})
	require.False(t, w.leave(c), "not its turn: marked gone")
	require.False(t, w.leave(b), "not its turn: marked gone")
	require.Equal(t, a, w.admitHead)
	require.True(t, w.leave(a))
	require.Equal(t, d, w.admitHead, "the gone tickets are skipped")
	require.Empty(t, w.admitGone)
	require.True(t, w.leave(d))
	require.Equal(t, w.admitTail, w.admitHead)
}

// TestWBSchedulerFits: the head writer fits while the dirty pages, the
// admitted writes' pages and its own (counted as at most the budget) stay
// within twice the budget, or when nothing else is admitted and the dirty
// pages are within twice the budget (a write larger than the budget is
// never refused).
func TestWBSchedulerFits(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		admitting, admitPages int
		dirty, pages, soft    int
		want                  bool
	}{
		{"empty", 0, 0, 0, 10, 100, true},
		{"within twice", 1, 50, 100, 50, 100, true},
		{"over twice", 1, 50, 120, 50, 100, false},
		{"large write alone", 0, 0, 150, 1000, 100, true},
		{"large write counts as the budget", 1, 10, 90, 1000, 100, true},
		{"large write behind others", 1, 20, 90, 1000, 100, false},
		{"dirty past twice alone", 0, 0, 201, 1, 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := wbScheduler{admitting: tc.admitting, admitPages: tc.admitPages}
			require.Equal(t, tc.want, w.fits(tc.dirty, tc.pages, tc.soft))
		})
	}
}
