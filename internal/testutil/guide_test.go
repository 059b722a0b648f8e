// covers: O4 (the user guide's walkthrough is read as a reader runs it: the test that follows it
// sees its commands and manifests exactly, and a command it cannot run without a shell is refused)

package testutil

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		line    string
		words   []string
		comment string
	}{
		{"kubectl -n shop get svc web", []string{"kubectl", "-n", "shop", "get", "svc", "web"}, ""},
		{`kubectl get svc -o jsonpath='{.spec.clusterIP}'   # → <ip>`, []string{"kubectl", "get", "svc", "-o", "jsonpath={.spec.clusterIP}"}, "→ <ip>"},
		{`kubectl wait --for=jsonpath='{.a[0].ip}' "x y"`, []string{"kubectl", "wait", "--for=jsonpath={.a[0].ip}", "x y"}, ""},
		{"  # only a comment", nil, "only a comment"},
		{"curl http://<EXTERNAL-IP>/hostname # from outside", []string{"curl", "http://<EXTERNAL-IP>/hostname"}, "from outside"},
		{"helm install vpcgw vpcgw-<chart version>.tgz --set a=tcp:<ovn-nb ClusterIP>:6641", []string{"helm", "install", "vpcgw", "vpcgw-<chart version>.tgz", "--set", "a=tcp:<ovn-nb ClusterIP>:6641"}, ""},
	} {
		words, comment, err := SplitWords(tc.line)
		if err != nil || !reflect.DeepEqual(words, tc.words) || comment != tc.comment {
			t.Errorf("SplitWords(%q) = %q, %q, %v; want %q, %q", tc.line, words, comment, err, tc.words, tc.comment)
		}
	}
	for _, line := range []string{
		"helm install x --set a=$(kubectl get svc)", "echo `id`", "a | b", "a && b", "a; b", "a > f",
		`echo "$HOME"`, "echo 'open", "ls *.tgz", "cd ~", "a {x,y}", "a < f", "a <f",
	} {
		if words, _, err := SplitWords(line); err == nil {
			t.Errorf("SplitWords(%q) = %q, want an error (a shell would expand or connect it)", line, words)
		}
	}
}

func TestGuideSteps(t *testing.T) {
	md := strings.Join([]string{
		"# Guide", "## First", "1. Apply:", "", "   ```yaml", "   kind: Namespace", "   metadata: {name: shop}", "   ```",
		"2. Run:", "   ```sh", "   kubectl get ns   # → <ns>", "", "   helm list", "   ```",
		"   ```text", "   not a step", "   ```", "## Next", "   ```sh", "   not in the section", "   ```",
	}, "\n")
	steps, err := GuideSteps(md, "## First")
	if err != nil {
		t.Fatal(err)
	}
	want := []GuideStep{
		{Line: 6, Manifest: "kind: Namespace\nmetadata: {name: shop}\n"},
		{Line: 11, Argv: []string{"kubectl", "get", "ns"}, Capture: "<ns>", Comment: "→ <ns>"},
		{Line: 13, Argv: []string{"helm", "list"}},
	}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("steps\n%+v\nwant\n%+v", steps, want)
	}
	if _, err := GuideSteps(md, "## Missing"); err == nil {
		t.Error("a missing section gave no error")
	}
	if _, err := GuideSteps("## S\n```sh\nx $(y)\n```\n", "## S"); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("a shell construct: %v, want an error naming line 3", err)
	}
	if _, err := GuideSteps("## S\n```sh\nx\n", "## S"); err == nil {
		t.Error("an open code block gave no error")
	}
}
