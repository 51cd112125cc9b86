package zctl

// zctl's config file: named clusters and a current one, the way kubectl
// contexts or etcdctl endpoint files work.
//
// Where: --config, else $ZONEFLEET_CONFIG, else
// $XDG_CONFIG_HOME/zonefleet/config.yaml (~/.config/zonefleet/config.yaml).
// It holds no secret: the admin token is named by a file path (token-file),
// never written inline, and the certificate paths are paths. zctl writes it
// with mode 0600 (directory 0700), atomically (temporary file and rename),
// so a crash leaves the old or the new file, never half of one.
//
// Precedence of each connection setting, first wins:
//  1. a flag (--arbiter, --etcd, -n, --token, --token-file),
//  2. its environment variable (ZONEFLEET_ARBITER, …; pkg/flagenv),
//  3. the cluster --cluster-name / ZONEFLEET_CLUSTER_NAME names in the config,
//  4. the cluster.json that ZONEFLEET_CLUSTER names (the tests' and scripts' way),
//  5. the config's current cluster,
//  6. the cluster.json of the last `zctl local up` (zctl before the config file).
//
// Endpoints come as a pair: a flag or variable for either --arbiter or --etcd
// replaces both. Sources 3 to 6 are exclusive: settings missing from the
// chosen cluster are not taken from another one (a namespace of the local
// cluster must not leak into the compose cluster). The token: --token (or
// ZONEFLEET_TOKEN), else the file --token-file (or ZONEFLEET_TOKEN_FILE)
// names, else the cluster's token-file, else cluster.json's admin token.
//
// The file has a format version; a version newer than this zctl knows is
// refused with a clear error and nothing is written over it.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// ConfigVersion is the format version zctl writes.
const ConfigVersion = 1

// LocalClusterName is the cluster `zctl local up` adds to the config.
const LocalClusterName = "local"

// ConfigFile is zctl's config file.
type ConfigFile struct {
	Version        int            `json:"version"`
	CurrentCluster string         `json:"current-cluster,omitempty"`
	Clusters       []ClusterEntry `json:"clusters"`
}

