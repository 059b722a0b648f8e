package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovn"
)

// Snapshot counts what vpcgw keeps for the lab's Services: in the API server, the NB DB and the
// gateway's kernel.
type Snapshot struct {
	Records int
	// Routes are the VIP policies (priority 29210) on the VPC's router.
	Routes int
	// VIPs are the ClusterIPs held on the gateway's lo.
	VIPs int
	// Identities are the elements of the agent's ownership set; Dispatch those of the service map.
	Identities, Dispatch int
	// IdentityChains (dnat-), EndpointChains (ep-), AffinitySets (aff-) and OwnChains and
	// OwnSets (vpcgw-, src-) are the agent's objects in the table.
	IdentityChains, EndpointChains, AffinitySets, OwnChains, OwnSets int
}

func (s Snapshot) String() string {
	return fmt.Sprintf("%d records, %d VIP routes, %d lo VIPs, %d identities (%d dispatch entries), chains %d dnat- %d ep- %d own, sets %d aff- %d own",
		s.Records, s.Routes, s.VIPs, s.Identities, s.Dispatch, s.IdentityChains, s.EndpointChains, s.OwnChains, s.AffinitySets, s.OwnSets)
}

// sameObjects says whether s has the baseline's objects, leaving out those that follow the
// backends (ep- chains, aff- sets), which endpoint churn changes.
func (s Snapshot) sameObjects(b Snapshot) bool {
	s.EndpointChains, s.AffinitySets = b.EndpointChains, b.AffinitySets
	return s == b
}

// Leaks are the counts of end that differ from the baseline s (the soak ends at the baseline's
// scale, so every count must be back).
func (s Snapshot) Leaks(end Snapshot) []string {
	var out []string
	add := func(what string, base, now int) {
		if base != now {
			out = append(out, fmt.Sprintf("%s: %d at the start, %d at the end", what, base, now))
		}
	}
	add("ServiceRecords", s.Records, end.Records)
	add("VIP routes", s.Routes, end.Routes)
	add("lo VIPs", s.VIPs, end.VIPs)
	add("identities", s.Identities, end.Identities)
	add("dispatch entries", s.Dispatch, end.Dispatch)
	add("dnat- chains", s.IdentityChains, end.IdentityChains)
	add("ep- chains", s.EndpointChains, end.EndpointChains)
	add("aff- sets", s.AffinitySets, end.AffinitySets)
	add("the agent's own chains", s.OwnChains, end.OwnChains)
	add("the agent's own sets", s.OwnSets, end.OwnSets)
	return out
}

func (s *Soak) gatewayNetns() (string, error) {
	ns, ok := s.C.GatewayNetns()
	if !ok {
		return "", errors.New("the gateway Pod has no network namespace")
	}
	return ns, nil
}

func (s *Soak) snapshot(ctx context.Context) (Snapshot, error) {
	var snap Snapshot
	var records vpcgwv1alpha1.ServiceRecordList
	if err := s.C.Client.List(ctx, &records); err != nil {
		return snap, fmt.Errorf("listing ServiceRecords: %w", err)
	}
	snap.Records = len(records.Items)
	out, err := s.C.OVN.NBCtl("--bare", "--columns=_uuid", "find", "Logical_Router_Policy", "priority="+strconv.Itoa(ovn.VIPPolicyPriority))
	if err != nil {
		return snap, err
	}
	snap.Routes = len(strings.Fields(out))
	ns, err := s.gatewayNetns()
	if err != nil {
		return snap, err
	}
	addrs, err := netlab.Run("ip", "netns", "exec", ns, "ip", "-4", "-o", "addr", "show", "dev", "lo")
	if err != nil {
		return snap, err
	}
	snap.VIPs = strings.Count(string(addrs), dataplane.VIPLabel)
	table, err := netlab.Run("ip", "netns", "exec", ns, "nft", "-j", "list", "table", "ip", "kube-ovn")
	if err != nil {
		return snap, err
	}
	if err := countTable(table, &snap); err != nil {
		return snap, err
	}
	return snap, nil
}

// countTable counts the agent's objects in `nft -j list table` output.
func countTable(data []byte, snap *Snapshot) error {
	var listing struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(data, &listing); err != nil {
		return fmt.Errorf("reading the gateway's table: %w", err)
	}
	type object struct {
		Name string            `json:"name"`
		Elem []json.RawMessage `json:"elem"`
	}
	for _, o := range listing.Nftables {
		for kind, raw := range o {
			if kind != "chain" && kind != "set" && kind != "map" {
				continue
			}
			var obj object
			if err := json.Unmarshal(raw, &obj); err != nil {
				return fmt.Errorf("reading the gateway's table: %s: %w", kind, err)
			}
			own := strings.HasPrefix(obj.Name, "vpcgw-")
			switch {
			case kind == "chain" && strings.HasPrefix(obj.Name, "dnat-"):
				snap.IdentityChains++
			case kind == "chain" && strings.HasPrefix(obj.Name, "ep-"):
				snap.EndpointChains++
			case kind == "chain" && own:
				snap.OwnChains++
			case kind != "chain" && strings.HasPrefix(obj.Name, "aff-"):
				snap.AffinitySets++
			case kind != "chain" && obj.Name == dataplane.ServiceMap:
				snap.Dispatch = len(obj.Elem)
			case kind != "chain" && obj.Name == dataplane.OwnedSet:
				snap.Identities = len(obj.Elem)
				snap.OwnSets++
			case kind != "chain" && (own || strings.HasPrefix(obj.Name, "src-")):
				snap.OwnSets++
			}
		}
	}
	return nil
}

