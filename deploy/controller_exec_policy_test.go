// covers: N5
//
// The chart's ValidatingAdmissionPolicy on the controller's pods/exec (templates/controller-policy.yaml),
// evaluated by the real API server: RBAC lets the controller exec into any Pod of kube-ovn's
// namespace (etcd's among them), and the client's owner-chain check does not bind a stolen token.
// The policy admits only gateway Pods, their vpc-nat-gw container, no TTY, and the argvs the
// agent's delivery and the agent run.
package deploy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

const execPolicyDenied = "ValidatingAdmissionPolicy 'vpcgw-controller-exec' with binding 'vpcgw-controller-exec' denied request"

// execAs opens (and at once drops) a pods/exec request as user with every RBAC permission
// (system:masters), so that only admission decides. The Pods do not exist: a request the policy
// admits fails after admission with NotFound.
func execAs(ctx context.Context, t *testing.T, user, sub, ns, pod string, opts *corev1.PodExecOptions) error {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	cs, err := kubernetes.NewForConfig(c)
	must(t, err)
	return cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource(sub).
		VersionedParams(opts, scheme.ParameterCodec).Do(ctx).Error()
}

// covers: N5
func TestControllerExecPolicyOnAPIServer(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	ctx := context.Background()
	m := manifest(render(t))
	p, b := m.must(t, "ValidatingAdmissionPolicy", "", "vpcgw-controller-exec"), m.must(t, "ValidatingAdmissionPolicyBinding", "", "vpcgw-controller-exec")
	applyOne(t, p, false)
	applyOne(t, b, false)
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), b.DeepCopy())
		_ = k8s.Delete(context.Background(), p.DeepCopy())
	})
	gwPod := "vpc-nat-gw-gw1-0"
	exec := func(argv ...string) *corev1.PodExecOptions {
		return &corev1.PodExecOptions{Container: "vpc-nat-gw", Command: argv, Stdin: true, Stdout: true, Stderr: true}
	}
	// The API server picks policies up asynchronously: wait until a shell is refused.
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = execAs(ctx, t, controllerUser, "exec", "kube-system", gwPod, exec("sh"))
		return last != nil && strings.Contains(last.Error(), execPolicyDenied), nil
	}); err != nil {
		t.Fatalf("the exec policy is not in force: %v (last: %v)", err, last)
	}

	const part = "/run/vpcgw/vpcgw-agent-0123456789abcdef.part-a1b2c3d4e5f6"
	const agent = "/run/vpcgw/vpcgw-agent-0123456789abcdef"
	// What internal/transport runs, in order: every one admitted.
	for _, argv := range [][]string{
		{"uname", "-m"}, {"sha256sum", agent}, {"mkdir", "-p", "/run/vpcgw"}, {"dd", "of=" + part, "bs=65536"},
		{"chmod", "0755", part}, {"sha256sum", part}, {"mv", "-f", part, agent}, {"ls", "-1", "/run/vpcgw"},
		{"rm", "-f", part, "/run/vpcgw/vpcgw-agent-fedcba9876543210"}, {agent}, {agent, "--debug"}, {"vpcgw-agent"},
	} {
		err := execAs(ctx, t, controllerUser, "exec", "kube-system", gwPod, exec(argv...))
		if err == nil || strings.Contains(err.Error(), execPolicyDenied) {
			t.Errorf("%q: %v, want it admitted (and then not found: the Pod does not exist)", argv, err)
		}
	}
	// What a stolen token would try.
	for _, c := range []struct {
		what, sub, pod string
		opts           *corev1.PodExecOptions
		msg            string
	}{
		{"a shell", "exec", gwPod, exec("sh", "-c", "id"), "may run only the agent and its delivery"},
		{"etcd's pod", "exec", "etcd-node-1", &corev1.PodExecOptions{Container: "etcd", Command: []string{"etcdctl", "get", "/"}, Stdout: true}, "only into kube-ovn gateway pods"},
		{"another container", "exec", gwPod, &corev1.PodExecOptions{Container: "debug", Command: []string{"uname", "-m"}, Stdout: true}, "only into the vpc-nat-gw container"},
		{"a TTY", "exec", gwPod, &corev1.PodExecOptions{Container: "vpc-nat-gw", Command: []string{agent}, Stdin: true, Stdout: true, TTY: true}, "without a TTY"},
		{"another file", "exec", gwPod, exec("dd", "of=/etc/passwd", "bs=65536"), "may run only the agent"},
		{"rm outside", "exec", gwPod, exec("rm", "-f", "/etc/shadow"), "may run only the agent"},
		{"an agent elsewhere", "exec", gwPod, exec("/tmp/vpcgw-agent-0123456789abcdef"), "may run only the agent"},
		{"an agent with an argument", "exec", gwPod, exec(agent, "x"), "may run only the agent"},
		{"sha256sum of a secret", "exec", gwPod, exec("sha256sum", "/var/run/secrets/kubernetes.io/serviceaccount/token"), "may run only the agent"},
		{"no command", "exec", gwPod, exec(gwPod), "may run only the agent"},
		{"attach", "attach", gwPod, nil, "may not attach pods"},
	} {
		var err error
		if c.sub == "attach" {
			err = attachAs(ctx, t, controllerUser, "kube-system", c.pod)
		} else {
			err = execAs(ctx, t, controllerUser, c.sub, "kube-system", c.pod, c.opts)
		}
		if err == nil || !strings.Contains(err.Error(), execPolicyDenied) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want it denied by the exec policy with %q", c.what, err, c.msg)
		}
	}
	// Everyone else is not the policy's business.
	if err := execAs(ctx, t, "alice", "exec", "kube-system", "etcd-node-1", &corev1.PodExecOptions{Container: "etcd", Command: []string{"sh"}, Stdout: true}); err != nil && strings.Contains(err.Error(), execPolicyDenied) {
		t.Errorf("another user's exec was judged by the controller's policy: %v", err)
	}
}

// attachAs opens a pods/attach request as user (system:masters).
func attachAs(ctx context.Context, t *testing.T, user, ns, pod string) error {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	cs, err := kubernetes.NewForConfig(c)
	must(t, err)
	err = cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "vpc-nat-gw", Stdout: true}, scheme.ParameterCodec).Do(ctx).Error()
	if err == nil {
		return fmt.Errorf("attach admitted")
	}
	return err
}
