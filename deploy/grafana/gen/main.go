// Command gen writes the ZoneFleet Grafana dashboards (package
// deploy/grafana) as JSON files: `go run ./deploy/grafana/gen -out
// deploy/grafana/dashboards`, or `go generate ./deploy/grafana`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zonefleet/zonefleet/deploy/grafana"
)

func main() {
	out := flag.String("out", "dashboards", "directory of the JSON files")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range grafana.Dashboards() {
		b, err := d.JSON()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, d.FileName()), b, 0o644); err != nil {
			return err
		}
		n := 0
		for _, p := range d.Panels {
			if p.Type != "row" {
				n++
			}
		}
		fmt.Printf("%s: %d panels\n", d.UID, n)
	}
	return nil
}
