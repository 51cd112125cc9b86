package zctl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/etcdrbac"
	"github.com/zonefleet/zonefleet/pkg/etcdclient"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Files of a cluster's PKI directory (written by `zctl cert init`).
const (
	CertCAFile         = auth.FileCA
	CertCAKeyFile      = auth.FileCAKey
	CertAdminToken     = auth.FileAdminToken
	CertSigningKeyFile = auth.FileSigningKey
	CertVerifyKeysFile = auth.FileVerifyKeys
)

// CertFile describes one file written by zctl cert.
type CertFile = auth.WrittenFile

// CertToken is the output of zctl cert token.
type CertToken struct {
	Token      string    `json:"token,omitempty"`
	File       string    `json:"file,omitempty"`
	Namespace  string    `json:"namespace"`
	Generation uint64    `json:"generation"`
	ExpiresAt  time.Time `json:"expires_at"`
	KeyID      string    `json:"key_id"`
}

// NewCertCmd returns `zctl cert` (init, issue, token, export). It reads -o from the
// root's persistent flags when it is added to the tree, so it needs no
// Globals: root.AddCommand(NewCertCmd()).
func NewCertCmd() *cobra.Command { return certCmd(nil) }

// certGlobals resolves the shared flags at run time.
func certGlobals(g *Globals, cmd *cobra.Command) *Globals {
	if g != nil {
		return g
	}
	out := "table"
	if f := cmd.Flag("output"); f != nil {
		out = f.Value.String()
	}
	return &Globals{Output: out, Out: cmd.OutOrStdout(), Err: cmd.ErrOrStderr()}
}

func certCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "cert",
		Short: "create the cluster's CA, component certificates and token keys",
		Long: "cert writes the trust material of a cluster into one directory (mode 0700, every file 0600):\n" +
			"the CA (ca.crt, ca.key — keep ca.key offline), a certificate and key per component\n" +
			"(admin, arbiter, etcd, node-<id>), the tenant token signing key (token-signing.key, for the\n" +
			"arbiter) and its public half (token-verify.pub, for every node), and a random admin token.\n" +
			"`cert export` then gives each component only its own files (never ca.key; the signing key only\n" +
			"to arbiters). No secret is ever taken from or printed to the command line, except a token you ask for.",
	}
	c.AddCommand(certInitCmd(g), certIssueCmd(g), certTokenCmd(g), certExportCmd(g), certEtcdRolesCmd(g))
	return c
}

func emitCertFiles(g *Globals, files []CertFile) error {
	return g.emit(files, func(w io.Writer) error {
		t := table(w)
		t.row("FILE\tKIND\tROLE\tEXPIRES")
		for _, f := range files {
			exp := ""
			if !f.NotAfter.IsZero() {
				exp = f.NotAfter.UTC().Format(time.RFC3339)
			}
			t.row("%s\t%s\t%s\t%s", f.Path, f.Kind, f.Role, exp)
		}
		return t.flush()
	})
}

func certInitCmd(g *Globals) *cobra.Command {
	var (
		dir                          string
		nodes, hosts, arbHosts, etcd []string
		validity, caValidity         time.Duration
		force, keep                  bool
	)
	c := &cobra.Command{
		Use:   "init",
		Short: "create a CA, component certificates, token keys and an admin token",
		Example: "  zctl cert init --dir ./pki --nodes node1,node2,node3 --hosts localhost,127.0.0.1\n" +
			"  zctl cert init --dir ./pki -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g := certGlobals(g, cmd)
			if dir == "" {
				return usageErr(errors.New("--dir is required"))
			}
			if keep && !force {
				if _, err := os.Stat(filepath.Join(dir, auth.FileCA)); err == nil {
					// An init step that runs at every start (compose):
					// the existing CA and secrets stay.
					return emitCertFiles(g, nil)
				}
			}
			files, err := auth.InitDir(auth.InitOptions{Dir: dir, Nodes: nodes, Hosts: hosts, ArbiterHosts: arbHosts,
				EtcdHosts: etcd, Validity: validity, CAValidity: caValidity, Force: force})
			if err != nil {
				return err
			}
			return emitCertFiles(g, files)
		},
	}
	f := c.Flags()
	f.StringVarP(&dir, "dir", "d", "", "directory to write into (created with mode 0700)")
	f.StringSliceVar(&nodes, "nodes", []string{"node1"}, "node ids to issue certificates for (each gets its id as a DNS name)")
	f.StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1", "::1"}, "DNS names and IPs every server certificate is valid for")
	f.StringSliceVar(&arbHosts, "arbiter-hosts", nil, "extra DNS names and IPs of the arbiter certificate (\"arbiter\" is always included)")
	f.StringSliceVar(&etcd, "etcd-hosts", nil, "extra DNS names and IPs of the etcd certificate (\"etcd\" is always included)")
	f.DurationVar(&validity, "validity", pki.DefaultLeafValidity, "lifetime of component certificates")
	f.DurationVar(&caValidity, "ca-validity", pki.DefaultCAValidity, "lifetime of the CA")
	f.BoolVar(&force, "force", false, "replace existing files (creates a NEW CA: every component needs the new files)")
	f.BoolVar(&keep, "keep-existing", false, "do nothing (exit 0) when DIR already holds a CA: for init steps that run at every start")
	return c
}

