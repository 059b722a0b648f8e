// Package scheme is the one runtime.Scheme of vpcgw's API clients: the Kubernetes built-ins,
// kube-ovn's types (as vpcgw reads them) and vpcgw's own. The controller, the webhook, the
// plugin and the labs share it without depending on each other.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
)

// New returns a scheme that knows the Kubernetes built-ins, kube-ovn's types and vpcgw's own.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubeovnv1.AddToScheme, vpcgwv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
