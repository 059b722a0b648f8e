// covers: N3, N5, N8, I2
package model

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// A programmed identity is never taken over: an older Service that adds the port (or turns into a
// LoadBalancer) later does not get the EIP part of the Service that is serving it; it takes over
// only when the holder lets go.
func TestProgrammedIdentityNotTakenOver(t *testing.T) {
	// "young" is created after "old" but serves 80/TCP on the EIP first.
	young := service("young", t0.Add(10))
	old := service("old", t0, func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 })
	snap := converge(t, baseSnapshot(young, old), srGates)
	if sp := servicePlan(Compute(snap, srGates), "young"); !sp.EIPServed {
		t.Fatalf("young does not serve its port before the change: %s", sp.EIPReason)
	}
	// old now adds 80/TCP: it is older, but young holds the programmed identity.
	for _, s := range snap.Services {
		if s.Name == "young" {
			young = s // as the cluster has it now: finalizer, ingress
		}
	}
	snap.Services = []corev1.Service{young, service("old", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP})
	})}
	p := Compute(snap, srGates)
	if y := servicePlan(p, "young"); !y.EIPServed || y.IngressWrite || y.WriteRecord {
		t.Fatalf("young lost or rewrote its EIP part: served %v ingress write %v record write %v (%s)", y.EIPServed, y.IngressWrite, y.WriteRecord, y.EIPReason)
	}
	o := servicePlan(p, "old")
	if o.EIPServed || !strings.Contains(o.EIPReason, "is held by Service ns/young") {
		t.Fatalf("old took over a programmed identity: served %v (%s)", o.EIPServed, o.EIPReason)
	}
	// young lets go: old takes over.
	snap.Services = snap.Services[1:]
	if o := servicePlan(Compute(snap, srGates), "old"); !o.EIPServed {
		t.Fatalf("old does not take over after young left: %s", o.EIPReason)
	}
}

// Between claimants of a free identity the older wins (I2), and a conflict event in another
// namespace does not name the holder (N8).
func TestConflictEventDoesNotRevealOtherNamespaces(t *testing.T) {
	holder := service("web", t0)
	other := service("shop", t0.Add(1), func(s *corev1.Service) { s.Namespace = "tenant-b" })
	p := Compute(baseSnapshot(holder, other), srGates)
	sp := servicePlan(p, "shop")
	if sp.EIPServed || len(sp.Events) != 1 {
		t.Fatalf("the younger claimant: served %v events %v", sp.EIPServed, sp.Events)
	}
	if msg := sp.Events[0].Message; strings.Contains(msg, "ns/web") || strings.Contains(msg, "web") || !strings.Contains(msg, "a Service of another namespace") {
		t.Fatalf("the event names another namespace's Service: %q", msg)
	}
}

// covers: N1, W6
// A Service may use a gateway only if its namespace is bound to the gateway's Vpc (spec.namespaces)
// or named by the gateway's allow-list annotation; an EIP's allow-list further restricts its use.
// A Service that is not admitted gets nothing: no identity, no ClusterIP held, no route, no record,
// no finalizer (and so cannot block the gateway's deletion).
func TestTenancyBoundary(t *testing.T) {
	cases := map[string]struct {
		namespaces []string        // of vpc1
		gwAllow    string          // the gateway's annotation ("" = none)
		eipAllow   string          // the EIP's annotation ("" = none)
		wantEIP    bool            // EIP part served
		wantAny    bool            // anything served
		mut        func(*Snapshot) // further changes
	}{
		"namespace bound to the Vpc":          {namespaces: []string{"tenant-a"}, wantEIP: true, wantAny: true},
		"another tenant's Vpc":                {namespaces: []string{"tenant-b"}},
		"Vpc lists no namespace":              {},
		"Vpc missing":                         {namespaces: []string{"tenant-a"}, mut: func(s *Snapshot) { s.Vpcs = nil }},
		"gateway admits the namespace":        {gwAllow: "tenant-c, tenant-a", wantEIP: true, wantAny: true},
		"gateway admits every namespace":      {gwAllow: "*", wantEIP: true, wantAny: true},
		"gateway admits others":               {gwAllow: "tenant-b"},
		"EIP restricted to another namespace": {namespaces: []string{"tenant-a"}, eipAllow: "tenant-b", wantAny: true},
		"EIP admits the namespace":            {namespaces: []string{"tenant-a"}, eipAllow: "tenant-a", wantEIP: true, wantAny: true},
	}
	for name, c := range cases {
		svc := service("web", t0, func(s *corev1.Service) { s.Namespace = "tenant-a" })
		snap := baseSnapshot(svc)
		snap.Vpcs = []kubeovnv1.Vpc{vpc("vpc1", c.namespaces...)}
		snap.EndpointSlices = nil
		if c.gwAllow != "" {
			snap.Gateways[0].Annotations = map[string]string{AnnotationAllowedNamespaces: c.gwAllow}
		}
		if c.eipAllow != "" {
			snap.EIPs[0].Annotations = map[string]string{AnnotationAllowedNamespaces: c.eipAllow}
		}
		if c.mut != nil {
			c.mut(&snap)
		}
		p := Compute(snap, srGates)
		sp := servicePlan(p, "web")
		gp := p.Gateway("gw1")
		if sp.EIPServed != c.wantEIP || sp.Served() != c.wantAny {
			t.Errorf("%s: EIP served %v, served %v; want %v, %v (%s / %s)", name, sp.EIPServed, sp.Served(), c.wantEIP, c.wantAny, sp.EIPReason, sp.ClusterIPReason)
			continue
		}
		if !c.wantAny {
			if len(gp.State.Identities) != 0 || len(gp.State.ClusterIPs) != 0 || len(gp.Routes.VIPs) != 0 || sp.Record != nil || sp.AddFinalizer || len(gp.Services) != 0 {
				t.Errorf("%s: something is published for a Service that is not admitted: %+v", name, gp)
			}
			if len(sp.Events) != 1 || sp.Events[0].Reason != ReasonNotAdmitted || !strings.Contains(sp.Events[0].Message, "namespace tenant-a may not use VpcNatGateway gw1") {
				t.Errorf("%s: events %v", name, sp.Events)
			}
		}
	}
}

