// Package model decides, without any I/O, clock or randomness, everything vpcgw does for a
// snapshot of the cluster: which Services a gateway serves and why not, their identities and
// backends, the accounting records, ingress, finalizers and events, each gateway's data-plane
// state and each gateway's VIP routes. The controller only reads the cluster, calls the model and
// writes the Plan; no rule of SPEC.md is decided anywhere else.
package model

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
)

// Annotations on Services (SPEC S1, S2, S6).
const (
	AnnotationGateway              = "ovn.kubernetes.io/vpc_nat_gw"
	AnnotationEIP                  = "ovn.kubernetes.io/eip"
	AnnotationExternalIPFromSubnet = "ovn.kubernetes.io/service_external_ip_from_subnet"
)

// AnnotationAllowedNamespaces lists, on a VpcNatGateway or an IptablesEIP (cluster-scoped
// objects only cluster administrators write), the namespaces whose Services may use it, comma
// separated, "*" for all (SPEC N1). On a gateway it admits namespaces beside the Vpc's
// spec.namespaces; on an EIP it further restricts who may use that EIP.
const AnnotationAllowedNamespaces = "vpcgw.io/allowed-namespaces"

// LoadBalancerClass is the spec.loadBalancerClass vpcgw answers to besides none (SPEC K9): a
// LoadBalancer Service of any other class belongs to another implementation.
const LoadBalancerClass = "kubeovn.io/vpc-nat-gw"

// Finalizer is kube-ovn's controller finalizer, put on Services before anything is written for
// them and removed after everything is released (SPEC T2).
const Finalizer = "kubeovn.io/kube-ovn-controller"

// Record labels (SPEC R2).
const (
	LabelRecordNamespace = "ovn.kubernetes.io/nftable-lb-svc-ns"
	LabelRecordName      = "ovn.kubernetes.io/nftable-lb-svc-name"
	LabelRecordUID       = "ovn.kubernetes.io/nftable-lb-svc-uid"
	LabelRecord          = "ovn.kubernetes.io/nftable-lb-svc-record"
	LabelGateway         = "ovn.kubernetes.io/vpc-nat-gw-name"
	LabelExternalPort    = "ovn.kubernetes.io/vpc_dnat_eport"
	LabelEIPAddress      = "ovn.kubernetes.io/eip_v4_ip"
	LabelEIPUID          = "ovn.kubernetes.io/eip_uid"
)

// Gateway pods (kube-ovn's names).
const (
	LabelGatewayPod      = "ovn.kubernetes.io/vpc-nat-gw" // "true" on every gateway pod
	AnnotationGatewayPod = AnnotationGateway              // the gateway's name, on its pods
	AnnotationGwInit     = "ovn.kubernetes.io/vpc_nat_gw_init"
	// DefaultGatewayNamespace is kube-ovn's own namespace in a default install: where it runs
	// gateway pods unless the gateway's spec.namespace (kube-ovn master) says otherwise.
	DefaultGatewayNamespace = "kube-system"
	// DefaultGatewayNamePrefix is kube-ovn's default natGwNamePrefix (ConfigMap ovn-vpc-nat-config):
	// a gateway's workload and label app are "<prefix>-<gateway>".
	DefaultGatewayNamePrefix = "vpc-nat-gw"
	// GatewayAppPrefix is the default prefix with its dash, as in label app=vpc-nat-gw-<gateway>.
	GatewayAppPrefix = DefaultGatewayNamePrefix + "-"
	// GatewayConfigMap is kube-ovn's ConfigMap, in its own namespace, that sets natGwNamePrefix.
	GatewayConfigMap = "ovn-vpc-nat-config"
	// GatewayConfigNamePrefix is the key of the prefix in GatewayConfigMap.
	GatewayConfigNamePrefix = "natGwNamePrefix"
)

