package lab

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/kcm"
)

// startEndpointSlices runs the real kube-controller-manager's EndpointSlice controllers (envtest
// runs none): every Service with a selector gets its slices from the Pods whose status the lab
// sets as a kubelet would.
func (l *Lab) startEndpointSlices() error {
	user, err := l.env.AddUser(envtest.User{Name: "kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("creating the kube-controller-manager user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if l.kcm, err = kcm.Start(l.opts.AssetsDir, kc, l.dir); err != nil {
		return err
	}
	return nil
}
