// covers: O4, N5 (the chart's uninstall: a pre-delete hook that runs vpcgw release as the controller)

package deploy

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The pre-delete hook runs `vpcgw release` with exactly the controller's flags, as the
// controller's service account, and is deleted once it succeeded; crds.keep=true still keeps the
// CRD for those who want the records, and release.enabled=false renders no hook.
func TestChartReleaseHook(t *testing.T) {
	helmBin(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"leader election and TLS", []string{"--set", "controller.replicas=2", "--set", "ovn.tls.secretName=kube-ovn-tls", "--set", "ovn.nbAddr=ssl:10.0.0.1:6641"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manifest(render(t, tc.args...))
			job := m.must(t, "Job", "kube-system", "vpcgw-release")
			if a := job.GetAnnotations(); a["helm.sh/hook"] != "pre-delete" || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
				t.Errorf("hook annotations %v", a)
			}
			d := m.must(t, "Deployment", "kube-system", "vpcgw-controller")
			if sa, _, _ := unstructured.NestedString(job.Object, "spec", "template", "spec", "serviceAccountName"); sa != "vpcgw-controller" {
				t.Errorf("the hook runs as %q, want the controller's service account", sa)
			}
			jargs := stringsAt(t, container(t, job, "release"), "args")
			cargs := stringsAt(t, container(t, d, "controller"), "args")
			if jargs[0] != "release" || cargs[0] != "controller" {
				t.Fatalf("commands %q and %q", jargs[0], cargs[0])
			}
			flags := slices.DeleteFunc(slices.Clone(jargs[1:]), func(a string) bool { return len(a) > 18 && a[:18] == "--release-timeout=" })
			if !slices.Equal(flags, cargs[1:]) {
				t.Errorf("the hook's flags differ from the controller's:\n hook       %q\n controller %q", flags, cargs[1:])
			}
			if !slices.Contains(jargs, "--release-timeout=5m") {
				t.Errorf("hook args %q lack --release-timeout", jargs)
			}
			if fmt.Sprint(mountsOf(container(t, job, "release"))) != fmt.Sprint(mountsOf(container(t, d, "controller"))) {
				t.Errorf("the hook mounts %v, the controller %v", mountsOf(container(t, job, "release")), mountsOf(container(t, d, "controller")))
			}
			crd := m.must(t, "CustomResourceDefinition", "", "servicerecords.vpcgw.io")
			if crd.GetAnnotations()["helm.sh/resource-policy"] == "keep" {
				t.Error("the CRD is kept by default")
			}
		})
	}
	kept := manifest(render(t, "--set", "crds.keep=true"))
	if crd := kept.must(t, "CustomResourceDefinition", "", "servicerecords.vpcgw.io"); crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("crds.keep=true: annotations %v", crd.GetAnnotations())
	}
	if off := manifest(render(t, "--set", "release.enabled=false")); off.find("Job", "kube-system", "vpcgw-release") != nil {
		t.Error("release.enabled=false renders the hook")
	}
}

func stringsAt(t *testing.T, obj map[string]any, field string) []string {
	t.Helper()
	v, _, err := unstructured.NestedStringSlice(obj, field)
	if err != nil || len(v) == 0 {
		t.Fatalf("%s: %v, %v", field, v, err)
	}
	return v
}

func mountsOf(c map[string]any) any {
	v, _, _ := unstructured.NestedFieldNoCopy(c, "volumeMounts")
	return v
}
