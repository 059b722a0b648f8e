// Package webhook is vpcgw's validating admission webhook (SPEC W1-W7): pure validators that
// take the admitted object and what they need from the cluster as plain arguments, admission
// handlers that read the cluster through a controller-runtime cache, and the HTTPS server.
//
// The webhook only rejects early what the controller would refuse anyway: admission reads a
// cache, can race and can be bypassed (failurePolicy Ignore, webhook down, configuration removed),
// so the controller re-checks every rule (model.Index: S2, S3, S6, I2) and never depends on it.
//
// Every validator returns the list of problems, each a complete sentence a user can act on; an
// empty list admits the request.
package webhook

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// serviceBinding is what the admission rules read from a Service's annotations. As in the model,
// an empty gateway or EIP value is the same as no annotation, and the mere presence of
// service_external_ip_from_subnet counts (SPEC S6).
type serviceBinding struct {
	gateway, eip   string
	fromSubnet     bool
	fromSubnetText string
}

func bindingOf(svc *corev1.Service) serviceBinding {
	if svc == nil {
		return serviceBinding{}
	}
	v, ok := svc.Annotations[model.AnnotationExternalIPFromSubnet]
	return serviceBinding{
		gateway:        svc.Annotations[model.AnnotationGateway],
		eip:            svc.Annotations[model.AnnotationEIP],
		fromSubnet:     ok,
		fromSubnetText: v,
	}
}

// ValidateService applies SPEC W1 and W2 to a Service create (old == nil) or update. It reads
// only the Service: the cluster-dependent part (W3) is ValidateServiceClaims, needed only when
// NeedsClaimCheck says so.
//
// An update that does not touch ovn.kubernetes.io/vpc_nat_gw, ovn.kubernetes.io/eip or
// ovn.kubernetes.io/service_external_ip_from_subnet is never rejected: a Service must stay
// editable (and its finalizer removable) when its EIP is gone, it lost a conflict, or it was
// admitted while the webhook was down. An update that touches them is rejected only for a
// problem it introduces (a create is an update from a Service without annotations):
//   - W2: the gateway or the EIP changes from one non-empty value to another. Clearing is
//     allowed (SPEC L2: clearing both leaves the mode, clearing only the EIP releases the EIP
//     part; clearing only the gateway leaves the mode too, since the model ignores an EIP
//     annotation without a gateway). Setting a value where there was none is allowed (it is how a
//     LoadBalancer Service that lacks its EIP annotation is fixed).
//   - W1: a new non-empty value that is not a valid object name (DNS-1123 subdomain); the
//     gateway annotation together with service_external_ip_from_subnet when the old Service did
//     not already have both (S6); a LoadBalancer Service that enters the mode (gets the gateway
//     annotation) without the EIP annotation (S2).
//
// subnets are the Subnets the handler read for service_external_ip_from_subnet (SPEC K4): the
// annotation is admitted beside the gateway annotation when it names one of them that holds every
// address of the Service's ingress, as kube-ovn-controller writes it for vpcgw's own EIP ingress.
func ValidateService(old, svc *corev1.Service, subnets ...kubeovnv1.Subnet) []string {
	o, n := bindingOf(old), bindingOf(svc)
	if old != nil && o == n {
		return nil
	}
	return append(changeProblems(o, n), newValueProblems(o, n, svc, subnets)...)
}

// changeProblems are W2's: a gateway or an EIP changed from one non-empty value to another.
func changeProblems(o, n serviceBinding) []string {
	var problems []string
	if o.gateway != "" && n.gateway != "" && o.gateway != n.gateway {
		problems = append(problems, fmt.Sprintf("annotation %s cannot change from %q to %q: the gateway binding of a Service is immutable; "+
			"delete and recreate the Service (or remove both %s and %s to take it off the gateway)",
			model.AnnotationGateway, o.gateway, n.gateway, model.AnnotationGateway, model.AnnotationEIP))
	}
	if o.eip != "" && n.eip != "" && o.eip != n.eip {
		problems = append(problems, fmt.Sprintf("annotation %s cannot change from %q to %q: the EIP binding of a Service is immutable; "+
			"delete and recreate the Service (or remove %s to release the EIP)",
			model.AnnotationEIP, o.eip, n.eip, model.AnnotationEIP))
	}
	return problems
}

