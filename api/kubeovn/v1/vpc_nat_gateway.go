package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VpcNatGatewaySpec is the desired VPC NAT gateway workload.
type VpcNatGatewaySpec struct {
	// Namespace is where the gateway workload runs; empty means the controller's namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Vpc is the VPC the gateway serves.
	Vpc string `json:"vpc"`
	// Subnet is the VPC-side subnet of the gateway's eth0.
	Subnet string `json:"subnet"`
	// ExternalSubnets lists the external networks; the first one is the default.
	// +optional
	ExternalSubnets []string `json:"externalSubnets,omitempty"`
	// LanIP is the gateway's address in Subnet (single-replica mode).
	// +optional
	LanIP string `json:"lanIp,omitempty"`
	// Replicas is the number of gateway instances; more than 1 is HA mode.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=1
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Selector is a list of "key: value" node selector terms.
	// +optional
	Selector []string `json:"selector,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Affinity of the gateway pods. Kept schemaless (as in kube-ovn): the full corev1.Affinity
	// schema would make this CRD about 140 KB, too close to kubectl apply's annotation limit.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Affinity corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	QoSPolicy string `json:"qosPolicy,omitempty"`
	// +optional
	BgpSpeaker VpcBgpSpeaker `json:"bgpSpeaker,omitempty"`
	// +optional
	BFD VpcNatGwBFDConfig `json:"bfd,omitempty"`
	// InternalSubnets are sources routed through the gateway in HA mode.
	// +optional
	InternalSubnets []string `json:"internalSubnets,omitempty"`
	// InternalCIDRs are source CIDRs routed through the gateway in HA mode.
	// +optional
	InternalCIDRs []string `json:"internalCIDRs,omitempty"`
	// +optional
	Routes []Route `json:"routes,omitempty"`
	// NoDefaultEIP skips the default EIP of the gateway.
	// +optional
	NoDefaultEIP bool `json:"noDefaultEIP,omitempty"`
	// Annotations are added to the gateway pod template at creation.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// VpcBgpSpeaker configures the gateway's BGP speaker sidecar.
type VpcBgpSpeaker struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// +optional
	ASN uint32 `json:"asn,omitempty"`
	// +optional
	RemoteASN uint32 `json:"remoteAsn,omitempty"`
	// +optional
	Neighbors []string `json:"neighbors,omitempty"`
	// +optional
	HoldTime metav1.Duration `json:"holdTime,omitempty"`
	// +optional
	RouterID string `json:"routerId,omitempty"`
	// +optional
	Password string `json:"password,omitempty"`
	// +optional
	EnableGracefulRestart bool `json:"enableGracefulRestart,omitempty"`
	// +optional
	ExtraArgs []string `json:"extraArgs,omitempty"`
}

// VpcNatGwBFDConfig configures BFD between the gateway and the VPC router.
type VpcNatGwBFDConfig struct {
	// +kubebuilder:default=false
	// +optional
	Enabled bool `json:"enabled"`
	// +kubebuilder:default=1000
	// +optional
	MinRX int32 `json:"minRX,omitempty"`
	// +kubebuilder:default=1000
	// +optional
	MinTX int32 `json:"minTX,omitempty"`
	// +kubebuilder:default=3
	// +optional
	Multiplier int32 `json:"multiplier,omitempty"`
}

// Route is a static route in the gateway; NextHopIP "gateway" means eth0's subnet gateway.
type Route struct {
	CIDR      string `json:"cidr"`
	NextHopIP string `json:"nextHopIP"`
}

// VpcNatGatewayWorkload identifies the StatefulSet or Deployment running the gateway.
type VpcNatGatewayWorkload struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// Nodes the gateway instances run on.
	// +optional
	Nodes []string `json:"nodes,omitempty"`
}

// VpcNatGatewayStatus is the observed state of a VpcNatGateway.
type VpcNatGatewayStatus struct {
	// +optional
	QoSPolicy string `json:"qosPolicy,omitempty"`
	// +optional
	ExternalSubnets []string `json:"externalSubnets,omitempty"`
	// +optional
	Selector []string `json:"selector,omitempty"`
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Ready is true when the gateway instances are initialised.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// LanIP is the gateway's VPC address; in HA mode a comma-joined list of the pod IPs.
	// +optional
	LanIP string `json:"lanIp,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Affinity of the gateway pods. Kept schemaless (as in kube-ovn): the full corev1.Affinity
	// schema would make this CRD about 140 KB, too close to kubectl apply's annotation limit.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Affinity corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	Workload VpcNatGatewayWorkload `json:"workload,omitempty"`
	// +optional
	InternalSubnets []string `json:"internalSubnets,omitempty"`
	// +optional
	InternalCIDRs []string `json:"internalCIDRs,omitempty"`
}

// VpcNatGateway is a NAT gateway of a custom VPC, run as pods with an interface in the VPC
// and one on the external network.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=vpc-nat-gateways,singular=vpc-nat-gateway,shortName=vpc-nat-gw
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Vpc",type=string,JSONPath=`.spec.vpc`
// +kubebuilder:printcolumn:name="Subnet",type=string,JSONPath=`.spec.subnet`
// +kubebuilder:printcolumn:name="IPs",type=string,JSONPath=`.status.lanIp`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="BFD",type=boolean,JSONPath=`.spec.bfd.enabled`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VpcNatGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VpcNatGatewaySpec   `json:"spec"`
	Status VpcNatGatewayStatus `json:"status,omitempty"`
}

// VpcNatGatewayList is a list of VpcNatGateway.
//
// +kubebuilder:object:root=true
type VpcNatGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VpcNatGateway `json:"items"`
}

func init() {
	register(&VpcNatGateway{}, &VpcNatGatewayList{})
}
