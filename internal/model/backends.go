package model

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

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
	slices.SortFunc(out, func(a, b gwstate.Backend) int {
		if c := netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP)); c != 0 {
			return c
		}
		return int(a.Port - b.Port)
	})
	return slices.Compact(out)
}

func slicePort(es *discoveryv1.EndpointSlice, port corev1.ServicePort) (int32, bool) {
	want := port.Protocol
	if want == "" {
		want = corev1.ProtocolTCP
	}
	for _, p := range es.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if name == port.Name && proto == want && p.Port != nil && *p.Port > 0 && *p.Port <= 65535 {
			return *p.Port, true
		}
	}
	return 0, false
}

// resolver maps endpoints to backend addresses in one VPC, remembering each pod's answer and the
// pods it skipped (one event per pod, SPEC B2).
type resolver struct {
	ix      *Index
	vpc     string
	memo    map[types.NamespacedName]string
	skipped []types.NamespacedName
}

func (ix *Index) newResolver(vpc string) *resolver {
	return &resolver{ix: ix, vpc: vpc, memo: map[types.NamespacedName]string{}}
}

// resolve returns the endpoint's backend address. An endpoint of a Pod uses the Pod's NIC in the
// gateway's VPC, the lowest IPv4 when several are; an endpoint without a Pod uses its own first
// IPv4 address.
func (r *resolver) resolve(namespace string, ep *discoveryv1.Endpoint) (string, bool) {
	if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
		return firstIPv4(ep.Addresses)
	}
	ns := ep.TargetRef.Namespace
	if ns == "" {
		ns = namespace
	}
	key := types.NamespacedName{Namespace: ns, Name: ep.TargetRef.Name}
	if ip, ok := r.memo[key]; ok {
		return ip, ip != ""
	}
	ip := ""
	pod := r.ix.pods[key]
	switch {
	case pod == nil:
		// Not in the cache yet: wait for it rather than guess a NIC.
	default:
		nics := podNICs(pod)
		if len(nics) == 0 {
			// No kube-ovn annotations: the endpoint's own address is all there is.
			ip, _ = firstIPv4(ep.Addresses)
			break
		}
		var inVpc []netip.Addr
		for _, nic := range nics {
			if r.ix.subnetVpc(nic.logicalSwitch) == r.vpc {
				inVpc = append(inVpc, nic.ip)
			}
		}
		if len(inVpc) == 0 {
			r.skipped = append(r.skipped, key)
			break
		}
		slices.SortFunc(inVpc, netip.Addr.Compare)
		ip = inVpc[0].String()
	}
	r.memo[key] = ip
	return ip, ip != ""
}

func (r *resolver) events() []Event {
	var out []Event
	for _, k := range r.skipped {
		out = append(out, *warning(ReasonBackendSkipped, "backend Pod %s has no network interface in VPC %s: it is not used", k, r.vpc))
	}
	return out
}

type nic struct {
	ip            netip.Addr
	logicalSwitch string
}

// podNICs reads kube-ovn's per-provider annotations: <provider>.kubernetes.io/ip_address (first
// IPv4 of a comma-separated list) and <provider>.kubernetes.io/logical_switch.
func podNICs(pod *corev1.Pod) []nic {
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
		out = append(out, nic{ip: netip.MustParseAddr(ip), logicalSwitch: pod.Annotations[provider+logicalSwitchSuffix]})
	}
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

func firstIPv4(addrs []string) (string, bool) {
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(strings.TrimSpace(a)); err == nil && ip.Is4() {
			return ip.String(), true
		}
	}
	return "", false
}
