package controller_test

// covers: V3 (harness: envtest, kube-controller-manager, agents in memory, a real OVN NB
// ovsdb-server for the VIP routes and the Vpc's routes)

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// testNB is an OVN NB ovsdb-server of one test, on a unix socket, with the schema vpcgw's models
// were generated from.
type testNB struct {
	t    *testing.T
	sock string
}

func startTestNB(t *testing.T) *testNB {
	t.Helper()
	for _, bin := range []string{"ovsdb-server", "ovsdb-tool", "ovn-nbctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.Skip(t, bin+" not installed (Debian package ovn-central)")
		}
	}
	dir, err := os.MkdirTemp("", "vpcgw-nb-") // short: unix socket paths are limited to 108 bytes
	must(t, err)
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	db, sock := filepath.Join(dir, "nb.db"), filepath.Join(dir, "nb.sock")
	if out, err := exec.Command("ovsdb-tool", "create", db, "../ovn/nbdb/ovn-nb.ovsschema").CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create: %v: %s", err, out)
	}
	cmd := exec.Command("ovsdb-server", db, "--remote=punix:"+sock, "--unixctl="+filepath.Join(dir, "nb.ctl"),
		"--log-file="+filepath.Join(dir, "nb.log"), "--no-chdir", "-vconsole:off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close() // a probe: the server answered
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ovsdb-server did not listen within 10s: %s", stderr.String())
		}
	}
	return &testNB{t: t, sock: sock}
}

func (s *testNB) nbctl(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("ovn-nbctl", append([]string{"--db=unix:" + s.sock, "--timeout=10"}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("ovn-nbctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// events are the Service's events of reason, oldest first.
func (f *fixture) events(svc, reason string) []corev1.Event {
	var evs corev1.EventList
	must(f.t, k8s.List(context.Background(), &evs, client.InNamespace(f.ns)))
	var out []corev1.Event
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Name == svc && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// A Vpc router that carries a VIP to no route, or to a discard route, drops it before vpcgw's
// 29210 policy (OVN routes before policies). The controller checks every VIP after writing the
// policies: the owning Service gets a Warning naming the VIP, the Vpc and the fix, the published
// status counts the VIPs; a covering route (written to the NB as kube-ovn writes a Vpc's static
// route) wakes the gateway by itself, the Service gets a Normal event and the count drops. The
// Warning is given when the state changes, not at every sync.
// covers: V3, T3, O2
func TestVIPNotRoutedByTheVpc(t *testing.T) {
	if cfg == nil {
		testutil.Skip(t, envSkip)
	}
	nb := startTestNB(t)
	const gw, statusNS = "gw-route", "vpcgw-status-route"
	router := gw + "-vpc" // the fixture's Vpc
	// kube-ovn made the Vpc's router with its Subnet's port; the Vpc lists no static route.
	nb.nbctl("lr-add", router, "--", "lrp-add", router, router+"-subnet", "02:00:00:00:01:01", "10.0.1.1/24")
	must(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: statusNS}}))
	f := newFixtureWith(t, inMemory, gw, 1, func(o *controller.Options) {
		o.NB = ovn.Config{Address: "unix:" + nb.sock}
		o.StatusNamespace, o.StatusMinInterval, o.StatusHeartbeat = statusNS, 100*time.Millisecond, time.Hour
	})
	f.eip("route-eip", "172.18.0.10", true)
	svc := f.service("web", "route-eip", 80, "10.0.1.10")
	f.eventually("the Service served", func() bool {
		return ingressIs(f.get("web"), "172.18.0.10") && allReady(f.records("web"), "172.18.0.10")
	})
	clusterIP := f.get("web").Spec.ClusterIP
	f.eventually("the VIP policies written", func() bool {
		out := nb.nbctl("lr-policy-list", router)
		return strings.Contains(out, "ip4.dst == 172.18.0.10") && strings.Contains(out, "ip4.dst == "+clusterIP)
	})
	unrouted := func(n int) func() bool {
		return func() bool {
			p, _, ok := published(t, statusNS)
			g, found := p.Gateways[gw]
			return ok && found && g.Routes != nil && g.Routes.Synced && g.Routes.UnroutedVIPs == n &&
				(n == 0) == (g.Routes.Unrouted == "") && !strings.Contains(g.Routes.Unrouted, clusterIP) && !strings.Contains(g.Routes.Unrouted, "172.18.0.10")
		}
	}

	// No route at all: both VIPs are dropped.
	f.eventually("the Warning for both VIPs", func() bool {
		return f.hasEvent("web", model.ReasonVIPNotRouted, "EIP 172.18.0.10 (no route covers 172.18.0.10) and ClusterIP "+clusterIP+" (no route covers "+clusterIP+")")
	})
	ev := f.events("web", model.ReasonVIPNotRouted)[0]
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.UID != svc.UID ||
		!strings.Contains(ev.Message, "Vpc "+router) || !strings.Contains(ev.Message, "nextHopIP 10.0.1.250") || !strings.Contains(ev.Message, "0.0.0.0/0") {
		t.Errorf("the Warning: %s %q", ev.Type, ev.Message)
	}
	f.eventually("two unrouted VIPs in the published status (a count, not the VIPs: SPEC N8)", unrouted(2))

	// More syncs of the gateway in the same state give no new Warning.
	f.backend("web", 1, "10.0.1.11")
	f.eventually("the second backend programmed", func() bool {
		st, _ := f.agents.state(f.pods[0])
		for _, id := range st.Identities {
			if id.Port == 80 && len(id.Backends) == 2 {
				return true
			}
		}
		return false
	})
	if evs := f.events("web", model.ReasonVIPNotRouted); len(evs) != 1 || evs[0].Series != nil || evs[0].Count > 1 {
		t.Errorf("the Warning was given again without a change: %+v", evs)
	}

	// The user adds the Vpc's default route to the gateway: the NB's change wakes the gateway.
	nb.nbctl("lr-route-add", router, "0.0.0.0/0", "10.0.1.250")
	f.eventually("the Normal event once the VIPs are routed", func() bool {
		return f.hasEvent("web", model.ReasonVIPRouted, "Vpc "+router+" now routes this Service's VIPs")
	})
	f.eventually("no unrouted VIP in the published status", unrouted(0))

	// A discard route for the ClusterIP's network: only the ClusterIP is dropped, and the Warning
	// is given again (a new state).
	prefix := clusterIP + "/32"
	nb.nbctl("lr-route-add", router, prefix, "discard")
	f.eventually("the Warning for the ClusterIP", func() bool {
		return f.hasEvent("web", model.ReasonVIPNotRouted, "OVN drops ClusterIP "+clusterIP+" (route "+prefix+" discards it) in Vpc "+router)
	})
	f.eventually("one unrouted VIP in the published status", unrouted(1))

	// The discard route removed: routed again, told again.
	nb.nbctl("lr-route-del", router, prefix)
	f.eventually("the count back to zero", unrouted(0))
	f.eventually("a second Normal event", func() bool { return occurrences(f.events("web", model.ReasonVIPRouted)) == 2 })
}

// occurrences counts the events, each with its series: an event given again with the same text is
// one Event object whose series counts it (client-go's events.k8s.io recorder).
func occurrences(evs []corev1.Event) int {
	n := 0
	for _, ev := range evs {
		if ev.Series != nil && ev.Series.Count > 1 {
			n += int(ev.Series.Count)
		} else {
			n++
		}
	}
	return n
}