// newValueProblems are W1's: what a new annotation value, or a new pair of them, introduces.
func newValueProblems(o, n serviceBinding, svc *corev1.Service, subnets []kubeovnv1.Subnet) []string {
	var problems []string
	if n.gateway != "" && n.gateway != o.gateway {
		problems = append(problems, nameProblems(model.AnnotationGateway, "VpcNatGateway", n.gateway)...)
	}
	if n.eip != "" && n.eip != o.eip {
		problems = append(problems, nameProblems(model.AnnotationEIP, "IptablesEIP", n.eip)...)
	}
	if n.gateway != "" && n.fromSubnet && (o.gateway == "" || !o.fromSubnet) && !ingressInSubnet(svc, n.fromSubnetText, subnets) {
		problems = append(problems, fmt.Sprintf("annotations %s and %s are mutually exclusive (a Service must not publish two ingress addresses): remove one",
			model.AnnotationGateway, model.AnnotationExternalIPFromSubnet))
	}
	if n.gateway != "" && o.gateway == "" && svc.Spec.Type == corev1.ServiceTypeLoadBalancer && n.eip == "" {
		problems = append(problems, fmt.Sprintf("a LoadBalancer Service with annotation %s=%s also needs annotation %s=<IptablesEIP name>",
			model.AnnotationGateway, n.gateway, model.AnnotationEIP))
	}
	return problems
}

// ingressInSubnet reports whether the Service has ingress addresses and every one lies in the
// Subnet named name (one of subnets).
func ingressInSubnet(svc *corev1.Service, name string, subnets []kubeovnv1.Subnet) bool {
	ing := svc.Status.LoadBalancer.Ingress
	if len(ing) == 0 {
		return false
	}
	for i := range subnets {
		if subnets[i].Name != name {
			continue
		}
		for _, in := range ing {
			if !cidrsHold(subnets[i].Spec.CIDRBlock, in.IP) {
				return false
			}
		}
		return true
	}
	return false
}

func cidrsHold(cidrs, addr string) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	for _, c := range strings.Split(cidrs, ",") {
		if p, err := netip.ParsePrefix(strings.TrimSpace(c)); err == nil && p.Contains(ip) {
			return true
		}
	}
	return false
}

func nameProblems(annotation, kind, value string) []string {
	errs := validation.IsDNS1123Subdomain(value)
	if len(errs) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("annotation %s=%q is not a valid %s name: %s", annotation, value, kind, strings.Join(errs, "; "))}
}

// NeedsClaimCheck reports whether SPEC W3 applies to a create (old == nil) or update, and which
// gateway and EIP the cluster must be read for: the Service names both, and the pair is new, or
// the Service's claims change (a port added or changed, or the type turned into LoadBalancer):
// adding a port must not take over an identity another Service serves (SPEC N3). An update that
// changes neither is not re-checked (see ValidateService).
func NeedsClaimCheck(old, svc *corev1.Service) (gateway, eip string, ok bool) {
	o, n := bindingOf(old), bindingOf(svc)
	if n.gateway == "" || n.eip == "" {
		return "", "", false
	}
	if old != nil && o.gateway == n.gateway && o.eip == n.eip && !claimsGrow(old, svc) {
		return "", "", false
	}
	return n.gateway, n.eip, true
}

// claimsGrow reports whether svc claims an EIP identity that old did not.
func claimsGrow(old, svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if old.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return true
	}
	held := portsOf(old)
	for _, p := range svc.Spec.Ports {
		if k, ok := keyOf(p); ok && !held[k] {
			return true
		}
	}
	return false
}

// ValidatePortBound applies SPEC N4's bound on a Service's ports before anything else reads
// them, so that a request's cost is bounded whatever its size: a Service that names a gateway
// and newly has more than maxPorts TCP/UDP ports is rejected (the model would not serve it). It
// reports whether the Service is over the bound at all: such a Service claims nothing, so the
// handler skips the claim check. One that was over the bound already stays editable (its
// finalizer removable); the controller's event says why it is not served.
func ValidatePortBound(old, svc *corev1.Service, maxPorts int) (problems []string, over bool) {
	if bindingOf(svc).gateway == "" {
		return nil, false
	}
	n := model.ServedPorts(svc)
	if n <= maxPorts {
		return nil, false
	}
	if old != nil && model.ServedPorts(old) > maxPorts && bindingOf(old) == bindingOf(svc) {
		return nil, true
	}
	return []string{fmt.Sprintf("the Service has %d TCP/UDP ports: a Service served by a VPC NAT gateway may have at most %d "+
		"(the controller's --max-ports-per-service); split it into several Services", n, maxPorts)}, true
}

