package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IptablesEIPSpec is the desired external address of a VPC NAT gateway.
type IptablesEIPSpec struct {
	// V4IP requests a static IPv4 from the external subnet; empty lets IPAM pick one.
	// +optional
	V4ip string `json:"v4ip,omitempty"`
	// +optional
	V6ip string `json:"v6ip,omitempty"`
	// +optional
	MacAddress string `json:"macAddress,omitempty"`
	// NatGwDp is the VpcNatGateway that holds the EIP.
	// +optional
	NatGwDp string `json:"natGwDp,omitempty"`
	// +optional
	QoSPolicy string `json:"qosPolicy,omitempty"`
	// ExternalSubnet is the subnet the address comes from; empty means the default external network.
	// +optional
	ExternalSubnet string `json:"externalSubnet,omitempty"`
	// Namespace is where the gateway's pods run.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// IptablesEIPStatus is the observed state of an IptablesEIP.
type IptablesEIPStatus struct {
	// +optional
	Conditions Conditions `json:"conditions,omitempty"`
	// Ready is true once the address is bound on the gateway.
	// +optional
	Ready bool `json:"ready"`
	// IP is the IPv4 address actually bound.
	// +optional
	IP string `json:"ip,omitempty"`
	// Nat is the comma-joined list of rule kinds (dnat, fip, snat) using the EIP.
	// +optional
	Nat string `json:"nat,omitempty"`
	// Redo is a timestamp that forces re-programming when changed.
	// +optional
	Redo string `json:"redo,omitempty"`
	// +optional
	QoSPolicy string `json:"qosPolicy,omitempty"`
}

// IptablesEIP is an external address held by a VPC NAT gateway.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=iptables-eips,singular=iptables-eip,shortName=eip
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="ExternalSubnet",type=string,JSONPath=`.spec.externalSubnet`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.ip`
// +kubebuilder:printcolumn:name="Mac",type=string,JSONPath=`.spec.macAddress`
// +kubebuilder:printcolumn:name="Nat",type=string,JSONPath=`.status.nat`
// +kubebuilder:printcolumn:name="NatGwDp",type=string,JSONPath=`.spec.natGwDp`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
type IptablesEIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IptablesEIPSpec   `json:"spec"`
	Status IptablesEIPStatus `json:"status,omitempty"`
}

// IptablesEIPList is a list of IptablesEIP.
//
// +kubebuilder:object:root=true
type IptablesEIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IptablesEIP `json:"items"`
}

func init() {
	register(&IptablesEIP{}, &IptablesEIPList{})
}
