package fusefs

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		groups  []uint32
		capEff  uint64
		wantErr bool
	}{
		{"root in a container", "Name:\tsh\nGid:\t0\t0\t0\t0\nGroups:\t \nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n", nil, 0x1fffeffffff, false},
		{"user with groups", "Groups:\t4 24 27 1000 \nCapEff:\t0000000000000000\n", []uint32{4, 24, 27, 1000}, 0, false},
		{"no trailing newline", "CapEff:\t0000000000000010", nil, 1 << capFSetID, false},
		{"empty", "", nil, 0, false},
		{"bad group", "Groups:\t4 x\n", nil, 0, true},
		{"group too large", "Groups:\t4294967296\n", nil, 0, true},
		{"bad capabilities", "CapEff:\tzz\n", nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c, err := parseStatus([]byte(tc.in))
			if tc.wantErr {
				require.Error(t, err)
				assert.Nil(t, g)
				assert.Zero(t, c)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.groups, g)
			assert.Equal(t, tc.capEff, c)
		})
	}
	// a long Groups line (up to NGROUPS_MAX = 65536 groups) is read whole
	var b strings.Builder
	b.WriteString("Groups:\t")
	for i := 0; i < 65536; i++ {
		fmt.Fprintf(&b, "%d ", 100000+i)
	}
	b.WriteString("\nCapEff:\t0000000000000010\n")
	g, c, err := parseStatus([]byte(b.String()))
	require.NoError(t, err)
	assert.Len(t, g, 65536)
	assert.Equal(t, uint64(1<<capFSetID), c)
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Groups:\t4 24 \nCapEff:\t000001fffeffffff\n"))
	f.Add([]byte("Groups:\n"))
	f.Add([]byte("CapEff:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, c, err := parseStatus(b)
		if err != nil && (g != nil || c != 0) {
			t.Fatalf("an error with a result: %v %x", g, c)
		}
	})
}

// The caller of this test: in its own group, CAP_FSETID as root; a thread
// that does not exist is in no other group and has no capabilities.
func TestCallerFromProc(t *testing.T) {
	self := newCaller(&fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}, Pid: uint32(os.Getpid())}})
	assert.True(t, self.InGroup(uint32(os.Getgid())))
	gs, err := os.Getgroups()
	require.NoError(t, err)
	for _, g := range gs {
		assert.True(t, self.InGroup(uint32(g)), "supplementary group %d", g)
	}
	if os.Geteuid() == 0 {
		assert.True(t, self.CapFSetID(), "root holds CAP_FSETID")
	}
	gone := newCaller(&fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Gid: 7}, Pid: 0}})
	assert.True(t, gone.InGroup(7))
	assert.False(t, gone.InGroup(0))
	assert.False(t, gone.CapFSetID())
}
