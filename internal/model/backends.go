package model

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

const (
	ipAddressSuffix     = ".kubernetes.io/ip_address"
	logicalSwitchSuffix = ".kubernetes.io/logical_switch"
	// defaultVpc is the VPC of Subnets whose spec.vpc is empty.
	defaultVpc = "ovn-cluster"
)

// backendsFor lists the backends of one Service port (SPEC B1): every ready, not terminating
// endpoint of the Service's IPv4 EndpointSlices whose port matches the Service port by name and
// protocol, resolved to its NIC in the gateway's VPC (SPEC B2). Sorted and de-duplicated.
// For a UDP port it also lists the draining endpoints: terminating and still serving, they get
// no new flow, and the agent keeps the flows they have (SPEC L11, D6). TCP needs no such list:
// the agent never deletes a TCP flow of a backend that leaves.
func (ix *Index) backendsFor(svc *corev1.Service, port corev1.ServicePort, r *resolver) (backends, draining []gwstate.Backend) {
	udp := PortProtocol(port.Protocol) == corev1.ProtocolUDP
	for _, es := range ix.slices[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] {
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		target, ok := slicePort(es, port)
		if !ok {
			continue
		}
		for i := range es.Endpoints {
			ep := &es.Endpoints[i]
			to := &backends
			switch endpointUse(ep.Conditions) {
			case useNone:
				continue
			case useDraining:
				if !udp {
					continue
				}
				to = &draining
			}
			if ip, ok := r.resolve(es.Namespace, ep); ok {
				*to = append(*to, gwstate.Backend{IP: ip, Port: target})
			}
		}
	}
	slices.SortFunc(backends, gwstate.Backend.Compare)
	backends = slices.Compact(backends)
	slices.SortFunc(draining, gwstate.Backend.Compare)
	draining = slices.DeleteFunc(slices.Compact(draining), func(b gwstate.Backend) bool {
		_, serving := slices.BinarySearchFunc(backends, b, gwstate.Backend.Compare)
		return serving // the same address ready in another slice: it serves
	})
	if len(draining) == 0 {
		draining = nil // as when none drains: a partial plan keeps an Equal identity as it was
	}
	return backends, draining
}

type endpointUseKind int

const (
	useNone endpointUseKind = iota
	useServing
	useDraining
)

// endpointUse reads an endpoint's conditions as kube-proxy does: ready (nil counts as ready) and
// not terminating serves; terminating and serving drains; anything else is not used.
func endpointUse(c discoveryv1.EndpointConditions) endpointUseKind {
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case !terminating && (c.Ready == nil || *c.Ready):
		return useServing
	case terminating && c.Serving != nil && *c.Serving:
		return useDraining
	}
	return useNone
}

func slicePort(es *discoveryv1.EndpointSlice, port corev1.ServicePort) (int32, bool) {
	want := PortProtocol(port.Protocol)
	for _, p := range es.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := PortProtocol(ptr.Deref(p.Protocol, ""))
		if name == port.Name && proto == want && p.Port != nil && *p.Port > 0 && *p.Port <= 65535 {
			return *p.Port, true
		}
	}
	return 0, false
}

// resolver maps endpoints to backend addresses in one VPC, remembering each pod's answer and the
// endpoints it skipped (one event per pod or address, SPEC B2, N2).
type resolver struct {
	ix        *Index
	vpc       string
	namespace string // the Service's: Pod targets must be there (SPEC N2)
	// infra are the addresses of the VPC's own machinery, never a backend (SPEC N2): the
	// gateways' addresses, the Subnets' gateway (the VPC router's port) and reserved addresses.
	infra   []infraRange
	memo    map[types.NamespacedName]netip.Addr
	skipped []string
	seen    map[string]bool
}

// infraRange is a range of addresses (one address: from == to) and what they are; where ranges
// overlap, the lowest rank names the address (a Subnet's gateway is also in its excludeIps).
type infraRange struct {
	from, to netip.Addr
	rank     int
	what     string
}

func (ix *Index) newResolver(svc *corev1.Service, gw *kubeovnv1.VpcNatGateway) *resolver {
	r := &resolver{ix: ix, vpc: gw.Spec.Vpc, namespace: svc.Namespace, memo: map[types.NamespacedName]netip.Addr{}, seen: map[string]bool{}}
	r.infra = ix.vpcInfra(gw)
	return r
}

