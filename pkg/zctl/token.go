package zctl

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// TokenIssued is the output of zctl token issue.
type TokenIssued struct {
	Token      string    `json:"token,omitempty"`
	File       string    `json:"file,omitempty"`
	Namespace  string    `json:"namespace"`
	Generation uint64    `json:"generation"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// TokenRevoked is the output of zctl token revoke.
type TokenRevoked struct {
	Namespace  string `json:"namespace"`
	Generation uint64 `json:"generation"`
}

// tokenCmd is `zctl token issue|revoke`: online token issuance and
// revocation through the arbiter (`zctl cert token` mints offline).
func tokenCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "issue and revoke namespace tokens through the arbiter",
	}
	var (
		ttl   time.Duration
		file  string
		force bool
	)
	issue := &cobra.Command{
		Use:   "issue NAMESPACE",
		Short: "get a signed namespace token from the arbiter (admin: any namespace; tenant: renew its own)",
		Long: "issue asks the arbiter for a short-lived namespace token that nodes verify without a round trip.\n" +
			"With --file the token goes to a new 0600 file and is not printed; --force replaces an existing\n" +
			"file atomically (rotation: a running client or mount re-reads its token file within 5 s and\n" +
			"renews from the new token; after `zctl token revoke` this is how a tenant gets going again).\n" +
			"A client renews its namespace token through the arbiter by itself before it expires.",
		Example: "  zctl token issue tenant-a --ttl 1h --file tenant-a.token\n" +
			"  zctl token issue tenant-a --file /etc/zonefleet/tenant-a.token --force   # rotate a mount's token",
		Args: cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			if ttl < 0 || ttl > auth.DefaultMaxTTL {
				return usageErr(&zerr.InvalidArgumentError{Field: "ttl", Reason: fmt.Sprintf("must be between 0 and %v", auth.DefaultMaxTTL)})
			}
			r, err := c.IssueToken(cmd.Context(), args[0], ttl)
			if err != nil {
				return err
			}
			out := TokenIssued{Namespace: r.GetNamespace(), Generation: r.GetGeneration(), ExpiresAt: r.GetExpires().AsTime()}
			if file != "" {
				if err := pki.WriteFile(file, []byte(r.GetToken()+"\n"), force); err != nil {
					if errors.Is(err, pki.ErrExists) {
						return &zerr.AlreadyExistsError{Kind: "file", Name: file}
					}
					return err
				}
				out.File = file
			} else {
				out.Token = r.GetToken()
			}
			return g.emit(out, func(w io.Writer) error {
				if out.Token != "" {
					_, err := fmt.Fprintln(w, out.Token)
					return err
				}
				_, err := fmt.Fprintf(w, "wrote %s (namespace %s, generation %d, expires %s)\n", out.File, out.Namespace, out.Generation, out.ExpiresAt.Format(time.RFC3339))
				return err
			})
		}),
	}
	issue.Flags().DurationVar(&ttl, "ttl", 0, "token lifetime (0: the arbiter's default, 15m; tenants at most 15m, admin at most 24h)")
	issue.Flags().StringVar(&file, "file", "", "write the token to this new file (0600) instead of stdout")
	issue.Flags().BoolVar(&force, "force", false, "replace an existing --file atomically (rotation)")
	revoke := &cobra.Command{
		Use:   "revoke NAMESPACE",
		Short: "revoke every token of a namespace issued so far (admin)",
		Long: "revoke bumps the namespace's token generation: nodes and arbiters refuse older tokens with\n" +
			"UNAUTHENTICATED as soon as their watch delivers it. Tenants then need a new token (zctl token issue).",
		Args: cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			gen, err := c.RevokeTokens(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := TokenRevoked{Namespace: args[0], Generation: gen}
			return g.emit(out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "revoked tokens of %s before generation %d\n", out.Namespace, out.Generation)
				return err
			})
		}),
	}
	cmd.AddCommand(issue, revoke)
	return cmd
}
