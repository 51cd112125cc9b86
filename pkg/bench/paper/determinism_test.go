package paper

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeterministic runs a short configuration of every figure twice and
// requires byte-identical JSON.
func TestDeterministic(t *testing.T) {
	for _, id := range IDs() {
		t.Run(id, func(t *testing.T) {
			o := Options{Short: true}
			run := func() []byte {
				res, err := Run(context.Background(), t.TempDir(), []string{id}, o)
				require.NoError(t, err)
				b, err := json.Marshal(res.Figures)
				require.NoError(t, err)
				return b
			}
			a, b := run(), run()
			require.Equal(t, string(a), string(b))
		})
	}
}

var _ = time.Second
