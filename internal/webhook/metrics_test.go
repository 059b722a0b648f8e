// covers: O3, N6 (the webhook's /metrics, as the chart serves it: HTTPS, each scrape authenticated
// and authorized by the API server, so that `up` of the webhook can be alerted on)
package webhook_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vpcgw/vpcgw/internal/webhook"
)

// covers: N6
// Plain metrics on a non-loopback address are refused before anything is served: any workload
// could read them (the controller's rule, metricsserve.Options).
func TestMetricsPlainOnlyOnLoopback(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	_, err := webhook.NewManager(context.Background(), cfg, webhook.Options{ControllerUser: controllerUser, MetricsAddr: ":8080"}, testLogger())
	if err == nil || !strings.Contains(err.Error(), "--metrics-secure") {
		t.Errorf("NewManager with plain metrics on :8080: %v, want a refusal naming --metrics-secure", err)
	}
}

// covers: O3, N6
// The webhook's /metrics with --metrics-secure: anonymous and unauthorized scrapes are refused; a
// service account bound to get /metrics (the chart's <fullname>-metrics-reader) reads the
// webhook's request metrics, one series per handler.
func TestMetricsServedSecurely(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := e.namespace(t)
	reader, other := saToken(ctx, t, cs, ns, "scraper"), saToken(ctx, t, cs, ns, "someone")
	role := unique("metrics-reader")
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"anonymous", "", http.StatusUnauthorized},
		{"a service account without get /metrics", other, http.StatusForbidden},
		{"the reader", reader, http.StatusOK},
	} {
		// RBAC bindings reach the authorizer's cache shortly after they are written.
		var code int
		var body string
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body, err = scrapeMetrics(e.metricsAddr, tc.token)
			if err == nil && code == tc.want || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || code != tc.want {
			t.Errorf("scrape as %s: %d %v (%.200s), want %d", tc.who, code, err, body, tc.want)
			continue
		}
		served := strings.Contains(body, `controller_runtime_webhook_requests_total{code="200",webhook="/validate-vpc-nat-gateway"}`)
		if tc.want == http.StatusOK && !served {
			t.Errorf("the reader's scrape has no request counter of the gateway handler: %.300s", body)
		}
		if tc.want != http.StatusOK && strings.Contains(body, "controller_runtime_") {
			t.Errorf("scrape as %s (%d) revealed metrics", tc.who, code)
		}
	}
}

// saToken creates service account name in ns and returns a token of it.
func saToken(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// scrapeMetrics GETs https://addr/metrics with bearer (none when empty), as a ServiceMonitor does:
// the webhook's self-signed metrics certificate is not verified.
func scrapeMetrics(addr, bearer string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed serving certificate; authentication is what is under test
	}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end (or failed) already
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}
