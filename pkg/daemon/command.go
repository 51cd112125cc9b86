package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/buildinfo"
	"github.com/zonefleet/zonefleet/pkg/flagenv"
)

// Exit codes of the server binaries.
const (
	ExitOK     = 0
	ExitFailed = 1
	ExitUsage  = 2
)

// Command builds the cobra command of a server binary. addFlags registers the
// binary's own flags; run is called with a context that ends on SIGINT or
// SIGTERM and a logger built from the skeleton's flags.
func Command(cfg *Config, short string, addFlags func(*cobra.Command), run func(ctx context.Context, log *slog.Logger) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:           cfg.Name,
		Short:         short,
		Version:       buildinfo.Get().String(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := NewLogger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
			if err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			bi := buildinfo.Get()
			logger.Info("starting", "component", cfg.Name, "version", bi.Version, "revision", bi.Revision)
			return run(ctx, logger)
		},
	}
	AddFlags(cmd.Flags(), cfg)
	if addFlags != nil {
		addFlags(cmd)
	}
	flagenv.Annotate(cmd.Flags())
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// UsageError marks err as a usage error (exit code 2).
func UsageError(err error) error { return usageError{err} }

// Main runs a server command and returns the process exit code.
func Main(cmd *cobra.Command) int {
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name(), err)
		if _, ok := err.(usageError); ok {
			return ExitUsage
		}
		return ExitFailed
	}
	return ExitOK
}