// covers: N7
// spec.loadBalancerSourceRanges reach the EIP identities (canonical, sorted, unique), not the
// ClusterIP ones; ranges with no IPv4 one leave the EIP part unserved with an event.
func TestLoadBalancerSourceRanges(t *testing.T) {
	svc := service("web", t0, func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"192.168.7.9/24", " 10.0.0.0/8", "10.0.0.0/8", "fd00::/8"}
	})
	gp := Compute(baseSnapshot(svc), srGates).Gateway("gw1")
	for _, id := range gp.State.Identities {
		want := []string(nil)
		if id.VIP == netip.MustParseAddr("172.18.0.10") {
			want = []string{"10.0.0.0/8", "192.168.7.0/24"}
		}
		if !slices.Equal(id.SourceRanges, want) {
			t.Errorf("identity %s: source ranges %v, want %v", id.Key(), id.SourceRanges, want)
		}
	}
	if err := gp.State.Validate(); err != nil {
		t.Fatalf("the agent would refuse the state: %v", err)
	}
	// The ledger records what the gateway enforces (SPEC R3).
	if rec := servicePlan(Compute(baseSnapshot(svc), srGates), "web").Record; rec == nil || !slices.Equal(rec.Spec.SourceRanges, []string{"10.0.0.0/8", "192.168.7.0/24"}) {
		t.Fatalf("record source ranges: %+v", rec)
	}
	v6only := service("web", t0, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"fd00::/8"} })
	sp := servicePlan(Compute(baseSnapshot(v6only), srGates), "web")
	if sp.EIPServed || !sp.ClusterIPServed || sp.Ingress != nil || len(sp.Events) != 1 || !strings.Contains(sp.Events[0].Message, "no valid IPv4 range") {
		t.Fatalf("IPv6-only ranges: EIP served %v, ClusterIP served %v, events %v", sp.EIPServed, sp.ClusterIPServed, sp.Events)
	}
}

