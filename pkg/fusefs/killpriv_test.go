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

// asNobody runs a shell command as uid/gid 65534 without capabilities, in
// the supplementary groups given (none by default).
func asNobody(t *testing.T, cmd string, groups ...string) {
	t.Helper()
	gr := "--clear-groups"
	if len(groups) > 0 {
		gr = "--groups=" + strings.Join(groups, ",")
	}
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", gr, "--inh-caps=-all", "sh", "-c", cmd).CombinedOutput()
	require.NoError(t, err, "%s: %s", cmd, out)
}

// With HANDLE_KILLPRIV_V2 the file system, not the kernel, clears what a
// write, truncate, fallocate or chown takes from a file, as on other Linux
// file systems: set-user-ID always, and set-group-ID of a group-executable
// file or of a file whose group the caller is not in, when the caller
// lacks CAP_FSETID (or for a chown); file capabilities on every change;
// and the kernel no longer asks for security.capability before each
// WRITE. Every case runs on the mount and on a directory of the host's own
// file system (ext4 or tmpfs), and both must end the same.
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
	ref := t.TempDir() // the host's file system, as the reference
	for d := ref; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o777))
	}
	mk := func(dir, name string, mode, gid uint32, caps bool) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o644))
		require.NoError(t, os.Chown(p, 0, int(gid)))
		require.NoError(t, os.Chmod(p, os.FileMode(mode&0o777)|modeBits(mode)))
		if caps {
			// a version-2 capability set (cap_net_raw+ep), as setcap writes it
			v := []byte{0, 0, 0, 2, 0, 32, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
			require.NoError(t, unix.Setxattr(p, "security.capability", v, 0))
		}
		return p
	}
	// the mode as `stat -c %A` and exec see it: statx asking for the mode
	// alone is answered from the kernel's attribute cache unless the mode
	// itself was invalidated (a full stat also refreshes when only the
	// size is stale, and would hide a stale mode)
	mode := func(p string) uint32 {
		var st unix.Statx_t
		require.NoError(t, unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_MODE, &st))
		return uint32(st.Mode) & 0o7777
	}
	hasCaps := func(p string) bool {
		_, err := unix.Getxattr(p, "security.capability", make([]byte, 64))
		return err == nil
	}
	for _, tc := range []struct {
		name     string
		mode     uint32
		gid      uint32 // the file's group
		caps     bool
		by       string // "nobody", "nobody in group 0" or "root"
		op       string // shell, $F is the file
		wantMode uint32
		wantCaps bool
	}{
		{"write by nobody clears suid and sgid of g+x", 0o6777, 0, false, "nobody", `echo x >> "$F"`, 0o0777, false},
		{"write by nobody clears sgid without g+x of another group's file", 0o2767, 0, false, "nobody", `echo x >> "$F"`, 0o0767, false},
		{"write by nobody keeps sgid without g+x of its group's file", 0o2767, 65534, false, "nobody", `echo x >> "$F"`, 0o2767, false},
		{"write by nobody keeps sgid without g+x of a supplementary group's file", 0o6767, 0, false, "nobody in group 0", `echo x >> "$F"`, 0o2767, false},
		{"truncate by nobody clears suid", 0o4777, 0, false, "nobody", `truncate -s 3 "$F"`, 0o0777, false},
		{"O_TRUNC by nobody clears suid", 0o4777, 0, false, "nobody", `: > "$F"`, 0o0777, false},
		{"O_TRUNC by nobody clears sgid without g+x of another group's file", 0o2766, 0, false, "nobody", `: > "$F"`, 0o0766, false},
		{"write by root keeps suid, drops capabilities", 0o4755, 0, true, "root", `echo x >> "$F"`, 0o4755, false},
		{"write by nobody drops capabilities", 0o0666, 0, true, "nobody", `echo x >> "$F"`, 0o0666, false},
		{"read keeps everything", 0o6755, 0, true, "nobody", `cat "$F" > /dev/null`, 0o6755, true},
		{"chown by root clears suid", 0o4755, 0, false, "root", `chown 65534 "$F"`, 0o0755, false},
		{"chown by root keeps sgid without g+x", 0o6745, 65534, false, "root", `chown 65534 "$F"`, 0o2745, false},
		{"fallocate by nobody clears suid and sgid", 0o6777, 0, false, "nobody", `fallocate -l 8192 "$F"`, 0o0777, false},
		{"fallocate by root keeps suid and sgid, drops capabilities", 0o6755, 0, true, "root", `fallocate -l 8192 "$F"`, 0o6755, false},
		{"KEEP_SIZE fallocate by nobody clears suid", 0o4777, 0, false, "nobody", `fallocate -n -l 65536 "$F"`, 0o0777, false},
		{"punch hole by nobody clears suid, drops capabilities", 0o4777, 0, true, "nobody", `fallocate -p -o 0 -l 4096 "$F"`, 0o0777, false},
		{"zero range by nobody in the file's group keeps sgid without g+x", 0o6767, 0, false, "nobody in group 0", `fallocate -z -o 0 -l 4096 "$F"`, 0o2767, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, where := range []string{dir, ref} {
				p := mk(where, strings.NewReplacer(" ", "_", "'", "").Replace(tc.name), tc.mode, tc.gid, tc.caps)
				require.Equal(t, tc.mode, mode(p))
				require.Equal(t, tc.caps, hasCaps(p))
				cmd := "F='" + p + "'; " + tc.op
				switch tc.by {
				case "nobody":
					asNobody(t, cmd)
				case "nobody in group 0":
					asNobody(t, cmd, "0")
				default:
					out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
					require.NoError(t, err, "%s", out)
				}
				fs := "the mount"
				if where == ref {
					fs = "the host's file system"
				}
				assert.Equal(t, tc.wantMode, mode(p), "%s: mode %o", fs, mode(p))
				assert.Equal(t, tc.wantCaps, hasCaps(p), fs)
			}
		})
	}

	// The kernel sees the cleared bits at once: a WRITE or FALLOCATE reply
	// carries no attributes, so without an invalidation it kept showing
	// (and honouring on exec) the old mode for its attribute timeout. The
	// sequence of xfstests generic/193 and 355: an empty file of nobody's,
	// made set-user/group-ID by root, then written by nobody.
	for _, op := range []string{`echo x >> "$F"`, `dd if=/dev/zero of="$F" bs=4096 count=1 oflag=direct conv=notrunc status=none`, `fallocate -l 8192 "$F"`} {
		for _, where := range []string{dir, ref} {
			p := filepath.Join(where, "owned")
			_ = os.Remove(p)
			f, err := os.Create(p)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			require.NoError(t, os.Chown(p, 65534, 65534))
			require.NoError(t, os.Chmod(p, 0o644|os.ModeSetuid|os.ModeSetgid))
			require.NoError(t, os.Chmod(p, 0o754|os.ModeSetuid|os.ModeSetgid)) // a second SETATTR, as chmod u+x does
			require.Equal(t, uint32(0o6754), mode(p))
			asNobody(t, "F='"+p+"'; "+op)
			assert.Equal(t, uint32(0o0754), mode(p), "%s in %s: stat right after", op, where)
		}
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
