// covers: D2, D4, D9, K6
package kubeovn

// Long-lived connections through the demo Service beside the real kube-ovn-controller outlive
// the gateway's conntrack (SPEC D9): request/response, upload, a ~20 s download checked by
// sha256 and UDP sessions (netlab's flow protocol, served by the demo Pods' echo server on the
// Service's flows port), from the external client to the EIP and from the VPC client to the
// ClusterIP and to the EIP (hairpin, D4), across kube-ovn replacing the gateway Pod, the agent
// killed over a deleted table, and a backend added. Every flow continues with its bytes intact
// on its backend (D2: the pick is a function of the flow); a hairpin download waits for its
// client's next segment, sent once the gateway is back; an external one completes by itself.
// One gap is reported, not asserted (issue 36 stays open for it): across kube-ovn's gateway
// replacement, a hairpin flow whose backend sends data can be reset by the new Pod's own stack
// before vpcgw's agent programmed it.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

const (
	// A transfer moves surviveBytes at surviveRate: about 20 s, so that it spans the fault.
	surviveBytes = 6 << 20
	surviveRate  = 300 << 10
	// After the gateway is back every request/response and UDP flow must get surviveAnswers more
	// answers, and every transfer must end, within surviveWithin: the flows' retransmission
	// backoff after an outage of ~10 s, plus what is left of a transfer.
	surviveAnswers = 10
	surviveWithin  = 90 * time.Second
	// surviveDeadline bounds each flow's connection.
	surviveDeadline = 5 * time.Minute
)

