package controller

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vpcgw/vpcgw/internal/controller/readiness"
	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/transport/agenttest"
	"github.com/vpcgw/vpcgw/internal/version"
)

// seriesOf lists the label values of c's series that have gateway gw (collecting, unlike
// WithLabelValues, creates nothing).
func seriesOf(t *testing.T, c prometheus.Collector, gw string) int {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gateway" && l.GetValue() == gw {
					n++
				}
			}
		}
	}
	return n
}

// covers: O3
// vpcgw_build_info is 1 with the running build's version and Go version.
func TestBuildInfo(t *testing.T) {
	if n := testutil.CollectAndCount(buildInfo); n != 1 {
		t.Fatalf("%d build_info series, want 1", n)
	}
	if v := testutil.ToFloat64(buildInfo.WithLabelValues(version.Version, runtime.Version(), buildRevision())); v != 1 {
		t.Fatalf("build_info{version=%q,goversion=%q} = %v, want 1", version.Version, runtime.Version(), v)
	}
}

// covers: O3
// vpcgw_gateway_agents_connected counts a gateway's instances with a live agent stream: up with
// each stream, down when one ends or its instance goes, and gone with the gateway.
func TestAgentsConnectedGauge(t *testing.T) {
	const gw = "gw-unit-agents"
	var mu sync.Mutex
	stops := map[types.UID]func(){}
	dial := dialerFunc(func(_ context.Context, inst transport.Instance) (*transport.Conn, error) {
		conn, stop := agenttest.Pipe(nil)
		mu.Lock()
		stops[inst.UID] = stop
		mu.Unlock()
		return conn, nil
	})
	ended := make(chan string, 4)
	s := newSessions(dial, 10*time.Second, logr.Discard(), func(g string) { ended <- g })
	defer s.closeAll()
	a := transport.Instance{Gateway: gw, Namespace: "kube-system", Pod: "a", UID: "uid-a"}
	b := transport.Instance{Gateway: gw, Namespace: "kube-system", Pod: "b", UID: "uid-b"}
	connected := func() float64 { return testutil.ToFloat64(agentsConnected.WithLabelValues(gw)) }

	if _, err := s.apply(context.Background(), gw, []transport.Instance{a, b}, gwstate.Complete(gwstate.State{})); err != nil {
		t.Fatal(err)
	}
	if n := connected(); n != 2 {
		t.Fatalf("%v agents connected, want 2", n)
	}
	mu.Lock()
	stops[a.UID]() // a's agent exits
	mu.Unlock()
	if g := <-ended; g != gw {
		t.Fatalf("ended stream of %s", g)
	}
	if n := connected(); n != 1 {
		t.Fatalf("%v agents connected after one exited, want 1", n)
	}
	if _, err := s.apply(context.Background(), gw, []transport.Instance{a, b}, gwstate.Complete(gwstate.State{})); err != nil {
		t.Fatal(err)
	}
	if n := connected(); n != 2 {
		t.Fatalf("%v agents connected after the redial, want 2", n)
	}
	if _, err := s.apply(context.Background(), gw, []transport.Instance{b}, gwstate.Complete(gwstate.State{})); err != nil {
		t.Fatal(err)
	}
	if n := connected(); n != 1 {
		t.Fatalf("%v agents connected after instance a went, want 1", n)
	}
	s.closeGateway(gw, true)
	if n := seriesOf(t, agentsConnected, gw); n != 0 {
		t.Fatalf("%d agents_connected series of a forgotten gateway", n)
	}
}

type dialerFunc func(context.Context, transport.Instance) (*transport.Conn, error)

func (d dialerFunc) Dial(ctx context.Context, inst transport.Instance) (*transport.Conn, error) {
	return d(ctx, inst)
}

