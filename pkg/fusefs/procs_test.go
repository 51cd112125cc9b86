package fusefs

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestServingProcsValue(t *testing.T) {
	tests := []struct {
		name     string
		cur      int
		explicit bool
		want     int
	}{
		{"two CPUs", 2, false, 2 + ExtraProcs},
		{"one CPU", 1, false, 1 + ExtraProcs},
		{"many CPUs", 64, false, 64 + ExtraProcs},
		{"GOMAXPROCS set by the user", 2, true, 2},
		{"GOMAXPROCS=1 set by the user", 1, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, servingProcs(tt.cur, tt.explicit))
		})
	}
}

func TestServingProcsAppliesOnce(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	from, to := ServingProcs()
	defer runtime.GOMAXPROCS(before)
	assert.Equal(t, before, from)
	if _, explicit := os.LookupEnv("GOMAXPROCS"); explicit {
		assert.Equal(t, from, to, "an explicit GOMAXPROCS is left alone")
	} else {
		assert.Equal(t, from+ExtraProcs, to)
	}
	assert.Equal(t, to, runtime.GOMAXPROCS(0))
	f2, t2 := ServingProcs() // a second mount in the process adds nothing
	assert.Equal(t, from, f2)
	assert.Equal(t, to, t2)
	assert.Equal(t, to, runtime.GOMAXPROCS(0))
}
