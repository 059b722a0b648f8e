package kubeovn

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/cluster/clustertest"
	"github.com/vpcgw/vpcgw/internal/soak"
)

// covers: L6, L8, L10, K2, K5, V1, D6, D9
// The soak's short version (`vpcgw-lab soak --duration 30m` is the long one): one round of every
// fault the soak injects, each followed by endpoint churn, on a lab of its own beside the real
// kube-ovn-controller, with steady TCP and UDP traffic through the EIP and the ClusterIP. Each
// step must converge (the gateway settled, exactly the Ready Pods answering, vpcgw's objects those
// of the start); no request may fail after a step converged, nor while a harmless fault lasts;
// at the end nothing is left behind: records, routes, lo VIPs, nft objects, UDP conntrack entries
// of removed backends, and the controller's goroutines and memory stay within bounds. Long-lived
// flows of every D9 kind (request/response, upload, download, UDP; external and hairpin) run
// across each step that takes the gateway's state away, and none may break.
func TestSoakWithFaultsShort(t *testing.T) {
	opts, skip, err := clustertest.Options()
	if skip != "" {
		t.Skip(skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := startCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(c.Logs(), 200))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	out := lineLogger{t}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rep, err := soak.Run(ctx, c, soak.Config{Gap: 3 * time.Second, Out: out})
	if rep != nil {
		if err := soak.WriteReport(out, rep); err != nil {
			t.Error(err)
		}
		replaced := 0
		for _, st := range rep.Steps {
			if !strings.Contains(st.Name, "gateway Pod deleted") && !strings.Contains(st.Name, "agent killed") && !strings.Contains(st.Name, "table flushed") {
				continue
			}
			replaced++
			if st.Flows.Run < 12 || st.Flows.Broken != 0 {
				t.Errorf("%s: %d of %d long-lived flows broke (%s), want 0 of at least 12", st.Name, st.Flows.Broken, st.Flows.Run, st.Flows.LastBroken)
			}
			if st.Flows.Gap > 0 {
				t.Logf("%s: %d hairpin flows whose backend sent data were reset by the new gateway Pod before its agent ran (the open gap of D9)", st.Name, st.Flows.Gap)
			}
		}
		if replaced != 3 {
			t.Errorf("%d steps replaced the gateway's state, want 3 (agent killed, gateway Pod deleted, table flushed)", replaced)
		}
		if rep.Flows.Broken != 0 {
			t.Errorf("%d of %d long-lived flows broke in the soak (%s)", rep.Flows.Broken, rep.Flows.Run, rep.Flows.LastBroken)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := len(soak.Schedule()); len(rep.Steps) != want {
		t.Fatalf("%d steps ran, want one round of %d", len(rep.Steps), want)
	}
}

// lineLogger writes what it is given to the test's log as it comes (each write is whole lines).
type lineLogger struct{ t *testing.T }

func (l lineLogger) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