// ClusterEntry is one named cluster.
type ClusterEntry struct {
	Name      string   `json:"name"`
	Etcd      []string `json:"etcd,omitempty"`
	Arbiters  []string `json:"arbiters,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	// TokenFile names a file (mode 0600) holding the admin token or a
	// namespace token.
	TokenFile string `json:"token-file,omitempty"`
	// CAFile, CertFile and KeyFile are the TLS files of the cluster: the CA
	// zctl verifies the servers with, and the client certificate and key it
	// presents (the operator's admin.crt and admin.key).
	CAFile   string `json:"ca-file,omitempty"`
	CertFile string `json:"cert-file,omitempty"`
	KeyFile  string `json:"key-file,omitempty"`
}

// ConfigError is a config file that cannot be used.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("config %s: %v", e.Path, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// DefaultConfigPath is $XDG_CONFIG_HOME/zonefleet/config.yaml, else
// ~/.config/zonefleet/config.yaml.
func DefaultConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = filepath.Join(os.TempDir(), "zonefleet-"+fmt.Sprint(os.Getuid()))
	}
	return filepath.Join(dir, "zonefleet", "config.yaml")
}

// configPath is the config file this invocation uses (--config and
// ZONEFLEET_CONFIG are the same flag, see pkg/flagenv).
func (g *Globals) configPath() string {
	if g.ConfigPath != "" {
		return g.ConfigPath
	}
	return DefaultConfigPath()
}

// ParseConfig parses and validates a config file's bytes.
func ParseConfig(b []byte) (*ConfigFile, error) {
	var c ConfigFile
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks names, endpoints and the version.
func (c *ConfigFile) Validate() error {
	if c.Version > ConfigVersion {
		return fmt.Errorf("format version %d is newer than this zctl knows (%d): upgrade zctl", c.Version, ConfigVersion)
	}
	if c.Version < 0 {
		return fmt.Errorf("format version %d is not valid", c.Version)
	}
	seen := map[string]bool{}
	for _, e := range c.Clusters {
		if err := e.Validate(); err != nil {
			return err
		}
		if seen[e.Name] {
			return fmt.Errorf("cluster %q appears twice", e.Name)
		}
		seen[e.Name] = true
	}
	if c.CurrentCluster != "" && !seen[c.CurrentCluster] {
		return fmt.Errorf("current-cluster %q is not one of the clusters", c.CurrentCluster)
	}
	return nil
}

// Validate checks one cluster entry.
func (e *ClusterEntry) Validate() error {
	if !clusterNameRE.MatchString(e.Name) {
		return fmt.Errorf("cluster name %q: want letters, digits, '.', '_' or '-' (at most 63, starting with a letter or digit)", e.Name)
	}
	for _, list := range [][]string{e.Etcd, e.Arbiters} {
		for _, a := range list {
			if err := checkEndpoint(a); err != nil {
				return fmt.Errorf("cluster %q: %w", e.Name, err)
			}
		}
	}
	for _, p := range []string{e.TokenFile, e.CAFile, e.CertFile, e.KeyFile} {
		if p != "" && !filepath.IsAbs(p) {
			return fmt.Errorf("cluster %q: path %q is not absolute", e.Name, p)
		}
	}
	return nil
}

// checkEndpoint accepts host:port, optionally behind http:// or https:// (etcd).
func checkEndpoint(a string) error {
	hp := a
	for _, scheme := range []string{"http://", "https://"} {
		hp = strings.TrimPrefix(hp, scheme)
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil || port == "" || strings.ContainsAny(host+port, " /\t\n") {
		return fmt.Errorf("endpoint %q: want host:port", a)
	}
	return nil
}

// LoadConfig reads the config at path; a missing file is an empty config.
func LoadConfig(path string) (*ConfigFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &ConfigFile{Version: ConfigVersion}, nil
	}
	if err != nil {
		return nil, &ConfigError{Path: path, Err: err}
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, &ConfigError{Path: path, Err: err}
	}
	return c, nil
}

// Save writes the config atomically with mode 0600.
func (c *ConfigFile) Save(path string) error {
	c.Version = ConfigVersion
	sort.Slice(c.Clusters, func(i, j int) bool { return c.Clusters[i].Name < c.Clusters[j].Name })
	if err := c.Validate(); err != nil {
		return &ConfigError{Path: path, Err: err}
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	b = append([]byte("# zctl's clusters (zctl config --help). No secrets here: tokens are named by file.\n"), b...)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &ConfigError{Path: path, Err: err}
	}
	f, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return &ConfigError{Path: path, Err: err}
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return &ConfigError{Path: path, Err: err}
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return &ConfigError{Path: path, Err: err}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return &ConfigError{Path: path, Err: err}
	}
	if err := f.Close(); err != nil {
		return &ConfigError{Path: path, Err: err}
	}
	if err := os.Rename(tmp, path); err != nil {
		return &ConfigError{Path: path, Err: err}
	}
	return nil
}

// Find returns the cluster named name.
func (c *ConfigFile) Find(name string) (*ClusterEntry, bool) {
	for i := range c.Clusters {
		if c.Clusters[i].Name == name {
			return &c.Clusters[i], true
		}
	}
	return nil, false
}

// Put adds or replaces the cluster e.
func (c *ConfigFile) Put(e ClusterEntry) {
	if old, ok := c.Find(e.Name); ok {
		*old = e
		return
	}
	c.Clusters = append(c.Clusters, e)
}

// Delete removes the cluster name (and unsets it as current).
func (c *ConfigFile) Delete(name string) bool {
	for i := range c.Clusters {
		if c.Clusters[i].Name == name {
			c.Clusters = append(c.Clusters[:i], c.Clusters[i+1:]...)
			if c.CurrentCluster == name {
				c.CurrentCluster = ""
			}
			return true
		}
	}
	return false
}

// Source says where the connection settings came from (`zctl config current`).
type Source struct {
	Kind string `json:"kind"`           // flags, config, cluster.json, none
	Name string `json:"name,omitempty"` // the config's cluster name
	Path string `json:"path,omitempty"` // the config file or cluster.json
}

// resolve fills the connection settings that no flag or environment variable
// gave, following the precedence in this file's comment. It runs once; an
// error (a broken config, a missing cluster or token file) is kept for
// connect to return.
func (g *Globals) resolve() {
	if g.resolved {
		return
	}
	g.resolved = true
	g.resolveErr = g.doResolve()
}

func (g *Globals) doResolve() error {
	endpointsGiven := g.Arbiter != "" || g.Etcd != ""
	apply := func(e *ClusterEntry) {
		if !endpointsGiven {
			g.Arbiter, g.Etcd = strings.Join(e.Arbiters, ","), strings.Join(e.Etcd, ",")
		}
		if g.Namespace == "" {
			g.Namespace = e.Namespace
		}
		if g.Token == "" && g.TokenFile == "" {
			g.TokenFile = e.TokenFile
		}
		if g.CAFile == "" && g.CertFile == "" && g.KeyFile == "" {
			g.CAFile, g.CertFile, g.KeyFile = e.CAFile, e.CertFile, e.KeyFile
		}
	}
	applyInfo := func(in localcluster.Info, path string) {
		if !endpointsGiven {
			var addrs []string
			for _, a := range in.Arbiters {
				addrs = append(addrs, a.GRPC)
			}
			g.Arbiter, g.Etcd = strings.Join(addrs, ","), strings.Join(in.Etcd, ",")
		}
		if g.Namespace == "" {
			g.Namespace = in.Namespace
		}
		if g.CAFile == "" && g.CertFile == "" && g.KeyFile == "" {
			// A local user is the cluster's operator: the admin certificate.
			g.CAFile, g.CertFile, g.KeyFile = in.CAFile, in.AdminCertFile, in.AdminKeyFile
		}
		if in.Insecure {
			g.Insecure = true
			if g.Token == "" && g.TokenFile == "" {
				g.TokenFile = in.AdminTokenFile
			}
		}
		if g.Token == "" && g.TokenFile == "" && in.AdminToken != "" {
			g.Token = in.AdminToken // cluster.json of an older zctl
		}
		g.source = Source{Kind: "cluster.json", Path: path}
	}
	defer func() {
		if endpointsGiven {
			g.source = Source{Kind: "flags"}
		}
	}()
	err := func() error {
		// 3. a cluster named by --cluster-name / ZONEFLEET_CLUSTER_NAME
		if g.ClusterName != "" {
			cfg, err := LoadConfig(g.configPath())
			if err != nil {
				return err
			}
			e, ok := cfg.Find(g.ClusterName)
			if !ok {
				return &exitError{code: ExitNotFound, err: fmt.Errorf("--cluster-name %q: no such cluster in %s (zctl config list)", g.ClusterName, g.configPath())}
			}
			apply(e)
			g.source = Source{Kind: "config", Name: e.Name, Path: g.configPath()}
			return nil
		}
		// 4. ZONEFLEET_CLUSTER names a cluster.json
		if os.Getenv("ZONEFLEET_CLUSTER") != "" {
			if in, path, ok := clusterInfo(); ok {
				applyInfo(in, path)
			}
			return nil
		}
		// 5. the config's current cluster
		cfg, err := LoadConfig(g.configPath())
		if err != nil {
			return err
		}
		if cfg.CurrentCluster != "" {
			e, _ := cfg.Find(cfg.CurrentCluster)
			apply(e)
			g.source = Source{Kind: "config", Name: e.Name, Path: g.configPath()}
			return nil
		}
		// 6. the last `zctl local up`
		if in, path, ok := clusterInfo(); ok {
			applyInfo(in, path)
		}
		return nil
	}()
	if err != nil {
		if errors.As(err, new(*exitError)) {
			return err
		}
		return usageErr(err)
	}
	if g.Token == "" && g.TokenFile != "" {
		tok, err := readTokenFile(g.TokenFile)
		if err != nil {
			return usageErr(err)
		}
		g.Token, g.tokenFromFile = tok, true
	}
	return nil
}

// readTokenFile reads an admin token file: one line, surrounding space trimmed.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\n\r") {
		return "", fmt.Errorf("token file %s: want one non-empty line", path)
	}
	return tok, nil
}

func configCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "named clusters in zctl's config file, and the current one",
		Long: `zctl's config file names clusters: etcd and arbiter endpoints, a default namespace,
the file holding the admin token and TLS file paths. Commands use the current
cluster unless --cluster-name, a flag or an environment variable says otherwise:

  flags > environment (ZONEFLEET_*) > --cluster-name > $ZONEFLEET_CLUSTER (a cluster.json)
        > the current cluster > the cluster.json of the last ` + "`zctl local up`" + `

The file is --config, $ZONEFLEET_CONFIG, or $XDG_CONFIG_HOME/zonefleet/config.yaml
(~/.config/zonefleet/config.yaml); zctl writes it with mode 0600. ` + "`zctl local up`" + ` adds
the cluster "local" and makes it current.`,
		Example: `  zctl config set compose --etcd 127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379 \
      --arbiter 127.0.0.1:7700,127.0.0.1:7710 --token-file ~/.config/zonefleet/compose.token --use
  zctl config list
  zctl config use local
  zctl --cluster-name compose ns list`,
	}
	cmd.AddCommand(configListCmd(g), configCurrentCmd(g), configUseCmd(g), configSetCmd(g), configDeleteCmd(g))
	return cmd
}

func (g *Globals) loadConfig() (*ConfigFile, error) {
	c, err := LoadConfig(g.configPath())
	if err != nil {
		return nil, usageErr(err)
	}
	return c, nil
}

func configListCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "the clusters in the config file (* marks the current one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadConfig()
			if err != nil {
				return err
			}
			out := struct {
				Path           string         `json:"path"`
				CurrentCluster string         `json:"current_cluster"`
				Clusters       []ClusterEntry `json:"clusters"`
			}{g.configPath(), c.CurrentCluster, append([]ClusterEntry{}, c.Clusters...)}
			return g.emit(out, func(w io.Writer) error {
				t := newTab(w)
				t.row("CURRENT\tNAME\tETCD\tARBITERS\tNAMESPACE\tTOKEN FILE")
				for _, e := range c.Clusters {
					cur := ""
					if e.Name == c.CurrentCluster {
						cur = "*"
					}
					t.row("%s\t%s\t%s\t%s\t%s\t%s", cur, e.Name, dash(strings.Join(e.Etcd, ",")), dash(strings.Join(e.Arbiters, ",")), dash(e.Namespace), dash(e.TokenFile))
				}
				return t.flush()
			})
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func configCurrentCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "current",
		Short: "the cluster commands use now, and where its settings come from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.resolve()
			if g.resolveErr != nil {
				return g.resolveErr
			}
			out := struct {
				Source    Source   `json:"source"`
				Etcd      []string `json:"etcd"`
				Arbiters  []string `json:"arbiters"`
				Namespace string   `json:"namespace"`
				TokenFile string   `json:"token_file,omitempty"`
				HasToken  bool     `json:"has_token"`
			}{Source: g.source, Etcd: nonNil(split(g.Etcd)), Arbiters: nonNil(split(g.Arbiter)), Namespace: g.Namespace, HasToken: g.Token != ""}
			if g.tokenFromFile {
				out.TokenFile = g.TokenFile
			}
			if out.Source.Kind == "" {
				out.Source.Kind = "none"
			}
			return g.emit(out, func(w io.Writer) error {
				t := newTab(w)
				from := out.Source.Kind
				switch out.Source.Kind {
				case "config":
					from = fmt.Sprintf("cluster %q of %s", out.Source.Name, out.Source.Path)
				case "cluster.json":
					from = out.Source.Path
				case "flags":
					from = "flags or ZONEFLEET_* variables"
				case "none":
					from = "nothing: no flags, no current cluster (zctl config use NAME, or zctl local up)"
				}
				t.row("from:\t%s", from)
				t.row("etcd:\t%s", dash(g.Etcd))
				t.row("arbiters:\t%s", dash(g.Arbiter))
				t.row("namespace:\t%s", dash(g.Namespace))
				tok := "none"
				switch {
				case g.tokenFromFile:
					tok = "from " + g.TokenFile
				case g.Token != "":
					tok = "set"
				}
				t.row("admin token:\t%s", tok)
				return t.flush()
			})
		},
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func configUseCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "use NAME",
		Short: "make NAME the current cluster",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.loadConfig()
			if err != nil {
				return err
			}
			if _, ok := c.Find(args[0]); !ok {
				return &exitError{code: ExitNotFound, err: fmt.Errorf("no cluster %q in %s (zctl config list)", args[0], g.configPath())}
			}
			c.CurrentCluster = args[0]
			if err := c.Save(g.configPath()); err != nil {
				return err
			}
			return g.emitDone(fmt.Sprintf("current cluster: %s", args[0]), map[string]string{"current_cluster": args[0]})
		},
	}
}

func configDeleteCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "remove NAME from the config file (the cluster itself is untouched)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.loadConfig()
			if err != nil {
				return err
			}
			if !c.Delete(args[0]) {
				return &exitError{code: ExitNotFound, err: fmt.Errorf("no cluster %q in %s", args[0], g.configPath())}
			}
			if err := c.Save(g.configPath()); err != nil {
				return err
			}
			return g.emitDone(fmt.Sprintf("deleted cluster %s", args[0]), map[string]string{"deleted": args[0]})
		},
	}
}

func configSetCmd(g *Globals) *cobra.Command {
	var (
		caFile, certFile, keyFile string
		use                       bool
	)
	c := &cobra.Command{
		Use:   "set NAME",
		Short: "add the cluster NAME or change it: --etcd, --arbiter, -n, --token-file, --ca-file, --cert-file, --key-file",
		Long: `Adds the cluster NAME, or changes the settings given and keeps the others. The
endpoints and the namespace come from the global flags --etcd, --arbiter and -n (or
their ZONEFLEET_* variables); the admin token only as a file (--token-file): a token
given inline (--token) is refused, so it never lands in a shell history or a config.
Relative paths are made absolute. --use makes NAME the current cluster.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.Token != "" {
				return usageErr(errors.New("config set stores no inline token: put it in a file (mode 0600) and give --token-file"))
			}
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			e := ClusterEntry{Name: args[0]}
			if old, ok := cfg.Find(args[0]); ok {
				e = *old
			}
			if g.Etcd != "" {
				e.Etcd = split(g.Etcd)
			}
			if g.Arbiter != "" {
				e.Arbiters = split(g.Arbiter)
			}
			if g.Namespace != "" {
				e.Namespace = g.Namespace
			}
			for _, p := range []struct {
				dst *string
				val string
			}{{&e.TokenFile, g.TokenFile}, {&e.CAFile, caFile}, {&e.CertFile, certFile}, {&e.KeyFile, keyFile}} {
				if p.val == "" {
					continue
				}
				abs, err := filepath.Abs(p.val)
				if err != nil {
					return usageErr(err)
				}
				*p.dst = abs
			}
			if e.TokenFile != "" {
				if _, err := readTokenFile(e.TokenFile); err != nil {
					return usageErr(err)
				}
			}
			if err := e.Validate(); err != nil {
				return usageErr(err)
			}
			cfg.Put(e)
			if use {
				cfg.CurrentCluster = e.Name
			}
			if err := cfg.Save(g.configPath()); err != nil {
				return err
			}
			msg := fmt.Sprintf("cluster %s saved in %s", e.Name, g.configPath())
			if use {
				msg += "; it is the current cluster"
			}
			return g.emit(e, func(w io.Writer) error { _, err := fmt.Fprintln(w, msg); return err })
		},
	}
	c.Flags().StringVar(&caFile, "ca-file", "", "CA certificate of the cluster (PEM)")
	c.Flags().StringVar(&certFile, "cert-file", "", "client certificate (PEM)")
	c.Flags().StringVar(&keyFile, "key-file", "", "client key (PEM)")
	c.Flags().BoolVar(&use, "use", false, "make it the current cluster")
	return c
}

// emitDone prints msg (table) or v (json, yaml).
func (g *Globals) emitDone(msg string, v any) error {
	return g.emit(v, func(w io.Writer) error { _, err := fmt.Fprintln(w, msg); return err })
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageErr(err)
		}
		return nil
	}
}

// registerLocal adds or updates the cluster "local" from a running local
// cluster and makes it current. The token is in DIR/admin-token.
func registerLocal(path string, in localcluster.Info, tokenFile string) error {
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	e := ClusterEntry{Name: LocalClusterName, Etcd: in.Etcd, Namespace: in.Namespace, TokenFile: tokenFile,
		CAFile: in.CAFile, CertFile: in.AdminCertFile, KeyFile: in.AdminKeyFile}
	for _, a := range in.Arbiters {
		e.Arbiters = append(e.Arbiters, a.GRPC)
	}
	cfg.Put(e)
	cfg.CurrentCluster = LocalClusterName
	return cfg.Save(path)
}
