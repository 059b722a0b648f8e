// Package model decides, without any I/O, what vpcgw must do for a snapshot of the cluster: which
// Services a gateway serves, with which identities and backends, what each Service's ingress must
// be, and which events tell users why something is not served. The controller only reads the
// cluster, calls Compute and writes the Plan.
package model

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Annotations on Services (SPEC S1, S2, S6).
const (
	AnnotationGateway              = "ovn.kubernetes.io/vpc_nat_gw"
	AnnotationEIP                  = "ovn.kubernetes.io/eip"
	AnnotationExternalIPFromSubnet = "ovn.kubernetes.io/service_external_ip_from_subnet"
)

// Event reasons (SPEC T3). NftableLbSvcConflict and NftableLbSvcBackendSkipped are kube-ovn's names.
const (
	ReasonConflict        = "NftableLbSvcConflict"
	ReasonBackendSkipped  = "NftableLbSvcBackendSkipped"
	ReasonEIPMissing      = "NftableLbSvcEipMissing"
	ReasonEIPNotReady     = "NftableLbSvcEipNotReady"
	ReasonEIPWrongGateway = "NftableLbSvcEipWrongGateway"
	ReasonGatewayMissing  = "NftableLbSvcGatewayMissing"
	ReasonUnsupported     = "NftableLbSvcUnsupported"
)

// Gates are the two feature gates of SPEC F1.
type Gates struct {
	LoadBalancer bool // --enable-gw-nftable-lb-svc
	ClusterIP    bool // --enable-gw-nftable-svc-cluster-ip
}

// Snapshot is what the model reads. Order does not matter.
type Snapshot struct {
	Gateways       []kubeovnv1.VpcNatGateway
	EIPs           []kubeovnv1.IptablesEIP
	Services       []corev1.Service
	EndpointSlices []discoveryv1.EndpointSlice
}

// Plan is what the controller must make true.
type Plan struct {
	Services []ServicePlan // sorted by namespace/name
	Gateways []GatewayPlan // one per existing gateway, sorted by name
}

// ServicePlan is the outcome for one Service that names a gateway.
type ServicePlan struct {
	Key     types.NamespacedName
	UID     types.UID
	Gateway string
	// EIPServed is true when the Service's EIP identities are part of its gateway's state.
	EIPServed bool
	// Reason says, in words a user can act on, why the EIP part is not served (empty when served).
	Reason string
	// Ingress is the desired status.loadBalancer.ingress once the gateway acknowledged the state;
	// nil means none (withdraw what vpcgw published).
	Ingress []corev1.LoadBalancerIngress
	// Identities this Service contributes to its gateway.
	Identities []gwstate.Identity
	Events     []Event
}

// Event is one Kubernetes event to emit on the Service.
type Event struct {
	Type    string // corev1.EventTypeNormal or corev1.EventTypeWarning
	Reason  string
	Message string
}

// GatewayPlan is the desired state of every instance of one gateway.
type GatewayPlan struct {
	Name  string
	State gwstate.State // Generation is left to the sender
}

// Compute turns a snapshot into a Plan. It is deterministic: the same snapshot in any order gives
// the same Plan.
func Compute(s Snapshot, gates Gates) Plan {
	gateways := map[string]*kubeovnv1.VpcNatGateway{}
	for i := range s.Gateways {
		gateways[s.Gateways[i].Name] = &s.Gateways[i]
	}
	eips := map[string]*kubeovnv1.IptablesEIP{}
	for i := range s.EIPs {
		eips[s.EIPs[i].Name] = &s.EIPs[i]
	}
	slicesBySvc := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for i := range s.EndpointSlices {
		es := &s.EndpointSlices[i]
		name := es.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		k := types.NamespacedName{Namespace: es.Namespace, Name: name}
		slicesBySvc[k] = append(slicesBySvc[k], es)
	}

	// Oldest Service first, so that it wins contested identities (SPEC I2).
	svcs := make([]*corev1.Service, 0, len(s.Services))
	for i := range s.Services {
		if s.Services[i].Annotations[AnnotationGateway] != "" {
			svcs = append(svcs, &s.Services[i])
		}
	}
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})

	claimed := map[string]types.NamespacedName{} // identity key -> holder
	states := map[string]*gwstate.State{}
	for name := range gateways {
		states[name] = &gwstate.State{Identities: []gwstate.Identity{}}
	}
	plan := Plan{}
	for _, svc := range svcs {
		sp := planService(svc, gates, gateways, eips, slicesBySvc[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}])
		if sp.EIPServed {
			for _, id := range sp.Identities {
				if holder, taken := claimed[id.Key()]; taken {
					sp.serveNot(Event{corev1.EventTypeWarning, ReasonConflict, fmt.Sprintf(
						"EIP identity %s/%d is held by Service %s, created earlier; this Service takes it over when %s releases it",
						id.VIP, id.Port, holder, holder)})
					break
				}
			}
		}
		if sp.EIPServed {
			for _, id := range sp.Identities {
				claimed[id.Key()] = sp.Key
			}
			st := states[sp.Gateway]
			st.Identities = append(st.Identities, sp.Identities...)
		}
		plan.Services = append(plan.Services, sp)
	}
	slices.SortFunc(plan.Services, func(a, b ServicePlan) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Name, b.Key.Name))
	})
	for name, st := range states {
		st.Normalize()
		plan.Gateways = append(plan.Gateways, GatewayPlan{Name: name, State: *st})
	}
	slices.SortFunc(plan.Gateways, func(a, b GatewayPlan) int { return cmp.Compare(a.Name, b.Name) })
	return plan
}