// covers: N2
// Backends are only addresses of the gateway's VPC that kube-ovn allocated to a Pod of the
// Service's namespace: the security reviews' probes. A Pod annotated with a made-up provider
// pointing at the metadata address; a Pod whose annotations kube-ovn never backed with an IP
// object; a hostile tenant's Pod that rewrote its annotations (primary and attachment) to another
// tenant's Pod's address; a Pod of another namespace; an endpoint without a Pod (off by default;
// with it on, only inside the VPC's Subnets); the VPC's machinery (the gateway's and another
// gateway's LAN address, a Subnet's gateway and reserved addresses) — none becomes a backend,
// each with an event, and no event names another namespace's Pod.
func TestHostileTenantBackendsOnlyFromKubeOVNAllocations(t *testing.T) {
	forged := backendPod("forged", nil)
	forged.Annotations = map[string]string{
		"evil.kubernetes.io/ip_address": "169.254.169.254", "evil.kubernetes.io/logical_switch": "vpc1-subnet",
		"evil.kubernetes.io/allocated":      "true",
		"k8s.v1.cni.cncf.io/network-status": `[{"name":"kubernetes.io/evil","interface":"net1","ips":["169.254.169.254"]}]`,
	}
	outOfCIDR := backendPod("outofcidr", map[string][2]string{"ovn": {"10.9.9.9", "vpc1-subnet"}})
	unallocated := backendPod("unallocated", map[string][2]string{"ovn": {"10.0.1.44", "vpc1-subnet"}})
	unlisted := backendPod("unlisted", map[string][2]string{"net1.ns.ovn": {"10.0.1.45", "vpc1-subnet"}})
	good := backendPod("good", map[string][2]string{"ovn": {"10.0.1.31", "vpc1-subnet"}})
	elsewhere := backendPod("elsewhere", map[string][2]string{"ovn": {"10.0.1.32", "vpc1-subnet"}})
	elsewhere.Namespace = "tenant-b"
	gwSelf := backendPod("gwself", map[string][2]string{"ovn": {"10.0.1.254", "vpc1-subnet"}})
	// The thief was allocated 10.0.1.46 (primary) and 10.0.1.47 (attachment); it rewrote both
	// annotations, and the network-status list, to tenant-b's Pod's address.
	thief := backendPod("thief", map[string][2]string{"ovn": {"10.0.1.46", "vpc1-subnet"}, "net1.ns.ovn": {"10.0.1.47", "vpc1-subnet"}})
	thiefAddrs := addressesOf(thief)
	thief.Annotations["ovn"+ipAddressSuffix] = "10.0.1.32"
	thief.Annotations["net1.ns.ovn"+ipAddressSuffix] = "10.0.1.32"
	thief.Annotations["k8s.v1.cni.cncf.io/network-status"] = `[{"name":"ns/net1","interface":"net1","ips":["10.0.1.32"]}]`
	// Static addresses on the VPC's machinery (kube-ovn would not allocate them; a snapshot is
	// input like any other).
	routerPort := backendPod("routerport", map[string][2]string{"ovn": {"10.0.1.1", "vpc1-subnet"}})
	reserved := backendPod("reserved", map[string][2]string{"ovn": {"10.0.1.5", "vpc1-subnet"}})
	otherGW := backendPod("othergw", map[string][2]string{"ovn": {"10.0.1.253", "vpc1-subnet"}})

	s := baseSnapshot(service("web", t0))
	s.Gateways = append(s.Gateways, gateway("gw2", "vpc1"))
	s.Gateways[1].Spec.LanIP = "10.0.1.253"
	s.Subnets[0].Spec.Gateway = "10.0.1.1"
	s.Subnets[0].Spec.ExcludeIps = []string{"10.0.1.1", "10.0.1.2..10.0.1.9"}
	s.Pods = []corev1.Pod{forged, outOfCIDR, unallocated, unlisted, good, elsewhere, gwSelf, thief, routerPort, reserved, otherGW}
	s.PodAddresses = append(addressesOf(outOfCIDR, good, elsewhere, gwSelf, routerPort, reserved, otherGW), thiefAddrs...)
	eps := []ep{{ip: "169.254.169.254", pod: "forged"}, {ip: "10.9.9.9", pod: "outofcidr"}, {ip: "10.0.1.44", pod: "unallocated"},
		{ip: "10.0.1.45", pod: "unlisted"}, {ip: "10.0.1.31", pod: "good"}, {ip: "10.0.1.254", pod: "gwself"},
		{ip: "10.0.1.32", pod: "thief"}, {ip: "10.0.1.1", pod: "routerport"}, {ip: "10.0.1.5", pod: "reserved"}, {ip: "10.0.1.253", pod: "othergw"},
		{ip: "10.0.1.60"}, {ip: "8.8.8.8"}, {ip: "10.0.1.1"}, {ip: "10.0.1.7"}, {ip: "10.0.1.253"}}
	sl := slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, eps...)
	// A Pod target in another namespace (an EndpointSlice written by hand may name any).
	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.1.32"},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "tenant-b", Name: "elsewhere"}})
	s.EndpointSlices = []discoveryv1.EndpointSlice{sl}

	backends := func(gates Gates) ([]gwstate.Backend, []string) {
		sp := servicePlan(Compute(s, gates), "web")
		var skipped []string
		for _, ev := range sp.Events {
			if ev.Reason == ReasonBackendSkipped {
				skipped = append(skipped, ev.Message)
			}
		}
		if len(sp.Identities) == 0 {
			t.Fatalf("nothing served: %s", sp.EIPReason)
		}
		return sp.Identities[0].Backends, skipped
	}
	has := func(skipped []string, parts ...string) bool {
		return slices.ContainsFunc(skipped, func(m string) bool {
			for _, p := range parts {
				if !strings.Contains(m, p) {
					return false
				}
			}
			return true
		})
	}
	got, skipped := backends(strictGates)
	// The thief is served at the address kube-ovn gave it, never at the one it claims.
	if want := []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.31"), Port: 8080}, {IP: netip.MustParseAddr("10.0.1.46"), Port: 8080}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("default: backends %v, want only %v (skipped: %v)", got, want, skipped)
	}
	for _, w := range [][]string{
		{"ns/forged", "169.254.169.254", "not allocated"}, {"ns/forged", "no address in VPC vpc1"},
		{"ns/outofcidr", "no address in VPC vpc1"},
		{"ns/unallocated", "10.0.1.44", "not allocated"}, {"ns/unlisted", "10.0.1.45", "not allocated"},
		{"ns/thief", "10.0.1.32", "annotation ovn.kubernetes.io/ip_address", "not allocated"},
		{"ns/thief", "10.0.1.32", "annotation net1.ns.ovn.kubernetes.io/ip_address", "not allocated"},
		{"ns/gwself", "LAN address of gateway gw1"}, {"ns/othergw", "LAN address of gateway gw2"},
		{"ns/routerport", "gateway address of Subnet vpc1-subnet"}, {"ns/reserved", "reserves (excludeIps)"},
		{"another namespace"}, {"no Pod target"},
	} {
		if !has(skipped, w...) {
			t.Errorf("no event with %q among %v", w, skipped)
		}
	}
	for _, m := range skipped {
		if strings.Contains(m, "tenant-b") || strings.Contains(m, "elsewhere") {
			t.Errorf("an event names another namespace's Pod: %q", m)
		}
	}
	got, skipped = backends(Gates{LoadBalancer: true, ClusterIP: true, EndpointsWithoutPods: true})
	if want := []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.31"), Port: 8080}, {IP: netip.MustParseAddr("10.0.1.46"), Port: 8080}, {IP: netip.MustParseAddr("10.0.1.60"), Port: 8080}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("with endpoints without Pods: backends %v, want %v (skipped: %v)", got, want, skipped)
	}
	for _, w := range [][]string{
		{"8.8.8.8", "not an address of a Subnet"}, {"endpoint 10.0.1.1", "gateway address of Subnet"},
		{"endpoint 10.0.1.7", "excludeIps"}, {"endpoint 10.0.1.253", "LAN address of gateway gw2"},
	} {
		if !has(skipped, w...) {
			t.Errorf("with endpoints without Pods: no event with %q among %v", w, skipped)
		}
	}
}