// vpcInfra lists the addresses of gw's VPC that are not a workload's: every gateway of the VPC
// (its LAN address; gw's instances' and EIPs too) and every Subnet's gateway, U2O and excluded
// addresses. Computed once per gateway and snapshot.
func (ix *Index) vpcInfra(gw *kubeovnv1.VpcNatGateway) []infraRange {
	if got, ok := ix.infra[gw.Name]; ok {
		return got
	}
	var out []infraRange
	for _, g := range ix.gateways {
		if g.Spec.Vpc == gw.Spec.Vpc {
			out = append(out, infraAddrs(g.Spec.LanIP, 0, "the LAN address of gateway "+g.Name)...)
		}
	}
	// The snapshot holds only this gateway's Pods; another gateway's Pods have its spec.lanIp.
	insts, _ := ix.instances(gw.Name)
	for _, inst := range insts {
		out = append(out, infraAddrs(inst.LanIP, 0, "the LAN address of gateway "+gw.Name)...)
	}
	for _, e := range ix.eips {
		if e.Spec.NatGwDp == gw.Name {
			out = append(out, infraAddrs(e.Status.IP, 0, "an EIP of gateway "+gw.Name)...)
			out = append(out, infraAddrs(e.Spec.V4ip, 0, "an EIP of gateway "+gw.Name)...)
		}
	}
	for name, sub := range ix.subnets {
		if ix.subnetVpc(name) == gw.Spec.Vpc {
			out = append(out, subnetInfra(name, sub)...)
		}
	}
	// Map iteration order must not decide which reason an event gives.
	slices.SortFunc(out, func(x, y infraRange) int {
		return cmp.Or(cmp.Compare(x.rank, y.rank), x.from.Compare(y.from), x.to.Compare(y.to), strings.Compare(x.what, y.what))
	})
	ix.infra[gw.Name] = out
	return out
}

// infraAddrs are the addresses of s, a comma-separated list (what does not parse is left out),
// as ranges of one address.
func infraAddrs(s string, rank int, what string) []infraRange {
	var out []infraRange
	for _, part := range strings.Split(s, ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(part)); err == nil {
			out = append(out, infraRange{a, a, rank, what})
		}
	}
	return out
}

// subnetInfra are a Subnet's gateway and U2O addresses and the ranges it excludes.
func subnetInfra(name string, sub *kubeovnv1.Subnet) []infraRange {
	out := infraAddrs(sub.Spec.Gateway, 1, "the gateway address of Subnet "+name)
	out = append(out, infraAddrs(sub.Spec.U2OInterconnectionIP, 1, "the U2O address of Subnet "+name)...)
	out = append(out, infraAddrs(sub.Status.U2OInterconnectionIP, 1, "the U2O address of Subnet "+name)...)
	for _, ex := range sub.Spec.ExcludeIps {
		from, to, ok := strings.Cut(ex, "..")
		if !ok {
			to = from
		}
		a, errA := netip.ParseAddr(strings.TrimSpace(from))
		b, errB := netip.ParseAddr(strings.TrimSpace(to))
		if errA == nil && errB == nil && a.Compare(b) <= 0 {
			out = append(out, infraRange{a, b, 2, "an address Subnet " + name + " reserves (excludeIps)"})
		}
	}
	return out
}

func (r *resolver) skip(why string) {
	if !r.seen[why] {
		r.seen[why] = true
		r.skipped = append(r.skipped, why)
	}
}

// resolve returns the endpoint's backend address (SPEC B2, N2). An endpoint of a Pod uses an
// address kube-ovn allocated to the Pod (its IP objects, which a tenant cannot write) in a Subnet
// of the gateway's VPC, the lowest when several are; the Pod must be in the Service's namespace.
// The Pod's annotations decide nothing: an address they claim that kube-ovn did not allocate to
// the Pod is reported and not used. An endpoint without a Pod is used only when the controller
// allows it, with an address inside a Subnet of the VPC. Never the VPC's own machinery (infra),
// nor loopback, link-local, multicast or broadcast addresses.
func (r *resolver) resolve(namespace string, ep *discoveryv1.Endpoint) (netip.Addr, bool) {
	if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
		ip, ok := firstIPv4(ep.Addresses)
		switch {
		case !ok:
			return netip.Addr{}, false
		case !r.ix.gates.EndpointsWithoutPods:
			r.skip("endpoint " + ip.String() + " has no Pod target: such endpoints are not used (the controller's --allow-endpoints-without-pods)")
			return netip.Addr{}, false
		case !r.inVpcSubnet(ip):
			r.skip("endpoint " + ip.String() + " is not an address of a Subnet of VPC " + r.vpc + ": it is not used")
			return netip.Addr{}, false
		case !r.safe(ip, "endpoint "+ip.String()):
			return netip.Addr{}, false
		}
		return ip, true
	}
	ns := ep.TargetRef.Namespace
	if ns == "" {
		ns = namespace
	}
	key := types.NamespacedName{Namespace: ns, Name: ep.TargetRef.Name}
	if ns != r.namespace {
		r.skip("an endpoint targets a Pod of another namespace: it is not used")
		return netip.Addr{}, false
	}
	if ip, ok := r.memo[key]; ok {
		return ip, ip.IsValid()
	}
	var ip netip.Addr                      // the zero Addr: no backend for this Pod
	if pod := r.ix.pods[key]; pod != nil { // not in the cache yet: wait for it rather than guess
		ip = r.podAddress(pod)
	}
	r.memo[key] = ip
	return ip, ip.IsValid()
}