// TestConnectionsOutliveTheGateway runs every kind of long-lived flow across each fault that
// replaces the gateway's state, each fault from a settled lab.
func TestConnectionsOutliveTheGateway(t *testing.T) {
	t.Run("gateway-pod-replaced", func(t *testing.T) {
		c := lab(t)
		ctx := context.Background()
		var old corev1.Pod
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}, &old); err != nil {
			t.Fatal(err)
		}
		countResets(t, c)
		flows := startLabFlows(t, c)
		waitLabFlowsUnderWay(t, flows)
		stop := make(chan struct{})
		seen := withdrawals(t, c, stop)
		start := time.Now()
		if err := c.DeleteGatewayPod(ctx); err != nil {
			t.Fatal(err)
		}
		waitGatewayReplaced(t, c, old.UID)
		gatewayBack(t, c, start)
		// The open gap of D9 (docs/connections.md): the new Pod's own stack answers a backend's
		// segment to the hairpin SNAT address with a reset when it comes before vpcgw's agent
		// programmed the Pod, so a hairpin flow whose backend sends data may break here. It is
		// reported, not asserted; every other flow must end intact.
		finishLabFlows(t, c, "gateway Pod replaced", flows, (*netlab.Flow).ServerSendsToGateway)
		close(stop)
		if w := <-seen; len(w) > 0 {
			t.Errorf("withdrawn while kube-ovn replaced the gateway: %v (K6)", w)
		}
	})

	t.Run("agent-killed-table-deleted", func(t *testing.T) {
		c := lab(t)
		flows := startLabFlows(t, c)
		waitLabFlowsUnderWay(t, flows)
		start := time.Now()
		killed := agentPIDs(t, c)
		if len(killed) == 0 {
			t.Fatal("no agent runs in the gateway Pod")
		}
		for _, pid := range killed {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("killing the agent %d: %v", pid, err)
			}
		}
		inGateway(t, c, "nft", "delete", "table", "ip", "kube-ovn")
		t.Logf("agent %v killed (SIGKILL), table ip kube-ovn deleted", killed)
		eventually(t, 60*time.Second, "a new agent with the demo's identities in its table", func(context.Context) (bool, error) {
			pids := agentPIDs(t, c)
			if len(pids) != 1 || slices.Contains(killed, pids[0]) {
				return false, nil
			}
			ns, ok := c.GatewayNetns()
			if !ok {
				return false, nil
			}
			out, err := netlab.Run("ip", "netns", "exec", ns, "nft", "list", "map", "ip", "kube-ovn", "service-ips")
			return err == nil && strings.Contains(string(out), cluster.EIPAddress+" . tcp . "+strconv.Itoa(cluster.FlowsPort)), nil
		})
		gatewayBack(t, c, start)
		finishLabFlows(t, c, "agent killed, table deleted", flows, nil)
	})

	t.Run("backend-added", func(t *testing.T) {
		c := lab(t)
		ctx := context.Background()
		n := int32(readyBackends(ctx, c))
		if n < 1 {
			t.Fatalf("the demo has %d ready backends", n)
		}
		t.Cleanup(func() { scaleTo(t, c, n) }) // after the flows ended (cleanups run last first)
		flows := startLabFlows(t, c)
		waitLabFlowsUnderWay(t, flows)
		start := time.Now()
		scaleTo(t, c, n+1)
		svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
		d := &cluster.Demo{C: c, Out: testWriter{t}, Requests: 20, Timeout: 90 * time.Second}
		pods, _, err := d.WaitBackends(ctx, svc, int(n+1))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("scaled %d → %d: answers through the EIP from %v after %s", n, n+1, pods, time.Since(start).Round(100*time.Millisecond))
		finishLabFlows(t, c, "backend added", flows, nil)
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startLabFlows starts every kind of flow from the external client to the EIP and from the VPC
// client to the ClusterIP and to the EIP, on the demo Service's flows port; they are ended with
// the test.
func startLabFlows(t *testing.T, c *cluster.Cluster) []*netlab.Flow {
	t.Helper()
	flows := c.DemoFlows(service(t, c, cluster.DemoNamespace, cluster.DemoService), surviveBytes, surviveRate, surviveDeadline)
	if len(flows) != 3*len(netlab.FlowKinds) {
		t.Fatalf("%d flows, want every kind from the external client to the EIP and from the VPC client to the ClusterIP and the EIP", len(flows))
	}
	for _, f := range flows {
		f.Start()
	}
	t.Cleanup(func() { netlab.EndFlows(flows, errors.New("ended with the test")) })
	return flows
}

// waitLabFlowsUnderWay waits until every flow has a backend and has made some progress, so that
// the fault hits flows in the middle of their work; a flow that broke already fails the test.
func waitLabFlowsUnderWay(t *testing.T, flows []*netlab.Flow) {
	t.Helper()
	eventually(t, 30*time.Second, "every flow under way", func(context.Context) (bool, error) {
		for _, f := range flows {
			if !f.UnderWay() {
				return false, nil
			}
		}
		return true, nil
	})
	for _, f := range flows {
		if b, err := f.Result(); err != nil || f.Finished() {
			table, _ := netlab.FlowTable(flows)
			t.Fatalf("%s (backend %s) broke before the fault: %v%s", f, b, err, table)
		}
	}
}

// gatewayBack waits until the lab is settled again after a fault (kube-ovn's gateway Pod
// initialised, one agent, its stream up, the demo answering through the EIP and the ClusterIP),
// then gives each hairpin download its client's next segment.
func gatewayBack(t *testing.T, c *cluster.Cluster, start time.Time) {
	t.Helper()
	if err := c.WaitSettled(context.Background(), 3*time.Minute); err != nil {
		t.Fatalf("the gateway back: %v", err)
	}
	t.Logf("the gateway serves the demo again %s after the fault", time.Since(start).Round(100*time.Millisecond))
}

// nudgeHairpinDownloads sends each hairpin download's one-byte "next segment" of its client: a
// hairpin server-push flow waits for it after conntrack was lost (D9).
func nudgeHairpinDownloads(flows []*netlab.Flow) {
	for _, f := range flows {
		if f.Kind == netlab.FlowDown && f.Hairpin {
			f.Nudge()
		}
	}
}

// finishLabFlows nudges the hairpin downloads (harmless where conntrack stayed), lets every flow
// finish (surviveAnswers more answers, transfers to their end, within surviveWithin), logs the
// outcome of each and fails the test for each broken one that gap does not allow (nil: none),
// with the gateway's ruleset and conntrack table.
func finishLabFlows(t *testing.T, c *cluster.Cluster, fault string, flows []*netlab.Flow, gap func(*netlab.Flow) bool) {
	t.Helper()
	nudgeHairpinDownloads(flows)
	start := time.Now()
	netlab.FinishFlows(flows, surviveAnswers, surviveWithin)
	table, broken := netlab.FlowTable(flows)
	loose := strings.TrimSpace(inGateway(t, c, "sysctl", "-n", "net.netfilter.nf_conntrack_tcp_loose"))
	t.Logf("%s: %d of %d flows intact, all ended %s after the gateway was back (nf_conntrack_tcp_loose=%s in the gateway):%s",
		fault, len(flows)-broken, len(flows), time.Since(start).Round(100*time.Millisecond), loose, table)
	if broken == 0 {
		return
	}
	failed := false
	for _, f := range flows {
		b, err := f.Result()
		switch {
		case err == nil:
		case gap != nil && gap(f):
			t.Logf("%s: %s on %s broke, the open gap of D9 (the new gateway Pod's reset before its agent ran): %v", fault, f, b, err)
		default:
			failed = true
			t.Errorf("%s: %s on %s (backend saw the client as %s) broke: %v", fault, f, b, f.Peer(), err)
		}
	}
	if !failed {
		return
	}
	if ns, ok := c.GatewayNetns(); ok {
		for _, argv := range [][]string{{"nft", "list", "ruleset"}, {"conntrack", "-L"}} {
			out, err := netlab.Run(append([]string{"ip", "netns", "exec", ns}, argv...)...)
			t.Logf("%s in the gateway (%v):\n%s", strings.Join(argv, " "), err, out)
		}
	}
}

// resetCounters is the test's own nft table in each demo Pod's network namespace: it counts the
// TCP resets the backend receives from the gateway's VPC address (the hairpin SNAT address: a
// reset from there comes from the gateway's own stack, not from a client) and those it sends.
const resetCounters = "vpcgw-test-resets"

// countResets installs resetCounters in the demo Pods for the test and logs them at its end
// when it failed, so that a broken hairpin flow says where its reset came from.
func countResets(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	nss, err := c.Namespaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nss {
		if !strings.HasPrefix(n.Pod, cluster.DemoNamespace+"/") {
			continue
		}
		script := "add table inet " + resetCounters + "; " +
			"add chain inet " + resetCounters + " in { type filter hook input priority -300; }; " +
			"add chain inet " + resetCounters + " out { type filter hook output priority -300; }; " +
			"add rule inet " + resetCounters + " in ip saddr " + cluster.GatewayLanIP + " tcp flags rst counter comment \"resets from the gateway\"; " +
			"add rule inet " + resetCounters + " out tcp flags rst counter comment \"resets sent\""
		if out, err := netlab.Run("ip", "netns", "exec", n.Name, "nft", script); err != nil {
			t.Fatalf("the reset counters in %s: %v: %s", n.Pod, err, out)
		}
		ns, pod := n.Name, n.Pod
		t.Cleanup(func() {
			if t.Failed() {
				out, err := netlab.Run("ip", "netns", "exec", ns, "nft", "list", "table", "inet", resetCounters)
				t.Logf("backend %s: resets (%v):\n%s", pod, err, out)
			}
			// The Pod may be gone with its namespace.
			_, _ = netlab.Run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", resetCounters)
		})
	}
}
