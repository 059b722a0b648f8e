package model

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// ServicePlan is the outcome for one Service.
type ServicePlan struct {
	Key types.NamespacedName
	UID types.UID
	// Gateway is the gateway the Service is bound to: its annotation, or the gateway its
	// remaining records name when the annotation is gone.
	Gateway string

	// EIPServed and ClusterIPServed say which parts are programmed; the reasons say, in words a
	// user can act on, why a part is not (empty when served or not asked for).
	EIPServed       bool
	EIPReason       string
	ClusterIPServed bool
	ClusterIPReason string

	// Identities this Service contributes to its gateway (SPEC I1).
	Identities []gwstate.Identity
	// EIP is the served EIP address (the zero Addr when the EIP part is not served); ClusterIP
	// likewise.
	EIP       netip.Addr
	ClusterIP netip.Addr

	// Record is the desired ServiceRecord of the Service (SPEC R6; nil when nothing is served or
	// the ledger is kept as IptablesDnatRules). WriteRecord: it differs from the existing one and is
	// written (one create or update) once the gateway acknowledged. DeleteServiceRecords are
	// ServiceRecords to release after programming (stale, or left from the other form).
	Record               *vpcgwv1alpha1.ServiceRecord
	WriteRecord          bool
	DeleteServiceRecords []string

	// Records is the desired ledger in the seed's form, IptablesDnatRules (SPEC R1, R2), with the
	// status each record gets once the gateway acknowledged.
	Records []kubeovnv1.IptablesDnatRule
	// Writes against the snapshot. Record creates and updates come before the gateway sync;
	// deletes, statuses, ingress and finalizer release after it (SPEC R3, T1, T2).
	// They point into Records.
	CreateRecords []*kubeovnv1.IptablesDnatRule
	UpdateRecords []*kubeovnv1.IptablesDnatRule
	DeleteRecords []string
	StatusRecords []*kubeovnv1.IptablesDnatRule

	// Ingress is the desired status.loadBalancer.ingress when IngressWrite is set.
	Ingress      []corev1.LoadBalancerIngress
	IngressWrite bool

	// AddFinalizer: put the finalizer on before anything else is written. ReleaseFinalizer: take
	// it off once the gateway no longer serves the Service and its records are gone.
	AddFinalizer     bool
	ReleaseFinalizer bool

	// Claim is what to write of the Service's claim stamp (SPEC I2, claim.go), before
	// programming and whatever programming does: ClaimStamp stamps ClaimedEIP on Gateway, dated
	// when it is written.
	Claim      ClaimWrite
	ClaimedEIP string

	Events []Event

	// Demand is what the Service asks of its gateway, served or Limited (SPEC N4).
	Demand Load
	// Limited: the Service would be served, but its gateway has no room left for its identities
	// (SPEC N4, --max-identities-per-gateway): nothing of it is served.
	Limited bool

	// programmed: its records say the gateway serves it, which puts it first in the budget order
	// and out of its namespace's share (Compute sets it). asks: what it asks with its draining
	// backends' kept flows, which the bounds drop first (Demand is without them when they do).
	// The planner keeps both to plan a gateway where a Service waits partially (plannerroom.go).
	programmed bool
	asks       Load
}

// Event is one Kubernetes event to emit on the Service.
type Event struct {
	Type    string // corev1.EventTypeNormal or corev1.EventTypeWarning
	Reason  string
	Message string
}

// Served reports whether any part of the Service is programmed.
func (sp *ServicePlan) Served() bool { return sp.EIPServed || sp.ClusterIPServed }

// binding is what the annotations, the gates and the referenced objects allow for a Service,
// before conflicts and backends.
type binding struct {
	gateway string
	gw      *kubeovnv1.VpcNatGateway
	// eipName, eip, eipAddr: the EIP part is eligible when eipAddr is valid.
	eipName string
	eip     *kubeovnv1.IptablesEIP
	eipAddr netip.Addr
	eipWhy  *Event
	// clusterIP is the IPv4 ClusterIP when the ClusterIP part is eligible.
	clusterIP netip.Addr
	cipWhy    *Event
	// blocked explains why no part can be served at all (type, family, policy, gateway ...).
	blocked *Event
	// quiet is set when the Service simply is not ours (no gateway annotation, being deleted,
	// both gates off): not served, and no event.
	quiet string
}

