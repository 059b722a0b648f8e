package controller_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
)

// kubeOVNDeployment is a kube-ovn-controller Deployment of this test's own name (the API server is
// shared with the other tests, whose controllers read the default name), with args.
func kubeOVNDeployment(name string, args ...string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: model.DefaultGatewayNamespace, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "kube-ovn-controller", Image: "docker.io/kubeovn/kube-ovn:v1.16.2", Args: args}}}}},
	}
}

// While kube-ovn-controller's Deployment turns on its own Service controller, vpcgw programs,
// writes and releases nothing, and says so on each bound Service; when it is turned off, vpcgw
// serves what waited and releases what was deleted meanwhile.
// covers: K10, T3
func TestStandsAsideWhileKubeOVNServes(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		deployment := "kovn-k10-" + string(mode)
		f := newFixtureWith(t, mode, "gw-k10", 1, func(o *controller.Options) { o.Flags.KubeOVNControllerDeployment = deployment })
		ctx := context.Background()
		d := kubeOVNDeployment(deployment, "--enable-lb=false")
		must(t, k8s.Create(ctx, d))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), d) })
		f.eip("eip-k10", "172.18.9.10", true)
		old := f.service("old", "eip-k10", 80, "10.0.1.11")
		f.eventually("served beside a v1.16 kube-ovn", func() bool { return ingressIs(f.get("old"), "172.18.9.10") })

		d.Spec.Template.Spec.Containers[0].Args = []string{"--enable-lb=false", "--enable-gw-nftable-lb-svc=true"}
		must(t, k8s.Update(ctx, d))
		f.eventually("the stand-aside event", func() bool {
			return f.hasEvent("old", model.ReasonKubeOVNServesEvent, "--enable-gw-nftable-lb-svc is on")
		})
		must(t, k8s.Delete(ctx, old))
		f.service("new", "eip-k10", 81, "10.0.1.12")
		// Its event comes from a sync that also saw the deletion before it (one informer, in order).
		f.eventually("the new Service told why", func() bool { return f.hasEvent("new", model.ReasonKubeOVNServesEvent, "") })
		if s := f.get("new"); hasFinalizer(s) || !ingressIs(s, "") || len(f.records("new")) != 0 {
			t.Errorf("served beside kube-ovn's own controller: finalizers %v, ingress %v, %d records", s.Finalizers, s.Status.LoadBalancer.Ingress, len(f.records("new")))
		}
		if s := f.get("old"); s == nil || !hasFinalizer(s) || len(f.records("old")) == 0 || !f.data.serves(f.pods[0], "172.18.9.10:80:tcp") {
			t.Errorf("released beside kube-ovn's own controller: %v, %d records", s, len(f.records("old")))
		}

		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(d), d))
		d.Spec.Template.Spec.Containers[0].Args = []string{"--enable-lb=false", "--enable-gw-nftable-lb-svc=false"}
		must(t, k8s.Update(ctx, d))
		f.eventually("resumed: the new one served, the old one released", func() bool {
			return ingressIs(f.get("new"), "172.18.9.10") && f.get("old") == nil && len(f.records("old")) == 0 && !f.data.serves(f.pods[0], "172.18.9.10:80:tcp")
		})
	})
}
