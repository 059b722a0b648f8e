package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is vpcgw's API group and version.
	GroupVersion = schema.GroupVersion{Group: "vpcgw.io", Version: "v1alpha1"}

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

func init() {
	register(&ServiceRecord{}, &ServiceRecordList{})
}