func warning(reason, format string, args ...any) *Event {
	return &Event{Type: corev1.EventTypeWarning, Reason: reason, Message: BoundMessage(fmt.Sprintf(format, args...))}
}

// bind applies SPEC F1, F5, S1-S6, L4 and L5 to one Service.
func (ix *Index) bind(svc *corev1.Service) (b binding) {
	b = binding{gateway: svc.Annotations[AnnotationGateway]}
	if b.quiet = ix.quietReason(svc, b.gateway); b.quiet != "" {
		return b
	}
	if b.blocked = ix.unsupported(svc, b.gateway); b.blocked != nil {
		return b
	}
	clusterIP, blocked := ix.checkPortsAndFamily(svc, b.gateway)
	if blocked != nil {
		b.blocked = blocked
		return b
	}
	b.gw = ix.gateways[b.gateway]
	// One answer whether the gateway is missing or does not admit the namespace: a namespace
	// learns nothing of a gateway it may not use, not even that it exists (SPEC N8).
	if b.gw == nil || b.gw.DeletionTimestamp != nil || !ix.admitted(svc.Namespace, b.gw) {
		b.blocked = warning(ReasonNotAdmitted, "%s; nothing is served until it exists and admits the namespace (a cluster administrator admits namespaces)",
			NotAdmittedText(svc.Namespace, b.gateway))
		b.gw = nil
		return b
	}
	isLB := svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	ix.bindClusterIP(&b, clusterIP, isLB)
	if !isLB {
		ix.checkFromSubnet(svc, &b)
		return b
	}
	if !ix.gates.LoadBalancer {
		b.eipWhy = &Event{Message: "the controller runs without --enable-gw-nftable-lb-svc"}
		return b
	}
	ix.bindEIP(svc, &b)
	ix.checkFromSubnet(svc, &b)
	return b
}

// quietReason says why the Service simply is not vpcgw's to serve ("": it is): no gateway
// annotation, being deleted, vpcgw being uninstalled or both gates off. No event is given.
func (ix *Index) quietReason(svc *corev1.Service, gateway string) string {
	switch {
	case gateway == "":
		return "the Service has no " + AnnotationGateway + " annotation"
	case svc.DeletionTimestamp != nil:
		return "the Service is being deleted"
	case ix.gates.Release:
		return "vpcgw is being uninstalled (vpcgw release): everything it wrote is released"
	case !ix.gates.LoadBalancer && !ix.gates.ClusterIP:
		return "the controller runs with --enable-gw-nftable-lb-svc and --enable-gw-nftable-svc-cluster-ip off"
	}
	return ""
}

// unsupported is the event for a Service vpcgw does not serve for what its gateway annotation,
// class, type or traffic policies say (nil: none of them is in the way).
func (ix *Index) unsupported(svc *corev1.Service, gateway string) *Event {
	if errs := validation.IsDNS1123Subdomain(gateway); len(errs) > 0 {
		return warning(ReasonInvalidAnnotation, "annotation %s=%q is not a valid VpcNatGateway name: %s", AnnotationGateway, gateway, errs[0])
	}
	isLB := svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	if isLB && svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != LoadBalancerClass {
		// Another implementation's Service (MetalLB, a cloud provider): not ours, no event there
		// is ours to give beyond this one (SPEC K9).
		return warning(ReasonUnsupported, "spec.loadBalancerClass is %q: this Service belongs to that implementation, not to gateway %s (use class %s, or none)",
			*svc.Spec.LoadBalancerClass, gateway, LoadBalancerClass)
	}
	if !isLB && svc.Spec.Type != corev1.ServiceTypeClusterIP && svc.Spec.Type != "" {
		return warning(ReasonUnsupported, "Service type %s is not served through a VPC NAT gateway: use LoadBalancer (EIP and ClusterIP) or ClusterIP", svc.Spec.Type)
	}
	if isLB && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		return warning(ReasonUnsupported, "externalTrafficPolicy Local is not supported through gateway %s: set it to Cluster", gateway)
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		return warning(ReasonUnsupported, "internalTrafficPolicy Local is not supported through gateway %s: set it to Cluster", gateway)
	}
	return nil
}

