package testutil

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/config/crd"
)

// StartKubeOVNEnvtest starts a real API server with kube-ovn's own CRDs, as a cluster running
// kube-ovn has them, and vpcgw's (SPEC K1). binaries are envtest binaries the caller needs besides
// kube-apiserver and etcd. skip is non-empty, and env nil, when this machine lacks an asset; the
// caller stops env.
func StartKubeOVNEnvtest(binaries ...string) (env *envtest.Environment, assets, skip string, err error) {
	assets, missing := EnvtestAssets(append([]string{"kube-apiserver", "etcd"}, binaries...)...)
	if missing != "" {
		return nil, "", missing, nil
	}
	kubeOVN, missing := KubeOVNAssets(crd.KubeOVNFiles...)
	if missing != "" {
		return nil, "", missing, nil
	}
	crds, err := crd.WithKubeOVN(kubeOVN)
	if err != nil {
		return nil, "", "", err
	}
	env = &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds}}
	if _, err := env.Start(); err != nil {
		return nil, "", "", fmt.Errorf("starting envtest: %w", err)
	}
	return env, assets, "", nil
}
