// covers: O1
//
// Against a real kube-apiserver: the lab node registers its Node and Lease, binds and runs Pods
// as network namespaces plumbed from kube-ovn's annotations, reports their status as a kubelet
// does, serves exec to kubectl and to client-go's SPDY executor (what kube-ovn uses), gives
// kube-ovn's gateway image its real nat-gateway.sh, restarts killed containers and honours
// deletion.
package labnode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// waitFor polls cond until it holds or within passes; cond says what it saw.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s; last saw: %s", what, within, saw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func createNamespace(t *testing.T, e *env, name string) {
	t.Helper()
	_, err := e.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// ovnAnnotations are what kube-ovn-controller writes for a Pod of an OVN subnet (provider ovn).
func ovnAnnotations(sw, ip, cidr, gw, mac string) map[string]string {
	return map[string]string{
		"ovn.kubernetes.io/allocated":      "true",
		"ovn.kubernetes.io/routed":         "true",
		"ovn.kubernetes.io/ip_address":     ip,
		"ovn.kubernetes.io/mac_address":    mac,
		"ovn.kubernetes.io/cidr":           cidr,
		"ovn.kubernetes.io/gateway":        gw,
		"ovn.kubernetes.io/logical_switch": sw,
		"ovn.kubernetes.io/pod_nic_type":   "veth-pair",
	}
}

// echoPod is a Pod with two containers, listed out of name order: "web" runs the test binary as
// netlab's echo server answering with the Pod's name (downward API, $(VAR) expansion), "sidecar"
// runs sleep.
func echoPod(t *testing.T, ns, name string, ann map[string]string) *corev1.Pod {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{
				{
					Name: "web", Image: "example.com/echo:v1",
					Command: []string{self},
					Args:    []string{"--name", "$(POD_NAME)", "--listen", "$(POD_IP):8080"},
					Env: []corev1.EnvVar{
						{Name: roleEnv, Value: "echo"},
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					},
					// Ready once it listens, as a real backend would declare.
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1,
						ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
				},
				{Name: "sidecar", Image: "example.com/busybox:v1", Command: []string{"sleep", "infinity"}},
			},
		},
	}
}

// createPod creates pod and, at the end of the test, deletes it and waits for the node to finish
// it (the object goes only when the node deleted it), so that runs can repeat.
func createPod(t *testing.T, e *env, pod *corev1.Pod) {
	t.Helper()
	if _, err := e.cs.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		err := e.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			t.Errorf("deleting pod %s/%s: %v", pod.Namespace, pod.Name, err)
			return
		}
		waitFor(t, 60*time.Second, "pod "+pod.Namespace+"/"+pod.Name+" finished by the node", func() (bool, string) {
			_, err := e.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})
}