// staleConntrack are the gateway's UDP conntrack entries of the demo Service that still lead to
// a backend that is gone: the agent deletes them when it removes a backend (SPEC D6), so that a
// UDP client is not sent to it for as long as it keeps sending.
func (s *Soak) staleConntrack(ctx context.Context) ([]string, error) {
	var pods corev1.PodList
	if err := s.C.Client.List(ctx, &pods, client.InNamespace(cluster.DemoNamespace), client.MatchingLabels{"app": cluster.DemoDeployment}); err != nil {
		return nil, err
	}
	var current []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			current = append(current, p.Status.PodIP)
		}
	}
	ns, err := s.gatewayNetns()
	if err != nil {
		return nil, err
	}
	// Standard output only: conntrack prints its count of entries on standard error.
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "conntrack", "-L", "-p", "udp").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the gateway's UDP conntrack entries: %w", err)
	}
	vips := []string{s.svc.Spec.ClusterIP, s.svc.Status.LoadBalancer.Ingress[0].IP}
	var stale []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "udp") {
			continue
		}
		dst, replySrc := conntrackAddrs(line)
		if slices.Contains(vips, dst) && !slices.Contains(current, replySrc) {
			stale = append(stale, "a UDP conntrack entry to the removed backend "+replySrc+": "+line)
		}
	}
	return stale, sc.Err()
}

// conntrackAddrs are an entry's original destination and its reply's source (the backend).
func conntrackAddrs(line string) (dst, replySrc string) {
	srcs := 0
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "dst="); ok && dst == "" {
			dst = v
		}
		if v, ok := strings.CutPrefix(f, "src="); ok {
			if srcs++; srcs == 2 {
				replySrc = v
			}
		}
	}
	return dst, replySrc
}

// Sample is the controller's and the agent's footprint at one moment.
type Sample struct {
	At            time.Time
	Goroutines    int
	RSS, AgentRSS int64
}

// Lifetime is the samples of one controller process.
type Lifetime struct{ Samples []Sample }

type lifetimes struct {
	mu    sync.Mutex
	lives []Lifetime
}

func (l *lifetimes) restarted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lives = append(l.lives, Lifetime{})
}

func (l *lifetimes) add(s Sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lives) == 0 {
		l.lives = append(l.lives, Lifetime{})
	}
	last := &l.lives[len(l.lives)-1]
	last.Samples = append(last.Samples, s)
}

func (l *lifetimes) all() []Lifetime {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lives)
}

// sampleLifetime records the controller's goroutines and resident memory (its /metrics) and the
// agent's resident memory, after a step converged.
func (s *Soak) sampleLifetime(ctx context.Context) {
	m, err := s.C.ControllerMetrics(ctx)
	if err != nil {
		return
	}
	sample := Sample{At: time.Now(), Goroutines: int(m["go_goroutines"]), RSS: int64(m["process_resident_memory_bytes"])}
	if agents, err := s.C.GatewayAgents(); err == nil && len(agents) == 1 {
		sample.AgentRSS = residentBytes(agents[0].PID)
	}
	s.life.add(sample)
}

// residentBytes is a process's VmRSS, 0 when it cannot be read.
func residentBytes(pid int) int64 {
	_, rss, err := netlab.ProcMemory(pid)
	if err != nil {
		return 0
	}
	return int64(rss * (1 << 20))
}

// Growth bounds within one controller lifetime, from its second sample (the first follows its
// start-up) to its last: beyond them the soak reports a leak. They are gross on purpose: the
// soak's steps repeat the same work, so a leak grows with every round, while a settled
// controller's goroutines and heap move by a few.
const (
	maxGoroutineGrowth = 50
	maxRSSGrowth       = 64 << 20
)

func growth(lives []Lifetime) []string {
	var out []string
	for i, l := range lives {
		if len(l.Samples) < 3 {
			continue
		}
		first, last := l.Samples[1], l.Samples[len(l.Samples)-1]
		if d := last.Goroutines - first.Goroutines; d > maxGoroutineGrowth {
			out = append(out, fmt.Sprintf("controller lifetime %d: goroutines grew by %d (%d to %d)", i+1, d, first.Goroutines, last.Goroutines))
		}
		if d := last.RSS - first.RSS; d > maxRSSGrowth {
			out = append(out, fmt.Sprintf("controller lifetime %d: resident memory grew by %d MiB", i+1, d>>20))
		}
	}
	return out
}
