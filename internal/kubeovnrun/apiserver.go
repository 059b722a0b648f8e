package kubeovnrun

import (
	"errors"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Asset file names in the kube-ovn assets directory ($VPCGW_KUBEOVN).
const (
	ControllerBinary = "kube-ovn-controller" // kube-ovn picks its role by this name
	CRDFile          = "kube-ovn-crd.yaml"   // kube-ovn's own CRDs (charts/kube-ovn/templates)
	NADCRDFile       = "networks-crd.yaml"   // NetworkAttachmentDefinition CRD
)

// AssetFiles are the files of the kube-ovn assets directory this package uses.
var AssetFiles = []string{ControllerBinary, CRDFile, NADCRDFile, NBSchemaFile, SBSchemaFile}

// DefaultServiceCIDR is the Service CIDR ConfigureEnvtest gives the API server when none is set.
const DefaultServiceCIDR = "10.96.0.0/16"

// ConfigureEnvtest sets up env (before Start) for kube-ovn-controller: the API server flags it
// needs (RBAC, privileged pods for the gateway, no ServiceAccount admission as no token
// controller runs, InternalIP for the kubelet connection of exec), the Service CIDR (serviceCIDR,
// or DefaultServiceCIDR when empty) and kube-ovn's CRDs with the NetworkAttachmentDefinition CRD
// from kubeOVNDir. vpcgw's own CRDs, if needed, are the caller's to add.
func ConfigureEnvtest(env *envtest.Environment, kubeOVNDir, serviceCIDR string) {
	if serviceCIDR == "" {
		serviceCIDR = DefaultServiceCIDR
	}
	api := env.ControlPlane.GetAPIServer().Configure()
	api.Set("authorization-mode", "RBAC")
	api.Set("allow-privileged", "true")
	api.Set("disable-admission-plugins", "ServiceAccount")
	api.Set("kubelet-preferred-address-types", "InternalIP")
	api.Set("service-cluster-ip-range", serviceCIDR)
	env.CRDInstallOptions.Paths = append(env.CRDInstallOptions.Paths,
		filepath.Join(kubeOVNDir, CRDFile), filepath.Join(kubeOVNDir, NADCRDFile))
	env.CRDInstallOptions.ErrorIfPathMissing = true
	env.ErrorIfCRDPathMissing = true
}

// ServiceCIDR is the Service CIDR env's API server was configured with (for kube-ovn's
// --service-cluster-ip-range).
func ServiceCIDR(env *envtest.Environment) string {
	if v := env.ControlPlane.GetAPIServer().Configure().Get("service-cluster-ip-range").Get(nil); len(v) > 0 {
		return v[0]
	}
	return DefaultServiceCIDR
}

// AdminKubeconfig returns a kubeconfig of a new user of env's (started) API server in group
// system:masters: kube-ovn-controller's start-up access check and kube-controller-manager's
// controllers need cluster-admin.
func AdminKubeconfig(env *envtest.Environment, user string) ([]byte, error) {
	if env.ControlPlane.APIServer == nil {
		return nil, errors.New("kubeovnrun: the envtest environment is not started")
	}
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("kubeovnrun: adding API server user %s: %w", user, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeovnrun: kubeconfig of user %s: %w", user, err)
	}
	return kc, nil
}