// covers: N4
// One Service's demands are bounded: too many ports and it is not served at all (an event, no
// claim); too many ready backends on a port and only the first (lowest addresses) are used.
func TestPerServiceBounds(t *testing.T) {
	many := service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = nil
		for i := range 5 {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprint("p", i), Port: int32(80 + i), Protocol: corev1.ProtocolTCP})
		}
	})
	gates := srGates
	gates.MaxPortsPerService, gates.MaxBackendsPerIdentity = 4, 1
	p := Compute(baseSnapshot(many), gates)
	sp := servicePlan(p, "web")
	if sp.Served() || len(sp.Events) != 1 || sp.Events[0].Reason != ReasonLimit || len(p.Gateway("gw1").State.Identities) != 0 {
		t.Fatalf("5 ports with a bound of 4: served %v, events %v", sp.Served(), sp.Events)
	}
	sp = servicePlan(Compute(baseSnapshot(service("web", t0)), gates), "web")
	if !sp.EIPServed || len(sp.Identities) != 2 || len(sp.Identities[0].Backends) != 1 || sp.Identities[0].Backends[0].IP != netip.MustParseAddr("10.0.1.11") {
		t.Fatalf("2 backends with a bound of 1: %+v", sp.Identities)
	}
	if !slices.ContainsFunc(sp.Events, func(e Event) bool { return e.Reason == ReasonLimit }) {
		t.Fatalf("no event for the backend bound: %v", sp.Events)
	}
}

// covers: N4, N3
// A gateway's identities are bounded: Services past the bound are not served (an event, nothing
// programmed, held or recorded), those the records say are programmed keep their place whatever
// their age, then the oldest; what a partial plan's Services find taken (GatewayLoad) counts
// first; a Service that lets go makes room for the next.
func TestPerGatewayIdentityBound(t *testing.T) {
	onPort := func(port int32) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.Ports[0].Port = port }
	}
	web := service("web", t0, onPort(80))
	a := service("a", t0.Add(time.Second), onPort(81))
	b := service("b", t0.Add(2*time.Second), onPort(82))
	gates := srGates
	gates.MaxIdentitiesPerGateway = 4 // two Services of one port each: EIP and ClusterIP

	p := Compute(soleTenant(baseSnapshot(web, a, b)), gates)
	for name, want := range map[string]bool{"web": true, "a": true, "b": false} {
		if sp := servicePlan(p, name); sp.Served() != want || sp.Limited == want {
			t.Errorf("%s: served %v, limited %v; want served %v", name, sp.Served(), sp.Limited, want)
		}
	}
	sp := servicePlan(p, "b")
	if sp.Record != nil || len(sp.Identities) != 0 || sp.AddFinalizer || !slices.ContainsFunc(sp.Events, func(e Event) bool {
		return e.Reason == ReasonLimit && strings.Contains(e.Message, "--max-identities-per-gateway")
	}) {
		t.Fatalf("the Service past the bound: record %v, identities %v, finalizer %v, events %v", sp.Record, sp.Identities, sp.AddFinalizer, sp.Events)
	}
	if sp.EIPReason == "" || sp.ClusterIPReason == "" {
		t.Errorf("no reason for the parts not served: %q, %q", sp.EIPReason, sp.ClusterIPReason)
	}
	if n := len(p.Gateway("gw1").State.Identities); n != 4 {
		t.Fatalf("gateway state has %d identities, want 4", n)
	}

	// b is programmed (its record exists) before the older Services arrive: it keeps its place.
	s := soleTenant(baseSnapshot(b))
	s = applyPlan(s, Compute(s, gates))
	s.Services = append(s.Services, web, a)
	p = Compute(s, gates)
	for name, want := range map[string]bool{"web": true, "a": false, "b": true} {
		if sp := servicePlan(p, name); sp.Served() != want {
			t.Errorf("b programmed first: %s served %v, want %v", name, sp.Served(), want)
		}
	}

	// What Services outside the snapshot hold counts first.
	for load, want := range map[int]bool{2: true, 3: false} {
		s := soleTenant(baseSnapshot(web))
		s.GatewayLoad = map[string]HeldLoad{"gw1": {Load: Load{Identities: load}}}
		if sp := servicePlan(Compute(s, gates), "web"); sp.Served() != want {
			t.Errorf("with %d identities taken: served %v, want %v", load, sp.Served(), want)
		}
	}

	// web lets go (deleted): a is served.
	s = applyPlan(s, p)
	s.Services = slices.DeleteFunc(s.Services, func(svc corev1.Service) bool { return svc.Name == "web" })
	if sp := servicePlan(Compute(s, gates), "a"); !sp.Served() {
		t.Fatalf("a not served after web left: %v", sp.Events)
	}
}

