package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Subnet IP families (spec.protocol).
const (
	ProtocolIPv4 = "IPv4"
	ProtocolIPv6 = "IPv6"
	ProtocolDual = "Dual"
)

// Subnet names and providers with a fixed meaning in kube-ovn.
const (
	DefaultSubnet   = "ovn-default"
	DefaultProvider = "ovn"
)

// SubnetSpec is the desired state of a Subnet (the fields vpcgw uses and cheap neighbours).
type SubnetSpec struct {
	// +optional
	Default bool `json:"default,omitempty"`
	// Vpc is the VPC that owns the subnet; empty means the default VPC.
	// +optional
	Vpc string `json:"vpc,omitempty"`
	// Protocol is IPv4, IPv6 or Dual.
	// +optional
	Protocol string `json:"protocol,omitempty"`
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// +optional
	CIDRBlock string `json:"cidrBlock,omitempty"`
	// +optional
	Gateway string `json:"gateway,omitempty"`
	// +optional
	ExcludeIps []string `json:"excludeIps,omitempty"`
	// Provider is "ovn", "<nad>.<namespace>.ovn" for an OVN attachment network, or
	// "<nad>.<namespace>" for an underlay attachment.
	// +optional
	Provider string `json:"provider,omitempty"`
	// +optional
	GatewayType string `json:"gatewayType,omitempty"`
	// +optional
	NatOutgoing bool `json:"natOutgoing,omitempty"`
	// +optional
	Private bool `json:"private,omitempty"`
	// +optional
	Vlan string `json:"vlan,omitempty"`
	// +optional
	U2OInterconnection bool `json:"u2oInterconnection,omitempty"`
	// +optional
	U2OInterconnectionIP string `json:"u2oInterconnectionIP,omitempty"`
}

// SubnetStatus is the observed state of a Subnet.
type SubnetStatus struct {
	// +optional
	Conditions Conditions `json:"conditions,omitempty"`
	// Address counts are JSON numbers in kube-ovn that exceed int64 for IPv6, hence float64.
	// +optional
	V4AvailableIPs float64 `json:"v4availableIPs,omitempty"`
	// +optional
	V4UsingIPs float64 `json:"v4usingIPs,omitempty"`
	// +optional
	V6AvailableIPs float64 `json:"v6availableIPs,omitempty"`
	// +optional
	V6UsingIPs float64 `json:"v6usingIPs,omitempty"`
	// +optional
	U2OInterconnectionIP string `json:"u2oInterconnectionIP,omitempty"`
	// +optional
	U2OInterconnectionVPC string `json:"u2oInterconnectionVPC,omitempty"`
}

// IsValidated reports whether kube-ovn has validated the subnet (it gates route injection).
func (s *SubnetStatus) IsValidated() bool { return s.Conditions.IsTrue(Validated) }

// Subnet is a kube-ovn logical switch with its CIDR, belonging to one VPC.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=subnets,singular=subnet,shortName=subnet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Vpc",type=string,JSONPath=`.spec.vpc`
// +kubebuilder:printcolumn:name="Vlan",type=string,JSONPath=`.spec.vlan`
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocol`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidrBlock`
// +kubebuilder:printcolumn:name="Private",type=boolean,JSONPath=`.spec.private`
// +kubebuilder:printcolumn:name="NAT",type=boolean,JSONPath=`.spec.natOutgoing`
// +kubebuilder:printcolumn:name="Default",type=boolean,JSONPath=`.spec.default`
// +kubebuilder:printcolumn:name="GatewayType",type=string,JSONPath=`.spec.gatewayType`
// +kubebuilder:printcolumn:name="V4Used",type=number,JSONPath=`.status.v4usingIPs`
// +kubebuilder:printcolumn:name="V4Available",type=number,JSONPath=`.status.v4availableIPs`
// +kubebuilder:printcolumn:name="V6Used",type=number,JSONPath=`.status.v6usingIPs`
// +kubebuilder:printcolumn:name="V6Available",type=number,JSONPath=`.status.v6availableIPs`
// +kubebuilder:printcolumn:name="ExcludeIPs",type=string,JSONPath=`.spec.excludeIps`
// +kubebuilder:printcolumn:name="U2OInterconnectionIP",type=string,JSONPath=`.status.u2oInterconnectionIP`
type Subnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SubnetSpec   `json:"spec,omitempty"`
	Status SubnetStatus `json:"status,omitempty"`
}

// SubnetList is a list of Subnet.
//
// +kubebuilder:object:root=true
type SubnetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Subnet `json:"items"`
}

func init() {
	register(&Subnet{}, &SubnetList{})
}
