package model

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func kubeOVNDeployment(image string, env []corev1.EnvVar, args ...string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: DefaultKubeOVNControllerDeployment},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "kube-ovn-controller", Image: image, Command: []string{"/kube-ovn/start-controller.sh"},
			Args: append([]string{"--default-cidr=10.16.0.0/16", "--enable-lb=true"}, args...), Env: env,
		}}}}},
	}
}

// covers: K10
func TestKubeOVNServesServices(t *testing.T) {
	const v1162, v118 = "docker.io/kubeovn/kube-ovn:v1.16.2", "docker.io/kubeovn/kube-ovn:v1.18.0"
	fromSecret := []corev1.EnvVar{{Name: "GATE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
	for _, tc := range []struct {
		name      string
		d         *appsv1.Deployment
		natConfig map[string]string
		serves    bool
		reason    string
		says      string
	}{
		{name: "no Deployment", d: nil, reason: ReasonKubeOVNNotFound},
		{name: "v1.16.2 has no such controller", d: kubeOVNDeployment(v1162, nil), reason: ReasonKubeOVNDoesNot, says: "v1.16"},
		{name: "v1.16 with a digest", d: kubeOVNDeployment(v1162+"@sha256:0123", nil), reason: ReasonKubeOVNDoesNot},
		{name: "#7451 lb gate on", d: kubeOVNDeployment(v118, nil, "--enable-gw-nftable-lb-svc=true"), serves: true, reason: ReasonKubeOVNServes, says: "--enable-gw-nftable-lb-svc is on"},
		{name: "#7451 cluster-ip gate on", d: kubeOVNDeployment(v118, nil, "--enable-gw-nftable-lb-svc=false", "--enable-gw-nftable-svc-cluster-ip=true"), serves: true, reason: ReasonKubeOVNServes, says: "cluster-ip is on"},
		{name: "#7047 gate on even on an old image tag", d: kubeOVNDeployment(v1162, nil, "--enable-nftable-lb-svc=true"), serves: true, reason: ReasonKubeOVNServes},
		{name: "bare flag is true", d: kubeOVNDeployment(v118, nil, "--enable-nftable-lb-svc"), serves: true, says: "without a value"},
		{name: "single dash", d: kubeOVNDeployment(v118, nil, "-enable-gw-nftable-lb-svc=1"), serves: true},
		{name: "env expanded on", d: kubeOVNDeployment(v118, []corev1.EnvVar{{Name: "GATE", Value: "true"}}, "--enable-gw-nftable-lb-svc=$(GATE)"), serves: true, reason: ReasonKubeOVNServes},
		{name: "env expanded off", d: kubeOVNDeployment(v118, []corev1.EnvVar{{Name: "GATE", Value: "false"}},
			"--enable-gw-nftable-lb-svc=$(GATE)", "--enable-gw-nftable-svc-cluster-ip=false"), reason: ReasonKubeOVNDoesNot},
		{name: "env from a Secret cannot be read", d: kubeOVNDeployment(v118, fromSecret, "--enable-gw-nftable-lb-svc=$(GATE)"), serves: true, reason: ReasonKubeOVNUnreadable, says: "cannot read"},
		{name: "a typo in the value", d: kubeOVNDeployment(v118, nil, "--enable-nftable-lb-svc=ture"), serves: true, reason: ReasonKubeOVNUnreadable},
		{name: "newer release, nothing said: on by default", d: kubeOVNDeployment(v118, nil), serves: true, reason: ReasonKubeOVNByDefault, says: "--enable-nftable-lb-svc=false"},
		{name: "unknown release, nothing said", d: kubeOVNDeployment("registry.example/kube-ovn:latest", nil), serves: true, reason: ReasonKubeOVNByDefault, says: "cannot tell"},
		{name: "newer release, #7047 gate off", d: kubeOVNDeployment(v118, nil, "--enable-nftable-lb-svc=false"), reason: ReasonKubeOVNDoesNot},
		{name: "newer release, both #7451 gates off", d: kubeOVNDeployment(v118, nil, "--enable-gw-nftable-lb-svc=false", "--enable-gw-nftable-svc-cluster-ip=False"), reason: ReasonKubeOVNDoesNot},
		{name: "newer release, one #7451 gate off, the other left to its default", d: kubeOVNDeployment(v118, nil, "--enable-gw-nftable-lb-svc=false"), serves: true, reason: ReasonKubeOVNByDefault, says: "both --enable-gw-nftable-lb-svc=false"},
		{name: "a similar flag is not one", d: kubeOVNDeployment(v118, nil, "--enable-nftable-lb-svc-x=true", "--enable-nftable-lb-svc=false"), reason: ReasonKubeOVNDoesNot},
		{name: "kube-ovn's ConfigMap turns it on", d: kubeOVNDeployment(v1162, nil), natConfig: map[string]string{"enable-gw-nftable-lb-svc": "true"}, serves: true, reason: ReasonKubeOVNConfigMap},
		{name: "kube-ovn's ConfigMap says off", d: kubeOVNDeployment(v1162, nil), natConfig: map[string]string{"enable-gw-nftable-lb-svc": "false", "image": "x"}, reason: ReasonKubeOVNDoesNot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := KubeOVNServesServices(tc.d, tc.natConfig)
			if got.Serves != tc.serves {
				t.Fatalf("Serves = %v, want %v (%s)", got.Serves, tc.serves, got.Message)
			}
			if tc.reason != "" && got.Reason != tc.reason {
				t.Errorf("Reason = %s, want %s (%s)", got.Reason, tc.reason, got.Message)
			}
			if !strings.Contains(got.Message, tc.says) {
				t.Errorf("Message %q does not say %q", got.Message, tc.says)
			}
			if tc.d != nil && !got.Known {
				t.Errorf("a Deployment was read, but Known is false")
			}
		})
	}
}
