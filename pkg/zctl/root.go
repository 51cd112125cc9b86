// Package zctl is the ZoneFleet command-line interface. Each command group
// lives in its own file; cmd/zctl only calls Main.
package zctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/buildinfo"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flagenv"
)

// Exit codes that mean something to scripts.
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitNotFound    = 3
	ExitConflict    = 4
	ExitUnavailable = 5
	ExitDenied      = 6
	ExitNoResources = 7
)

// Globals are the flags every command shares.
type Globals struct {
	Arbiter     string
	Etcd        string
	Namespace   string
	Token       string
	TokenFile   string
	ConfigPath  string // --config: zctl's config file (config.go)
	ClusterName string // --cluster-name: a cluster of the config file
	Output      string
	Out         io.Writer
	Err         io.Writer

	// TLS files: --ca-file/--cert-file/--key-file (ZONEFLEET_CA_FILE, …),
	// else the chosen cluster's (config file entry or cluster.json).
	// Insecure (--insecure) dials plaintext: clusters started with
	// --insecure only.
	CAFile, CertFile, KeyFile string
	Insecure                  bool

	// newClient replaces the resolved settings' client (zctl local up
	// --mount: the tenant's refreshing token from the cluster's key).
	newClient func(ctx context.Context, reg prometheus.Registerer) (*client.Client, error)

	resolved      bool
	resolveErr    error
	source        Source
	tokenFromFile bool

	// Progress test hooks: a terminal without a tty, and the redraw clock.
	forceTTY bool
	clock    clock.Clock
}

// NewRoot builds the zctl command tree.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root, _ := newRoot(out, errOut)
	return root
}

// newRoot also returns the globals the commands share (tests inspect them).
func newRoot(out, errOut io.Writer) (*cobra.Command, *Globals) {
	g := &Globals{Out: out, Err: errOut}
	root := &cobra.Command{
		Use:           "zctl",
		Short:         "zctl drives a ZoneFleet zoned-storage cluster",
		Long:          "zctl manages namespaces, v-zones, drives' zones and the file system of a ZoneFleet cluster, and runs a whole local cluster.",
		Version:       buildinfo.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Before the environment is applied: Changed means the command line.
			if f := cmd.Flags().Lookup("token"); f != nil && f.Changed {
				return usageErr(errors.New("--token puts the secret on the command line, visible in ps: use --token-file (mode 0600) or $ZONEFLEET_TOKEN"))
			}
			if err := flagenv.Apply(cmd.Flags()); err != nil {
				return usageErr(err)
			}
			switch g.Output {
			case "table", "json", "yaml":
			default:
				return usageErr(fmt.Errorf("-o %q: want table, json or yaml", g.Output))
			}
			return nil
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	pf := root.PersistentFlags()
	pf.StringVar(&g.Arbiter, "arbiter", "", "arbiter address(es), comma-separated")
	pf.StringVar(&g.Etcd, "etcd", "", "etcd endpoints, comma-separated")
	pf.StringVarP(&g.Namespace, "namespace", "n", "", "tenant namespace")
	pf.StringVar(&g.Token, "token", "", "bearer token (admin or namespace token) — from $ZONEFLEET_TOKEN only: refused on the command line, where ps shows it; see --token-file")
	pf.StringVar(&g.TokenFile, "token-file", "", "file (0600) holding the admin token or a namespace token (zctl cert token)")
	pf.StringVar(&g.CAFile, "ca-file", "", "cluster CA certificate (zctl cert init's ca.crt)")
	pf.StringVar(&g.CertFile, "cert-file", "", "client certificate (the operator's admin.crt)")
	pf.StringVar(&g.KeyFile, "key-file", "", "client certificate's key")
	pf.BoolVar(&g.Insecure, "insecure", false, "dial plaintext (only for clusters started with --insecure)")
	pf.StringVar(&g.ConfigPath, "config", "", "zctl's config file (default $XDG_CONFIG_HOME/zonefleet/config.yaml)")
	pf.StringVar(&g.ClusterName, "cluster-name", "", "cluster of the config file to use instead of the current one")
	pf.StringVarP(&g.Output, "output", "o", "table", "output format: table, json or yaml")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })

	root.AddCommand(versionCmd(g), benchCmd(g), localCmd(g), clusterCmd(g), nodeCmd(g), nsCmd(g), vzoneCmd(g), zoneCmd(g), mkfsCmd(g), mountCmd(g), fsckCmd(g), fsCmd(g))
	root.AddCommand(healthCmd(g), configCmd(g), certCmd(g), tokenCmd(g), fdpCmd(g))
	annotateTree(root)
	for _, c := range root.Commands() {
		guardGroups(c)
	}
	flagenv.Annotate(pf)
	return root, g
}

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(err error) error { return &exitError{code: ExitUsage, err: err} }

// ExitCode maps an error to zctl's exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	return codeFor(err)
}

// Main runs zctl with args and returns the exit code.
func Main(ctx context.Context, args []string) int {
	root := NewRoot(os.Stdout, os.Stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
	}
	return ExitCode(err)
}

// guardGroups makes every command group (subcommands and no action of its
// own) refuse an unknown subcommand as a usage error (exit 2): cobra would
// print the group's help and exit 0, so a typo in a script would pass.
// Without arguments a group prints its help, as before.
func guardGroups(c *cobra.Command) {
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr(fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
			}
			return cmd.Help()
		}
	}
	for _, sub := range c.Commands() {
		guardGroups(sub)
	}
}

func annotateTree(c *cobra.Command) {
	flagenv.Annotate(c.Flags())
	for _, sub := range c.Commands() {
		annotateTree(sub)
	}
}
