// covers: O4, O2, T1, T3, K5 (the user guide's "Your first Service" run command by command in the
// lab without vpcgw: installed from the release, a Service answering through its EIP, the plugin
// telling a tenant with only vpcgw-tenant-view the truth)

package kubeovn

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

const (
	guidePath        = "../../docs/user-guide.md"
	walkthroughTitle = "## Your first Service"
)

// walkthroughSteps reads the walkthrough from the user guide.
func walkthroughSteps(t *testing.T) []testutil.GuideStep {
	t.Helper()
	b, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := testutil.GuideSteps(string(b), walkthroughTitle)
	if err != nil {
		t.Fatalf("the user guide's walkthrough: %v", err)
	}
	return steps
}

// The walkthrough stays something a test can follow: plain commands of the tools it names, each
// placeholder filled by the release or by an earlier command's output. No lab needed.
func TestUserGuideWalkthroughIsRunnable(t *testing.T) {
	known := map[string]bool{"<chart version>": true}
	tools := []string{"sha256sum", "kubectl", "helm", "curl"}
	var manifests int
	for _, s := range walkthroughSteps(t) {
		if s.Manifest != "" {
			manifests++
			continue
		}
		if !slices.Contains(tools, s.Argv[0]) {
			t.Errorf("line %d runs %q: the walkthrough's test runs only %v", s.Line, s.Argv[0], tools)
		}
		for _, w := range s.Argv {
			for _, p := range placeholders(w) {
				if !known[p] {
					t.Errorf("line %d uses %s, which neither the release nor an earlier command's `# → %s` gives", s.Line, p, p)
				}
			}
		}
		if s.Capture != "" {
			known[s.Capture] = true
		}
	}
	if manifests == 0 {
		t.Error("the walkthrough applies no manifest")
	}
}

// placeholders are the <...> of a word.
func placeholders(w string) []string {
	var out []string
	for {
		i := strings.IndexByte(w, '<')
		j := strings.IndexByte(w[max(i, 0):], '>')
		if i < 0 || j < 0 {
			return out
		}
		out = append(out, w[i:i+j+1])
		w = w[i+j+1:]
	}
}

// A kube-ovn operator follows the user guide's "Your first Service" in a cluster without vpcgw:
// the test runs each of its commands (the real kubectl, helm, sha256sum and curl; the plugin from
// the release's krew archive as `kubectl vpcgw`) and applies each of its manifests, in order, in
// the release directory, with the guide's placeholders filled from the release and from the
// outputs the guide names. The lab node runs vpcgw from the release's OCI archives and agnhost as
// the walkthrough's backend; curl runs from the external network's client.
func TestUserGuideWalkthrough(t *testing.T) {
	steps := walkthroughSteps(t)
	rel, c, helm, kubectl := releaseLab(t, func(o *cluster.Options) { o.NoDemo, o.Agnhost = true, true })
	bin := toolsDir(t, rel, map[string]string{"kubectl": kubectl, "helm": helm})
	home := t.TempDir()
	env := append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "helm-config"))
	filled := map[string]string{"<chart version>": strings.TrimPrefix(rel.Version, "v")}
	outputs := map[string]string{}
	for _, s := range steps {
		if s.Manifest != "" {
			guideRun(t, s, rel.Dir, env, strings.NewReader(s.Manifest), "kubectl", "apply", "-f", "-")
			continue
		}
		argv := fillPlaceholders(t, s, filled)
		if argv[0] == "curl" {
			// From the external network, as the guide says.
			argv = append([]string{"ip", "netns", "exec", c.ExternalClient()}, argv...)
		}
		out := guideRun(t, s, rel.Dir, env, nil, argv...)
		outputs[strings.Join(s.Argv, " ")] = out
		if s.Capture != "" {
			filled[s.Capture] = strings.TrimSpace(out)
		}
	}
	assertWalkthroughAnswers(t, c, filled, outputs)
}

