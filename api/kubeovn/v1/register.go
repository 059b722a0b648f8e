package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the kube-ovn API group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "kubeovn.io", Version: "v1"}

	// SchemeBuilder registers the types of this package; each type file adds itself in init.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource qualifies a resource name (e.g. "iptables-dnat-rules") with the kubeovn.io group.
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}
