// Command loopback mounts go-fuse's loopback file system over a directory:
// the baseline of bench/apps/run.sh. Without -passthrough every byte goes
// through the FUSE daemon, as on a ZoneFleet mount (the kernel's FUSE
// passthrough, which go-fuse negotiates by default as root, would hand reads
// and writes to the backing file without the daemon); the mount options
// match a ZoneFleet mount's: 1 MiB requests, 64 background requests, 1 MiB
// read-ahead.
//
//	go build -o /tmp/loopback ./bench/apps/loopback
//	/tmp/loopback [-passthrough] MOUNTPOINT DIR
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
)

func main() {
	passthrough := flag.Bool("passthrough", false, "let the kernel pass reads and writes to the backing files (FUSE passthrough)")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: loopback [-passthrough] MOUNTPOINT DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *passthrough); err != nil {
		fmt.Fprintln(os.Stderr, "loopback:", err)
		os.Exit(1)
	}
}

func run(mnt, dir string, passthrough bool) error {
	root, err := gofs.NewLoopbackRoot(dir)
	if err != nil {
		return err
	}
	mo := fuse.MountOptions{DirectMount: os.Geteuid() == 0, MaxWrite: 1 << 20, MaxBackground: 64,
		FsName: "loopback", Logger: log.New(io.Discard, "", 0)}
	if !passthrough {
		mo.DisabledCapabilities = fuse.CAP_PASSTHROUGH
	}
	srv, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: mo})
	if err != nil {
		return err
	}
	_ = fusefs.SetReadAhead(mnt, 1024)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		_ = srv.Unmount()
	}()
	srv.Wait()
	return nil
}
