package znsplus_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/bench/znsplus"
)

// TestSmallFull logs the JSON of znsplus.Small() per workload (all four
// utilizations). It runs only when ZONEFLEET_ZNSPLUS_FULL is set: "1" for
// both workloads, or one workload's name; ZONEFLEET_ZNSPLUS_UTILS (e.g.
// "0.9,0.95") narrows the utilizations.
func TestSmallFull(t *testing.T) {
	sel := os.Getenv("ZONEFLEET_ZNSPLUS_FULL")
	if sel == "" {
		t.Skip("set ZONEFLEET_ZNSPLUS_FULL=1 (or a workload) to run the full small benchmark")
	}
	for _, wl := range []string{znsplus.Fileserver, znsplus.Varmail} {
		if sel != "1" && sel != wl {
			continue
		}
		c := znsplus.Small()
		c.Workload = wl
		if us := os.Getenv("ZONEFLEET_ZNSPLUS_UTILS"); us != "" {
			c.Utilizations = nil
			for _, f := range strings.Split(us, ",") {
				u, err := strconv.ParseFloat(f, 64)
				require.NoError(t, err)
				c.Utilizations = append(c.Utilizations, u)
			}
		}
		r, err := znsplus.Run(context.Background(), c)
		require.NoError(t, err)
		j, _ := json.Marshal(r)
		t.Logf("%s", j)
	}
}