// serveNot marks the Service's EIP part unserved for the reason the event gives.
func (sp *ServicePlan) serveNot(ev Event) {
	sp.EIPServed = false
	sp.Reason = ev.Message
	sp.Ingress = nil
	sp.Identities = nil
	sp.Events = append(sp.Events, ev)
}

func planService(svc *corev1.Service, gates Gates, gateways map[string]*kubeovnv1.VpcNatGateway,
	eips map[string]*kubeovnv1.IptablesEIP, epSlices []*discoveryv1.EndpointSlice) ServicePlan {
	gwName := svc.Annotations[AnnotationGateway]
	sp := ServicePlan{
		Key:       types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
		UID:       svc.UID,
		Gateway:   gwName,
		EIPServed: true,
	}
	warn := func(reason, format string, args ...any) ServicePlan {
		sp.serveNot(Event{corev1.EventTypeWarning, reason, fmt.Sprintf(format, args...)})
		return sp
	}

	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return warn(ReasonUnsupported, "Service type %s is not served through gateway %s: only LoadBalancer Services are served in this version", svc.Spec.Type, gwName)
	}
	if !gates.LoadBalancer {
		sp.EIPServed, sp.Reason = false, "the controller runs without --enable-gw-nftable-lb-svc"
		return sp
	}
	if _, both := svc.Annotations[AnnotationExternalIPFromSubnet]; both {
		return warn(ReasonUnsupported, "annotations %s and %s are mutually exclusive: remove one", AnnotationGateway, AnnotationExternalIPFromSubnet)
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		return warn(ReasonUnsupported, "externalTrafficPolicy Local is not supported through gateway %s: set it to Cluster", gwName)
	}
	if !hasIPv4ClusterIP(svc) {
		return warn(ReasonUnsupported, "the Service has no IPv4 ClusterIP: only IPv4 is served through gateway %s", gwName)
	}
	gw := gateways[gwName]
	if gw == nil {
		return warn(ReasonGatewayMissing, "VpcNatGateway %s does not exist: waiting for it", gwName)
	}
	eipName := svc.Annotations[AnnotationEIP]
	if eipName == "" {
		return warn(ReasonEIPMissing, "a LoadBalancer Service with annotation %s=%s also needs annotation %s=<IptablesEIP name>", AnnotationGateway, gwName, AnnotationEIP)
	}
	eip := eips[eipName]
	if eip == nil {
		return warn(ReasonEIPMissing, "IptablesEIP %s does not exist: the Service is served as soon as it is created and Ready", eipName)
	}
	if eip.Spec.NatGwDp != gwName {
		return warn(ReasonEIPWrongGateway, "IptablesEIP %s belongs to gateway %q, not %s: use an EIP of gateway %s", eipName, eip.Spec.NatGwDp, gwName, gwName)
	}
	eipAddr, ok := readyEIPAddress(eip)
	if !ok {
		return warn(ReasonEIPNotReady, "IptablesEIP %s is not Ready (no IPv4 status.ip yet): the Service is served as soon as it is", eipName)
	}

	for _, port := range svc.Spec.Ports {
		proto, ok := protocolOf(port.Protocol)
		if !ok {
			sp.Events = append(sp.Events, Event{corev1.EventTypeWarning, ReasonUnsupported, fmt.Sprintf(
				"port %s %d/%s is not served: only TCP and UDP are supported", port.Name, port.Port, port.Protocol)})
			continue
		}
		sp.Identities = append(sp.Identities, gwstate.Identity{
			VIP:      eipAddr,
			Port:     port.Port,
			Protocol: proto,
			Backends: backendsFor(port, epSlices),
		})
	}
	sp.Ingress = []corev1.LoadBalancerIngress{{IP: eipAddr}}
	return sp
}

// backendsFor lists the ready IPv4 endpoints of one Service port (SPEC B1). The endpoint port is
// matched to the Service port by name and protocol.
func backendsFor(port corev1.ServicePort, epSlices []*discoveryv1.EndpointSlice) []gwstate.Backend {
	var out []gwstate.Backend
	for _, es := range epSlices {
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		target, ok := slicePort(es, port)
		if !ok {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
					out = append(out, gwstate.Backend{IP: ip.String(), Port: target})
					break
				}
			}
		}
	}
	return out
}

func slicePort(es *discoveryv1.EndpointSlice, port corev1.ServicePort) (int32, bool) {
	for _, p := range es.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if name == port.Name && proto == port.Protocol && p.Port != nil {
			return *p.Port, true
		}
	}
	return 0, false
}

func protocolOf(p corev1.Protocol) (gwstate.Protocol, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return gwstate.TCP, true
	case corev1.ProtocolUDP:
		return gwstate.UDP, true
	}
	return "", false
}

func hasIPv4ClusterIP(svc *corev1.Service) bool {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			return true
		}
	}
	// A headless or not-yet-allocated Service has no ClusterIP; the EIP part does not need one.
	return len(ips) == 0 || strings.EqualFold(svc.Spec.ClusterIP, corev1.ClusterIPNone)
}

// readyEIPAddress returns the EIP's bound IPv4 address when it is Ready (SPEC S4).
func readyEIPAddress(eip *kubeovnv1.IptablesEIP) (string, bool) {
	if !eip.Status.Ready {
		return "", false
	}
	ip, err := netip.ParseAddr(eip.Status.IP)
	if err != nil || !ip.Is4() {
		return "", false
	}
	return ip.String(), true
}