// checkPortsAndFamily returns the Service's IPv4 ClusterIP, or the event for a Service with no
// TCP or UDP port, more of them than the bound, or no IPv4 ClusterIP.
func (ix *Index) checkPortsAndFamily(svc *corev1.Service, gateway string) (netip.Addr, *Event) {
	served := ServedPorts(svc)
	if served == 0 {
		// A Service with no TCP or UDP port has no identity: nothing is published for it, no
		// ingress, finalizer, held ClusterIP or route (SPEC L10, S5).
		return netip.Addr{}, warning(ReasonUnsupported, "the Service has no TCP or UDP port (%s): nothing is served through gateway %s; only TCP and UDP are supported",
			portList(svc.Spec.Ports), gateway)
	}
	if n := served; n > ix.gates.maxPorts() {
		return netip.Addr{}, warning(ReasonLimit, "the Service has %d TCP/UDP ports; a Service may have at most %d served through gateway %s (the controller's --max-ports-per-service)",
			n, ix.gates.maxPorts(), gateway)
	}
	clusterIP, ok := ipv4ClusterIP(svc)
	if !ok {
		return netip.Addr{}, warning(ReasonUnsupported, "the Service has no IPv4 ClusterIP (%v): only IPv4 is served through gateway %s", clusterIPsOf(svc), gateway)
	}
	return clusterIP, nil
}

// bindClusterIP makes the ClusterIP part eligible, or says who serves it instead.
func (ix *Index) bindClusterIP(b *binding, clusterIP netip.Addr, isLB bool) {
	switch {
	case ix.gates.ClusterIP:
		b.clusterIP = clusterIP
	case ix.gates.KubeOVNLoadBalancers:
		// Not a fault, but a user who finds no ClusterIP in the gateway's table learns here who
		// serves it (the explain text says the same).
		part := "only the EIP part"
		if !isLB {
			part = "nothing of this ClusterIP Service"
		}
		b.cipWhy = &Event{Type: corev1.EventTypeNormal, Reason: ReasonClusterIPByOVN, Message: BoundMessage(fmt.Sprintf(
			"ClusterIP %s is served by kube-ovn's OVN load balancers (the controller runs with --enable-lb and without --enable-gw-nftable-svc-cluster-ip): gateway %s serves %s",
			clusterIP, b.gateway, part))}
	default:
		b.cipWhy = &Event{Message: "the controller runs without --enable-gw-nftable-svc-cluster-ip"}
	}
}

// bindEIP makes the EIP part of a LoadBalancer Service eligible (b.eipAddr), or says why not.
func (ix *Index) bindEIP(svc *corev1.Service, b *binding) {
	b.eipName = svc.Annotations[AnnotationEIP]
	switch {
	case b.eipName == "":
		b.eipWhy = warning(ReasonEIPMissing, "a LoadBalancer Service with annotation %s=%s also needs annotation %s=<IptablesEIP name>", AnnotationGateway, b.gateway, AnnotationEIP)
	case len(validation.IsDNS1123Subdomain(b.eipName)) > 0:
		b.eipWhy = warning(ReasonInvalidAnnotation, "annotation %s=%q is not a valid IptablesEIP name", AnnotationEIP, b.eipName)
	default:
		b.eip = ix.eips[b.eipName]
		switch {
		case b.eip == nil || b.eip.DeletionTimestamp != nil || b.eip.Spec.NatGwDp != b.gateway || !EIPAdmitted(svc.Namespace, b.eip):
			// One answer for an EIP that is missing, of another gateway, or closed to the
			// namespace: which EIPs exist is not this namespace's to learn (SPEC N8), and the
			// webhook answers the three alike.
			b.eipWhy = warning(ReasonEIPMissing, "gateway %s has no IptablesEIP %s that namespace %s may use: the EIP part is served as soon as it has one of that name, "+
				"Ready, whose %s annotation names the namespace or is absent", b.gateway, b.eipName, svc.Namespace, AnnotationAllowedNamespaces)
		default:
			if addr, ok := readyEIPAddress(b.eip); ok {
				b.eipAddr = addr
			} else {
				b.eipWhy = warning(ReasonEIPNotReady, "IptablesEIP %s is not Ready (no IPv4 status.ip yet): the EIP part is served as soon as it is", b.eipName)
			}
		}
	}
}

