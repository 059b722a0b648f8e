// covers: D9
package dataplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// guardElements are the guard's elements in a Fake dump, sorted.
func guardElements(dump string) []string {
	var out []string
	for _, l := range strings.Split(testutil.SortElements(dump), "\n") {
		if strings.HasPrefix(l, "add element ip kube-ovn "+EndpointSet+" ") || strings.HasPrefix(l, "add element ip kube-ovn "+ReplyMap+" ") {
			out = append(out, strings.TrimPrefix(l, "add element ip kube-ovn "))
		}
	}
	return out
}

// The guard covers every TCP endpoint of a served identity, draining ones too, and no UDP one;
// it rewrites toward an external client only for an endpoint of exactly one external identity
// (a ClusterIP the gateway holds is reachable from the VPC only).
func TestGuardElements(t *testing.T) {
	lb := ident("172.31.0.100", 80, gwstate.TCP, be("10.0.1.1", 8080), be("10.0.1.2", 8080))
	lb.Draining = []gwstate.Backend{be("10.0.1.3", 8080)}
	clusterIP := ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.1", 8080), be("10.0.1.2", 8080))
	other := ident("172.31.0.101", 443, gwstate.TCP, be("10.0.1.2", 8080)) // a second EIP on 10.0.1.2:8080
	dns := ident("172.31.0.100", 53, gwstate.UDP, be("10.0.1.1", 53))
	st := withClusterIPs(state(1, lb, clusterIP, other, dns), "10.96.0.10")
	want := []string{
		EndpointSet + " { 10.0.1.1 . 8080 }",
		EndpointSet + " { 10.0.1.2 . 8080 }",
		EndpointSet + " { 10.0.1.3 . 8080 }",
		ReplyMap + " { 10.0.1.1 . 8080 : 172.31.0.100 . 80 }",
		ReplyMap + " { 10.0.1.3 . 8080 : 172.31.0.100 . 80 }",
	}
	if got := guardElements(freshDump(t, st)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("guard elements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The same through changes: the incremental path ends where a fresh agent does.
	f := newFake()
	ag := NewAgent(f, logr.Discard())
	steps := []gwstate.State{
		withClusterIPs(state(1, clusterIP), "10.96.0.10"),
		st,
		withClusterIPs(state(3, lb, clusterIP, dns), "10.96.0.10"), // 10.0.1.2 has one external identity again
		withClusterIPs(state(4, clusterIP), "10.96.0.10"),          // no external identity left
		state(5, clusterIP), // its VIP no longer held: it is external now
		state(6),
	}
	for _, s := range steps {
		mustApply(t, ag, s)
		if got, want := guardElements(f.Dump()), guardElements(freshDump(t, s)); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("generation %d: guard elements\n%s\nwant (fresh agent)\n%s", s.Generation, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if got := guardElements(f.Dump()); len(got) != 0 {
		t.Errorf("empty state keeps guard elements %q", got)
	}
}

// The agent keeps nf_conntrack_tcp_loose at 1, and warns when it cannot.
func TestTCPLooseKeeper(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nf_conntrack_tcp_loose")
	if err := os.WriteFile(path, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w := (tcpLooseKeeper{path: path}).keep(); w != "" {
		t.Errorf("warning %q for a writable 0", w)
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("value %q after keep, want 1", b)
	}
	if w := (tcpLooseKeeper{path: filepath.Join(dir, "missing")}).keep(); !strings.Contains(w, "SPEC D9") || !strings.Contains(w, "missing") {
		t.Errorf("warning for a missing file: %q", w)
	}
	// A value that cannot be written (a sysctl of a namespace without the right to it): a
	// read-only proc file, which root cannot write either.
	if w := (tcpLooseKeeper{path: "/proc/version"}).keep(); !strings.Contains(w, "cannot be set to 1") {
		t.Errorf("warning for a value that cannot be written: %q", w)
	}
}
