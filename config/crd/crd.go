// Package crd provides the CustomResourceDefinitions the lab and the tests install: vpcgw's own
// (embedded, as `make generate` wrote them) and kube-ovn's, read from kube-ovn's module (the files
// hack/tools/kubeovn/build.sh gathers). vpcgw never ships or installs kubeovn.io CRDs in a cluster
// (SPEC K1): where kube-ovn runs, its CRDs are the ones in place.
package crd

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// All returns vpcgw's own CRDs (group vpcgw.io).
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", name, err)
		}
		out = append(out, &crd)
	}
	return out, nil
}

// KubeOVNFiles are the CRD files of kube-ovn v1.16.2 and the NetworkAttachmentDefinition CRD its
// gateways need, as hack/tools/kubeovn/build.sh names them.
var KubeOVNFiles = []string{"kube-ovn-crd.yaml", "networks-crd.yaml"}

// KubeOVN reads kube-ovn's own CRDs (and the NAD CRD) from dir, the directory
// hack/tools/kubeovn/build.sh fills.
func KubeOVN(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range KubeOVNFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading kube-ovn's CRDs: %w", err)
		}
		crds, err := decodeAll(data)
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", filepath.Join(dir, name), err)
		}
		out = append(out, crds...)
	}
	return out, nil
}

// WithKubeOVN returns kube-ovn's CRDs from dir followed by vpcgw's own: what a cluster running
// kube-ovn and vpcgw has.
func WithKubeOVN(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	kubeOVN, err := KubeOVN(dir)
	if err != nil {
		return nil, err
	}
	own, err := All()
	if err != nil {
		return nil, err
	}
	return append(kubeOVN, own...), nil
}

func decodeAll(data []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*apiextensionsv1.CustomResourceDefinition
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		err := dec.Decode(&crd)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if crd.Kind == "" {
			continue // an empty document
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("unexpected %s %q among CRDs", crd.Kind, crd.Name)
		}
		out = append(out, &crd)
	}
}
