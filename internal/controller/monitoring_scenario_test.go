package controller_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/controller"
)

// covers: O3
// Against the real API server: a programmed gateway shows when every instance last acknowledged
// it, how many agents are connected of how many instances, and nothing pending; /readyz is ready
// once the caches synced, fails while a change waits unapplied (an agent that does not answer)
// longer than --sync-stale-after, and recovers when it is applied; a deleted gateway takes its
// series with it.
func TestMonitoringOnTheAPIServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	healthAddr := l.Addr().String()
	must(t, l.Close())
	f := newFixtureWith(t, inMemory, "gw-monitoring", 2, func(o *controller.Options) {
		o.HealthAddr = healthAddr
		o.SyncStaleAfter = time.Second
	})
	readyz := func() int {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	f.eventually("ready", func() bool { return readyz() == http.StatusOK })

	before := float64(time.Now().Unix())
	f.eip("eip-monitoring", "172.18.40.10", true)
	f.service("web", "eip-monitoring", 80, "10.0.1.11")
	gw := map[string]string{"gateway": f.gw}
	f.eventually("programmed and shown", func() bool {
		return f.data.serves(f.pods[0], "172.18.40.10:80:tcp") &&
			metricValue(t, "vpcgw_gateway_last_successful_sync_timestamp_seconds", gw) >= before &&
			metricValue(t, "vpcgw_gateway_agents_connected", gw) == 2 &&
			metricValue(t, "vpcgw_gateway_instances", gw) == 2 &&
			hasSeries(t, "vpcgw_gateway_pending_since_timestamp_seconds", gw) &&
			metricValue(t, "vpcgw_gateway_pending_since_timestamp_seconds", gw) == 0
	})
	if !hasSeries(t, "vpcgw_build_info", nil) || metricValue(t, "vpcgw_reconcile_duration_seconds", map[string]string{"result": "ok"}) == 0 {
		t.Fatal("build info or reconcile duration missing")
	}

	// An agent that does not answer: the change waits, readiness fails, and comes back once applied.
	thaw := f.agents.freeze(f.pods[0])
	defer thaw()
	f.backend("web", 1, "10.0.1.12")
	f.eventually("the change waits", func() bool { return f.agents.waiting(f.pods[0]) > 0 })
	f.eventually("not ready while the change waits", func() bool {
		return readyz() == http.StatusInternalServerError && metricValue(t, "vpcgw_gateway_pending_since_timestamp_seconds", gw) > 0
	})
	synced := metricValue(t, "vpcgw_gateway_last_successful_sync_timestamp_seconds", gw)
	thaw()
	f.eventually("ready again once applied", func() bool {
		return readyz() == http.StatusOK && backendsOf(f, "172.18.40.10:80:tcp") == 2 &&
			metricValue(t, "vpcgw_gateway_pending_since_timestamp_seconds", gw) == 0 &&
			metricValue(t, "vpcgw_gateway_last_successful_sync_timestamp_seconds", gw) > synced
	})

	must(t, k8s.Delete(context.Background(), &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: f.gw}}))
	f.eventually("the gateway's series gone with it", func() bool {
		for _, name := range []string{
			"vpcgw_gateway_last_successful_sync_timestamp_seconds", "vpcgw_gateway_agents_connected", "vpcgw_gateway_instances",
			"vpcgw_gateway_pending_since_timestamp_seconds", "vpcgw_gateway_identities", "vpcgw_gateway_backends",
			"vpcgw_gateway_quarantined_services", "vpcgw_gateway_services_waiting_for_room",
		} {
			if hasSeries(t, name, gw) {
				return false
			}
		}
		return true
	})
	f.eventually("ready after the gateway went", func() bool { return readyz() == http.StatusOK })
}

// hasSeries reports whether the registry serves a series of name whose labels include want.
func hasSeries(t *testing.T, name string, want map[string]string) bool {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	must(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			return true
		}
	}
	return false
}
