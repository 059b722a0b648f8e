package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DnatRuleType selects how an IptablesDnatRule is programmed on the gateway.
// +kubebuilder:validation:Enum=exclusive;share
type DnatRuleType string

const (
	// DnatRuleTypeExclusive is kube-ovn's classic iptables DNAT: one rule owns (EIP, port, protocol).
	DnatRuleTypeExclusive DnatRuleType = "exclusive"
	// DnatRuleTypeShare is an nftables share DNAT: all share rules of one identity are the
	// backends of that identity. vpcgw uses share rules as controller-owned Service records.
	DnatRuleTypeShare DnatRuleType = "share"
)

// DnatSessionAffinity is the session affinity of a share DNAT identity.
// +kubebuilder:validation:Enum="";ClientIP
type DnatSessionAffinity string

const (
	// DnatSessionAffinityNone spreads every new connection over the backends.
	DnatSessionAffinityNone DnatSessionAffinity = ""
	// DnatSessionAffinityClientIP sends a client to the backend it used last, until the timeout.
	DnatSessionAffinityClientIP DnatSessionAffinity = "ClientIP"
)

// DefaultDnatSessionAffinityTimeoutSeconds is the ClientIP affinity timeout used when
// sessionAffinityTimeoutSeconds is 0; it is Kubernetes' Service default.
const DefaultDnatSessionAffinityTimeoutSeconds int32 = 10800

// MaxDnatSessionAffinityTimeoutSeconds is the largest accepted affinity timeout (one day),
// as for Kubernetes Services.
const MaxDnatSessionAffinityTimeoutSeconds int32 = 86400

// IptablesDnatRuleSpec is the desired DNAT of (eip or clusterIP, externalPort, protocol) to
// internalIp:internalPort.
type IptablesDnatRuleSpec struct {
	// EIP is the name of the IptablesEIP whose address is the DNAT destination.
	// Empty only for a ClusterIP-only share record.
	// +optional
	EIP string `json:"eip,omitempty"`

	// ExternalPort is the destination port on the EIP or ClusterIP, a decimal 1..65535.
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]{0,4}$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+$') && int(self) >= 1 && int(self) <= 65535",message="externalPort must be a decimal port number between 1 and 65535"
	ExternalPort string `json:"externalPort"`

	// Protocol is the L4 protocol, lowercase.
	// +kubebuilder:validation:Enum=tcp;udp
	Protocol string `json:"protocol"`

	// InternalIP is the backend address traffic is DNATed to.
	InternalIP string `json:"internalIp"`

	// InternalPort is the backend port, a decimal 1..65535.
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]{0,4}$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+$') && int(self) >= 1 && int(self) <= 65535",message="internalPort must be a decimal port number between 1 and 65535"
	InternalPort string `json:"internalPort"`

	// Type is exclusive (iptables DNAT) or share (nftables share DNAT). Immutable.
	// +kubebuilder:default=exclusive
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.type is immutable: delete and recreate the rule to change it"
	// +optional
	Type DnatRuleType `json:"type,omitempty"`

	// SessionAffinity is "" or ClientIP; share rules only.
	// +optional
	SessionAffinity DnatSessionAffinity `json:"sessionAffinity,omitempty"`

	// SessionAffinityTimeoutSeconds is the ClientIP affinity timeout; 0 means 10800.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	SessionAffinityTimeoutSeconds int32 `json:"sessionAffinityTimeoutSeconds,omitempty"`

	// ClusterIP is the Service ClusterIP this share record also serves inside the VPC.
	// +optional
	ClusterIP string `json:"clusterIP,omitempty"`
}

// IptablesDnatRuleStatus mirrors the last spec that was successfully programmed.
type IptablesDnatRuleStatus struct {
	// +optional
	Conditions Conditions `json:"conditions,omitempty"`
	// Ready is true once the rule is programmed on the gateway.
	// +optional
	Ready bool `json:"ready"`
	// V4IP is the programmed VIP: the EIP address, or the ClusterIP of a ClusterIP-only record.
	// +optional
	V4IP string `json:"v4ip,omitempty"`
	// +optional
	V6IP string `json:"v6ip,omitempty"`
	// NatGwDp is the gateway the rule is programmed on.
	// +optional
	NatGwDp string `json:"natGwDp,omitempty"`
	// Redo is a timestamp that forces re-programming when changed.
	// +optional
	Redo string `json:"redo,omitempty"`
	// +optional
	Protocol string `json:"protocol,omitempty"`
	// +optional
	InternalIP string `json:"internalIp,omitempty"`
	// +optional
	InternalPort string `json:"internalPort,omitempty"`
	// +optional
	ExternalPort string `json:"externalPort,omitempty"`
}

// IptablesDnatRule is a DNAT on a VPC NAT gateway. vpcgw keeps one share rule per
// (Service port, ready backend) as its accounting record.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=iptables-dnat-rules,singular=iptables-dnat-rule,shortName=dnat
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Eip",type=string,JSONPath=`.spec.eip`
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocol`
// +kubebuilder:printcolumn:name="V4ip",type=string,JSONPath=`.status.v4ip`
// +kubebuilder:printcolumn:name="V6ip",type=string,JSONPath=`.status.v6ip`
// +kubebuilder:printcolumn:name="InternalIp",type=string,JSONPath=`.spec.internalIp`
// +kubebuilder:printcolumn:name="ExternalPort",type=string,JSONPath=`.spec.externalPort`
// +kubebuilder:printcolumn:name="InternalPort",type=string,JSONPath=`.spec.internalPort`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="NatGwDp",type=string,JSONPath=`.status.natGwDp`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
type IptablesDnatRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IptablesDnatRuleSpec   `json:"spec"`
	Status IptablesDnatRuleStatus `json:"status,omitempty"`
}

// IptablesDnatRuleList is a list of IptablesDnatRule.
//
// +kubebuilder:object:root=true
type IptablesDnatRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IptablesDnatRule `json:"items"`
}

// EffectiveSessionAffinityTimeoutSeconds returns the timeout that applies, resolving 0 to the default.
func (s *IptablesDnatRuleSpec) EffectiveSessionAffinityTimeoutSeconds() int32 {
	if s.SessionAffinityTimeoutSeconds == 0 {
		return DefaultDnatSessionAffinityTimeoutSeconds
	}
	return s.SessionAffinityTimeoutSeconds
}

func init() {
	register(&IptablesDnatRule{}, &IptablesDnatRuleList{})
}
