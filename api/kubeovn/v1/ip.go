package v1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPSpec is one address kube-ovn-controller allocated (the fields vpcgw reads and cheap
// neighbours). kube-ovn writes it; a tenant cannot (the resource is cluster-scoped and only
// kube-ovn's ServiceAccount is granted it), so it is what decides which addresses a Pod really
// has (SPEC N2).
type IPSpec struct {
	// PodName and Namespace are the Pod the address is allocated to.
	// +optional
	PodName string `json:"podName,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Subnet is the Subnet (logical switch) the address is allocated in; immutable.
	// +optional
	Subnet string `json:"subnet,omitempty"`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// +optional
	IPAddress string `json:"ipAddress,omitempty"`
	// +optional
	V4IPAddress string `json:"v4IpAddress,omitempty"`
	// +optional
	V6IPAddress string `json:"v6IpAddress,omitempty"`
	// +optional
	MacAddress string `json:"macAddress,omitempty"`
	// +optional
	PodType string `json:"podType,omitempty"`
}

// IP is kube-ovn's record of one NIC's allocation. A Pod's NIC of provider "ovn" has the IP named
// "<pod>.<namespace>", an attachment's "<pod>.<namespace>.<provider>" (v1.16.2
// pkg/ovs/util.go PodNameToPortName).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=ips,singular=ip,shortName=ip
type IP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPSpec `json:"spec,omitempty"`
}

// IPList is a list of IP.
//
// +kubebuilder:object:root=true
type IPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IP `json:"items"`
}

// IPName is the name kube-ovn gives the IP of pod's NIC of provider ("ovn" for the primary NIC).
func IPName(pod, namespace, provider string) string {
	if provider == DefaultProvider {
		return pod + "." + namespace
	}
	return pod + "." + namespace + "." + provider
}

// NewIP is the IP object kube-ovn-controller makes when it allocates addr (comma-separated for
// dual stack) in subnet to the NIC of provider of Pod namespace/pod (v1.16.2
// pkg/controller/ip.go createOrUpdateIPCR). Labs and tests that play kube-ovn's IPAM use it.
func NewIP(pod, namespace, provider, subnet, addr string) *IP {
	v4, v6 := "", ""
	for _, a := range strings.Split(addr, ",") {
		if strings.Contains(a, ":") {
			v6 = a
		} else if v4 == "" {
			v4 = a
		}
	}
	return &IP{
		ObjectMeta: metav1.ObjectMeta{Name: IPName(pod, namespace, provider), Labels: map[string]string{"ovn.kubernetes.io/subnet": subnet, subnet: ""}},
		Spec:       IPSpec{PodName: pod, Namespace: namespace, Subnet: subnet, IPAddress: addr, V4IPAddress: v4, V6IPAddress: v6},
	}
}

func init() {
	register(&IP{}, &IPList{})
}
