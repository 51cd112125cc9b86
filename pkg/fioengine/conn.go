package fioengine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Options select the target and the credentials of one fio job: the fio
// engine options of the same names (--node=, --device=, --namespace=, …).
// Exactly one of Node/Addr (a drive) and Namespace (a tenant's v-zones)
// names the target.
type Options struct {
	Node      string // drive target: the node's id (its address from the arbiter)
	Addr      string // drive target: the node's address, instead of Node
	Device    uint32 // drive target: the device index on the node
	Namespace string // v-zone target: the namespace

	// Connection settings, resolved as zctl resolves them (Resolve).
	Arbiter     string // comma-separated arbiter addresses
	Etcd        string // comma-separated etcd endpoints
	Config      string // zctl's config file
	ClusterName string // a cluster of the config file
	Cluster     string // a cluster.json (`zctl local up`)
	TokenFile   string // an admin token or a namespace token (0600)
	CAFile      string
	CertFile    string
	KeyFile     string
	Insecure    bool

	// ZoneAppend issues every write that starts at a zone's write pointer
	// as a zone append and checks that the drive placed it there.
	ZoneAppend bool
	// Zones bounds a v-zone target to v-zones 0..Zones-1 (default: the
	// namespace's quota; required when it has none).
	Zones uint64
}

// key identifies the target and connection of o: jobs of one fio process
// with the same key share one connection.
func (o Options) key() string {
	return fmt.Sprintf("%#v", o)
}

// Resolve fills the connection settings o does not give, in zctl's order
// (pkg/zctl config.go): the option, its ZONEFLEET_* environment variable,
// the cluster ClusterName names in the config file, the cluster.json
// ZONEFLEET_CLUSTER names, the config file's current cluster, the cluster of
// the last `zctl local up`. Sources after the environment are exclusive:
// settings the chosen cluster lacks are not taken from another.
func (o Options) Resolve() (Options, error) {
	env := func(dst *string, name string) {
		if *dst == "" {
			*dst = os.Getenv(name)
		}
	}
	endpointsGiven := o.Arbiter != "" || o.Etcd != ""
	if !endpointsGiven {
		o.Arbiter, o.Etcd = os.Getenv("ZONEFLEET_ARBITER"), os.Getenv("ZONEFLEET_ETCD")
		endpointsGiven = o.Arbiter != "" || o.Etcd != ""
	}
	env(&o.Config, "ZONEFLEET_CONFIG")
	env(&o.ClusterName, "ZONEFLEET_CLUSTER_NAME")
	env(&o.Cluster, "ZONEFLEET_CLUSTER")
	env(&o.TokenFile, "ZONEFLEET_TOKEN_FILE")
	env(&o.CAFile, "ZONEFLEET_CA_FILE")
	env(&o.CertFile, "ZONEFLEET_CERT_FILE")
	env(&o.KeyFile, "ZONEFLEET_KEY_FILE")
	if !o.Insecure {
		o.Insecure = os.Getenv("ZONEFLEET_INSECURE") == "true" || os.Getenv("ZONEFLEET_INSECURE") == "1"
	}
	if o.Config == "" {
		o.Config = defaultConfigPath()
	}
	apply := func(e *clusterEntry) {
		if !endpointsGiven {
			o.Arbiter, o.Etcd = strings.Join(e.Arbiters, ","), strings.Join(e.Etcd, ",")
		}
		if o.TokenFile == "" {
			o.TokenFile = e.TokenFile
		}
		if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
			o.CAFile, o.CertFile, o.KeyFile = e.CAFile, e.CertFile, e.KeyFile
		}
	}
	applyInfo := func(in clusterInfo) {
		if !endpointsGiven {
			var addrs []string
			for _, a := range in.Arbiters {
				addrs = append(addrs, a.GRPC)
			}
			o.Arbiter, o.Etcd = strings.Join(addrs, ","), strings.Join(in.Etcd, ",")
		}
		if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
			o.CAFile, o.CertFile, o.KeyFile = in.CAFile, in.AdminCertFile, in.AdminKeyFile
		}
		if in.Insecure {
			o.Insecure = true
			if o.TokenFile == "" {
				o.TokenFile = in.AdminTokenFile
			}
		}
	}
	switch {
	case o.ClusterName != "":
		cfg, err := loadConfig(o.Config)
		if err != nil {
			return o, err
		}
		e := cfg.find(o.ClusterName)
		if e == nil {
			return o, &zerr.NotFoundError{Kind: "cluster in " + o.Config, Name: o.ClusterName}
		}
		apply(e)
	case o.Cluster != "":
		in, err := readClusterInfo(o.Cluster)
		if err != nil {
			return o, err
		}
		applyInfo(in)
	default:
		cfg, err := loadConfig(o.Config)
		if err != nil {
			return o, err
		}
		if e := cfg.find(cfg.CurrentCluster); e != nil {
			apply(e)
		} else if path, ok := lastLocalUp(); ok {
			if in, err := readClusterInfo(path); err == nil {
				applyInfo(in)
			}
		}
	}
	if o.Arbiter == "" && o.Etcd == "" {
		return o, &zerr.InvalidArgumentError{Field: "cluster", Reason: "no arbiter or etcd endpoint: give arbiter=, cluster= (a cluster.json), config=/cluster_name=, ZONEFLEET_CLUSTER, or start one with `zctl local up`"}
	}
	return o, nil
}

