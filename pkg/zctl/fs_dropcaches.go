package zctl

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
)

// DropMountCaches empties the clean page cache of the ZoneFleet mount at
// dir (the mount process's own cache; the kernel's is dropped through
// /proc/sys/vm/drop_caches) and returns the pages cached before and after.
func DropMountCaches(dir string) (before, after int, err error) {
	si, err := ReadMountStats(dir)
	if err != nil {
		return 0, 0, err
	}
	if err := unix.Setxattr(dir, fusefs.DropCachesXattr, []byte("1"), 0); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return 0, 0, &exitError{code: ExitFailed, err: fmt.Errorf("drop the caches of %s: %w (root only)", dir, err)}
		}
		return 0, 0, fmt.Errorf("drop the caches of %s: %w", dir, err)
	}
	if _, err := unix.Getxattr(dir, fusefs.DropCachesXattr, nil); err == nil {
		// a mount without the control stored the name as an ordinary
		// attribute: take it away again and say so
		_ = unix.Removexattr(dir, fusefs.DropCachesXattr)
		return 0, 0, &exitError{code: ExitFailed, err: fmt.Errorf("the mount at %s has no drop-caches control (an older zctl mount)", dir)}
	}
	so, err := ReadMountStats(dir)
	if err != nil {
		return 0, 0, err
	}
	return si.Stats.CachedPages, so.Stats.CachedPages, nil
}

func fsDropCachesCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "drop-caches DIR",
		Short: "empty the file system's own cache of clean pages (cold reads; root only)",
		Long: `Drops every clean page of the page cache of the ZoneFleet mount at DIR, as
writing 1 to /proc/sys/vm/drop_caches drops the kernel's: later reads go to the drives.
Dirty pages (written, not yet on the drives) stay. The kernel's page cache of the mount
is separate: for a cold read drop both, e.g.

  sync; echo 3 > /proc/sys/vm/drop_caches; zctl fs drop-caches DIR

Only root may do it (the virtual attribute ` + fusefs.DropCachesXattr + ` of DIR).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			before, after, err := DropMountCaches(args[0])
			if err != nil {
				return err
			}
			out := struct {
				Dir    string `json:"dir"`
				Before int    `json:"cached_pages_before"`
				After  int    `json:"cached_pages_after"`
			}{args[0], before, after}
			return g.emit(out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s: %d cached pages before, %d after (dirty pages stay)\n", args[0], before, after)
				return err
			})
		},
	}
}