// NotAdmittedText is the one answer, in events and in the webhook's rejections, for a gateway a
// namespace may not use, whether it exists or not (SPEC N1, N8).
func NotAdmittedText(namespace, gateway string) string {
	return fmt.Sprintf("namespace %s may not use VpcNatGateway %s: it does not exist, or neither its Vpc's spec.namespaces nor its %s annotation names the namespace",
		namespace, gateway, AnnotationAllowedNamespaces)
}

// admitted applies SPEC N1: a Service may use gateway gw when its namespace is listed in the
// gateway's Vpc spec.namespaces (kube-ovn's own binding of namespaces to a VPC), or in the
// gateway's allow-list annotation. Nothing else admits it: a Vpc that is missing or lists no
// namespace admits nobody.
func (ix *Index) admitted(namespace string, gw *kubeovnv1.VpcNatGateway) bool {
	return Admitted(namespace, gw, ix.vpcs[gw.Spec.Vpc])
}

// Admitted is SPEC N1's rule for one namespace, gateway and the gateway's Vpc (nil when missing),
// shared with the webhook.
func Admitted(namespace string, gw *kubeovnv1.VpcNatGateway, vpc *kubeovnv1.Vpc) bool {
	if vpc != nil && vpc.DeletionTimestamp == nil && slices.Contains(vpc.Spec.Namespaces, namespace) {
		return true
	}
	return listAdmits(gw.Annotations, namespace, false)
}

// AdmittedNames are the namespaces gateway gw admits by name under SPEC N1 (its Vpc's, nil when
// missing, and its allow-list's), and whether its allow-list admits every namespace ("*").
func AdmittedNames(gw *kubeovnv1.VpcNatGateway, vpc *kubeovnv1.Vpc) (names map[string]bool, all bool) {
	names = map[string]bool{}
	if vpc != nil && vpc.DeletionTimestamp == nil {
		for _, n := range vpc.Spec.Namespaces {
			names[n] = true
		}
	}
	if v, ok := gw.Annotations[AnnotationAllowedNamespaces]; ok {
		for _, n := range strings.Split(v, ",") {
			switch n = strings.TrimSpace(n); n {
			case "*":
				all = true
			case "":
			default:
				names[n] = true
			}
		}
	}
	return names, all
}

// EIPAdmitted is SPEC N1's rule for one namespace and an EIP of a gateway it is admitted to: an
// EIP without an allow-list admits every namespace of its gateway, one with it only those it
// names. Shared with the webhook.
func EIPAdmitted(namespace string, eip *kubeovnv1.IptablesEIP) bool {
	return listAdmits(eip.Annotations, namespace, true)
}

// listAdmits reads the allow-list annotation of an object: whether it names namespace (or "*").
// Without the annotation the answer is absent.
func listAdmits(annotations map[string]string, namespace string, absent bool) bool {
	v, ok := annotations[AnnotationAllowedNamespaces]
	if !ok {
		return absent
	}
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n == "*" || n == namespace {
			return true
		}
	}
	return false
}

// checkFromSubnet applies SPEC S6 with K4: ovn.kubernetes.io/service_external_ip_from_subnet
// beside the gateway annotation is a second ingress address, unless it names the Subnet that holds
// the EIP address the Service is served on. kube-ovn-controller writes exactly that annotation on
// every LoadBalancer Service whose ingress lies in one of its Subnets, so vpcgw's own EIP ingress
// gets it; that is kube-ovn describing vpcgw's address, not another one.
func (ix *Index) checkFromSubnet(svc *corev1.Service, b *binding) {
	name, ok := svc.Annotations[AnnotationExternalIPFromSubnet]
	if !ok || b.blocked != nil {
		return
	}
	if b.eipAddr.IsValid() && ix.subnetHolds(name, b.eipAddr) {
		return
	}
	*b = binding{gateway: b.gateway, blocked: warning(ReasonUnsupported,
		"annotations %s and %s are mutually exclusive (a Service must not publish two ingress addresses): remove %s, or let it name the Subnet of the EIP",
		AnnotationGateway, AnnotationExternalIPFromSubnet, AnnotationExternalIPFromSubnet)}
}