// covers: N3, I2, T3
// kube-ovn's own NAT on the EIP is held: a Service claiming a port that one of kube-ovn's
// IptablesDnatRules forwards on its EIP, or an EIP that is a floating IP (IptablesFIPRule), gets
// a conflict event and nothing on the EIP (vpcgw's DNAT would shadow kube-ovn's); its ClusterIP
// part is still served. A record of vpcgw's own, a rule on another EIP or port, and a rule being
// deleted hold nothing.
func TestHostileTenantCannotShadowKubeOVNsOwnNAT(t *testing.T) {
	ssh := service("ssh", t0, func(s *corev1.Service) { s.Spec.Ports[0].Port = 22 })
	dns := service("dns", t0, func(s *corev1.Service) {
		s.Spec.Ports[0].Port, s.Spec.Ports[0].Protocol = 53, corev1.ProtocolUDP
	})
	web := service("web", t0)
	onFIP := service("onfip", t0, func(s *corev1.Service) { s.Annotations[AnnotationEIP] = "eip2" })
	s := baseSnapshot(ssh, dns, web, onFIP)
	s.EIPs = append(s.EIPs, eip("eip2", "gw1", "172.18.0.11", true))
	rule := func(name, eip, port, proto string) kubeovnv1.IptablesDnatRule {
		return kubeovnv1.IptablesDnatRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kubeovnv1.IptablesDnatRuleSpec{EIP: eip, ExternalPort: port, Protocol: proto}}
	}
	gone := rule("gone", "eip1", "80", "tcp")
	gone.DeletionTimestamp = &metav1.Time{Time: t0}
	record := rule("record", "eip1", "80", "tcp")
	record.Labels = map[string]string{LabelRecord: "true", LabelRecordUID: "uid-other"}
	s.KubeOVNDnatRules = []kubeovnv1.IptablesDnatRule{rule("ssh-in", "eip1", "22", "tcp"), rule("dns-in", "eip1", "53", ""),
		rule("elsewhere", "eip9", "80", "tcp"), rule("other-proto", "eip1", "80", "udp"), gone, record}
	s.KubeOVNFIPRules = []kubeovnv1.IptablesFIPRule{{ObjectMeta: metav1.ObjectMeta{Name: "fip"}, Spec: kubeovnv1.IptablesFIPRuleSpec{EIP: "eip2", InternalIP: "10.0.1.9"}}}
	p := Compute(s, bothGates)
	for _, c := range []struct{ svc, want string }{
		{"ssh", "IptablesEIP eip1 port 22/TCP is forwarded by kube-ovn's own NAT"},
		{"dns", "IptablesEIP eip1 port 53/UDP is forwarded by kube-ovn's own NAT"},
		{"onfip", "IptablesEIP eip2 is a floating IP of kube-ovn"},
	} {
		sp := servicePlan(p, c.svc)
		if sp.EIPServed || sp.Ingress != nil || !strings.Contains(sp.EIPReason, c.want) || !sp.ClusterIPServed {
			t.Errorf("%s: EIP served %v, ingress %v, reason %q, ClusterIP served %v; want the EIP part refused (%q) and the ClusterIP served",
				c.svc, sp.EIPServed, sp.Ingress, sp.EIPReason, sp.ClusterIPServed, c.want)
		}
		if !slices.ContainsFunc(sp.Events, func(e Event) bool { return e.Reason == ReasonConflict && strings.Contains(e.Message, c.want) }) {
			t.Errorf("%s: no conflict event among %v", c.svc, sp.Events)
		}
		for _, id := range sp.Identities {
			if id.VIP.String() == "172.18.0.10" || id.VIP.String() == "172.18.0.11" {
				t.Errorf("%s: identity %s on the EIP", c.svc, id.Key())
			}
		}
	}
	if sp := servicePlan(p, "web"); !sp.EIPServed {
		t.Errorf("web (port 80/TCP: only a deleted rule, a record, another protocol and another EIP name it): not served: %s", sp.EIPReason)
	}
}

// covers: N7
// The legacy annotation service.beta.kubernetes.io/load-balancer-source-ranges is read as cloud
// load balancers read it, when spec.loadBalancerSourceRanges is empty; beside the field it is
// ignored with an event. Before, it was ignored silently and the EIP was open to everyone.
func TestLegacySourceRangesAnnotationIsNeverSilentlyIgnored(t *testing.T) {
	legacy := service("web", t0, func(s *corev1.Service) {
		s.Annotations[AnnotationLegacySourceRanges] = " 10.1.0.0/16, 192.0.2.7/32 "
	})
	sp := servicePlan(Compute(baseSnapshot(legacy), srGates), "web")
	var eipID *gwstate.Identity
	for i := range sp.Identities {
		if sp.Identities[i].VIP.String() == "172.18.0.10" {
			eipID = &sp.Identities[i]
		}
	}
	if eipID == nil || !slices.Equal(eipID.SourceRanges, []string{"10.1.0.0/16", "192.0.2.7/32"}) {
		t.Fatalf("legacy annotation only: EIP identity %+v, want source ranges 10.1.0.0/16, 192.0.2.7/32", eipID)
	}
	both := service("web", t0, func(s *corev1.Service) {
		s.Annotations[AnnotationLegacySourceRanges] = "10.1.0.0/16"
		s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	})
	sp = servicePlan(Compute(baseSnapshot(both), srGates), "web")
	for _, id := range sp.Identities {
		if id.VIP.String() == "172.18.0.10" && !slices.Equal(id.SourceRanges, []string{"198.51.100.0/24"}) {
			t.Fatalf("both: source ranges %v, want the field's", id.SourceRanges)
		}
	}
	if !slices.ContainsFunc(sp.Events, func(e Event) bool {
		return e.Reason == ReasonUnsupported && strings.Contains(e.Message, AnnotationLegacySourceRanges+" is ignored")
	}) {
		t.Fatalf("both: no event saying the annotation is ignored: %v", sp.Events)
	}
	bad := service("web", t0, func(s *corev1.Service) { s.Annotations[AnnotationLegacySourceRanges] = "fd00::/8" })
	sp = servicePlan(Compute(baseSnapshot(bad), srGates), "web")
	if sp.EIPServed || !strings.Contains(sp.EIPReason, "annotation "+AnnotationLegacySourceRanges+" has no valid IPv4 range") {
		t.Fatalf("IPv6-only legacy ranges: EIP served %v (%s)", sp.EIPServed, sp.EIPReason)
	}
}