// assertWalkthroughAnswers checks what the walkthrough's reader is told: the EIP is the
// EXTERNAL-IP, a backend answered through it, and the plugin, run as the tenant alice with only
// vpcgw-tenant-view, says the Service is served.
func assertWalkthroughAnswers(t *testing.T, c *cluster.Cluster, filled, outputs map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace("shop"), client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	var hostname string
	for cmd, out := range outputs {
		if strings.HasPrefix(cmd, "curl ") {
			hostname = strings.TrimSpace(out)
		}
	}
	if !slices.Contains(names, hostname) {
		t.Errorf("curl through EXTERNAL-IP %s answered %q, want the name of a backend of %v", filled["<EXTERNAL-IP>"], hostname, names)
	}
	ip := filled["<EXTERNAL-IP>"]
	served := regexp.MustCompile(`(?m)^web\s+gw1\s+eip-web\s+` + regexp.QuoteMeta(ip) + `\s.*\sTrue\s`)
	verdict := regexp.MustCompile(`^Service shop/web is served (by gateway gw1 )?through EIP ` + regexp.QuoteMeta(ip) + `\b`)
	checked := 0
	for cmd, out := range outputs {
		switch {
		case strings.HasPrefix(cmd, "kubectl vpcgw status"):
			checked++
			if !served.MatchString(out) || strings.Contains(out, "Unknown") {
				t.Errorf("%s printed, with the Service served:\n%s\nwant its row READY True, nothing Unknown", cmd, out)
			}
		case strings.HasPrefix(cmd, "kubectl vpcgw explain"):
			checked++
			if first, _, _ := strings.Cut(out, "\n"); !verdict.MatchString(first) || !strings.Contains(out, "Ready:      True") {
				t.Errorf("%s printed, with the Service served:\n%s\nwant it to begin %s and say Ready True", cmd, out, verdict)
			}
		}
	}
	if checked != 3 {
		t.Errorf("the walkthrough ran %d kubectl vpcgw status or explain commands, want 3 (explain as admin, status and explain as the tenant)", checked)
	}
}

// fillPlaceholders returns the step's argv with each placeholder replaced by its value.
func fillPlaceholders(t *testing.T, s testutil.GuideStep, filled map[string]string) []string {
	t.Helper()
	argv := slices.Clone(s.Argv)
	for i, w := range argv {
		for _, p := range placeholders(w) {
			v, ok := filled[p]
			if !ok || v == "" {
				t.Fatalf("line %d: %s has no value (known: %v)", s.Line, p, filled)
			}
			w = strings.ReplaceAll(w, p, v)
		}
		argv[i] = w
	}
	return argv
}

// guideRun runs one command of the guide in dir and returns its standard output; a failure ends
// the test with the guide's line, the command and what it printed.
func guideRun(t *testing.T, s testutil.GuideStep, dir string, env []string, stdin io.Reader, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// The guide's tools are found on the test's PATH (toolsDir first), as a reader's shell finds them.
	cmd := exec.CommandContext(ctx, lookPathIn(t, argv[0], env), argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir, cmd.Env, cmd.Stdin = dir, env, stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("user guide line %d: %s: %v\nstdout:\n%s\nstderr:\n%s", s.Line, strings.Join(argv, " "), err, tail(stdout.String(), 40), tail(stderr.String(), 40))
	}
	t.Logf("user guide line %d: %s\n%s", s.Line, strings.Join(argv, " "), tail(stdout.String(), 20))
	return stdout.String()
}

// lookPathIn finds name on the PATH of env.
func lookPathIn(t *testing.T, name string, env []string) string {
	t.Helper()
	var path string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s is not on PATH %s", name, path)
	return ""
}

// toolsDir is a directory for the front of PATH: the given tools by their names, and the
// release's kubectl plugin (kubectl-vpcgw from its krew archive for this machine), which kubectl
// finds there as `kubectl vpcgw`.
func toolsDir(t *testing.T, rel cluster.Release, tools map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, path := range tools {
		if err := os.Symlink(path, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	archive := rel.Path(fmt.Sprintf("kubectl-vpcgw_%s_%s.tar.gz", runtime.GOOS, runtime.GOARCH))
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s holds no kubectl-vpcgw", archive)
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if filepath.Base(h.Name) != "kubectl-vpcgw" {
			continue
		}
		out, err := os.OpenFile(filepath.Join(dir, "kubectl-vpcgw"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
}