// Holders are the Services that may hold the identities of one EIP, as the model decides it:
// only Services the gateway would serve count, so a namespace that is not admitted (SPEC N1)
// cannot squat a port against one that is.
type Holders struct {
	// Gateway is the annotated VpcNatGateway and Vpc its Vpc (nil when missing); without the
	// gateway nobody is served, so nobody holds anything.
	Gateway *kubeovnv1.VpcNatGateway
	Vpc     *kubeovnv1.Vpc
	// Services may hold the EIP's identities (any; the validator picks).
	Services []corev1.Service
}

// ValidateServiceClaims applies SPEC W3 to a Service that names a gateway and an EIP.
//   - eip is the annotated IptablesEIP, nil when it does not exist. A missing, deleted or
//     not-Ready EIP is allowed (S4); one that exists must belong to the annotated gateway
//     (spec.natGwDp, S3).
//   - of others.Services, the validator keeps those that are LoadBalancer Services with another
//     UID, not being deleted, with the same gateway and EIP annotations, whose namespace the
//     gateway and the EIP admit (SPEC N1: model.Admitted, model.EIPAdmitted). A port (TCP or
//     UDP) of svc that one of them also has is rejected, naming the holder the controller would
//     pick (I2: model.CompareClaims, the first claim, then the oldest, then namespace/name).
//
// Only a LoadBalancer Service claims EIP identities; for other types only the EIP's gateway is
// checked. The cost is linear in the ports of svc and of the holders.
func ValidateServiceClaims(svc *corev1.Service, eip *kubeovnv1.IptablesEIP, others Holders) []string {
	b := bindingOf(svc)
	if b.gateway == "" || b.eip == "" {
		return nil
	}
	var problems []string
	if eip != nil && eip.DeletionTimestamp == nil && eip.Spec.NatGwDp != b.gateway {
		// The EIP's own gateway is not named: it is not this namespace's to learn (SPEC N8).
		problems = append(problems, fmt.Sprintf("IptablesEIP %s is not an EIP of gateway %s: use an EIP whose spec.natGwDp is %s",
			b.eip, b.gateway, b.gateway))
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || others.Gateway == nil || others.Gateway.Name != b.gateway {
		return problems
	}
	held := firstHolders(others.competitors(svc, b, eip))
	for _, p := range svc.Spec.Ports {
		k, ok := keyOf(p)
		if !ok || held[k] == nil {
			continue
		}
		h := held[k]
		// Another namespace's Service is not named (SPEC N8).
		who := "a Service of another namespace"
		if h.Namespace == svc.Namespace {
			who = "Service " + h.Namespace + "/" + h.Name
		}
		problems = append(problems, fmt.Sprintf("IptablesEIP %s port %d/%s is already held by %s: "+
			"one (EIP, port, protocol) is served by one Service only; use another port or another EIP",
			b.eip, k.port, k.protocol, who))
	}
	return problems
}

// competitors are the Services of others that claim ports of svc's EIP against it, the best
// claim first.
func (others Holders) competitors(svc *corev1.Service, b serviceBinding, eip *kubeovnv1.IptablesEIP) []*corev1.Service {
	out := make([]*corev1.Service, 0, len(others.Services))
	for i := range others.Services {
		if o := &others.Services[i]; others.competes(o, svc, b, eip) {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, model.CompareClaims)
	return out
}

// competes says whether o is another live LoadBalancer Service with svc's gateway and EIP
// annotations (b), in a namespace the gateway and the EIP admit.
func (others Holders) competes(o, svc *corev1.Service, b serviceBinding, eip *kubeovnv1.IptablesEIP) bool {
	ob := bindingOf(o)
	switch {
	case (o.UID != "" && o.UID == svc.UID) || (o.Namespace == svc.Namespace && o.Name == svc.Name):
		return false // svc itself
	case o.DeletionTimestamp != nil || o.Spec.Type != corev1.ServiceTypeLoadBalancer:
		return false
	case ob.gateway != b.gateway || ob.eip != b.eip:
		return false
	}
	return model.Admitted(o.Namespace, others.Gateway, others.Vpc) && (eip == nil || model.EIPAdmitted(o.Namespace, eip))
}

// firstHolders maps each port of the holders, best first, to its first (best) holder.
func firstHolders(holders []*corev1.Service) map[portKey]*corev1.Service {
	held := map[portKey]*corev1.Service{}
	for _, h := range holders {
		for _, p := range h.Spec.Ports {
			if k, ok := keyOf(p); ok && held[k] == nil {
				held[k] = h
			}
		}
	}
	return held
}

// portKey is one EIP port a Service claims.
type portKey struct {
	port     int32
	protocol corev1.Protocol
}

// keyOf is the model's rule on served protocols (S5: SCTP claims nothing), spelled as Kubernetes
// spells protocols for the messages.
func keyOf(p corev1.ServicePort) (portKey, bool) {
	if _, ok := model.ServedProtocol(p.Protocol); !ok {
		return portKey{}, false
	}
	return portKey{p.Port, model.PortProtocol(p.Protocol)}, true
}

func portsOf(svc *corev1.Service) map[portKey]bool {
	out := make(map[portKey]bool, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		if k, ok := keyOf(p); ok {
			out[k] = true
		}
	}
	return out
}

// ValidateRecordWrite applies SPEC W4 to a create (old == nil), update, or delete (obj == nil)
// of an IptablesDnatRule by user. Rules carrying the record label (on either side of an update:
// forging one and unmarking one alike) are vpcgw's controller-owned accounting records (R4): only
// controllerUser may write or delete them. Every other rule, kube-ovn's own share rules included,
// is not vpcgw's business (SPEC W4, K8): kube-ovn v1.16.2's CRD prunes spec.type, so the type
// cannot tell records apart.
func ValidateRecordWrite(op admissionv1.Operation, user, controllerUser string, old, obj *kubeovnv1.IptablesDnatRule) []string {
	var r *kubeovnv1.IptablesDnatRule
	switch {
	case obj != nil && model.IsRecord(obj):
		r = obj
	case old != nil && model.IsRecord(old):
		r = old
	default:
		return nil
	}
	if controllerUser != "" && user == controllerUser {
		return nil
	}
	svc := cmp.Or(r.Labels[model.LabelRecordName], "<svc>")
	return []string{fmt.Sprintf("IptablesDnatRule %s carries label %s=true: it is a controller-owned accounting record of a Service; "+
		"only the vpcgw controller (%s) may %s it, not %q. Change the Service instead (the controller keeps its records in step), "+
		"and inspect a Service's records with: kubectl get iptables-dnat-rules -l %s=%s",
		r.Name, model.LabelRecord, controllerUser, verb(op), user, model.LabelRecordName, svc)}
}

// ValidateServiceRecordWrite applies SPEC W4 to a write of a ServiceRecord (vpcgw.io): every one
// is controller-owned, so only controllerUser may create, update or delete it.
func ValidateServiceRecordWrite(op admissionv1.Operation, user, controllerUser, name string, labels map[string]string) []string {
	if controllerUser != "" && user == controllerUser {
		return nil
	}
	svc := cmp.Or(labels[model.LabelRecordName], "<svc>")
	return []string{fmt.Sprintf("ServiceRecord %s is a controller-owned accounting record of a Service: only the vpcgw controller (%s) may %s it, not %q. "+
		"Change the Service instead (the controller keeps its record in step), and inspect a Service's record with: kubectl get servicerecords -l %s=%s",
		name, controllerUser, verb(op), user, model.LabelRecordName, svc)}
}

func verb(op admissionv1.Operation) string {
	switch op {
	case admissionv1.Create:
		return "create"
	case admissionv1.Delete:
		return "delete"
	default:
		return "update"
	}
}

// servicesCount says how many distinct Services names holds ("1 Service", "3 Services").
func servicesCount(names []string) string {
	slices.Sort(names)
	if n := len(slices.Compact(names)); n != 1 {
		return fmt.Sprintf("%d Services", n)
	}
	return "1 Service"
}

// claim is what the delete rules read of a record of either form: its labels and whether it is
// being deleted.
type claim struct {
	labels   map[string]string
	deleting bool
	name     string
}

func claimsOf(records []kubeovnv1.IptablesDnatRule, serviceRecords []vpcgwv1alpha1.ServiceRecord) []claim {
	out := make([]claim, 0, len(records)+len(serviceRecords))
	for i := range records {
		if r := &records[i]; model.IsRecord(r) {
			out = append(out, claim{r.Labels, r.DeletionTimestamp != nil, r.Name})
		}
	}
	for i := range serviceRecords {
		if r := &serviceRecords[i]; model.IsServiceRecord(r) {
			out = append(out, claim{r.Labels, r.DeletionTimestamp != nil, r.Name})
		}
	}
	return out
}

func (c claim) owner() string {
	ns, name := c.labels[model.LabelRecordNamespace], c.labels[model.LabelRecordName]
	if name == "" {
		return "record " + c.name
	}
	return ns + "/" + name
}

// ValidateEIPDelete applies SPEC W5: an IptablesEIP cannot be deleted while a Service record of
// either ledger form (labelled ovn.kubernetes.io/nftable-lb-svc-record=true with an owner UID, not
// being deleted) claims it by label ovn.kubernetes.io/eip_uid = the EIP's UID. The records may
// hold anything; the validator picks the claims.
func ValidateEIPDelete(eip *kubeovnv1.IptablesEIP, records []kubeovnv1.IptablesDnatRule, serviceRecords ...vpcgwv1alpha1.ServiceRecord) []string {
	if eip == nil || eip.UID == "" {
		return nil
	}
	var users []string
	for _, c := range claimsOf(records, serviceRecords) {
		if !c.deleting && c.labels[model.LabelEIPUID] == string(eip.UID) {
			users = append(users, c.owner())
		}
	}
	if len(users) == 0 {
		return nil
	}
	// Counted, not named: whoever reaches the webhook may send it a review, and the Services may
	// be of any namespace (SPEC N8); an administrator lists them with the command.
	return []string{fmt.Sprintf("IptablesEIP %s is in use by %s: delete them or remove their %s annotation first "+
		"(kubectl get servicerecords -A -l %s=%s lists the claims)",
		eip.Name, servicesCount(users), model.AnnotationEIP, model.LabelEIPUID, eip.UID)}
}

// ValidateServiceAdmitted applies SPEC N1 to a Service that newly names a gateway: gw is the
// gateway when it exists and is not being deleted (vpc its Vpc, nil when missing). The namespace
// must be bound to the Vpc or admitted by the gateway's allow-list. A gateway that does not exist
// gets the same answer as one that does not admit the namespace, which names only the Service's
// own namespace and the gateway the user named: a namespace learns nothing of a gateway it may
// not use, not even that it exists (SPEC N8).
func ValidateServiceAdmitted(svc *corev1.Service, gw *kubeovnv1.VpcNatGateway, vpc *kubeovnv1.Vpc) []string {
	name := svc.Annotations[model.AnnotationGateway]
	if gw != nil && gw.Name == name && model.Admitted(svc.Namespace, gw, vpc) {
		return nil
	}
	return []string{model.NotAdmittedText(svc.Namespace, name) + "; a cluster administrator admits namespaces to a VPC, and the Service can be created once the gateway exists and admits it"}
}

// AdmittedServices keeps the Services whose namespace may use gateway gw (SPEC N1).
func AdmittedServices(gw *kubeovnv1.VpcNatGateway, vpc *kubeovnv1.Vpc, services []corev1.Service) []corev1.Service {
	var out []corev1.Service
	for i := range services {
		if model.Admitted(services[i].Namespace, gw, vpc) {
			out = append(out, services[i])
		}
	}
	return out
}

// ValidateGatewayDelete applies SPEC W6: a VpcNatGateway cannot be deleted while Services are
// bound to it through an EIP or a ClusterIP: Services annotated with the gateway that are not
// being deleted, and the owners of records (either form) labelled
// ovn.kubernetes.io/vpc-nat-gw-name=<gateway>. services and records may hold anything; the
// validator picks the bindings.
func ValidateGatewayDelete(gateway string, services []corev1.Service, records []kubeovnv1.IptablesDnatRule, serviceRecords ...vpcgwv1alpha1.ServiceRecord) []string {
	var bound []string
	for i := range services {
		s := &services[i]
		if s.DeletionTimestamp == nil && s.Annotations[model.AnnotationGateway] == gateway {
			bound = append(bound, s.Namespace+"/"+s.Name)
		}
	}
	for _, c := range claimsOf(records, serviceRecords) {
		if !c.deleting && c.labels[model.LabelGateway] == gateway {
			bound = append(bound, c.owner())
		}
	}
	if gateway == "" || len(bound) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("VpcNatGateway %s still serves %s: delete those Services or remove their %s and %s annotations first "+
		"(kubectl get servicerecords -A -l %s=%s lists the served ones)",
		gateway, servicesCount(bound), model.AnnotationGateway, model.AnnotationEIP, model.LabelGateway, gateway)}
}
