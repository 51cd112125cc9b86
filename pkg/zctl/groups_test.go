package zctl

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A command group refuses an unknown subcommand as a usage error, so a typo
// in a script fails; without arguments it prints its help and succeeds.
func TestGroupRefusesUnknownSubcommand(t *testing.T) {
	t.Setenv("ZONEFLEET_CONFIG", t.TempDir()+"/none.yaml")
	for _, tt := range []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{[]string{"cluster", "statuz"}, ExitUsage, `unknown command "statuz" for "zctl cluster"`},
		{[]string{"cert", "nope"}, ExitUsage, `unknown command "nope" for "zctl cert"`},
		{[]string{"fdp", "stat"}, ExitUsage, `unknown command "stat" for "zctl fdp"`},
		{[]string{"cluster"}, ExitOK, "Available Commands"},
	} {
		_, out, errOut, code := runG(t, tt.args...)
		assert.Equal(t, tt.code, code, "%v: %s", tt.args, errOut)
		assert.Contains(t, out+errOut, tt.out, "%v", tt.args)
	}
}