func certExportCmd(g *Globals) *cobra.Command {
	var dir, out, component string
	c := &cobra.Command{
		Use:   "export",
		Short: "copy out, per component, only the files it needs (never ca.key)",
		Long: "export copies from the `zctl cert init` directory what one component loads, so that a\n" +
			"compromised container holds neither the CA key nor (except on arbiters) the token signing key:\n" +
			"  etcd        ca.crt etcd.crt etcd.key\n" +
			"  arbiter     ca.crt arbiter.crt arbiter.key token-verify.pub token-signing.key\n" +
			"  node-<id>   ca.crt node-<id>.crt node-<id>.key token-verify.pub\n" +
			"  admin       ca.crt admin.crt admin.key admin.token (the operator's)\n" +
			"With --component the files go straight into --out; without, every component found goes into\n" +
			"--out/<component>/. Idempotent: unchanged files are left alone (run it at every start: a renewed\n" +
			"certificate reaches the component), trust files the component must not hold are removed.\n" +
			"Files 0600, directories 0700.",
		Example: "  zctl cert export --dir ./pki --out ./pki-export                       # every component\n" +
			"  zctl cert export --dir /data --component node-node-1 --out /pki       # one, as compose does",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g := certGlobals(g, cmd)
			if dir == "" || out == "" {
				return usageErr(errors.New("--dir and --out are required"))
			}
			var files []CertFile
			var err error
			if component != "" {
				files, err = auth.ExportDir(dir, component, out)
			} else {
				files, err = auth.ExportAll(dir, out)
			}
			if err != nil {
				return err
			}
			return emitCertFiles(g, files)
		},
	}
	f := c.Flags()
	f.StringVarP(&dir, "dir", "d", "", "PKI directory of `zctl cert init`")
	f.StringVar(&out, "out", "", "directory to export into (created with mode 0700)")
	f.StringVar(&component, "component", "", "one component (etcd, arbiter, admin, node-<id>): its files go straight into --out")
	return c
}

func certEtcdRolesCmd(g *Globals) *cobra.Command {
	var (
		dir, endpoints string
		nodes          []string
		wait           time.Duration
	)
	c := &cobra.Command{
		Use:   "etcd-roles",
		Short: "turn on etcd's authentication with a role per component (least privilege)",
		Long: "etcd-roles connects to etcd with the etcd certificate of --dir (etcd's root) and, idempotently,\n" +
			"creates a role per component and enables authentication (users are certificate common names):\n" +
			"  node:<id>  writes only its own registration; reads registrations, its grants, namespaces, token generations\n" +
			"  arbiter    reads and writes the cluster's keys\n" +
			"  admin      reads them\n" +
			"Run it before the components start, and again with the full --nodes list when nodes are added.",
		Example: "  zctl cert etcd-roles --dir /pki --etcd https://etcd:2379 --nodes node-1,node-2,node-3",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g := certGlobals(g, cmd)
			if dir == "" || endpoints == "" {
				return usageErr(errors.New("--dir and --etcd are required"))
			}
			for _, id := range nodes {
				if err := (pki.Role{Kind: pki.RoleNode, Name: id}).Validate(); err != nil || id == "" {
					return usageErr(fmt.Errorf("--nodes: bad node id %q", id))
				}
			}
			files := auth.DirFiles(dir, pki.Role{Kind: pki.RoleEtcd}, false, false)
			files.VerifyKeys, files.AdminToken = "", "" // the etcd certificate and the CA only
			b, err := auth.Load(files)
			if err != nil {
				return err
			}
			tc, err := b.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
			if err != nil {
				return err
			}
			cli, err := etcdclient.ConnectWith(cmd.Context(), endpoints, tc, wait)
			if err != nil {
				return err
			}
			defer cli.Close()
			if err := etcdrbac.Apply(cmd.Context(), cli, nodes); err != nil {
				return err
			}
			return g.emit(map[string]any{"authentication": "enabled", "nodes": nodes}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "etcd authentication enabled; roles for the arbiter, the operator and %d node(s)\n", len(nodes))
				return err
			})
		},
	}
	f := c.Flags()
	f.StringVarP(&dir, "dir", "d", "", "directory holding ca.crt, etcd.crt and etcd.key (the init directory or the etcd export)")
	f.StringVar(&endpoints, "etcd", "", "etcd endpoints (https://)")
	f.StringSliceVar(&nodes, "nodes", nil, "every node id of the cluster")
	f.DurationVar(&wait, "wait", 30*time.Second, "how long to wait for etcd to answer")
	return c
}