// ClientConfig is the client configuration of resolved options: TLS from
// the CA (and the client certificate) unless Insecure; the token file's
// token as the tenant's credential when it is a namespace token, as the
// admin token otherwise; $ZONEFLEET_TOKEN when no file is named.
func (o Options) ClientConfig(namespace string) (client.Config, error) {
	cfg := client.Config{Arbiters: split(o.Arbiter), Etcd: split(o.Etcd), Namespace: namespace}
	cr := client.Credentials{CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile, Insecure: o.Insecure}
	if err := cr.Apply(&cfg); err != nil {
		return cfg, &zerr.InvalidArgumentError{Field: "credentials", Reason: err.Error()}
	}
	tok, fromFile := os.Getenv("ZONEFLEET_TOKEN"), false
	if o.TokenFile != "" {
		var err error
		if tok, err = readTokenFile(o.TokenFile); err != nil {
			return cfg, &zerr.InvalidArgumentError{Field: "token_file", Reason: err.Error()}
		}
		fromFile = true
	}
	switch {
	case tok == "":
	case strings.HasPrefix(tok, auth.TokenPrefix) && fromFile:
		cfg.Credentials = auth.NewFileToken(o.TokenFile, 0, nil)
	case strings.HasPrefix(tok, auth.TokenPrefix):
		cfg.Credentials = auth.StaticToken(tok)
	default:
		cfg.Token = tok
	}
	return cfg, nil
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// readTokenFile reads a token file: one line, surrounding space trimmed.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\n\r") {
		return "", fmt.Errorf("%s: want one non-empty line", path)
	}
	return tok, nil
}

// The parts of zctl's config file (pkg/zctl config.go) a connection needs.
type configFile struct {
	Version        int            `json:"version"`
	CurrentCluster string         `json:"current-cluster,omitempty"`
	Clusters       []clusterEntry `json:"clusters"`
}

type clusterEntry struct {
	Name      string   `json:"name"`
	Etcd      []string `json:"etcd,omitempty"`
	Arbiters  []string `json:"arbiters,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	TokenFile string   `json:"token-file,omitempty"`
	CAFile    string   `json:"ca-file,omitempty"`
	CertFile  string   `json:"cert-file,omitempty"`
	KeyFile   string   `json:"key-file,omitempty"`
}

// configVersion is the newest config format this package reads (zctl's).
const configVersion = 1

func defaultConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = filepath.Join(os.TempDir(), "zonefleet-"+fmt.Sprint(os.Getuid()))
	}
	return filepath.Join(dir, "zonefleet", "config.yaml")
}

// loadConfig reads zctl's config file; a missing file is an empty config.
func loadConfig(path string) (*configFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &configFile{}, nil
	}
	if err != nil {
		return nil, err
	}
	var c configFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, &zerr.CorruptError{Path: path, Reason: err.Error()}
	}
	if c.Version > configVersion {
		return nil, &zerr.InvalidArgumentError{Field: "config", Reason: fmt.Sprintf("%s: format version %d is newer than this engine knows (%d)", path, c.Version, configVersion)}
	}
	return &c, nil
}

func (c *configFile) find(name string) *clusterEntry {
	if name == "" {
		return nil
	}
	for i := range c.Clusters {
		if c.Clusters[i].Name == name {
			return &c.Clusters[i]
		}
	}
	return nil
}

// clusterInfo is the part of a `zctl local up` cluster.json
// (localcluster.Info) a connection needs.
type clusterInfo struct {
	Etcd     []string `json:"etcd"`
	Arbiters []struct {
		GRPC string `json:"grpc"`
	} `json:"arbiters"`
	CAFile         string `json:"ca_file,omitempty"`
	AdminCertFile  string `json:"admin_cert_file,omitempty"`
	AdminKeyFile   string `json:"admin_key_file,omitempty"`
	AdminTokenFile string `json:"admin_token_file,omitempty"`
	Insecure       bool   `json:"insecure,omitempty"`
}

func readClusterInfo(path string) (clusterInfo, error) {
	var in clusterInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return in, &zerr.InvalidArgumentError{Field: "cluster", Reason: err.Error()}
	}
	if err := yaml.Unmarshal(b, &in); err != nil {
		return in, &zerr.CorruptError{Path: path, Reason: err.Error()}
	}
	return in, nil
}

// lastLocalUp is the cluster.json the last `zctl local up` recorded.
func lastLocalUp() (string, bool) {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = os.TempDir()
	}
	b, err := os.ReadFile(filepath.Join(dir, "zonefleet", "current-cluster"))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}
