// covers: D1, D2 (test infrastructure for the data-plane tests: namespaces, echo backends, probes)
package netlab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

const helperEnv = "NETLAB_TEST_HELPER"

// TestMain turns the test binary into the echo server or the probe when re-executed with
// NETLAB_TEST_HELPER set (the usual helper-process pattern).
func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "echo":
		if err := EchoMain(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "probe":
		if err := ProbeMain(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperCmd is the argv prefix that runs this test binary as helper `mode` under `ip netns exec`
// (env passes through ip netns exec).
func helperCmd(t *testing.T, mode string) []string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"env", helperEnv + "=" + mode, exe}
}

func newLab(t *testing.T) *Lab {
	t.Helper()
	if err := Available(); err != nil {
		testutil.Skip(t, fmt.Sprintf("skipping namespace test: %v", err))
	}
	l, err := New("nl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return l
}

// pairLab is a lab of two namespaces, a and b, joined by a veth (a0, b0) with the addresses
// <net>.1/24 and <net>.2/24.
func pairLab(t *testing.T, net string) (l *Lab, a, b string) {
	t.Helper()
	l = newLab(t)
	var err error
	if a, err = l.AddNetns("a"); err != nil {
		t.Fatal(err)
	}
	if b, err = l.AddNetns("b"); err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(a, "a0", b, "b0"); err != nil {
		t.Fatal(err)
	}
	if err := l.AddAddr(a, "a0", net+".1/24"); err != nil {
		t.Fatal(err)
	}
	if err := l.AddAddr(b, "b0", net+".2/24"); err != nil {
		t.Fatal(err)
	}
	return l, a, b
}

func TestEchoAndProbeAcrossNamespaces(t *testing.T) {
	l, a, b := pairLab(t, "10.250.0")
	if _, err := l.StartEcho(b, helperCmd(t, "echo"), "be-b", "10.250.0.2:8080"); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{"tcp", "udp"} {
		res, err := l.Probe(a, helperCmd(t, "probe"), ProbeOptions{Target: "10.250.0.2:8080", Proto: proto, Count: 5, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Answers["be-b"] != 5 || res.Errors != 0 {
			t.Errorf("%s probe: got %+v, want 5 answers from be-b", proto, res)
		}
	}
	// The echo server is only reachable inside the lab: from a namespace with no route the
	// probe fails instead of answering.
	res, err := l.Probe(a, helperCmd(t, "probe"), ProbeOptions{Target: "10.251.0.2:8080", Count: 1, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 1 || res.Total() != 0 {
		t.Errorf("probe to an unreachable address: got %+v, want one error", res)
	}
}

func TestCleanupDeletesExactlyItsNamespaces(t *testing.T) {
	if err := Available(); err != nil {
		testutil.Skip(t, fmt.Sprintf("skipping namespace test: %v", err))
	}
	l1, err := New("nl")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := New("nl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l1.Cleanup(); _ = l2.Cleanup() })
	if l1.ID() == l2.ID() {
		t.Fatalf("two labs got the same id %q", l1.ID())
	}
	n1, err := l1.AddNetns("x")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := l2.AddNetns("x")
	if err != nil {
		t.Fatal(err)
	}
	p, err := l1.Start(n1, "sleep", "300")
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + n1); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists after Cleanup (stat: %v)", n1, err)
	}
	if _, err := os.Stat("/run/netns/" + n2); err != nil {
		t.Errorf("namespace %s of another lab was touched: %v", n2, err)
	}
	select {
	case <-p.done:
	default:
		t.Errorf("process started by the lab still runs after Cleanup")
	}
}
