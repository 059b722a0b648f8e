package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServiceRecord is the ledger entry of one Service served through a VPC NAT gateway: what the
// gateway was programmed with for it (SPEC R1-R6). It is written after the gateway acknowledged
// the state (the ledger follows the data plane), in one API write per change of the Service, and
// carries the labels of SPEC R2, so `kubectl get servicerecords -l
// ovn.kubernetes.io/nftable-lb-svc-name=web` lists a Service's record. Only the controller writes
// it (SPEC W4). It is cluster-scoped like kube-ovn's NAT rules, with no OwnerReference: it must
// outlive its Service until the controller has released everything (SPEC R5).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=svcrec,categories=vpcgw
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.service.namespace`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.service.name`
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gateway`
// +kubebuilder:printcolumn:name="EIP",type=string,JSONPath=`.spec.eipAddress`
// +kubebuilder:printcolumn:name="ClusterIP",type=string,JSONPath=`.spec.clusterIP`
// +kubebuilder:printcolumn:name="Ports",type=string,JSONPath=`.status.ports`
// +kubebuilder:printcolumn:name="Backends",type=integer,JSONPath=`.status.backends`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ServiceRecordSpec `json:"spec"`
	// Status is written with the spec, in the same request: the kind has no status subresource,
	// so that one change of a Service costs one API write (SPEC R6).
	// +optional
	Status ServiceRecordStatus `json:"status,omitempty"`
}

// ServiceReference names the Service a record belongs to. The UID decides ownership (SPEC I3).
type ServiceReference struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// ServiceRecordSpec is what the gateway serves for the Service.
type ServiceRecordSpec struct {
	Service ServiceReference `json:"service"`
	// Gateway is the VpcNatGateway that serves the Service.
	Gateway string `json:"gateway"`
	// EIP is the IptablesEIP whose address serves the LoadBalancer part; empty when that part is
	// not served. EIPUID and EIPAddress are that EIP's UID and the address programmed.
	// +optional
	EIP string `json:"eip,omitempty"`
	// +optional
	EIPUID types.UID `json:"eipUID,omitempty"`
	// +optional
	EIPAddress string `json:"eipAddress,omitempty"`
	// ClusterIP is the Service ClusterIP the gateway holds; empty when that part is not served.
	// +optional
	ClusterIP string `json:"clusterIP,omitempty"`
	// SessionAffinityTimeoutSeconds is the ClientIP affinity timeout of every identity of the
	// Service (SPEC S7); 0 means no affinity.
	// +optional
	SessionAffinityTimeoutSeconds int32 `json:"sessionAffinityTimeoutSeconds,omitempty"`
	// SourceRanges are the only client prefixes that reach the EIP identities (the Service's
	// loadBalancerSourceRanges, canonical IPv4, sorted; empty: everyone, SPEC N7).
	// +listType=atomic
	// +optional
	SourceRanges []string `json:"sourceRanges,omitempty"`
	// Ports are the served Service ports, sorted by protocol and port.
	// +listType=atomic
	Ports []RecordPort `json:"ports"`
}

// RecordPort is one served Service port: its identities on the EIP and the ClusterIP share the
// backends (SPEC I1).
type RecordPort struct {
	Port int32 `json:"port"`
	// Protocol is tcp or udp.
	// +kubebuilder:validation:Enum=tcp;udp
	Protocol string `json:"protocol"`
	// Backends are "<ip>:<port>", sorted; empty when the port has no Ready endpoint.
	// +listType=atomic
	// +optional
	Backends []string `json:"backends,omitempty"`
}

// ServiceRecordStatus says what the record stands for.
type ServiceRecordStatus struct {
	// Ready: every instance of the gateway acknowledged this spec.
	Ready bool `json:"ready"`
	// Ports lists the served ports as "<port>/<protocol>", for `kubectl get`.
	// +optional
	Ports string `json:"ports,omitempty"`
	// Backends is the number of distinct backends over all ports, for `kubectl get`.
	// +optional
	Backends int32 `json:"backends,omitempty"`
}

// +kubebuilder:object:root=true

// ServiceRecordList is a list of ServiceRecords.
type ServiceRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceRecord `json:"items"`
}