// podAddress is the lowest address kube-ovn allocated to pod in the resolver's VPC, or the zero
// Addr.
func (r *resolver) podAddress(pod *corev1.Pod) netip.Addr {
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	var inVpc, allocated []netip.Addr
	for _, a := range r.ix.podAddrs[key] {
		if r.ix.subnetVpc(a.Spec.Subnet) != r.vpc {
			continue
		}
		ip, ok := firstIPv4([]string{a.Spec.V4IPAddress})
		if !ok {
			ip, ok = firstIPv4(strings.Split(a.Spec.IPAddress, ","))
		}
		if !ok {
			continue
		}
		allocated = append(allocated, ip)
		if r.ix.subnetHolds(a.Spec.Subnet, ip) && r.safe(ip, "backend Pod "+key.String()+" address "+ip.String()) {
			inVpc = append(inVpc, ip)
		}
	}
	slices.SortFunc(inVpc, netip.Addr.Compare)
	// What the Pod's annotations claim in the VPC and kube-ovn did not allocate to it: a tenant
	// rewrote them to publish someone else's address, or kube-ovn has not written the IP yet.
	for _, c := range podClaims(pod) {
		if r.ix.subnetVpc(c.logicalSwitch) == r.vpc && !slices.Contains(allocated, c.ip) {
			r.skip("backend Pod " + key.String() + ": address " + c.ip.String() + " (annotation " + c.annotation +
				") is not allocated to it by kube-ovn (no ips.kubeovn.io object says so): it is not used")
		}
	}
	if len(inVpc) == 0 {
		r.skip("backend Pod " + key.String() + " has no address in VPC " + r.vpc + " that kube-ovn allocated: it is not used")
		return netip.Addr{}
	}
	return inVpc[0]
}

// safe refuses the VPC's machinery and the address classes that are never a backend, saying why
// for what (an endpoint or a Pod's address).
func (r *resolver) safe(a netip.Addr, what string) bool {
	for _, in := range r.infra {
		if in.from.Compare(a) <= 0 && a.Compare(in.to) <= 0 {
			r.skip(what + " is " + in.what + ": it is not used")
			return false
		}
	}
	if err := gwstate.ValidBackendAddr(a); err != nil {
		r.skip(what + ": " + err.Error() + ": it is not used")
		return false
	}
	return true
}

// inVpcSubnet reports whether ip lies in a Subnet of the resolver's VPC.
func (r *resolver) inVpcSubnet(ip netip.Addr) bool {
	for name := range r.ix.subnets {
		if r.ix.subnetVpc(name) == r.vpc && r.ix.subnetHolds(name, ip) {
			return true
		}
	}
	return false
}

func (r *resolver) events() []Event {
	var out []Event
	for _, why := range r.skipped {
		out = append(out, *warning(ReasonBackendSkipped, "%s", why))
	}
	return out
}

// claim is an address a Pod's kube-ovn annotations say one of its NICs has.
type claim struct {
	ip            netip.Addr
	logicalSwitch string
	annotation    string
}

// podClaims reads kube-ovn's per-provider annotations <provider>.kubernetes.io/ip_address (first
// IPv4 of a comma-separated list) and <provider>.kubernetes.io/logical_switch. Any Pod editor
// may write them, so they only serve to report a claim kube-ovn's IP objects do not back.
func podClaims(pod *corev1.Pod) []claim {
	var out []claim
	for k, v := range pod.Annotations {
		provider, ok := strings.CutSuffix(k, ipAddressSuffix)
		if !ok || provider == "" {
			continue
		}
		if ip, ok := firstIPv4(strings.Split(v, ",")); ok {
			out = append(out, claim{ip: ip, logicalSwitch: pod.Annotations[provider+logicalSwitchSuffix], annotation: k})
		}
	}
	slices.SortFunc(out, func(a, b claim) int { return strings.Compare(a.annotation, b.annotation) })
	return out
}

func (ix *Index) subnetVpc(name string) string {
	s := ix.subnets[name]
	if s == nil {
		return ""
	}
	if s.Spec.Vpc == "" {
		return defaultVpc
	}
	return s.Spec.Vpc
}

func firstIPv4(addrs []string) (netip.Addr, bool) {
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(strings.TrimSpace(a)); err == nil && ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}
