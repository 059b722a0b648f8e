// covers: N4
package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/model"
)

// covers: N4, O3
// Against the real API server: a gateway serves at most --max-identities-per-gateway identities.
// The Service past the bound gets an event and nothing else (no ingress, no record, no
// finalizer, no identity) and is counted as waiting for room; a Service that lets go makes room,
// and the waiting one is served although it did not change itself.
func TestIdentityBoundOnTheAPIServer(t *testing.T) {
	f := newFixture(t, "gw-bound", 1)
	f.stopController()
	f.start(model.Gates{LoadBalancer: true, ClusterIP: true, MaxIdentitiesPerGateway: 4}) // two one-port Services: EIP and ClusterIP each
	f.eip("eip-bound", "172.18.21.10", true)
	first := f.service("first", "eip-bound", 80, "10.0.1.11")
	f.eventually("first served", func() bool { return ingressIs(f.get("first"), "172.18.21.10") })
	f.service("second", "eip-bound", 81, "10.0.1.12")
	f.eventually("second served", func() bool { return ingressIs(f.get("second"), "172.18.21.10") })
	f.service("third", "eip-bound", 82, "10.0.1.13")
	f.eventually("the bound's event", func() bool { return f.hasEvent("third", model.ReasonLimit, "--max-identities-per-gateway") })
	gw := map[string]string{"gateway": f.gw}
	f.eventually("one Service waiting for room", func() bool { return metricValue(t, "vpcgw_gateway_services_waiting_for_room", gw) == 1 })
	if s := f.get("third"); !ingressIs(s, "") || hasFinalizer(s) || len(f.records("third")) != 0 || f.data.serves(f.pods[0], "172.18.21.10:82:tcp") {
		t.Fatalf("the Service past the bound got ingress %v, finalizer %v, records %d or its identity", s.Status.LoadBalancer.Ingress, s.Finalizers, len(f.records("third")))
	}
	must(t, k8s.Delete(context.Background(), first))
	f.eventually("third served once first let go", func() bool {
		return ingressIs(f.get("third"), "172.18.21.10") && allReady(f.records("third"), "172.18.21.10") && f.data.serves(f.pods[0], "172.18.21.10:82:tcp")
	})
	if !f.data.serves(f.pods[0], "172.18.21.10:81:tcp") {
		t.Fatal("second lost its identity")
	}
	if n := metricValue(t, "vpcgw_gateway_services_waiting_for_room", gw); n != 0 {
		t.Fatalf("%v Services waiting for room once all are served", n)
	}
}

