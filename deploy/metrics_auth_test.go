// covers: N6, O3 (the controller's and the webhook's /metrics: HTTPS, each scrape authenticated
// and authorized by the real API server with exactly the chart's RBAC)
package deploy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vpcgw/vpcgw/internal/controller"
)

// covers: N6, O3
// The controller's and the webhook's /metrics, each served as the chart runs it (--metrics-secure)
// as its own service account with exactly the chart's RBAC: anonymous, malformed and unauthorized
// scrapes are refused, a service account of controller.metricsReaders reads the metrics, and plain
// HTTP serves nothing.
func TestMetricsNeedAuthorization(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	ctx := context.Background()
	const ns = "metrics-test"
	createNamespace(t, ns)
	// The chart's metrics RBAC, for real: the controller and the webhook may review tokens and
	// access; the service account "scraper" is bound to the reader ClusterRole through
	// controller.metricsReaders.
	m := manifest(render(t, "--set", "controller.metricsReaders[0].name=scraper", "--set", "controller.metricsReaders[0].namespace="+ns))
	var rbac []*unstructured.Unstructured
	for _, o := range m {
		if strings.Contains(o.GetName(), "metrics") && strings.HasPrefix(o.GetKind(), "ClusterRole") {
			rbac = append(rbac, o)
		}
	}
	if len(rbac) != 6 {
		t.Fatalf("metrics RBAC objects %d, want 3 ClusterRoles and 3 ClusterRoleBindings (the controller's and the webhook's reviews, the reader): %v", len(rbac), m.names())
	}
	apply(t, rbac, false)

	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	token := func(sa string) string {
		t.Helper()
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		must(t, err)
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		must(t, err)
		return tr.Status.Token
	}
	reader, other := token("scraper"), token("someone")
	for _, part := range []struct{ name, user, body string }{
		// The controller's own metrics; the webhook's process registers controller-runtime's.
		{"controller", controllerUser, "vpcgw_full_plans_total"},
		{"webhook", "system:serviceaccount:kube-system:vpcgw-webhook", ""},
	} {
		t.Run(part.name, func(t *testing.T) {
			addr := serveMetricsAs(t, part.user)
			checkScrapes(t, addr, reader, other, part.body)
		})
	}
}

// serveMetricsAs runs the metrics server as the chart's processes run it (metricsserve.Options,
// HTTPS, each scrape reviewed) in a manager that authenticates as user, and returns its address:
// the reviews it makes are allowed by the chart's RBAC alone.
func serveMetricsAs(t *testing.T, user string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	opts, err := controller.MetricsServerOptions(addr, true, "")
	must(t, err)
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	scheme, err := controller.Scheme()
	must(t, err)
	mgr, err := ctrl.NewManager(as, ctrl.Options{Scheme: scheme, Metrics: opts, HealthProbeBindAddress: "0", Logger: zap.New(zap.WriteTo(io.Discard))})
	must(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager: %v", err)
		}
	})
	eventually(t, "the secure metrics server answers", func() bool { _, _, err := scrape(addr, ""); return err == nil })
	return addr
}

// scrape is what the chart's ServiceMonitors do: GET /metrics over HTTPS with a bearer token (none
// when empty), the self-signed certificate unverified.
func scrape(addr, bearer string) (int, string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed serving certificate; authentication is what is under test
	}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end (or failed) already
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}

// checkScrapes: only the reader's token reads the metrics at addr (with body in them, when given),
// and plain HTTP serves none.
func checkScrapes(t *testing.T, addr, reader, other, body string) {
	t.Helper()
	for _, tc := range []struct {
		who, token string
		want       []int
	}{
		{"anonymous", "", []int{http.StatusUnauthorized}},
		// The TokenReview reports an error for a malformed token; controller-runtime's filter
		// answers that with 500, a refusal all the same.
		{"a bad token", "not-a-token", []int{http.StatusUnauthorized, http.StatusInternalServerError}},
		{"a service account without the reader role", other, []int{http.StatusForbidden}},
		{"the reader", reader, []int{http.StatusOK}},
	} {
		code, got, err := scrape(addr, tc.token)
		if err != nil || !slices.Contains(tc.want, code) {
			t.Errorf("scrape as %s: %d %v (%.200s), want %d", tc.who, code, err, got, tc.want)
			continue
		}
		if code == http.StatusOK && (!strings.Contains(got, body) || !strings.Contains(got, "# TYPE ")) {
			t.Errorf("the reader's scrape has no metrics (want %q): %.300s", body, got)
		}
		if code != http.StatusOK && strings.Contains(got, "# TYPE ") {
			t.Errorf("scrape as %s (%d) revealed metrics", tc.who, code)
		}
	}
	// Plain HTTP is not served at all.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read to the end already
		if strings.Contains(string(b), "# TYPE ") {
			t.Errorf("plain HTTP scrape served metrics")
		}
	}
}

// covers: N6
func TestMetricsOptions(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		secure  bool
		wantErr bool
	}{
		{"0", false, false},
		{"", false, false},
		{controller.DefaultMetricsAddr, false, false},
		{"[::1]:8080", false, false},
		{"localhost:8080", false, false},
		{":8080", false, true},
		{"0.0.0.0:8080", false, true},
		{"10.0.0.1:8080", false, true},
		{":8443", true, false},
	} {
		o, err := controller.MetricsServerOptions(tc.addr, tc.secure, "")
		if (err != nil) != tc.wantErr {
			t.Errorf("MetricsServerOptions(%q, secure %v): %v, want error %v", tc.addr, tc.secure, err, tc.wantErr)
			continue
		}
		if err == nil && tc.secure && (!o.SecureServing || o.FilterProvider == nil) {
			t.Errorf("MetricsServerOptions(%q, secure): %+v, want HTTPS with the authentication and authorization filter", tc.addr, o)
		}
		if err == nil && tc.secure {
			c := &tls.Config{}
			for _, f := range o.TLSOpts {
				f(c)
			}
			if c.MinVersion != tls.VersionTLS12 {
				t.Errorf("secure metrics TLS minimum %x, want TLS 1.2", c.MinVersion)
			}
		}
	}
}
