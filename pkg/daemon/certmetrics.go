package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/zonefleet/zonefleet/pkg/pki"
)

// certExpiry exports zonefleet_tls_certificate_expiry_timestamp_seconds{cert}:
// the NotAfter, as a Unix time, of the certificate the process serves with
// (cert="server") and presents to the servers it calls — other nodes, the
// arbiter's nodes, etcd — (cert="client"). Both come from the component's
// certificate reloader, read at every scrape, so a certificate rotated on
// disk shows its new expiry without a restart. The deploy alerts
// (ZoneFleetCertificateExpiresSoon, …Critical) fire on it.
type certExpiry struct {
	sec  *Security
	desc *prometheus.Desc
}

func newCertExpiry(sec *Security) *certExpiry {
	return &certExpiry{sec: sec, desc: prometheus.NewDesc("zonefleet_tls_certificate_expiry_timestamp_seconds",
		"Expiry (NotAfter, Unix time) of the TLS certificate this process serves with (cert=server) and presents as a client (cert=client).",
		[]string{"cert"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *certExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *certExpiry) Collect(ch chan<- prometheus.Metric) {
	s := c.sec
	if s == nil || s.Bundle == nil || s.Bundle.Cert == nil {
		return
	}
	leaf, err := pki.LeafOf(s.Bundle.Cert.Current())
	if err != nil {
		return
	}
	at := float64(leaf.NotAfter.Unix())
	if s.TLS != nil {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, at, "server")
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, at, "client")
}