func certIssueCmd(g *Globals) *cobra.Command {
	var (
		dir, role string
		hosts     []string
		validity  time.Duration
		force     bool
	)
	c := &cobra.Command{
		Use:     "issue",
		Short:   "issue one more component certificate from the directory's CA (a new node, a renewal)",
		Example: "  zctl cert issue --dir ./pki --role node:node4 --hosts node4,10.0.0.14",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g := certGlobals(g, cmd)
			r, err := pki.ParseRole(role)
			if err != nil {
				return usageErr(err)
			}
			files, err := auth.IssueInDir(dir, r, hosts, validity, force)
			if err != nil {
				return err
			}
			return emitCertFiles(g, files)
		},
	}
	f := c.Flags()
	f.StringVarP(&dir, "dir", "d", "", "PKI directory of `zctl cert init`")
	f.StringVar(&role, "role", "", "admin, arbiter, etcd or node:<id>")
	f.StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1", "::1"}, "DNS names and IPs the certificate is valid for")
	f.DurationVar(&validity, "validity", pki.DefaultLeafValidity, "certificate lifetime")
	f.BoolVar(&force, "force", false, "replace existing files (renewal)")
	return c
}

func certTokenCmd(g *Globals) *cobra.Command {
	var (
		dir, ns, file string
		ttl           time.Duration
		gen           uint64
	)
	c := &cobra.Command{
		Use:   "token",
		Short: "mint a namespace token offline with the directory's signing key",
		Long: "token signs a namespace token with token-signing.key (bootstrap and tests; tenants normally\n" +
			"get tokens from the arbiter). With --file the token goes to a new 0600 file and is not printed.",
		Example: "  zctl cert token --dir ./pki --namespace tenant-a --ttl 1h --file tenant-a.token",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g := certGlobals(g, cmd)
			sk, err := auth.LoadSigningKey(filepath.Join(dir, CertSigningKeyFile))
			if err != nil {
				return err
			}
			iss, err := auth.NewIssuer(sk, nil)
			if err != nil {
				return err
			}
			tok, cl, err := iss.Issue(auth.TokenRoleNamespace, ns, gen, ttl)
			if err != nil {
				return usageErr(err)
			}
			out := CertToken{Namespace: cl.Subject, Generation: cl.Generation, ExpiresAt: cl.ExpiresAt, KeyID: cl.KeyID}
			if file != "" {
				if err := pki.WriteFile(file, []byte(tok+"\n"), false); err != nil {
					if errors.Is(err, pki.ErrExists) {
						return &zerr.AlreadyExistsError{Kind: "file", Name: file}
					}
					return err
				}
				out.File = file
			} else {
				out.Token = tok
			}
			return g.emit(out, func(w io.Writer) error {
				if out.Token != "" {
					_, err := fmt.Fprintln(w, out.Token)
					return err
				}
				_, err := fmt.Fprintf(w, "wrote %s (namespace %s, expires %s)\n", out.File, out.Namespace, out.ExpiresAt.Format(time.RFC3339))
				return err
			})
		},
	}
	f := c.Flags()
	f.StringVarP(&dir, "dir", "d", "", "PKI directory of `zctl cert init`")
	f.StringVar(&ns, "namespace", "", "namespace the token is for")
	f.DurationVar(&ttl, "ttl", auth.DefaultTokenTTL, "token lifetime (at most 24h)")
	f.Uint64Var(&gen, "generation", 0, "the namespace's token generation")
	f.StringVar(&file, "file", "", "write the token to this new file (0600) instead of stdout")
	return c
}
