package zctl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthCmd is `zctl health ADDR [--http]`: the container healthcheck of the
// compose cluster (the image is FROM scratch: no curl). It asks the standard
// gRPC health service of ADDR (every ZoneFleet server, and etcd on its client
// port) or GETs http://ADDR/healthz, and exits 0 when serving, 1 otherwise.
func healthCmd(g *Globals) *cobra.Command {
	var (
		useHTTP bool
		service string
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:   "health ADDR",
		Short: "check a server's health: gRPC health service, or HTTP /healthz with --http; exit 0 when serving",
		Long: "zctl health asks the standard gRPC health service (grpc.health.v1) of ADDR and exits 0 when it\n" +
			"answers SERVING, 1 otherwise (NOT_SERVING, unreachable, or no answer within --timeout).\n" +
			"With --http it GETs http://ADDR/healthz instead and wants status 200; ADDR may carry its own\n" +
			"path (etcd: --http 127.0.0.1:2379/health). Used by the compose healthchecks.",
		Example: "  zctl health 127.0.0.1:7800\n  zctl health --http 127.0.0.1:7801\n  zctl health --http 127.0.0.1:2379/health",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return usageErr(err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var (
				status string
				err    error
			)
			if useHTTP {
				status, err = httpHealth(ctx, args[0])
			} else {
				status, err = grpcHealth(ctx, g, args[0], service)
			}
			if err != nil {
				return &exitError{code: ExitFailed, err: fmt.Errorf("%s: %w", args[0], err)}
			}
			return g.emit(map[string]string{"addr": args[0], "status": status}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s %s\n", args[0], status)
				return err
			})
		},
	}
	c.Flags().BoolVar(&useHTTP, "http", false, "GET http://ADDR/healthz (or ADDR's own path) instead of the gRPC health service")
	c.Flags().StringVar(&service, "service", "", "gRPC health service name (empty: the whole server)")
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "give up after this long")
	return c
}

// grpcHealth asks the standard health service, which every server answers
// without credentials. Over TLS unless --insecure; the server certificate is
// verified when a CA is known (--ca-file, the config), otherwise not: a
// probe sends nothing secret and only reads a status.
func grpcHealth(ctx context.Context, g *Globals, addr, service string) (string, error) {
	g.resolve()
	creds := insecure.NewCredentials()
	if !g.Insecure {
		conf := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} //nolint:gosec // see above
		if g.CAFile != "" {
			pool, err := pki.LoadCertPool(g.CAFile)
			if err != nil {
				return "", err
			}
			conf = pki.ClientConfig(pki.ClientOptions{Roots: pool})
		}
		creds = credentials.NewTLS(conf)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return "", err
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return "", fmt.Errorf("health status %s", st)
	}
	return healthpb.HealthCheckResponse_SERVING.String(), nil
}

func httpHealth(ctx context.Context, addr string) (string, error) {
	url := addr
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		url = "http://" + url
	}
	if rest := url[strings.Index(url, "://")+3:]; !strings.Contains(rest, "/") {
		url += "/healthz"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if msg == "" {
			return "", errors.New(resp.Status)
		}
		return "", fmt.Errorf("%s: %s", resp.Status, msg)
	}
	return "SERVING", nil
}