// covers: I2, N3
// Between claimants of a free identity the first to claim it wins, not the oldest Service: a
// Service created long ago that sets its annotations late, or clears and re-sets them, queues
// behind the Services already waiting. The claim is stamped when the controller first sees it
// and removed when the claim goes; a stamp of another EIP is no stamp of this claim.
func TestFirstClaimWinsNotTheOldestService(t *testing.T) {
	holder := service("holder", t0.Add(2))
	// The squatter is the oldest Service, and claims first.
	squatter := service("squatter", t0, func(s *corev1.Service) { s.Namespace = "tenant-b" })
	snap := converge(t, baseSnapshot(holder, squatter), srGates)
	get := func(name string) *corev1.Service {
		for i := range snap.Services {
			if snap.Services[i].Name == name {
				return &snap.Services[i]
			}
		}
		t.Fatalf("no Service %s", name)
		return nil
	}
	if _, ok := ClaimedSince(get("squatter")); !ok {
		t.Fatalf("the squatter's claim is not stamped: %+v", get("squatter").Status.Conditions)
	}
	// It clears its annotations: its claim, and the stamp, go.
	delete(get("squatter").Annotations, AnnotationEIP)
	if sp := servicePlan(Compute(snap, srGates), "squatter"); sp.Claim != ClaimClear {
		t.Fatalf("the squatter cleared its EIP annotation: claim write %v, want ClaimClear", sp.Claim)
	}
	snap = converge(t, snap, srGates)
	if HasClaimStamp(get("squatter")) {
		t.Fatalf("the stamp stayed on a Service that claims nothing: %+v", get("squatter").Status.Conditions)
	}
	// Another tenant claims the port and waits behind the holder.
	snap.Services = append(snap.Services, service("waiting", t0.Add(5), func(s *corev1.Service) { s.Namespace = "tenant-b" }))
	snap = converge(t, snap, srGates)
	// The squatter re-sets its annotation: a new claim, stamped after the waiting one's.
	get("squatter").Annotations[AnnotationEIP] = "eip1"
	snap = converge(t, snap, srGates)
	w, _ := ClaimedSince(get("waiting"))
	s, _ := ClaimedSince(get("squatter"))
	if !w.Before(s) {
		t.Fatalf("stamps: waiting %v, squatter %v: want the waiting claim first", w, s)
	}
	// The holder goes: the first claim takes over, not the oldest Service.
	snap.Services = slices.DeleteFunc(snap.Services, func(s corev1.Service) bool { return s.Name == "holder" })
	p := Compute(snap, srGates)
	if sp := servicePlan(p, "waiting"); !sp.EIPServed {
		t.Fatalf("the first claimant does not take over: %s", sp.EIPReason)
	}
	if sp := servicePlan(p, "squatter"); sp.EIPServed || !strings.Contains(sp.EIPReason, "is held by Service tenant-b/waiting") {
		t.Fatalf("the squatter: served %v (%s), want it to wait behind tenant-b/waiting", sp.EIPServed, sp.EIPReason)
	}

	// A claim the controller has not stamped yet ranks after every stamped one, however old the
	// Service; a stamp naming another EIP is not a stamp of this claim.
	older := service("older", t0.Add(-time.Hour), func(s *corev1.Service) {
		s.Status.Conditions = []metav1.Condition{ClaimCondition("gw1", "eip-elsewhere", t0.Add(-time.Hour), 1)}
	})
	if _, ok := ClaimedSince(&older); ok {
		t.Fatal("a stamp of another EIP counts for this claim")
	}
	stamped := service("stamped", t0.Add(time.Hour), func(s *corev1.Service) {
		s.Status.Conditions = []metav1.Condition{ClaimCondition("gw1", "eip1", t0.Add(2*time.Hour), 1)}
	})
	if CompareClaims(&stamped, &older) >= 0 {
		t.Fatal("an unstamped claim of an older Service ranks before a stamped one")
	}
	if sp := servicePlan(Compute(baseSnapshot(older, stamped), srGates), "older"); sp.EIPServed || sp.Claim != ClaimStamp {
		t.Fatalf("the unstamped claimant: served %v, claim write %v; want it waiting, and stamped", sp.EIPServed, sp.Claim)
	}
}

