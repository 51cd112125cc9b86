// Command zctl is the ZoneFleet CLI.
package main

import (
	"context"
	"os"

	"github.com/zonefleet/zonefleet/pkg/zctl"
)

func main() { os.Exit(zctl.Main(context.Background(), os.Args[1:])) }
