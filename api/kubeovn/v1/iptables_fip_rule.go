package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IptablesFIPRuleSpec maps a whole EIP to one internal address (kube-ovn's floating IP): every
// port of the EIP is kube-ovn's, so vpcgw serves nothing on it (SPEC N3).
type IptablesFIPRuleSpec struct {
	// +optional
	EIP string `json:"eip,omitempty"`
	// +optional
	InternalIP string `json:"internalIp,omitempty"`
}

// IptablesFIPRule is kube-ovn's floating IP on a VPC NAT gateway (the fields vpcgw reads).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=iptables-fip-rules,singular=iptables-fip-rule,shortName=fip
type IptablesFIPRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IptablesFIPRuleSpec `json:"spec,omitempty"`
}

// IptablesFIPRuleList is a list of IptablesFIPRule.
//
// +kubebuilder:object:root=true
type IptablesFIPRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IptablesFIPRule `json:"items"`
}

func init() {
	register(&IptablesFIPRule{}, &IptablesFIPRuleList{})
}