// A namespace learns nothing of an EIP it may not use: the event for an EIP that the EIP's
// allow-list closes to it is the one for an EIP that does not exist (hostile review R4).
// covers: N8, T3
func TestClosedEIPAnsweredAsMissing(t *testing.T) {
	eipEvent := func(mut func(*Snapshot)) Event {
		snap := baseSnapshot(service("web", t0))
		snap.EndpointSlices = nil
		mut(&snap)
		sp := servicePlan(Compute(snap, srGates), "web")
		if sp.EIPServed {
			t.Fatalf("the EIP part is served: %+v", sp)
		}
		for _, ev := range sp.Events {
			if strings.Contains(ev.Message, "eip1") {
				return ev
			}
		}
		t.Fatalf("no event names the EIP: %+v", sp.Events)
		return Event{}
	}
	closed := eipEvent(func(s *Snapshot) {
		s.EIPs[0].Annotations = map[string]string{AnnotationAllowedNamespaces: "someone-else"}
	})
	missing := eipEvent(func(s *Snapshot) { s.EIPs = nil })
	if closed != missing {
		t.Errorf("a closed EIP is answered\n  %+v\nand a missing one\n  %+v", closed, missing)
	}
	if strings.Contains(closed.Message, "someone-else") {
		t.Errorf("the answer names whom the EIP admits: %q", closed.Message)
	}
}

// vpcgw's ingress is known from its ledger (hostile review R1): a tenant that strips vpcgw's
// finalizer from its served Service cannot keep the EIP published past the release, and the
// release takes exactly the address its record names, leaving another implementation's entry;
// a look-alike Service with another implementation's ingress and no record of vpcgw's is never
// written.
// covers: T1, T2, O4, N8
func TestIngressOwnedByTheLedger(t *testing.T) {
	svc := service("web", t0)
	served := servicePlan(Compute(baseSnapshot(svc), srGates), "web")
	if !served.EIPServed || served.Record == nil || served.Record.Spec.EIPAddress != "172.18.0.10" {
		t.Fatalf("the setup is not served with a record: %+v", served)
	}
	foreign := corev1.LoadBalancerIngress{IP: "198.51.100.7"}
	for _, finalizer := range []bool{true, false} {
		s := service("web", t0, func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "172.18.0.10"}, foreign}
			if !finalizer {
				s.Finalizers = nil
			}
		})
		snap := baseSnapshot(s)
		snap.ServiceRecords = []vpcgwv1alpha1.ServiceRecord{*served.Record}
		snap.ServiceRecords[0].Labels[LabelRecordUID] = string(s.UID)
		sp := servicePlan(Compute(snap, Gates{Release: true}), "web")
		if !sp.IngressWrite || len(sp.Ingress) != 1 || sp.Ingress[0].IP != foreign.IP || len(sp.DeleteServiceRecords) != 1 {
			t.Errorf("release with finalizer %v: ingress write %v %v, record deletions %v; want only %v kept and the record released",
				finalizer, sp.IngressWrite, sp.Ingress, sp.DeleteServiceRecords, foreign)
		}
		if a := sp.After(GatewayGone); !a.Ingress || !a.Release {
			t.Errorf("release with finalizer %v: after %+v", finalizer, a)
		}
	}
	lookalike := service("lookalike", t0, func(s *corev1.Service) {
		s.Annotations[AnnotationGateway] = "a-gateway-it-may-not-use"
		s.Finalizers = nil
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{foreign}
	})
	for _, gates := range []Gates{srGates, {Release: true}} {
		if sp := servicePlan(Compute(baseSnapshot(lookalike), gates), "lookalike"); sp.IngressWrite || sp.AddFinalizer {
			t.Errorf("a look-alike with another implementation's ingress (release %v): ingress write %v %v, finalizer %v",
				gates.Release, sp.IngressWrite, sp.Ingress, sp.AddFinalizer)
		}
	}
}

// An IP object kube-ovn is deleting gives its Pod no address (hostile review R7): the address is
// about to be free for another Pod, so it is not a backend, and the skip says why.
// covers: B2, N2
func TestIPBeingDeletedGivesNoAddress(t *testing.T) {
	plan := func(deleting bool) ServicePlan {
		s := baseSnapshot(service("web", t0))
		s.EndpointSlices = []discoveryv1.EndpointSlice{slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP,
			ep{ip: "10.0.1.31", pod: "p"})}
		s.Pods = []corev1.Pod{backendPod("p", map[string][2]string{"ovn": {"10.0.1.31", "vpc1-subnet"}})}
		s.PodAddresses = addressesOf(s.Pods...)
		if deleting {
			s.PodAddresses[0].DeletionTimestamp = &metav1.Time{Time: t0}
			s.PodAddresses[0].Finalizers = []string{"kube-ovn-controller"}
		}
		return servicePlan(Compute(s, lbGates), "web")
	}
	if sp := plan(false); len(sp.Identities) != 1 || len(sp.Identities[0].Backends) != 1 {
		t.Fatalf("the Pod's address is not a backend: %+v", sp.Identities)
	}
	sp := plan(true)
	if len(sp.Identities) != 1 || len(sp.Identities[0].Backends) != 0 {
		t.Fatalf("an address being released is a backend: %+v", sp.Identities)
	}
	if !slices.ContainsFunc(sp.Events, func(ev Event) bool { return ev.Reason == ReasonBackendSkipped && strings.Contains(ev.Message, "ns/p") }) {
		t.Errorf("no skip event names the Pod: %+v", sp.Events)
	}
}

