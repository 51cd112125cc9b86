// Package flagenv gives every command-line flag an environment variable:
// flag --etcd-endpoints is also ZONEFLEET_ETCD_ENDPOINTS. A flag given on the
// command line wins over the environment.
package flagenv

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Prefix of every environment variable.
const Prefix = "ZONEFLEET_"

// Name returns the environment variable of a flag.
func Name(flag string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Apply sets every flag of fs that was not given on the command line from its
// environment variable, if set. It fails with the variable's name when a value
// does not parse.
func Apply(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" || f.Name == "version" {
			return
		}
		if v, ok := os.LookupEnv(Name(f.Name)); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment variable %s=%q: %w", Name(f.Name), v, serr)
			}
		}
	})
	return err
}

// Annotate appends "[$ZONEFLEET_X]" to every flag's usage so --help shows the variable.
func Annotate(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "version" || strings.Contains(f.Usage, Prefix) {
			return
		}
		f.Usage = f.Usage + " [$" + Name(f.Name) + "]"
	})
}
