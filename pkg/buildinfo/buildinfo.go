// Package buildinfo tells which build of ZoneFleet is running.
//
// Version and revision are stamped by the Makefile with -ldflags -X; a plain
// `go build` falls back to the module's build information.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

var (
	version  = ""
	revision = ""
)

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"go_version"`
}

// Get returns the build information.
func Get() Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Revision == "" {
				info.Revision = s.Value
				if len(info.Revision) > 12 {
					info.Revision = info.Revision[:12]
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// String is the one-line form printed by --version.
func (i Info) String() string {
	return i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}
