package ondisk

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestCheck(t *testing.T) {
	known := Features{Compat: 1, ROCompat: 2, Incompat: 4}
	for _, tc := range []struct {
		name  string
		have  Features
		ro    bool
		class Class
	}{
		{"none", Features{}, false, ""},
		{"all known", known, false, ""},
		{"unknown compat is fine", Features{Compat: 1 << 40}, false, ""},
		{"unknown ro_compat", Features{ROCompat: 1 << 3}, true, ClassROCompat},
		{"unknown incompat", Features{Incompat: 1 << 9}, false, ClassIncompat},
		{"incompat wins", Features{ROCompat: 1 << 3, Incompat: 1 << 9}, false, ClassIncompat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro, err := Check("img", tc.have, known)
			require.Equal(t, tc.ro, ro)
			if tc.class == "" {
				require.NoError(t, err)
				return
			}
			var fe *FeatureError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.class, fe.Class)
			require.NotZero(t, fe.Unknown)
			require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
			require.False(t, errors.Is(err, zerr.ErrCorrupt), "not corruption: callers skipping corrupt records must not skip it")
			var ge *zerr.GeometryMismatchError
			require.True(t, errors.As(err, &ge))
			require.Contains(t, err.Error(), map[Class]string{ClassROCompat: "read-only", ClassIncompat: "refusing"}[tc.class])
		})
	}
}

func TestEncodeDecode(t *testing.T) {
	f := Features{1, 1 << 63, 0xdead}
	b := make([]byte, Size)
	f.Encode(b)
	require.Equal(t, f, Decode(b))
}