func getPod(t *testing.T, e *env, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func condition(p *corev1.Pod, c corev1.PodConditionType) corev1.ConditionStatus {
	for _, pc := range p.Status.Conditions {
		if pc.Type == c {
			return pc.Status
		}
	}
	return ""
}

func waitReady(t *testing.T, e *env, ns, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	waitFor(t, 60*time.Second, "pod "+ns+"/"+name+" Running and Ready", func() (bool, string) {
		p = getPod(t, e, ns, name)
		return p.Status.Phase == corev1.PodRunning && condition(p, corev1.PodReady) == corev1.ConditionTrue,
			fmt.Sprintf("phase %s, conditions %+v, containers %+v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	return p
}

// startPod creates the echo Pod at ip in switch sw and waits for it to run.
func startPod(t *testing.T, e *env, ns, name, sw, ip, mac string) *corev1.Pod {
	t.Helper()
	createNamespace(t, e, ns)
	pod := echoPod(t, ns, name, ovnAnnotations(sw, ip, "10.91.0.0/24", "10.91.0.1", mac))
	createPod(t, e, pod)
	return waitReady(t, e, ns, name)
}

func TestNodeRegisteredWithLease(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	node, err := e.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("Node %s is not Ready: %+v", nodeName, node.Status.Conditions)
	}
	if got := int(node.Status.DaemonEndpoints.KubeletEndpoint.Port); got != e.node.ExecPort() || got == 0 {
		t.Errorf("kubeletEndpoint.Port = %d, want the exec server's %d", got, e.node.ExecPort())
	}
	internal := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != "127.0.0.1" {
		t.Errorf("InternalIP = %q, want 127.0.0.1", internal)
	}
	if node.Status.Allocatable.Pods().Value() == 0 || node.Labels[corev1.LabelHostname] != nodeName {
		t.Errorf("allocatable %v, labels %v", node.Status.Allocatable, node.Labels)
	}
	lease, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node's Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != nodeName || lease.Spec.RenewTime == nil ||
		time.Since(lease.Spec.RenewTime.Time) > time.Minute {
		t.Errorf("Lease not held and renewed by the node: %+v", lease.Spec)
	}
}

// (a) A Pod with kube-ovn's annotations is bound, waits for kube-ovn's allocation, then runs as
// a namespace with eth0 at its address and reports a kubelet's status.
func TestPodRunsInNamespaceFromKubeOVNAnnotations(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	createNamespace(t, e, "web")
	ann := ovnAnnotations("sw-a", "10.91.0.11", "10.91.0.0/24", "10.91.0.1", "00:00:00:5a:0b:11")
	// Created before kube-ovn allocated the address: bound, but no sandbox yet.
	held := echoPod(t, "web", "echo-1", map[string]string{"ovn.kubernetes.io/logical_switch": "sw-a"})
	createPod(t, e, held)
	waitFor(t, 30*time.Second, "bound and reported pending", func() (bool, string) {
		p := getPod(t, e, "web", "echo-1")
		return p.Spec.NodeName == nodeName && condition(p, corev1.PodReadyToStartContainers) == corev1.ConditionFalse,
			fmt.Sprintf("nodeName %q, conditions %+v", p.Spec.NodeName, p.Status.Conditions)
	})
	if ns, ok := e.node.PodNetns("web", "echo-1"); ok {
		t.Fatalf("sandbox %s made before kube-ovn allocated the address", ns)
	}
	p := getPod(t, e, "web", "echo-1")
	if condition(p, corev1.PodScheduled) != corev1.ConditionTrue {
		t.Errorf("PodScheduled not True after binding: %+v", p.Status.Conditions)
	}
	// kube-ovn-controller's allocation arrives.
	p.Annotations = ann
	if _, err := e.cs.CoreV1().Pods("web").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = waitReady(t, e, "web", "echo-1")

	if p.Status.PodIP != "10.91.0.11" || len(p.Status.PodIPs) != 1 || p.Status.HostIP != "127.0.0.1" || len(p.Status.HostIPs) != 1 {
		t.Errorf("podIP %q %v hostIP %q %v", p.Status.PodIP, p.Status.PodIPs, p.Status.HostIP, p.Status.HostIPs)
	}
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodReadyToStartContainers} {
		if condition(p, c) != corev1.ConditionTrue {
			t.Errorf("condition %s = %q", c, condition(p, c))
		}
	}
	var names []string
	for _, cs := range p.Status.ContainerStatuses {
		names = append(names, cs.Name)
		if !cs.Ready || cs.Started == nil || !*cs.Started || cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() ||
			!strings.HasPrefix(cs.ContainerID, "labnode://") || cs.ImageID == "" || cs.RestartCount != 0 {
			t.Errorf("container status %+v", cs)
		}
	}
	if strings.Join(names, ",") != "sidecar,web" {
		t.Errorf("containerStatuses in order %v, want sorted by name [sidecar web]", names)
	}
	if p.Status.StartTime == nil {
		t.Error("no startTime")
	}

	netns, ok := e.node.PodNetns("web", "echo-1")
	if !ok {
		t.Fatal("no sandbox for the running pod")
	}
	out, err := netlab.Run("ip", "-n", netns, "-br", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(string(out), "10.91.0.11/24") {
		t.Errorf("eth0 in %s: %s %v", netns, out, err)
	}
	out, err = netlab.Run("ip", "-n", netns, "-br", "link", "show", "dev", "eth0")
	if err != nil || !strings.Contains(string(out), "00:00:00:5a:0b:11") {
		t.Errorf("eth0's MAC: %s %v", out, err)
	}
	out, err = netlab.Run("ip", "-n", netns, "route", "show", "default")
	if err != nil || !strings.Contains(string(out), "via 10.91.0.1 dev eth0") {
		t.Errorf("default route: %s %v", out, err)
	}

	// Real traffic over the switch: the container answers with the Pod's name.
	client := e.net.client(t, "sw-a", "10.91.0.200/24")
	self, _ := os.Executable()
	res, err := probe(e, client, self, "10.91.0.11:8080")
	if err != nil || res.Answers["echo-1"] != 3 {
		t.Errorf("HTTP to the pod: %+v %v", res, err)
	}
}

func probe(e *env, ns, self, target string) (netlab.ProbeResult, error) {
	// netlab.Probe runs argv through `ip netns exec`; the role variable is inherited.
	if err := os.Setenv(roleEnv, "probe"); err != nil {
		return netlab.ProbeResult{}, err
	}
	defer func() { _ = os.Unsetenv(roleEnv) }()
	return e.net.lab.Probe(ns, []string{self}, netlab.ProbeOptions{Target: target, Count: 3, Timeout: 2 * time.Second})
}

func kubectl(t *testing.T, e *env, stdin string, args ...string) (string, int) {
	t.Helper()
	bin := filepath.Join(e.assets, "kubectl")
	if _, err := os.Stat(bin); err != nil {
		testutil.Skip(t, "KUBEBUILDER_ASSETS has no kubectl (hack/tools/build-assets.sh builds it)")
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", e.kcfg}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// (b) kubectl exec through the real API server runs in the pod's namespace, with stdin, and a
// non-zero exit is reported as such.
func TestKubectlExec(t *testing.T) {
	e := cluster(t)
	startPod(t, e, "kx", "echo-kx", "sw-a", "10.91.0.21", "00:00:00:5a:0b:21")
	out, code := kubectl(t, e, "", "exec", "-n", "kx", "echo-kx", "-c", "sidecar", "--", "ip", "-4", "addr", "show", "dev", "eth0")
	if code != 0 || !strings.Contains(out, "inet 10.91.0.21/24") {
		t.Errorf("kubectl exec ip addr: exit %d:\n%s", code, out)
	}
	out, code = kubectl(t, e, "hello from stdin\n", "exec", "-i", "-n", "kx", "echo-kx", "-c", "web", "--", "cat")
	if code != 0 || out != "hello from stdin\n" {
		t.Errorf("kubectl exec -i cat: exit %d: %q", code, out)
	}
	out, code = kubectl(t, e, "", "exec", "-n", "kx", "echo-kx", "-c", "sidecar", "--", "ip", "link", "show", "dev", "nosuchdev")
	if code == 0 || !strings.Contains(out, "command terminated with exit code") {
		t.Errorf("kubectl exec of a failing command: exit %d:\n%s", code, out)
	}
	out, code = kubectl(t, e, "", "exec", "-n", "kx", "echo-kx", "-c", "sidecar", "--", "printenv", "HOSTNAME")
	if code != 0 || strings.TrimSpace(out) != "echo-kx" {
		t.Errorf("exec environment: HOSTNAME %q (exit %d)", out, code)
	}
	// kubectl logs reaches the node's containerLogs endpoint: the echo server's start line.
	out, code = kubectl(t, e, "", "logs", "-n", "kx", "echo-kx", "-c", "web")
	if code != 0 || !strings.Contains(out, "listening 10.91.0.21:8080") {
		t.Errorf("kubectl logs: exit %d:\n%s", code, out)
	}
}

// spdyExec runs argv in the container as kube-ovn does (client-go's SPDY executor, POST).
func spdyExec(e *env, ns, pod, container string, argv ...string) (string, string, error) {
	req := e.cs.CoreV1().RESTClient().Post().Resource("pods").Name(pod).Namespace(ns).SubResource("exec").
		Param("container", container)
	req.VersionedParams(&corev1.PodExecOptions{Stdout: true, Stderr: true, Container: container, Command: argv}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

// (c) client-go's SPDY executor, what kube-ovn uses.
func TestSPDYExec(t *testing.T) {
	e := cluster(t)
	startPod(t, e, "spdy", "echo-spdy", "sw-a", "10.91.0.31", "00:00:00:5a:0b:31")
	out, _, err := spdyExec(e, "spdy", "echo-spdy", "web", "ip", "-4", "-br", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, "10.91.0.31/24") {
		t.Errorf("SPDY exec: %q %v", out, err)
	}
	_, _, err = spdyExec(e, "spdy", "echo-spdy", "web", "false")
	var ce utilexec.CodeExitError
	if !errors.As(err, &ce) || ce.Code != 1 {
		t.Errorf("SPDY exec of false: %v (%T), want exit code 1", err, err)
	}
	// With a tty the command's stdio is a terminal of its own.
	req := e.cs.CoreV1().RESTClient().Post().Resource("pods").Name("echo-spdy").Namespace("spdy").SubResource("exec")
	req.VersionedParams(&corev1.PodExecOptions{Stdout: true, TTY: true, Container: "sidecar", Command: []string{"tty"}}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var tty bytes.Buffer
	if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &tty, Tty: true}); err != nil ||
		!strings.HasPrefix(strings.TrimSpace(tty.String()), "/dev/pts/") {
		t.Errorf("exec with a tty: %q %v", tty.String(), err)
	}
	_, _, err = spdyExec(e, "spdy", "echo-spdy", "nosuch", "true")
	if err == nil {
		t.Error("exec into a container the pod does not have succeeded")
	}
}

// (d) kube-ovn's gateway pod: its image gets kube-ovn's real nat-gateway.sh, its NICs come from
// the ovn provider (eth0) and the external network's IPAM provider (net1), its postStart runs,
// and kube-ovn's exact exec argv for init reaches the script in the pod's namespace.
func TestGatewayImageRunsKubeOVNScript(t *testing.T) {
	e := cluster(t)
	if _, missing := testutil.KubeOVNAssets("nat-gateway.sh"); missing != "" {
		testutil.Skip(t, missing)
	}
	zero := int64(0)
	privileged := true
	ann := ovnAnnotations("vpc1-subnet", "10.92.0.254", "10.92.0.0/24", "10.92.0.1", "00:00:00:5a:0c:fe")
	for k, v := range map[string]string{
		"k8s.v1.cni.cncf.io/networks":                                     "kube-system/ovn-vpc-external-network",
		"ovn.kubernetes.io/vpc_nat_gw":                                    "gw1",
		"ovn.kubernetes.io/routes":                                        `[{"dst":"10.96.0.0/12","gw":"10.92.0.1"}]`,
		"ovn-vpc-external-network.kube-system.kubernetes.io/allocated":    "true",
		"ovn-vpc-external-network.kube-system.kubernetes.io/ip_address":   "172.31.50.10",
		"ovn-vpc-external-network.kube-system.kubernetes.io/mac_address":  "00:00:00:5a:0d:0a",
		"ovn-vpc-external-network.kube-system.kubernetes.io/cidr":         "172.31.50.0/24",
		"ovn-vpc-external-network.kube-system.kubernetes.io/gateway":      "172.31.50.1",
		"ovn-vpc-external-network.kube-system.kubernetes.io/routes":       `[{"dst":"0.0.0.0/0","gw":"172.31.50.1"}]`,
		"ovn-vpc-external-network.kube-system.kubernetes.io/pod_nic_type": "veth-pair",
	} {
		ann[k] = v
	}
	// As kube-ovn v1.16.2's genNatGwStatefulSet makes it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-gw1-0", Namespace: "kube-system", Annotations: ann,
			Labels: map[string]string{"app": "vpc-nat-gw-gw1", "ovn.kubernetes.io/vpc-nat-gw": "true"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "vpc-nat-gw", Image: "docker.io/kubeovn/vpc-nat-gateway:v1.16.2",
				Command: []string{"sleep", "infinity"},
				Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
					Command: []string{"sh", "-c", "sysctl -w net.ipv4.ip_forward=1"}}}},
				Env:             []corev1.EnvVar{{Name: "GATEWAY_V4", Value: "172.31.50.1"}, {Name: "GATEWAY_V6"}},
				SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
			}},
		},
	}
	createPod(t, e, pod)
	gw := waitReady(t, e, "kube-system", pod.Name)
	netns, _ := e.node.PodNetns("kube-system", pod.Name)
	// What multus writes, which kube-ovn reads in non-primary-CNI mode to find the interfaces.
	var status []struct {
		Name, Interface string
		IPs             []string
		Default         bool
	}
	if err := json.Unmarshal([]byte(gw.Annotations["k8s.v1.cni.cncf.io/network-status"]), &status); err != nil || len(status) != 2 ||
		status[0].Interface != "eth0" || !status[0].Default || status[0].IPs[0] != "10.92.0.254" ||
		status[1].Name != "kube-system/ovn-vpc-external-network" || status[1].Interface != "net1" || status[1].IPs[0] != "172.31.50.10" {
		t.Errorf("network-status %q (%v)", gw.Annotations["k8s.v1.cni.cncf.io/network-status"], err)
	}

	if out, err := netlab.Run("ip", "netns", "exec", netns, "sysctl", "-n", "net.ipv4.ip_forward"); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("postStart did not enable forwarding in the pod: %q %v", out, err)
	}
	out, _ := netlab.Run("ip", "-n", netns, "-4", "route", "show")
	for _, want := range []string{"default via 172.31.50.1 dev net1", "10.96.0.0/12 via 10.92.0.1 dev eth0", "10.92.0.0/24 dev eth0", "172.31.50.0/24 dev net1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("routes lack %q:\n%s", want, out)
		}
	}

	// kube-ovn v1.16.2's execNatGwRules for init, in primary-CNI mode (no interfaces given).
	stdout, stderr, err := spdyExec(e, "kube-system", pod.Name, "vpc-nat-gw", "/bin/bash", "-c", "bash /kube-ovn/nat-gateway.sh init ")
	if err != nil {
		t.Fatalf("nat-gateway.sh init: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	// The script picks iptables-legacy when that works on the machine, as it does in its image.
	save := "iptables-save"
	if _, err := netlab.Run("ip", "netns", "exec", netns, "iptables-legacy", "-t", "nat", "-S", "INPUT", "1"); err == nil {
		save = "iptables-legacy-save"
	}
	nat, err := netlab.Run("ip", "netns", "exec", netns, save, "-t", "nat")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s -t nat in the gateway after init:\n%s", save, nat)
	for _, want := range []string{":DNAT_FILTER", ":SNAT_FILTER", ":SHARED_DNAT", "-A PREROUTING -j DNAT_FILTER", "-A POSTROUTING -j SNAT_FILTER"} {
		if !strings.Contains(string(nat), want) {
			t.Errorf("after init, the pod's nat table lacks %q:\n%s", want, nat)
		}
	}
	// The script's state is the container's own /etc, kept between execs, not the host's.
	env, _, err := spdyExec(e, "kube-system", pod.Name, "vpc-nat-gw", "cat", "/etc/kube-ovn/nat-gateway.env")
	if err != nil || !strings.Contains(env, "VPC_INTERFACE=eth0") || !strings.Contains(env, "EXTERNAL_INTERFACE=net1") {
		t.Errorf("the container's /etc/kube-ovn/nat-gateway.env: %q %v", env, err)
	}
	if _, err := os.Stat("/etc/kube-ovn/nat-gateway.env"); err == nil {
		t.Error("the script wrote the host's /etc")
	}
	// A second init is a no-op for the script (it finds DNAT_FILTER), as in a real gateway.
	if _, stderr, err := spdyExec(e, "kube-system", pod.Name, "vpc-nat-gw", "/bin/bash", "-c", "bash /kube-ovn/nat-gateway.sh init "); err != nil {
		t.Errorf("second init: %v %s", err, stderr)
	}
	// Not the gateway image: no script.
	startPod(t, e, "noscript", "plain", "sw-a", "10.91.0.41", "00:00:00:5a:0b:41")
	if _, _, err := spdyExec(e, "noscript", "plain", "sidecar", "test", "-e", "/kube-ovn/nat-gateway.sh"); err == nil {
		t.Error("a container of another image sees /kube-ovn/nat-gateway.sh")
	}
}

// (e) Killing a container's process restarts it: restartCount 1, lastState the kill.
func TestKilledContainerRestarts(t *testing.T) {
	e := cluster(t)
	p := startPod(t, e, "restart", "echo-r", "sw-a", "10.91.0.51", "00:00:00:5a:0b:51")
	var firstID string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "sidecar" {
			firstID = cs.ContainerID
		}
	}
	pid, ok := e.node.ContainerPID("restart", "echo-r", "sidecar")
	if !ok {
		t.Fatal("no pid for the sidecar")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "sidecar restarted", func() (bool, string) {
		p = getPod(t, e, "restart", "echo-r")
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "sidecar" {
				return cs.RestartCount == 1 && cs.State.Running != nil && cs.Ready && condition(p, corev1.PodReady) == corev1.ConditionTrue,
					fmt.Sprintf("%+v", cs)
			}
		}
		return false, "no sidecar status"
	})
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != "sidecar" {
			if cs.RestartCount != 0 {
				t.Errorf("container %s restarted too: %+v", cs.Name, cs)
			}
			continue
		}
		last := cs.LastTerminationState.Terminated
		if last == nil || last.ExitCode != 137 || last.ContainerID != firstID || cs.ContainerID == firstID || last.Reason != "Error" {
			t.Errorf("lastState %+v (first container %s, now %s), want exit 137 of the first", last, firstID, cs.ContainerID)
		}
	}
	if newPID, ok := e.node.ContainerPID("restart", "echo-r", "sidecar"); !ok || newPID == pid {
		t.Errorf("restarted container pid %d (old %d)", newPID, pid)
	}
}

