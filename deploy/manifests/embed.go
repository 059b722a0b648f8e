// Package manifests embeds the plain install manifests (vpcgw.yaml, generated from the chart by
// generate.sh), so that the lab installs the RBAC and service accounts exactly as shipped.
package manifests

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed vpcgw.yaml
var vpcgw []byte

// Objects returns the objects of vpcgw.yaml whose kind is one of kinds (all when none is given).
func Objects(kinds ...string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(vpcgw), 4096)
	var out []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding vpcgw.yaml: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if len(kinds) == 0 || slices.Contains(kinds, u.GetKind()) {
			out = append(out, &u)
		}
	}
}
