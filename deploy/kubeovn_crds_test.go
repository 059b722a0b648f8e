package deploy

// covers: K1
//
// kube-ovn's CRDs belong to kube-ovn. The tests of this package install kube-ovn v1.16.2's own
// CRDs (kube-ovn-crd.yaml from its module) before anything else, apply every install path on top
// and check afterwards that not one of them changed.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

// kubeOVNCRDFile is kube-ovn's CRD file in testutil.KubeOVNAssets' directory.
const kubeOVNCRDFile = "kube-ovn-crd.yaml"

// kubeOVNFieldManager stands for kube-ovn's installer; no vpcgw install path may appear next to it.
const kubeOVNFieldManager = "kube-ovn-install"

// crdState is what must not change about a kube-ovn CRD.
type crdState struct {
	resourceVersion string
	spec            string // JSON
	managers        []string
}

// kubeOVNBefore is every kubeovn.io CRD as kube-ovn installed it, before any test ran.
var kubeOVNBefore map[string]crdState

// readKubeOVNCRDs decodes kube-ovn's CRD file.
func readKubeOVNCRDs() ([]*unstructured.Unstructured, error) {
	dir, missing := testutil.KubeOVNAssets(kubeOVNCRDFile)
	if missing != "" {
		return nil, errors.New(missing)
	}
	data, err := os.ReadFile(filepath.Join(dir, kubeOVNCRDFile))
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", kubeOVNCRDFile, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", kubeOVNCRDFile, err)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", kubeOVNCRDFile, err)
		}
		if u.GetKind() == "CustomResourceDefinition" {
			out = append(out, u)
		}
	}
}

// installKubeOVNCRDs server-side applies kube-ovn's CRDs as kube-ovn's installer would, waits until
// they are served and returns their state.
func installKubeOVNCRDs(ctx context.Context, c client.Client) (map[string]crdState, error) {
	crds, err := readKubeOVNCRDs()
	if err != nil {
		return nil, err
	}
	for _, u := range crds {
		//nolint:staticcheck // server-side apply of unstructured objects as kube-ovn ships them
		if err := c.Patch(ctx, u.DeepCopy(), client.Apply, client.FieldOwner(kubeOVNFieldManager)); err != nil {
			return nil, fmt.Errorf("applying %s: %w", u.GetName(), err)
		}
	}
	for _, u := range crds {
		if err := waitCRDEstablished(ctx, c, u.GetName()); err != nil {
			return nil, err
		}
	}
	state, err := kubeOVNCRDState(ctx, c)
	if err != nil {
		return nil, err
	}
	if len(state) != len(crds) {
		return nil, fmt.Errorf("%d kubeovn.io CRDs served after installing %d", len(state), len(crds))
	}
	return state, nil
}

func waitCRDEstablished(ctx context.Context, c client.Client, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, nil
		}
		accepted, established := false, false
		for _, cond := range crd.Status.Conditions {
			accepted = accepted || cond.Type == apiextensionsv1.NamesAccepted && cond.Status == apiextensionsv1.ConditionTrue
			established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
		}
		return accepted && established, nil
	})
}

// kubeOVNCRDState reads every kubeovn.io CRD the API server has.
func kubeOVNCRDState(ctx context.Context, c client.Client) (map[string]crdState, error) {
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	out := map[string]crdState{}
	for _, crd := range list.Items {
		if crd.Spec.Group != "kubeovn.io" {
			continue
		}
		spec, err := json.Marshal(crd.Spec)
		if err != nil {
			return nil, err
		}
		var managers []string
		for _, mf := range crd.ManagedFields {
			managers = append(managers, mf.Manager+"/"+string(mf.Operation)+"/"+mf.Subresource)
		}
		sort.Strings(managers)
		out[crd.Name] = crdState{resourceVersion: crd.ResourceVersion, spec: string(spec), managers: managers}
	}
	return out, nil
}

// checkKubeOVNCRDsUnchanged fails the test when an install path touched a kube-ovn CRD on the
// shared API server (SPEC K1).
func checkKubeOVNCRDsUnchanged(t *testing.T, after string) {
	t.Helper()
	now, err := kubeOVNCRDState(context.Background(), k8s)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range diffKubeOVNCRDs(kubeOVNBefore, now) {
		t.Errorf("after %s: %s", after, p)
	}
}

// diffKubeOVNCRDs lists what changed: every CRD kube-ovn installed is still there at the
// resourceVersion its install left, with the same spec and the same field managers, none of
// them vpcgw's; and no other kubeovn.io CRD appeared.
func diffKubeOVNCRDs(before, now map[string]crdState) []string {
	var out []string
	for name, b := range before {
		cur, ok := now[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("kube-ovn's CRD %s is gone", name))
			continue
		case cur.resourceVersion != b.resourceVersion:
			out = append(out, fmt.Sprintf("kube-ovn's CRD %s was written (resourceVersion %s, kube-ovn installed it at %s; managers %v)", name, cur.resourceVersion, b.resourceVersion, cur.managers))
		case cur.spec != b.spec:
			out = append(out, fmt.Sprintf("kube-ovn's CRD %s has another spec", name))
		case !slices.Equal(cur.managers, b.managers):
			out = append(out, fmt.Sprintf("kube-ovn's CRD %s field managers %v, kube-ovn's install left %v", name, cur.managers, b.managers))
		}
		for _, m := range cur.managers {
			if strings.Contains(m, "vpcgw") {
				out = append(out, fmt.Sprintf("vpcgw field manager %s on kube-ovn's CRD %s", m, name))
			}
		}
	}
	for name := range now {
		if _, ok := before[name]; !ok {
			out = append(out, fmt.Sprintf("a kubeovn.io CRD %s appeared that kube-ovn did not install", name))
		}
	}
	sort.Strings(out)
	return out
}

// checkNoKubeOVNCRDs: a rendering holds no kubeovn.io CRD, and its CRDs are exactly vpcgw's own
// (servicerecords.vpcgw.io) or none (SPEC K1).
func checkNoKubeOVNCRDs(t *testing.T, m manifest, wantOwn bool) {
	t.Helper()
	var crds []string
	for _, o := range m {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		if group == "kubeovn.io" || strings.HasSuffix(o.GetName(), ".kubeovn.io") {
			t.Errorf("rendering holds kube-ovn's CRD %s", o.GetName())
		}
		crds = append(crds, o.GetName()+" "+group)
	}
	want := []string{"servicerecords.vpcgw.io vpcgw.io"}
	if !wantOwn {
		want = nil
	}
	if !slices.Equal(crds, want) {
		t.Errorf("rendered CRDs %v, want %v", crds, want)
	}
}