// (f) Deleting the Pod stops its processes, removes its namespace and NICs, and the node deletes
// the Pod object (grace 0, UID precondition) once done.
func TestDeletedPodIsCleanedUp(t *testing.T) {
	e := cluster(t)
	p := startPod(t, e, "del", "echo-d", "sw-a", "10.91.0.61", "00:00:00:5a:0b:61")
	netns, _ := e.node.PodNetns("del", "echo-d")
	pid, _ := e.node.ContainerPID("del", "echo-d", "web")
	grace := int64(30) // the node, not the API server, ends it: the object stays until then
	if err := e.cs.CoreV1().Pods("del").Delete(context.Background(), "echo-d", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 45*time.Second, "pod object gone", func() (bool, string) {
		q, err := e.cs.CoreV1().Pods("del").Get(context.Background(), "echo-d", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return q.UID != p.UID, fmt.Sprintf("deletionTimestamp %v", q.DeletionTimestamp)
	})
	if _, err := os.Stat(filepath.Join("/run/netns", netns)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace %s still exists (%v)", netns, err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("container process %d still runs", pid)
	}
	if e.net.attached(netns, "eth0") {
		t.Error("the pod's eth0 was not detached from its switch")
	}
	if _, ok := e.node.PodNetns("del", "echo-d"); ok {
		t.Error("the node still tracks the deleted pod")
	}
}

// Readiness follows the containers' readiness probes: an httpGet probe of the echo server (run
// from inside the pod's namespace) and an exec probe that fails until a file appears.
func TestReadinessProbes(t *testing.T) {
	e := cluster(t)
	createNamespace(t, e, "probes")
	marker := filepath.Join(t.TempDir(), "ready")
	pod := echoPod(t, "probes", "echo-p", ovnAnnotations("sw-a", "10.91.0.71", "10.91.0.0/24", "10.91.0.1", "00:00:00:5a:0b:71"))
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}}
	pod.Spec.Containers[1].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-e", marker}}}}
	createPod(t, e, pod)
	ready := func(p *corev1.Pod) map[string]bool {
		m := map[string]bool{}
		for _, cs := range p.Status.ContainerStatuses {
			m[cs.Name] = cs.Ready && cs.Started != nil && *cs.Started
		}
		return m
	}
	waitFor(t, 30*time.Second, "web ready by its HTTP probe, sidecar started but not ready", func() (bool, string) {
		p := getPod(t, e, "probes", "echo-p")
		r := ready(p)
		started := false
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "sidecar" {
				started = cs.Started != nil && *cs.Started && cs.State.Running != nil && !cs.Ready
			}
		}
		return r["web"] && started && p.Status.Phase == corev1.PodRunning && condition(p, corev1.PodReady) == corev1.ConditionFalse,
			fmt.Sprintf("ready %v, conditions %+v", r, p.Status.Conditions)
	})
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e, "probes", "echo-p")
}

