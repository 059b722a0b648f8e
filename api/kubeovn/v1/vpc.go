package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RoutePolicy selects whether a static route matches on source or destination.
type RoutePolicy string

// Static route policies.
const (
	PolicySrc RoutePolicy = "policySrc"
	PolicyDst RoutePolicy = "policyDst"
)

// PolicyRouteAction is the action of a VPC policy route.
type PolicyRouteAction string

// Policy route actions (OVN Logical_Router_Policy actions).
const (
	PolicyRouteActionAllow   PolicyRouteAction = "allow"
	PolicyRouteActionDrop    PolicyRouteAction = "drop"
	PolicyRouteActionReroute PolicyRouteAction = "reroute"
)

// DefaultVpc is the name of the cluster's default VPC.
const DefaultVpc = "ovn-cluster"

// StaticRoute is a static route on the VPC router.
type StaticRoute struct {
	// +optional
	Policy RoutePolicy `json:"policy,omitempty"`
	CIDR   string      `json:"cidr"`
	// +optional
	NextHopIP string `json:"nextHopIP,omitempty"`
	// +optional
	ECMPMode string `json:"ecmpMode,omitempty"`
	// +optional
	BfdID string `json:"bfdId,omitempty"`
	// +optional
	RouteTable string `json:"routeTable,omitempty"`
}

// PolicyRoute is a policy route on the VPC router.
type PolicyRoute struct {
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// +optional
	Match string `json:"match,omitempty"`
	// +optional
	Action PolicyRouteAction `json:"action,omitempty"`
	// NextHopIP is needed only for reroute.
	// +optional
	NextHopIP string `json:"nextHopIP,omitempty"`
}

// BFDPort is an optional BFD logical router port of the VPC.
type BFDPort struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// +optional
	IP string `json:"ip,omitempty"`
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// VpcSpec is the desired state of a Vpc.
type VpcSpec struct {
	// +optional
	DefaultSubnet string `json:"defaultSubnet,omitempty"`
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// +optional
	StaticRoutes []*StaticRoute `json:"staticRoutes,omitempty"`
	// +optional
	PolicyRoutes []*PolicyRoute `json:"policyRoutes,omitempty"`
	// +optional
	EnableExternal bool `json:"enableExternal,omitempty"`
	// +optional
	ExtraExternalSubnets []string `json:"extraExternalSubnets,omitempty"`
	// +optional
	EnableBfd bool `json:"enableBfd,omitempty"`
	// +optional
	BFDPort *BFDPort `json:"bfdPort,omitempty"`
}

// VpcStatus is the observed state of a Vpc.
type VpcStatus struct {
	// +optional
	Conditions Conditions `json:"conditions,omitempty"`
	// +optional
	Standby bool `json:"standby,omitempty"`
	// Default is true for the cluster's default VPC.
	// +optional
	Default bool `json:"default,omitempty"`
	// +optional
	DefaultLogicalSwitch string `json:"defaultLogicalSwitch,omitempty"`
	// Router is the OVN logical router of the VPC.
	// +optional
	Router string `json:"router,omitempty"`
	// The OVN load balancers of the VPC (used when kube-ovn runs with --enable-lb).
	// +optional
	TCPLoadBalancer string `json:"tcpLoadBalancer,omitempty"`
	// +optional
	TCPSessionLoadBalancer string `json:"tcpSessionLoadBalancer,omitempty"`
	// +optional
	UDPLoadBalancer string `json:"udpLoadBalancer,omitempty"`
	// +optional
	UDPSessionLoadBalancer string `json:"udpSessionLoadBalancer,omitempty"`
	// +optional
	SctpLoadBalancer string `json:"sctpLoadBalancer,omitempty"`
	// +optional
	SctpSessionLoadBalancer string `json:"sctpSessionLoadBalancer,omitempty"`
	// Subnets are the names of the VPC's subnets.
	// +optional
	Subnets []string `json:"subnets,omitempty"`
	// +optional
	EnableExternal bool `json:"enableExternal,omitempty"`
	// +optional
	ExtraExternalSubnets []string `json:"extraExternalSubnets,omitempty"`
	// +optional
	EnableBfd bool `json:"enableBfd,omitempty"`
}

// Vpc is a kube-ovn virtual private cloud: one OVN logical router and its subnets.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=vpcs,singular=vpc,shortName=vpc
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="EnableExternal",type=boolean,JSONPath=`.status.enableExternal`
// +kubebuilder:printcolumn:name="EnableBfd",type=boolean,JSONPath=`.status.enableBfd`
// +kubebuilder:printcolumn:name="Standby",type=boolean,JSONPath=`.status.standby`
// +kubebuilder:printcolumn:name="Subnets",type=string,JSONPath=`.status.subnets`
// +kubebuilder:printcolumn:name="ExtraExternalSubnets",type=string,JSONPath=`.status.extraExternalSubnets`
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
// +kubebuilder:printcolumn:name="DefaultSubnet",type=string,JSONPath=`.status.defaultLogicalSwitch`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Vpc struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VpcSpec   `json:"spec,omitempty"`
	Status VpcStatus `json:"status,omitempty"`
}

// VpcList is a list of Vpc.
//
// +kubebuilder:object:root=true
type VpcList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Vpc `json:"items"`
}

func init() {
	register(&Vpc{}, &VpcList{})
}