// subnetHolds reports whether Subnet name exists and one of its CIDRs contains ip.
func (ix *Index) subnetHolds(name string, ip netip.Addr) bool {
	sub := ix.subnets[name]
	if sub == nil {
		return false
	}
	for _, c := range strings.Split(sub.Spec.CIDRBlock, ",") {
		if p, err := netip.ParsePrefix(strings.TrimSpace(c)); err == nil && p.Contains(ip) {
			return true
		}
	}
	return false
}

// PlanService decides everything about one Service. Its cost is that of the Service's own ports,
// endpoints and records. A served Service takes its identities from its gateway's bound (SPEC
// N4), so the order Services are planned in matters: Compute plans them in budget order.
func (ix *Index) PlanService(svc *corev1.Service) ServicePlan {
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	sp := ServicePlan{Key: key, UID: svc.UID}
	b := ix.bind(svc)
	sp.Gateway = b.gateway

	switch {
	case b.quiet != "":
		sp.EIPReason, sp.ClusterIPReason = b.quiet, b.quiet
	case b.blocked != nil:
		sp.EIPReason, sp.ClusterIPReason = b.blocked.Message, b.blocked.Message
		sp.Events = append(sp.Events, *b.blocked)
	default:
		for _, why := range []struct {
			ev     *Event
			reason *string
		}{{b.cipWhy, &sp.ClusterIPReason}, {b.eipWhy, &sp.EIPReason}} {
			if why.ev == nil {
				continue
			}
			*why.reason = why.ev.Message
			if why.ev.Reason != "" {
				sp.Events = append(sp.Events, *why.ev)
			}
		}
		ix.planIdentities(svc, b, &sp)
		sp.asks = LoadOf(sp.Identities)
		ix.takeLoad(svc, &sp)
	}
	if sp.Gateway == "" {
		sp.Gateway = ix.recordGateway(svc.UID)
	}
	ix.planWrites(svc, b, &sp)
	return sp
}

// planIdentities fills identities and records for an eligible Service (SPEC I1, I2, B1-B3, S7).
func (ix *Index) planIdentities(svc *corev1.Service, b binding, sp *ServicePlan) {
	serveEIP, serveCIP := ix.servedParts(svc, b, sp)
	if !serveEIP && !serveCIP {
		return
	}
	timeout := affinityTimeout(svc)
	var ranges []string
	if serveEIP {
		var ok bool
		if ranges, ok = eipSourceRanges(svc, sp); !ok && !serveCIP {
			return
		}
	}
	resolver := ix.newResolver(svc, b.gw)
	group := IdentityGroup(svc.UID)
	sp.Identities = make([]gwstate.Identity, 0, 2*len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		proto, ok := ServedProtocol(p.Protocol)
		if !ok {
			sp.Events = append(sp.Events, *warning(ReasonUnsupported, "port %q %d/%s is not served: only TCP and UDP are supported", p.Name, p.Port, p.Protocol))
			continue
		}
		backends, draining := ix.backendsFor(svc, p, resolver)
		backends = ix.boundBackends(sp, p, proto, backends)
		if limit := ix.gates.maxBackends(); len(draining) > limit {
			draining = draining[:limit] // kept flows are best effort; the event is about serving ones
		}
		sp.addIdentities(gwstate.Identity{Port: p.Port, Protocol: proto, Backends: backends, Draining: draining,
			AffinityTimeoutSeconds: timeout, Group: group}, ranges)
		if ix.gates.dnatRuleLedger() {
			addRecords(svc, b, sp, p, proto, backends, timeout)
		}
	}
	sp.Events = append(sp.Events, resolver.events()...)
	if ix.gates.dnatRuleLedger() {
		dedupeRecords(&sp.Records)
	} else {
		sp.Record = desiredServiceRecord(svc, b, sp, timeout)
	}
}

// servedParts decides which eligible parts the Service holds (kube-ovn's NAT and the other
// claimants let it, SPEC N3, I2), and sets them in sp.
func (ix *Index) servedParts(svc *corev1.Service, b binding, sp *ServicePlan) (serveEIP, serveCIP bool) {
	serveEIP = b.eipAddr.IsValid() && ix.freeOfKubeOVNNat(svc, sp, b.eipName) &&
		ix.holdsAll(svc, sp, b.eipAddr, fmt.Sprintf("EIP %s (%s)", b.eipName, b.eipAddr), &sp.EIPReason)
	serveCIP = b.clusterIP.IsValid() && ix.holdsAll(svc, sp, b.clusterIP, "ClusterIP "+b.clusterIP.String(), &sp.ClusterIPReason)
	sp.EIPServed, sp.ClusterIPServed = serveEIP, serveCIP
	if serveEIP {
		sp.EIP = b.eipAddr
	}
	if serveCIP {
		sp.ClusterIP = b.clusterIP
	}
	return serveEIP, serveCIP
}