// covers: N5, N8, V1, D7
// A hostile tenant who may create Pods in a gateway's namespace makes look-alikes of its
// instance: kube-ovn's labels and annotations, a running phase, an address, and an owner
// reference to the gateway's StatefulSet as it can read it. Only a Pod the StatefulSet controller
// made is an instance: controlled (Controller=true) by the StatefulSet of that name and UID, with
// an ordinal below its replicas spelled as the controller spells it. A look-alike gets no state,
// is no next hop, and its Warning names nothing outside its own namespace.
func TestHostileTenantLookAlikeGatewayPods(t *testing.T) {
	const evilIP = "10.0.1.66"
	lookAlike := func(name string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := gatewayPod("gw1", name, evilIP, true, true)
		if mutate != nil {
			mutate(&p)
		}
		return &p
	}
	for _, c := range []struct {
		name     string
		pod      *corev1.Pod // nil: kube-ovn's instance only
		replicas *int32
		want     string // a fragment of the refusal; "" when the Pod is an instance
	}{
		{"kube-ovn's instance alone", nil, ptr.To[int32](1), ""},
		{"kube-ovn's instance, replicas unset (1)", nil, nil, ""},
		{"a second replica of a two-replica StatefulSet", lookAlike("vpc-nat-gw-gw1-1", nil), ptr.To[int32](2), ""},
		{"no controller owner reference", lookAlike("vpc-nat-gw-gw1-1", func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }), ptr.To[int32](2), "no controller"},
		{"a controller reference that is not Controller=true", lookAlike("vpc-nat-gw-gw1-1", func(p *corev1.Pod) { p.OwnerReferences[0].Controller = ptr.To(false) }), ptr.To[int32](2), "no controller"},
		{"owner reference with the wrong UID", lookAlike("vpc-nat-gw-gw1-1", func(p *corev1.Pod) { p.OwnerReferences[0].UID = "tenant-sts" }), ptr.To[int32](2), "another UID"},
		{"owner reference of another API group", lookAlike("vpc-nat-gw-gw1-1", func(p *corev1.Pod) { p.OwnerReferences[0].APIVersion = "evil.io/v1" }), ptr.To[int32](2), "not StatefulSet"},
		{"another StatefulSet", lookAlike("vpc-nat-gw-gw1-1", func(p *corev1.Pod) { p.OwnerReferences[0].Name = "tenant-sts" }), ptr.To[int32](2), "not vpc-nat-gw-gw1"},
		{"the finding: ordinal 7 of a one-replica StatefulSet", lookAlike("vpc-nat-gw-gw1-7", nil), ptr.To[int32](1), "ordinal 7 is not below the 1 replicas"},
		{"ordinal 1, replicas unset (1)", lookAlike("vpc-nat-gw-gw1-1", nil), nil, "ordinal 1 is not below the 1 replicas"},
		{"ordinal equal to replicas", lookAlike("vpc-nat-gw-gw1-2", nil), ptr.To[int32](2), "ordinal 2 is not below"},
		{"ordinal with a leading zero", lookAlike("vpc-nat-gw-gw1-01", nil), ptr.To[int32](3), "no leading zeros"},
		{"ordinal zero twice", lookAlike("vpc-nat-gw-gw1-00", nil), ptr.To[int32](3), "no leading zeros"},
		{"ordinal with a letter", lookAlike("vpc-nat-gw-gw1-1a", nil), ptr.To[int32](3), "is not vpc-nat-gw-gw1-<ordinal>"},
		{"ordinal with a sign", lookAlike("vpc-nat-gw-gw1-+1", nil), ptr.To[int32](3), "is not vpc-nat-gw-gw1-<ordinal>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := baseSnapshot(service("web", t0))
			sts := gatewayStatefulSet("gw1", 1)
			sts.Spec.Replicas = c.replicas
			s.GatewayStatefulSets = []appsv1.StatefulSet{sts}
			if c.pod != nil {
				s.GatewayPods = append(s.GatewayPods, *c.pod)
			}
			gp := Compute(s, srGates).Gateway("gw1")
			wantInstances, wantHops := []string{"vpc-nat-gw-gw1-0"}, []string{"10.0.1.254"}
			if c.pod != nil && c.want == "" {
				wantInstances, wantHops = append(wantInstances, c.pod.Name), []string{evilIP, "10.0.1.254"} // in address order
			}
			var names []string
			for _, inst := range gp.Instances {
				names = append(names, inst.Pod.Name)
			}
			if !slices.Equal(names, wantInstances) || !slices.Equal(gp.Routes.NextHops, wantHops) {
				t.Fatalf("instances %v, next hops %v; want %v, %v", names, gp.Routes.NextHops, wantInstances, wantHops)
			}
			if len(gp.State.Identities) == 0 {
				t.Fatal("the instances get no state")
			}
			if c.want == "" {
				if len(gp.Refused) != 0 {
					t.Fatalf("refused %+v", gp.Refused)
				}
				return
			}
			if len(gp.Refused) != 1 || gp.Refused[0].Pod.Name != c.pod.Name || gp.Refused[0].UID != c.pod.UID {
				t.Fatalf("refused %+v, want the look-alike %s", gp.Refused, c.pod.Name)
			}
			ev := gp.Refused[0].Event
			if ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonNotAGatewayInstance || !strings.Contains(ev.Message, c.want) {
				t.Errorf("event %+v, want a Warning %s saying %q", ev, ReasonNotAGatewayInstance, c.want)
			}
			// Nothing of another namespace (the Services, their addresses) nor the StatefulSet's UID.
			for _, secret := range []string{"web", "172.18.0.10", "10.96.0.10", string(sts.UID), "ns/"} {
				if strings.Contains(ev.Message, secret) {
					t.Errorf("the Warning %q reveals %q", ev.Message, secret)
				}
			}
		})
	}
}