// covers: N4, O3
// One Service whose part the agent refuses does not block its gateway: it is quarantined (an
// event, no ingress, no record, counted per gateway) and keeps what it was served before; the gateway's other
// Services, old and new, are programmed; once its change goes through, it is served. In memory
// the agents refuse the Service's identity as a kernel short of memory would; with the real
// agent the Service's backend is an address of the gateway's own namespace that the model cannot
// know (the agent refuses it, SPEC N2). A controller restart does not lift that.
func TestRejectedServiceQuarantined(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-quarantine", 1)
		f.eip("eip-q", "172.18.22.10", true)
		f.service("good", "eip-q", 80, "10.0.1.11")
		f.eventually("good served", func() bool { return ingressIs(f.get("good"), "172.18.22.10") })

		programmed := func(ip string) bool {
			st, _ := f.agents.state(f.pods[0])
			return slices.ContainsFunc(st.Identities, func(id gwstate.Identity) bool {
				return slices.ContainsFunc(id.Backends, func(b gwstate.Backend) bool { return b.IP.String() == ip })
			})
		}
		badIP, refuse := "10.0.1.12", func(on bool) {
			key := ""
			if on {
				key = "172.18.22.10:81:tcp"
			}
			f.agents.reject(key)
		}
		if mode == inNetns {
			programmed = func(ip string) bool {
				out, err := f.real.net.Exec(f.real.nsOf[f.pods[0]], "nft", "list", "table", "ip", "kube-ovn")
				must(t, err)
				return strings.Contains(string(out), ip)
			}
			badIP, refuse = "10.0.1.99", func(on bool) {
				op := map[bool]string{true: "add", false: "del"}[on]
				if out, err := f.real.net.Exec(f.real.nsOf[f.pods[0]], "ip", "addr", op, "10.0.1.99/32", "dev", "lo"); err != nil {
					t.Fatalf("ip addr %s: %v: %s", op, err, out)
				}
			}
		}
		refuse(true)
		f.service("bad", "eip-q", 81, badIP)
		f.eventually("the quarantine event", func() bool { return f.hasEvent("bad", model.ReasonQuarantined, "refused this Service's change") })
		gw := map[string]string{"gateway": f.gw}
		f.eventually("one Service quarantined", func() bool { return metricValue(t, "vpcgw_gateway_quarantined_services", gw) == 1 })
		// Before its backend was ready the Service may have been served without backends: that
		// it keeps. Nothing records or programs the refused change.
		for _, r := range f.records("bad") {
			for _, p := range r.Spec.Ports {
				if slices.Contains(p.Backends, badIP+":8080") {
					t.Fatalf("the quarantined change is recorded: %+v", r.Spec)
				}
			}
		}
		if programmed(badIP) {
			t.Fatalf("the quarantined backend %s is programmed", badIP)
		}
		// Other Services of the gateway are not held up: a new one, and a backend change of the old.
		f.service("late", "eip-q", 82, "10.0.1.13")
		f.eventually("late served beside the quarantined one", func() bool {
			return ingressIs(f.get("late"), "172.18.22.10") && allReady(f.records("late"), "172.18.22.10") && f.data.serves(f.pods[0], "172.18.22.10:82:tcp")
		})
		f.backend("good", 1, "10.0.1.14")
		f.eventually("good's new backend programmed", func() bool {
			rs := f.records("good")
			return len(rs) == 1 && len(rs[0].Spec.Ports) == 1 && len(rs[0].Spec.Ports[0].Backends) == 2 && rs[0].Status.Ready
		})
		if f.hasEvent("good", model.ReasonProgrammingFailed, "") || f.hasEvent("late", model.ReasonProgrammingFailed, "") {
			t.Fatal("the other Services got a programming failure")
		}

		// After a controller restart (new streams, new agents) the ledger is the known-good
		// state: the refused change is found again and the gateway is still not held up.
		f.stopController()
		f.start(model.Gates{LoadBalancer: true, ClusterIP: true})
		f.service("after", "eip-q", 83, "10.0.1.16")
		f.eventually("a new Service served after the restart", func() bool {
			return ingressIs(f.get("after"), "172.18.22.10") && allReady(f.records("after"), "172.18.22.10") && f.data.serves(f.pods[0], "172.18.22.10:83:tcp")
		})
		if !f.data.serves(f.pods[0], "172.18.22.10:80:tcp") || !f.data.serves(f.pods[0], "172.18.22.10:82:tcp") || programmed(badIP) {
			t.Fatal("after the restart the gateway lost a Service or programs the refused change")
		}

		// The refusal ends and the quarantined Service changes (a new backend): it is served.
		refuse(false)
		f.backend("bad", 1, "10.0.1.15")
		f.eventually("bad served after its change", func() bool {
			return ingressIs(f.get("bad"), "172.18.22.10") && allReady(f.records("bad"), "172.18.22.10") && f.data.serves(f.pods[0], "172.18.22.10:81:tcp") &&
				metricValue(t, "vpcgw_gateway_quarantined_services", gw) == 0
		})
	})
}

// covers: L9
// One gateway's trouble is its own: while gateway A's agent hangs (a state sent to it is never
// answered), a Service of gateway B is programmed, its ingress and records written, and A's state
// is still waiting for its agent when that happens. With one worker for every gateway, B would
// wait behind A until A's apply timed out. Once A's agent answers again, A is served too.
func TestFrozenAgentDelaysNoOtherGateway(t *testing.T) {
	a := newFixture(t, "gw-frozen", 1)
	b := a.sibling("gw-thawed", 1)
	a.eip("eip-frozen", "172.18.23.10", true)
	b.eip("eip-thawed", "172.18.24.10", true)
	a.service("before", "eip-frozen", 80, "10.0.1.11")
	a.eventually("A served before the freeze", func() bool { return ingressIs(a.get("before"), "172.18.23.10") })

	thaw := a.agents.freeze(a.pods[0])
	defer thaw()
	a.service("stuck", "eip-frozen", 81, "10.0.1.12")
	a.eventually("A's sync waiting for its frozen agent", func() bool { return a.agents.waiting(a.pods[0]) > 0 })

	b.service("web", "eip-thawed", 80, "10.0.1.21")
	b.eventually("B served while A's agent hangs", func() bool {
		return ingressIs(b.get("web"), "172.18.24.10") && allReady(b.records("web"), "172.18.24.10") && b.data.serves(b.pods[0], "172.18.24.10:80:tcp")
	})
	if a.agents.waiting(a.pods[0]) == 0 {
		t.Fatal("A's sync ended before B was served: B may have waited for it")
	}
	if ingressIs(a.get("stuck"), "172.18.23.10") {
		t.Fatal("A's new Service was published while A's agent had not acknowledged it")
	}
	thaw()
	a.eventually("A served once its agent answers", func() bool {
		return ingressIs(a.get("stuck"), "172.18.23.10") && a.data.serves(a.pods[0], "172.18.23.10:81:tcp")
	})
}
