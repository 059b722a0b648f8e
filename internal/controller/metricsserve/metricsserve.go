// Package metricsserve says how the controller and the webhook serve /metrics (SPEC N6) and
// describes the metrics the controller serves (SPEC O3), so that docs, alerts and the dashboard can
// be checked against them.
package metricsserve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// DefaultAddr is --metrics-bind-address's default: plain HTTP on the pod's loopback only,
// which nothing outside the controller's own pod can reach (SPEC N6). The chart serves metrics
// on the pod network instead, with --metrics-secure.
const DefaultAddr = "127.0.0.1:8080"

// Options is how /metrics is served at addr ("" or "0": off). secure serves HTTPS
// (a self-signed certificate unless certDir holds tls.crt and tls.key, reloaded when they
// change), TLS 1.2 or later, HTTP/1.1 only, and every request is authenticated (TokenReview) and
// authorized (SubjectAccessReview of get on the non-resource URL /metrics) by the API server,
// as kubebuilder scaffolds it. Without secure, only a loopback address is accepted: plain,
// unauthenticated metrics on the pod network would be readable by any workload (SPEC N6).
func Options(addr string, secure bool, certDir string) (metricsserver.Options, error) {
	if addr == "" || addr == "0" {
		return metricsserver.Options{BindAddress: "0"}, nil
	}
	if !secure {
		if err := checkLoopback(addr); err != nil {
			return metricsserver.Options{}, fmt.Errorf("--metrics-bind-address %q without --metrics-secure: %w", addr, err)
		}
		return metricsserver.Options{BindAddress: addr}, nil
	}
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		CertDir:        certDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			// HTTP/2 off, as kubebuilder does: its stream handling was the way in for
			// CVE-2023-44487 and CVE-2023-39325; a scrape needs nothing of it.
			c.NextProtos = []string{"http/1.1"}
		}},
	}, nil
}

// checkLoopback accepts only host:port with a loopback host (127.0.0.0/8, ::1 or localhost).
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not a host:port: %w", err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("plain HTTP metrics are served on a loopback address only (like %s); serve them on %q with --metrics-secure", DefaultAddr, addr)
}

// Desc describes one metric served on /metrics.
type Desc struct {
	Name string
	// Type is counter, gauge or histogram.
	Type   string
	Labels []string
	Help   string
}

var descFields = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^}]*)\}\}$`)

// Describe describes the metrics of collectors, read from the collectors themselves, sorted by
// name.
func Describe(collectors []prometheus.Collector) ([]Desc, error) {
	var out []Desc
	for _, c := range collectors {
		typ, err := metricType(c)
		if err != nil {
			return nil, err
		}
		ch := make(chan *prometheus.Desc, 1)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descFields.FindStringSubmatch(d.String())
			if m == nil {
				return nil, fmt.Errorf("unexpected descriptor %s", d)
			}
			name, err1 := strconv.Unquote(m[1])
			help, err2 := strconv.Unquote(m[2])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("descriptor %s: %w", d, err)
			}
			md := Desc{Name: name, Type: typ, Help: help}
			if m[3] != "" {
				md.Labels = strings.Split(m[3], ",")
			}
			out = append(out, md)
		}
	}
	slices.SortFunc(out, func(a, b Desc) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// metricType names a collector's type; a Gauge also has a Counter's methods, so it goes first.
func metricType(c prometheus.Collector) (string, error) {
	switch c.(type) {
	case *prometheus.GaugeVec, prometheus.Gauge:
		return "gauge", nil
	case *prometheus.CounterVec, prometheus.Counter:
		return "counter", nil
	case *prometheus.HistogramVec, prometheus.Histogram:
		return "histogram", nil
	}
	return "", fmt.Errorf("metric collector of unknown type %T", c)
}
