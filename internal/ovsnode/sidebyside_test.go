// covers: O1 (two labs on one machine: each chassis is private)
package ovsnode

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestSideBySide: two chassis (each with its OVN central) run at once in one network namespace of
// the machine, with the same bridge name, the same Pod container IDs (so the same veth names) and
// the same addresses, and each forwards its own traffic: nothing of one meets the other, as when
// two test packages run their labs at the same time.
func TestSideBySide(t *testing.T) {
	ctx := t.Context()
	envs := []*env{startEnv(t, "node", false), startEnv(t, "node", false)}
	var wg sync.WaitGroup
	ida, idb := containerID(t), containerID(t)
	type result struct {
		got string
		err error
	}
	results := make([]result, len(envs))
	for i, e := range envs {
		e.nbctl(t, "--wait=hv", "ls-add", "ls1",
			"--", "lsp-add", "ls1", "a.demo", "--", "lsp-set-addresses", "a.demo", "02:00:00:77:01:0a 10.77.1.10",
			"--", "lsp-add", "ls1", "b.demo", "--", "lsp-set-addresses", "b.demo", "02:00:00:77:01:0b 10.77.1.11")
		nsA, nsB := e.netns(t, "a"), e.netns(t, "b")
		for _, p := range []Port{
			{Pod: "a", Namespace: "demo", ContainerID: ida, Iface: Iface{Netns: nsA, MAC: mac("02:00:00:77:01:0a"), IPs: []netip.Prefix{netip.MustParsePrefix("10.77.1.10/24")}}},
			{Pod: "b", Namespace: "demo", ContainerID: idb, Iface: Iface{Netns: nsB, MAC: mac("02:00:00:77:01:0b"), IPs: []netip.Prefix{netip.MustParsePrefix("10.77.1.11/24")}}},
		} {
			if err := e.ch.Plug(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		name := []string{"first", "second"}[i]
		serve(t, nsB, "10.77.1.11:8080", name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := request(nsA, "10.77.1.11:8080", 2*time.Second)
			results[i] = result{got, err}
		}()
	}
	wg.Wait()
	for i, want := range []string{"first", "second"} {
		if results[i].err != nil || results[i].got != want {
			t.Errorf("chassis %d: got %q, %v; want %q", i, results[i].got, results[i].err, want)
		}
	}
	if envs[0].ch.Bridge() != envs[1].ch.Bridge() || envs[0].ch.Netns() == envs[1].ch.Netns() {
		t.Errorf("bridges %s, %s in %s, %s: want one name in two namespaces", envs[0].ch.Bridge(), envs[1].ch.Bridge(), envs[0].ch.Netns(), envs[1].ch.Netns())
	}
}