// eipSourceRanges are the ranges that may reach the EIP (SPEC N7). Without a valid IPv4 one, the
// EIP would admit nobody: its part is not served, and ok is false.
func eipSourceRanges(svc *corev1.Service, sp *ServicePlan) (ranges []string, ok bool) {
	if len(svc.Spec.LoadBalancerSourceRanges) > 0 && strings.TrimSpace(svc.Annotations[AnnotationLegacySourceRanges]) != "" {
		sp.Events = append(sp.Events, *warning(ReasonUnsupported, "annotation %s is ignored: spec.loadBalancerSourceRanges is set and decides who reaches the EIP",
			AnnotationLegacySourceRanges))
	}
	ranges, from, ok := sourceRanges(svc)
	if !ok {
		ev := warning(ReasonUnsupported, "%s has no valid IPv4 range: the EIP (IPv4) would admit nobody, so it is not served", from)
		sp.EIPServed, sp.EIP, sp.EIPReason = false, netip.Addr{}, ev.Message
		sp.Events = append(sp.Events, *ev)
	}
	return ranges, ok
}

// boundBackends are at most --max-backends-per-identity of a port's backends (an event says when
// some are left out).
func (ix *Index) boundBackends(sp *ServicePlan, p corev1.ServicePort, proto gwstate.Protocol, backends []gwstate.Backend) []gwstate.Backend {
	if limit := ix.gates.maxBackends(); len(backends) > limit {
		sp.Events = append(sp.Events, *warning(ReasonLimit, "port %d/%s has %d ready backends; at most %d are used (the controller's --max-backends-per-identity)",
			p.Port, proto, len(backends), limit))
		return backends[:limit]
	}
	return backends
}

// addIdentities adds, for each served part, the identity id with the part's VIP. Only the listed
// sources reach the EIP identity (SPEC N7); as with kube-proxy, the ClusterIP stays open to the
// VPC.
func (sp *ServicePlan) addIdentities(id gwstate.Identity, ranges []string) {
	if sp.EIP.IsValid() {
		eip := id
		eip.VIP, eip.SourceRanges = sp.EIP, ranges
		sp.Identities = append(sp.Identities, eip)
	}
	if sp.ClusterIP.IsValid() {
		id.VIP = sp.ClusterIP
		sp.Identities = append(sp.Identities, id)
	}
}

// addRecords adds the IptablesDnatRule records of port p, one per backend.
func addRecords(svc *corev1.Service, b binding, sp *ServicePlan, p corev1.ServicePort, proto gwstate.Protocol, backends []gwstate.Backend, timeout int32) {
	if sp.Records == nil {
		sp.Records = make([]kubeovnv1.IptablesDnatRule, 0, len(backends)*len(svc.Spec.Ports))
	}
	labels := recordLabels(svc, b, sp, p.Port)
	for _, be := range backends {
		sp.Records = append(sp.Records, desiredRecord(svc, b, sp, labels, p, proto, be, timeout))
	}
}

// freeOfKubeOVNNat reports whether kube-ovn's own NAT leaves svc's EIP ports free; otherwise it
// records why (SPEC N3). The part is not served at all, as for a conflict between Services.
func (ix *Index) freeOfKubeOVNNat(svc *corev1.Service, sp *ServicePlan, eip string) bool {
	why := ix.nat.Holds(eip, svc)
	if why == "" {
		return true
	}
	ev := warning(ReasonConflict, "%s: this Service's EIP part is not served", why)
	sp.EIPReason = ev.Message
	sp.Events = append(sp.Events, *ev)
	return false
}

