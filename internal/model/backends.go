package model

import (
	"encoding/json"
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
func (ix *Index) backendsFor(svc *corev1.Service, port corev1.ServicePort, r *resolver) []gwstate.Backend {
	var out []gwstate.Backend
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
			if (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) || (ep.Conditions.Terminating != nil && *ep.Conditions.Terminating) {
				continue
			}
			if ip, ok := r.resolve(es.Namespace, ep); ok {
				out = append(out, gwstate.Backend{IP: ip, Port: target})
			}
		}
	}
	slices.SortFunc(out, gwstate.Backend.Compare)
	return slices.Compact(out)
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
	namespace string              // the Service's: Pod targets must be there (SPEC N2)
	own       map[netip.Addr]bool // the gateway's own addresses, never a backend
	memo      map[types.NamespacedName]netip.Addr
	skipped   []string
	seen      map[string]bool
}

func (ix *Index) newResolver(svc *corev1.Service, gw *kubeovnv1.VpcNatGateway) *resolver {
	r := &resolver{ix: ix, vpc: gw.Spec.Vpc, namespace: svc.Namespace, own: map[netip.Addr]bool{}, memo: map[types.NamespacedName]netip.Addr{}, seen: map[string]bool{}}
	// The objects spell the addresses as strings: parsed once here. One that does not parse
	// cannot equal a backend address anyway.
	own := []string{gw.Spec.LanIP}
	for _, inst := range ix.instances(gw.Name) {
		own = append(own, inst.LanIP)
	}
	for _, e := range ix.eips {
		if e.Spec.NatGwDp == gw.Name {
			own = append(own, e.Status.IP, e.Spec.V4ip)
		}
	}
	for _, s := range own {
		if a, err := netip.ParseAddr(s); err == nil {
			r.own[a] = true
		}
	}
	return r
}

func (r *resolver) skip(why string) {
	if !r.seen[why] {
		r.seen[why] = true
		r.skipped = append(r.skipped, why)
	}
}

// resolve returns the endpoint's backend address (SPEC B2, N2). An endpoint of a Pod uses the
// Pod's NIC in the gateway's VPC, the lowest IPv4 when several are; the Pod must be in the
// Service's namespace, the NIC one kube-ovn allocated (and, for an attachment, one the Pod's
// network status lists) with an address inside its Subnet's CIDR. An endpoint without a Pod is
// used only when the controller allows it, with an address inside a Subnet of the VPC. Never the
// gateway's own addresses, nor loopback, link-local, multicast or broadcast ones.
func (r *resolver) resolve(namespace string, ep *discoveryv1.Endpoint) (netip.Addr, bool) {
	if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
		ip, ok := firstIPv4(ep.Addresses)
		switch {
		case !ok:
			return netip.Addr{}, false
		case !r.ix.gates.EndpointsWithoutPods:
			r.skip("endpoint " + ip.String() + " has no Pod target: such endpoints are not used (the controller's --allow-endpoints-without-pods)")
			return netip.Addr{}, false
		case !r.inVpcSubnet(ip) || !r.safe(ip):
			r.skip("endpoint " + ip.String() + " is not an address of a Subnet of VPC " + r.vpc + ": it is not used")
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
	var ip netip.Addr // the zero Addr: no backend for this Pod
	pod := r.ix.pods[key]
	switch {
	case pod == nil:
		// Not in the cache yet: wait for it rather than guess a NIC.
	default:
		var inVpc []netip.Addr
		for _, nic := range podNICs(pod) {
			if nic.allocated && r.ix.subnetVpc(nic.logicalSwitch) == r.vpc && r.ix.subnetHolds(nic.logicalSwitch, nic.ip) && r.safe(nic.ip) {
				inVpc = append(inVpc, nic.ip)
			}
		}
		if len(inVpc) == 0 {
			r.skip("backend Pod " + key.String() + " has no network interface in VPC " + r.vpc + " that kube-ovn allocated: it is not used")
			break
		}
		ip = slices.MinFunc(inVpc, netip.Addr.Compare)
	}
	r.memo[key] = ip
	return ip, ip.IsValid()
}

// safe refuses the gateway's own addresses and the address classes that are never a backend.
func (r *resolver) safe(ip netip.Addr) bool {
	return !r.own[ip] && gwstate.ValidBackendAddr(ip) == nil
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

type nic struct {
	ip            netip.Addr
	logicalSwitch string
	// allocated: kube-ovn allocated the NIC (<provider>.kubernetes.io/allocated), and an
	// attachment's is listed in the Pod's network status with this address.
	allocated bool
}

// podNICs reads kube-ovn's per-provider annotations: <provider>.kubernetes.io/ip_address (first
// IPv4 of a comma-separated list), <provider>.kubernetes.io/logical_switch and .../allocated,
// and for attachments multus's k8s.v1.cni.cncf.io/network-status.
func podNICs(pod *corev1.Pod) []nic {
	var status []networkStatusEntry
	_ = json.Unmarshal([]byte(pod.Annotations[networkStatusAnnotation]), &status) // absent or bad: no attachment is listed
	var out []nic
	for k, v := range pod.Annotations {
		provider, ok := strings.CutSuffix(k, ipAddressSuffix)
		if !ok || provider == "" {
			continue
		}
		ip, ok := firstIPv4(strings.Split(v, ","))
		if !ok {
			continue
		}
		n := nic{ip: ip, logicalSwitch: pod.Annotations[provider+logicalSwitchSuffix]}
		n.allocated = pod.Annotations[provider+allocatedSuffix] == "true" && (provider == "ovn" || listed(status, provider, ip.String()))
		out = append(out, n)
	}
	return out
}

const (
	allocatedSuffix         = ".kubernetes.io/allocated"
	networkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
)

type networkStatusEntry struct {
	Name string   `json:"name"`
	IPs  []string `json:"ips"`
}

// listed reports whether the network status lists the attachment of provider ("<nad>.<ns>" or
// "<nad>.<ns>.ovn", entry "<ns>/<nad>") with address ip.
func listed(status []networkStatusEntry, provider, ip string) bool {
	parts := strings.Split(strings.TrimSuffix(provider, ".ovn"), ".")
	if len(parts) != 2 {
		return false
	}
	name := parts[1] + "/" + parts[0]
	for _, e := range status {
		if e.Name == name && slices.Contains(e.IPs, ip) {
			return true
		}
	}
	return false
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

// firstIPv4 is the first of addrs (the API's strings) that is an IPv4 address: where an
// address from an object becomes a netip.Addr.
func firstIPv4(addrs []string) (netip.Addr, bool) {
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(strings.TrimSpace(a)); err == nil && ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}