// Node shutdown removes everything the node made (namespaces, processes, state); a Pod whose
// nodeSelector names another node is left to that node, as the scheduler's filter would.
func TestNodeStopCleansUp(t *testing.T) {
	e := cluster(t)
	stateDir := t.TempDir()
	second, err := labnode.Start(context.Background(), labnode.Config{
		NodeName: "lab-node-2", REST: e.cfg, Network: e.net, StateDir: stateDir, NetnsPrefix: "ln2",
		RestartBackoff: 200 * time.Millisecond, Log: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = second.Stop()
		}
	})
	createNamespace(t, e, "stop")
	pod := echoPod(t, "stop", "echo-s", ovnAnnotations("sw-a", "10.91.0.81", "10.91.0.0/24", "10.91.0.1", "00:00:00:5a:0b:81"))
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "lab-node-2"}
	createPod(t, e, pod)
	p := waitReady(t, e, "stop", "echo-s")
	if p.Spec.NodeName != "lab-node-2" {
		t.Fatalf("bound to %q, want lab-node-2 (its nodeSelector)", p.Spec.NodeName)
	}
	netns, ok := second.PodNetns("stop", "echo-s")
	if !ok {
		t.Fatal("no sandbox on the second node")
	}
	pid, _ := second.ContainerPID("stop", "echo-s", "sidecar")
	entries, _ := os.ReadDir(stateDir)
	if len(entries) == 0 {
		t.Fatal("the node keeps no state for its pod")
	}
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(filepath.Join("/run/netns", netns)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace %s survives the node (%v)", netns, err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("container process %d survives the node", pid)
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Errorf("state left behind: %v", entries)
	}
	// The pod stays in the API, bound to a node that went away, as with a real machine; it is
	// removed for the next run without a node to finish it.
	zero := int64(0)
	if err := e.cs.CoreV1().Pods("stop").Delete(context.Background(), "echo-s", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Nodes().Delete(context.Background(), "lab-node-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
