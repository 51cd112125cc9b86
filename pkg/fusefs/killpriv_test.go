package fusefs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
)

// asNobody runs a shell command as uid/gid 65534 without capabilities.
func asNobody(t *testing.T, cmd string) {
	t.Helper()
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "sh", "-c", cmd).CombinedOutput()
	require.NoError(t, err, "%s: %s", cmd, out)
}

// With HANDLE_KILLPRIV_V2 the file system, not the kernel, clears what a
// write, truncate or chown takes from a file, as on other Linux file
// systems: set-user-ID always and set-group-ID of a group-executable file
// when the caller lacks CAP_FSETID, file capabilities on every write; and
// the kernel no longer asks for security.capability before each WRITE.
func TestKillPrivOnWriteTruncateChown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: files owned by another user, setpriv")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux)")
	}
	m := mountClusterWith(t, fusefs.MountOptions{AllowOther: true}) // nobody may use it
	// nobody must reach the mount: t.TempDir's directories are 0700
	for d := filepath.Dir(m.dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.NoError(t, os.Chmod(m.dir, 0o755))
	dir := filepath.Join(m.dir, "d")
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	mk := func(name string, mode uint32, caps bool) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o644))
		require.NoError(t, os.Chmod(p, os.FileMode(mode&0o777)|modeBits(mode)))
		if caps {
			// a version-2 capability set (cap_net_raw+ep), as setcap writes it
			v := []byte{0, 0, 0, 2, 0, 32, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
			require.NoError(t, unix.Setxattr(p, "security.capability", v, 0))
		}
		return p
	}
	mode := func(p string) uint32 {
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(p, &st))
		return st.Mode & 0o7777
	}
	hasCaps := func(p string) bool {
		_, err := unix.Getxattr(p, "security.capability", make([]byte, 64))
		return err == nil
	}
	for _, tc := range []struct {
		name     string
		mode     uint32
		caps     bool
		by       string // "nobody" or "root"
		op       string // shell, $F is the file
		wantMode uint32
		wantCaps bool
	}{
		{"write by nobody clears suid and sgid of g+x", 0o6777, false, "nobody", `echo x >> "$F"`, 0o0777, false},
		{"write by nobody keeps sgid without g+x (mandatory locking mark)", 0o2767, false, "nobody", `echo x >> "$F"`, 0o2767, false},
		{"truncate by nobody clears suid", 0o4777, false, "nobody", `truncate -s 3 "$F"`, 0o0777, false},
		{"O_TRUNC by nobody clears suid", 0o4777, false, "nobody", `: > "$F"`, 0o0777, false},
		{"write by root keeps suid, drops capabilities", 0o4755, true, "root", `echo x >> "$F"`, 0o4755, false},
		{"write by nobody drops capabilities", 0o0666, true, "nobody", `echo x >> "$F"`, 0o0666, false},
		{"read keeps everything", 0o6755, true, "nobody", `cat "$F" > /dev/null`, 0o6755, true},
		{"chown by root clears suid", 0o4755, false, "root", `chown 65534 "$F"`, 0o0755, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mk(strings.ReplaceAll(tc.name, " ", "_"), tc.mode, tc.caps)
			require.Equal(t, tc.mode, mode(p))
			require.Equal(t, tc.caps, hasCaps(p))
			cmd := "F='" + p + "'; " + tc.op
			if tc.by == "nobody" {
				asNobody(t, cmd)
			} else {
				out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
				require.NoError(t, err, "%s", out)
			}
			assert.Equal(t, tc.wantMode, mode(p), "mode %o", mode(p))
			assert.Equal(t, tc.wantCaps, hasCaps(p))
		})
	}

	// an O_TRUNC open of an existing file is one OPEN (ATOMIC_O_TRUNC and
	// HANDLE_KILLPRIV: no SETATTR after it), and it truncates
	trunc := filepath.Join(dir, "trunc")
	require.NoError(t, os.WriteFile(trunc, []byte("0123456789"), 0o644))
	setattrs, opens := fsOps(t, m.reg, "setattr"), fsOps(t, m.reg, "open")
	for i := 0; i < 20; i++ {
		require.NoError(t, os.WriteFile(trunc, []byte("abc"), 0o644))
	}
	assert.Equal(t, 0.0, fsOps(t, m.reg, "setattr")-setattrs, "SETATTR after an O_TRUNC OPEN")
	assert.Equal(t, 20.0, fsOps(t, m.reg, "open")-opens)
	got, err := os.ReadFile(trunc)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(got))

	// the kernel no longer asks for security.capability before each write
	p := filepath.Join(dir, "many")
	f, err := os.Create(p)
	require.NoError(t, err)
	before := fsOps(t, m.reg, "getxattr")
	for i := 0; i < 200; i++ {
		_, err := f.WriteAt([]byte("abcd"), int64(i)*4096)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	assert.Less(t, fsOps(t, m.reg, "getxattr")-before, 10.0, "GETXATTR per WRITE")
	assert.GreaterOrEqual(t, fsOps(t, m.reg, "write"), 200.0)
	m.unmountAndCheck(t)
}

func modeBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&syscall.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&syscall.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&syscall.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}
