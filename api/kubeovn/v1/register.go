package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the kube-ovn API group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "kubeovn.io", Version: "v1"}

	// SchemeBuilder holds what adds this package's types to a scheme; each type registers itself
	// in init (register). apimachinery's builder: controller-runtime's scheme.Builder is deprecated
	// for API packages, which should depend on little beyond apimachinery.
	SchemeBuilder = runtime.NewSchemeBuilder()

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// register adds objs, under GroupVersion, to what AddToScheme adds.
func register(objs ...runtime.Object) {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objs...)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
}

// Resource qualifies a resource name (e.g. "iptables-dnat-rules") with the kubeovn.io group.
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}
