// Package model decides, without any I/O, clock or randomness, everything vpcgw does for a
// snapshot of the cluster: which Services a gateway serves and why not, their identities and
// backends, the accounting records, ingress, finalizers and events, each gateway's data-plane
// state and each gateway's VIP routes. The controller only reads the cluster, calls the model and
// writes the Plan; no rule of SPEC.md is decided anywhere else.
package model

// Annotations on Services (SPEC S1, S2, S6).
const (
	AnnotationGateway              = "ovn.kubernetes.io/vpc_nat_gw"
	AnnotationEIP                  = "ovn.kubernetes.io/eip"
	AnnotationExternalIPFromSubnet = "ovn.kubernetes.io/service_external_ip_from_subnet"
)

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
	GatewayAppPrefix     = "vpc-nat-gw-"                  // label app=vpc-nat-gw-<gateway>
	AnnotationGatewayPod = AnnotationGateway              // the gateway's name, on its pods
	AnnotationGwInit     = "ovn.kubernetes.io/vpc_nat_gw_init"
	// DefaultGatewayNamespace is where kube-ovn runs gateway pods when spec.namespace is empty.
	DefaultGatewayNamespace = "kube-system"
)

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
	ReasonEIPWrongGateway   = "NftableLbSvcEipWrongGateway"
	ReasonGatewayMissing    = "NftableLbSvcGatewayMissing"
	ReasonInvalidAnnotation = "NftableLbSvcInvalidAnnotation"
	ReasonUnsupported       = "NftableLbSvcUnsupported"
	ReasonProgrammingFailed = "NftableLbSvcProgrammingFailed"
)