// KubeOVNNat is what kube-ovn's own NAT forwards on EIPs: the ports of its DNAT rules (not
// records) and the whole EIP of a floating IP. vpcgw's DNAT would shadow them, so they are held
// (SPEC N3), in the model and in the webhook alike.
type KubeOVNNat struct {
	ports map[string]map[natPort]bool // by EIP name
	fips  map[string]bool
}

// natPort is one EIP port kube-ovn's NAT forwards.
type natPort struct {
	port     int32
	protocol corev1.Protocol
}

// NewKubeOVNNat reads kube-ovn's DNAT and FIP rules; records and rules being deleted hold nothing.
func NewKubeOVNNat(dnat []kubeovnv1.IptablesDnatRule, fips []kubeovnv1.IptablesFIPRule) KubeOVNNat {
	n := KubeOVNNat{ports: map[string]map[natPort]bool{}, fips: map[string]bool{}}
	for i := range dnat {
		r := &dnat[i]
		port, err := strconv.ParseUint(strings.TrimSpace(r.Spec.ExternalPort), 10, 16)
		if IsRecord(r) || r.DeletionTimestamp != nil || r.Spec.EIP == "" || err != nil {
			continue
		}
		if n.ports[r.Spec.EIP] == nil {
			n.ports[r.Spec.EIP] = map[natPort]bool{}
		}
		// A rule without a protocol is taken to forward both.
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
			if r.Spec.Protocol == "" || strings.EqualFold(r.Spec.Protocol, string(proto)) {
				n.ports[r.Spec.EIP][natPort{port: int32(port), protocol: proto}] = true
			}
		}
	}
	for i := range fips {
		if r := &fips[i]; r.DeletionTimestamp == nil && r.Spec.EIP != "" {
			n.fips[r.Spec.EIP] = true
		}
	}
	return n
}

// Holds says why kube-ovn's NAT holds a port svc would serve on EIP eip, or "" when it holds none.
func (n KubeOVNNat) Holds(eip string, svc *corev1.Service) string {
	if n.fips[eip] {
		return fmt.Sprintf("IptablesEIP %s is a floating IP of kube-ovn (an IptablesFIPRule maps all its ports); use another EIP", eip)
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := ServedProtocol(p.Protocol); ok && n.ports[eip][natPort{port: p.Port, protocol: PortProtocol(p.Protocol)}] {
			return fmt.Sprintf("IptablesEIP %s port %d/%s is forwarded by kube-ovn's own NAT (an IptablesDnatRule); use another port or another EIP",
				eip, p.Port, PortProtocol(p.Protocol))
		}
	}
	return ""
}

// holdsAll reports whether svc holds every identity it would serve on vip; otherwise it records
// the conflict (SPEC I2): the part is not served at all.
func (ix *Index) holdsAll(svc *corev1.Service, sp *ServicePlan, vip netip.Addr, what string, reason *string) bool {
	for _, p := range svc.Spec.Ports {
		if _, ok := ServedProtocol(p.Protocol); !ok {
			continue
		}
		if holder := ix.holder(vip, p, sp.Key); holder != sp.Key {
			// Another namespace's Service is not named: its owner's objects are not this user's to
			// read (SPEC N8).
			who := "a Service of another namespace"
			if holder.Namespace == svc.Namespace {
				who = "Service " + holder.String()
			}
			ev := warning(ReasonConflict, "%s port %d/%s is held by %s: this Service does not serve it and takes over when that Service releases it",
				what, p.Port, PortProtocol(p.Protocol), who)
			*reason = ev.Message
			sp.Events = append(sp.Events, *ev)
			return false
		}
	}
	return true
}

// AnnotationLegacySourceRanges is the annotation that predates spec.loadBalancerSourceRanges;
// cloud load balancers still read it when the field is empty (k8s.io/cloud-provider's
// GetLoadBalancerSourceRanges), and so does vpcgw, so that it is never silently ignored (N7).
const AnnotationLegacySourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// sourceRanges are the canonical IPv4 prefixes of spec.loadBalancerSourceRanges, or when it is
// empty of the legacy annotation (comma-separated), sorted as strings and unique (nil: everyone);
// from names where they came from. ok is false when ranges are given but none is IPv4: the EIP
// would admit nobody. The API server validates the field; anything unparsable is skipped.
func sourceRanges(svc *corev1.Service) (ranges []string, from string, ok bool) {
	given, from := svc.Spec.LoadBalancerSourceRanges, "spec.loadBalancerSourceRanges"
	if v := strings.TrimSpace(svc.Annotations[AnnotationLegacySourceRanges]); len(given) == 0 && v != "" {
		given, from = strings.Split(v, ","), "annotation "+AnnotationLegacySourceRanges
	}
	if len(given) == 0 {
		return nil, from, true
	}
	for _, r := range given {
		p, err := netip.ParsePrefix(strings.TrimSpace(r))
		if err != nil || !p.Addr().Is4() {
			continue
		}
		ranges = append(ranges, p.Masked().String())
	}
	slices.Sort(ranges)
	ranges = slices.Compact(ranges)
	return ranges, from, len(ranges) > 0
}