// covers: O3, N4
// A gateway that is gone takes every one of its series with it (tenants choose gateway names
// in annotations), and nothing else's.
func TestGatewaySeriesForgotten(t *testing.T) {
	const gone, kept = "gw-unit-gone", "gw-unit-kept"
	r := &GatewayReconciler{planners: newPlanners(), health: readiness.New(time.Minute, clocktesting.NewFakePassiveClock(time.Now())),
		sessions: newSessions(nil, time.Second, logr.Discard(), nil)}
	for _, gw := range []string{gone, kept} {
		syncFailures.WithLabelValues(gw).Inc()
		identities.WithLabelValues(gw).Set(1)
		backends.WithLabelValues(gw).Set(1)
		lastSuccessfulSync.WithLabelValues(gw).SetToCurrentTime()
		pendingSince.WithLabelValues(gw).Set(0)
		agentsConnected.WithLabelValues(gw).Set(1)
		gatewayInstances.WithLabelValues(gw).Set(1)
		quarantinedServices.WithLabelValues(gw).Set(0)
		waitingForRoom.WithLabelValues(gw).Set(0)
		agentWarnings.WithLabelValues(gw).Inc()
	}
	r.forgetGateway(gone)
	for _, c := range []prometheus.Collector{syncFailures, identities, backends, lastSuccessfulSync, pendingSince, agentsConnected, gatewayInstances, quarantinedServices, waitingForRoom, agentWarnings} {
		if n := seriesOf(t, c, gone); n != 0 {
			t.Errorf("%d series of the gone gateway left in %v", n, c)
		}
		if n := seriesOf(t, c, kept); n != 1 {
			t.Errorf("%d series of the kept gateway in %v, want 1", n, c)
		}
	}
	if len(perGateway.vecs) != 10 {
		t.Errorf("perGateway has %d metrics; this test sets 10: add the new one here", len(perGateway.vecs))
	}
	deleteGatewaySeries(kept)
}

// covers: O3
// RegisteredMetrics describes every vpcgw metric of the process with its type and labels.
func TestRegisteredMetrics(t *testing.T) {
	ms, err := RegisteredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]MetricDesc{}
	for _, m := range ms {
		if !strings.HasPrefix(m.Name, "vpcgw_") || m.Help == "" {
			t.Errorf("metric %+v: not vpcgw_ or without help", m)
		}
		byName[m.Name] = m
	}
	for name, want := range map[string]string{
		"vpcgw_build_info": "gauge version,goversion,revision",
		"vpcgw_gateway_last_successful_sync_timestamp_seconds": "gauge gateway",
		"vpcgw_gateway_agents_connected":                       "gauge gateway",
		"vpcgw_gateway_sync_failures_total":                    "counter gateway",
		"vpcgw_network_programming_latency_seconds":            "histogram ",
		"vpcgw_reconcile_duration_seconds":                     "histogram kind,result",
		"vpcgw_vip_route_repairs_total":                        "counter gateway",
	} {
		m := byName[name]
		if got := m.Type + " " + strings.Join(m.Labels, ","); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if len(ms) != len(collectors)+1 {
		t.Errorf("%d metrics described, %d collectors and the route writer's one registered", len(ms), len(collectors))
	}
}

// covers: O3
// The user guide's Monitoring section lists every metric the controller registers, each in a
// table row with its type and labels, so that the list stays true.
func TestUserGuideListsEveryMetric(t *testing.T) {
	guide, err := os.ReadFile("../../docs/user-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(guide), "\n## Monitoring\n")
	if !ok {
		t.Fatal("docs/user-guide.md has no ## Monitoring section")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	rows := map[string]string{}
	for _, line := range strings.Split(sec, "\n") {
		if name, ok := strings.CutPrefix(line, "| `vpcgw_"); ok {
			name, _, _ = strings.Cut(name, "`")
			rows["vpcgw_"+name] = line
		}
	}
	ms, err := RegisteredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		row, ok := rows[m.Name]
		if !ok {
			t.Errorf("the user guide does not list %s (%s)", m.Name, m.Type)
			continue
		}
		cells := strings.Split(row, "|")
		if len(cells) < 5 || strings.TrimSpace(cells[2]) != m.Type {
			t.Errorf("the user guide's row of %s does not give its type %s second: %s", m.Name, m.Type, row)
			continue
		}
		labels := strings.TrimSpace(cells[3])
		for _, l := range m.Labels {
			if !strings.Contains(labels, "`"+l+"`") {
				t.Errorf("the user guide's row of %s does not name its label %s: %s", m.Name, l, row)
			}
		}
		delete(rows, m.Name)
	}
	for name := range rows {
		t.Errorf("the user guide lists %s, which the controller does not register", name)
	}
}