// GatewayPlacement is where kube-ovn runs gateway pods and how it names them (SPEC K5). The zero
// value is kube-ovn's default install.
type GatewayPlacement struct {
	// KubeOVNNamespace is kube-ovn-controller's namespace (its POD_NAMESPACE): v1.16.x runs every
	// gateway there, master those without spec.namespace.
	KubeOVNNamespace string
	// NamePrefix is kube-ovn's natGwNamePrefix.
	NamePrefix string
}

// Namespace is where gateway gw's pods run.
func (p GatewayPlacement) Namespace(gw *kubeovnv1.VpcNatGateway) string {
	if gw != nil && gw.Spec.Namespace != "" {
		return gw.Spec.Namespace // kube-ovn master; v1.16.x's CRD prunes the field
	}
	if p.KubeOVNNamespace != "" {
		return p.KubeOVNNamespace
	}
	return DefaultGatewayNamespace
}

// AppLabel is the value of label app on gateway gw's pods: "<prefix>-<gw>".
func (p GatewayPlacement) AppLabel(gw string) string {
	prefix := p.NamePrefix
	if prefix == "" {
		prefix = DefaultGatewayNamePrefix
	}
	return prefix + "-" + gw
}

// VIP route constants (SPEC V1).
const (
	VIPRoutePriority = 29210
)

// Event reasons (SPEC T3). NftableLbSvcConflict and NftableLbSvcBackendSkipped are kube-ovn's.
const (
	ReasonConflict          = "NftableLbSvcConflict"
	ReasonBackendSkipped    = "NftableLbSvcBackendSkipped"
	ReasonEIPMissing        = "NftableLbSvcEipMissing"
	ReasonEIPNotReady       = "NftableLbSvcEipNotReady"
	ReasonInvalidAnnotation = "NftableLbSvcInvalidAnnotation"
	ReasonUnsupported       = "NftableLbSvcUnsupported"
	ReasonProgrammingFailed = "NftableLbSvcProgrammingFailed"
	ReasonNotAdmitted       = "NftableLbSvcNotAdmitted"
	ReasonLimit             = "NftableLbSvcLimit"
	ReasonQuarantined       = "NftableLbSvcQuarantined"
	// ReasonClusterIPByOVN (Normal) tells a Service served for its EIP that kube-ovn's OVN load
	// balancers serve its ClusterIP (--enable-lb, SPEC F2).
	ReasonClusterIPByOVN = "NftableLbSvcClusterIPByOVN"
	// ReasonKubeOVNServesEvent: kube-ovn-controller serves Services itself, so vpcgw serves and
	// releases nothing (SPEC K10).
	ReasonKubeOVNServesEvent = "NftableLbSvcKubeOVNServes"
	// ReasonVIPNotRouted (Warning): the Vpc's router has no route for one of the Service's VIPs,
	// or one that discards it, so OVN drops it before vpcgw's VIP route applies (SPEC V3).
	// ReasonVIPRouted (Normal): that is over.
	ReasonVIPNotRouted = "NftableLbSvcVIPNotRouted"
	ReasonVIPRouted    = "NftableLbSvcVIPRouted"
	// ReasonServed (Normal): the gateway now serves the Service, at the addresses and ports the
	// message names; given when it becomes served and when it is served again after a problem
	// (ServicePlan.Serving).
	ReasonServed = "NftableLbSvcServed"
	// ReasonNotAGatewayInstance (Warning, on a Pod): the Pod carries a gateway's labels in its
	// namespace, but kube-ovn's workload did not make it, so it is not an instance (SPEC N5).
	ReasonNotAGatewayInstance = "NftableLbSvcNotAGatewayInstance"
)

// IdentityGroup names the identities of the Service with uid on the wire (gwstate.Identity.Group):
// an agent that refuses one of them holds back the Service's other changed identities too, so a
// quarantined Service keeps what the gateway served for it, all of it (SPEC D8, N4). Twelve hex
// digits of the UID's SHA-256: short on the wire, and never a name (SPEC I3).
func IdentityGroup(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:6])
}