// affinityTimeout is the ClientIP timeout of SPEC S7 (0: no affinity).
func affinityTimeout(svc *corev1.Service) int32 {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return 0
	}
	t := kubeovnv1.DefaultDnatSessionAffinityTimeoutSeconds
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
		t = *c.ClientIP.TimeoutSeconds
	}
	return min(t, kubeovnv1.MaxDnatSessionAffinityTimeoutSeconds)
}

// servedPorts counts the TCP and UDP ports of a Service.
// ServedPorts counts the ports of svc that claim an identity (TCP and UDP, SPEC S5): what the
// per-Service bound (SPEC N4) counts, in the model and in the webhook.
// portList spells a Service's ports for an event, the first few of them.
func portList(ports []corev1.ServicePort) string {
	const shown = 4
	var parts []string
	for i, p := range ports {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(ports)-shown))
			break
		}
		parts = append(parts, fmt.Sprintf("%d/%s", p.Port, PortProtocol(p.Protocol)))
	}
	if len(parts) == 0 {
		return "no ports"
	}
	return strings.Join(parts, ", ")
}

// ServedPorts counts the Service's TCP and UDP ports, the ones vpcgw serves.
func ServedPorts(svc *corev1.Service) int {
	n := 0
	for _, p := range svc.Spec.Ports {
		if _, ok := ServedProtocol(p.Protocol); ok {
			n++
		}
	}
	return n
}

// PortProtocol is the protocol of a Service or EndpointSlice port: unset is TCP, the API's
// default. The one place that says so.
func PortProtocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// MaxEventMessage bounds an event's message: the API server refuses an Event whose note passes
// 1 KiB, and a tenant's annotation values appear in messages (SPEC N6).
const MaxEventMessage = 1024

// BoundMessage is s cut to MaxEventMessage bytes on a character boundary, ending in "…" when cut.
func BoundMessage(s string) string {
	if len(s) <= MaxEventMessage {
		return s
	}
	const ellipsis = "…"
	cut := MaxEventMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// ServedProtocol maps a Service port protocol to a served one (SPEC S5: TCP and UDP; "" is TCP).
func ServedProtocol(p corev1.Protocol) (gwstate.Protocol, bool) {
	switch PortProtocol(p) {
	case corev1.ProtocolTCP:
		return gwstate.TCP, true
	case corev1.ProtocolUDP:
		return gwstate.UDP, true
	}
	return "", false
}

func clusterIPsOf(svc *corev1.Service) []string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs
	}
	if svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}
	}
	return nil
}

// ipv4ClusterIP returns the Service's IPv4 ClusterIP (the IPv4 part of a dual-stack Service).
func ipv4ClusterIP(svc *corev1.Service) (netip.Addr, bool) {
	for _, s := range clusterIPsOf(svc) {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// readyEIPAddress returns the EIP's bound IPv4 address when it is Ready (SPEC S4), or while
// kube-ovn redoes it after a gateway restart (SPEC K6): kube-ovn then marks every EIP of the gateway
// ready=false with a redo time and replays eip-add into the new pod, keeping status.ip. That is a
// transient state of the same address, not an EIP going away: withdrawing ingress and records for
// it would only add churn and a gap after the gateway is back.
func readyEIPAddress(eip *kubeovnv1.IptablesEIP) (netip.Addr, bool) {
	redoing := eip.Status.Redo != "" && (eip.Spec.V4ip == "" || eip.Spec.V4ip == eip.Status.IP)
	if !eip.Status.Ready && !redoing {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(eip.Status.IP)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, false
	}
	return ip, true
}
