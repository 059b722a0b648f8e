package deploy

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubeOVNControllerDeployment is kube-ovn-controller's Deployment as kube-ovn's install script
// makes it (one container, start-controller.sh with the flags as args), at image and with args.
func kubeOVNControllerDeployment(ns, image string, args ...string) *appsv1.Deployment {
	labels := map[string]string{"app": "kube-ovn-controller"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-ovn-controller"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0), // nothing runs it here: only its arguments are read
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "kube-ovn-controller", Image: image, Command: []string{"/kube-ovn/start-controller.sh"},
					Args: append([]string{"--default-cidr=10.16.0.0/16", "--enable-lb=true", "--enable-np=true"}, args...),
				}}},
			},
		},
	}
}

// covers: K10
//
// The chart (at install time: its lookups) and the install script refuse to install beside a
// kube-ovn-controller whose Deployment turns on its own Service controller, as kube-ovn's newer
// releases would, and say what to change; the install script then creates nothing. A v1.16
// kube-ovn, or a newer one with the gates turned off, installs.
func TestRefusesBesideKubeOVNsServiceController(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	kubectl := kubectlBin(t)
	kubeconfig := kubeconfigFor(t, env)
	ctx := context.Background()
	// A kube-ovn namespace of this test's own, so that the other install tests on this API
	// server never see its Deployment.
	const kubeOVNNS, installNS = "kube-ovn-k10", "vpcgw-k10"
	createNamespace(t, kubeOVNNS)
	online := []string{"--dry-run=server", "--kubeconfig", kubeconfig, "--set", "kubeOvn.namespace=" + kubeOVNNS}
	setDeployment := func(d *appsv1.Deployment) {
		t.Helper()
		cur := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(d), cur); err == nil {
			cur.Spec = d.Spec
			must(t, k8s.Update(ctx, cur))
		} else {
			must(t, k8s.Create(ctx, d))
		}
	}
	const v1162, v118 = "docker.io/kubeovn/kube-ovn:v1.16.2", "docker.io/kubeovn/kube-ovn:v1.18.0"

	for _, tc := range []struct {
		name   string
		d      *appsv1.Deployment
		refuse string // "" : installs
	}{
		{name: "v1.16.2 has no Service controller of its own", d: kubeOVNControllerDeployment(kubeOVNNS, v1162)},
		{name: "#7451's LoadBalancer gate on", d: kubeOVNControllerDeployment(kubeOVNNS, v118, "--enable-gw-nftable-lb-svc=true"),
			refuse: "--enable-gw-nftable-lb-svc is on"},
		{name: "#7451's ClusterIP gate on, bare", d: kubeOVNControllerDeployment(kubeOVNNS, v118, "--enable-gw-nftable-lb-svc=false", "--enable-gw-nftable-svc-cluster-ip"),
			refuse: "--enable-gw-nftable-svc-cluster-ip is given without a value"},
		{name: "#7047's gate on", d: kubeOVNControllerDeployment(kubeOVNNS, v118, "--enable-nftable-lb-svc=true"), refuse: "--enable-nftable-lb-svc is on"},
		{name: "a newer release with nothing said is on by default (#7403)", d: kubeOVNControllerDeployment(kubeOVNNS, v118),
			refuse: "set --enable-nftable-lb-svc=false on it"},
		{name: "a value that cannot be read", d: kubeOVNControllerDeployment(kubeOVNNS, v118, "--enable-gw-nftable-lb-svc=$(FROM_SECRET)"),
			refuse: "cannot read --enable-gw-nftable-lb-svc=$(FROM_SECRET)"},
		{name: "a newer release with both gates off", d: kubeOVNControllerDeployment(kubeOVNNS, v118, "--enable-gw-nftable-lb-svc=false", "--enable-gw-nftable-svc-cluster-ip=false")},
		{name: "a newer release with #7047's gate off", d: kubeOVNControllerDeployment(kubeOVNNS, v118, "--enable-nftable-lb-svc=false")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setDeployment(tc.d)
			_, err := renderErr(t, online...)
			switch {
			case tc.refuse == "" && err != nil:
				t.Fatalf("chart refused: %v", err)
			case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse) || !strings.Contains(err.Error(), "SPEC K10")):
				t.Fatalf("chart: %v, want a refusal saying %q", err, tc.refuse)
			}
			if tc.refuse == "" {
				return
			}
			out, stderr, err := installScript(t, map[string]string{"KUBECTL": kubectl, "KUBECONFIG": kubeconfig, "ROLLOUT_TIMEOUT": "0",
				"NAMESPACE": installNS, "KUBE_OVN_NAMESPACE": kubeOVNNS})
			if err == nil || !strings.Contains(stderr, tc.refuse) || !strings.Contains(stderr, "nothing was applied") || out != "" {
				t.Fatalf("install.sh: err %v, stdout %q, stderr %q; want a refusal saying %q", err, out, stderr, tc.refuse)
			}
			// Namespaces are the script's first write: none means nothing was created.
			var ns corev1.Namespace
			if err := k8s.Get(ctx, client.ObjectKey{Name: installNS}, &ns); err == nil {
				t.Errorf("the refused install created namespace %s", installNS)
			}
		})
	}

	// kube-ovn's own configuration, where it has one: a gate key in ovn-vpc-nat-config refuses too.
	setDeployment(kubeOVNControllerDeployment(kubeOVNNS, v1162))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: kubeOVNNS, Name: "ovn-vpc-nat-config"},
		Data: map[string]string{"image": "docker.io/kubeovn/vpc-nat-gateway:v1.16.2", "enable-gw-nftable-lb-svc": "true"}}
	must(t, k8s.Create(ctx, cm))
	if _, err := renderErr(t, online...); err == nil || !strings.Contains(err.Error(), `sets enable-gw-nftable-lb-svc="true"`) {
		t.Errorf("chart beside a ConfigMap that turns kube-ovn's Service controller on: %v, want a refusal", err)
	}
	cm.Data["enable-gw-nftable-lb-svc"] = "false"
	must(t, k8s.Update(ctx, cm))
	if _, err := renderErr(t, online...); err != nil {
		t.Errorf("chart beside a ConfigMap that turns it off: %v", err)
	}
}
