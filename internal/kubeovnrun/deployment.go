package kubeovnrun

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// ControllerDeployment is the name of kube-ovn-controller's Deployment in Namespace (v1.16.2
	// dist/images/install.sh), whose arguments vpcgw reads (SPEC K10).
	ControllerDeployment = "kube-ovn-controller"
	// ControllerImage is the image kube-ovn v1.16.2 runs its controller from.
	ControllerImage = "docker.io/kubeovn/kube-ovn:v1.16.2"
)

// RecordDeployment writes kube-ovn-controller's Deployment as kube-ovn's install makes it, with
// the arguments this process runs with: what a cluster's API holds about kube-ovn-controller, and
// what vpcgw reads its flags from (SPEC K10). The process here is the controller; the Deployment
// has no replicas, so that no node is asked to start another one.
func (c *Controller) RecordDeployment(ctx context.Context, k client.Client) error {
	labels := map[string]string{"app": ControllerDeployment, "component": "network", "type": "infra"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ControllerDeployment, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": ControllerDeployment}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "ovn",
					Containers: []corev1.Container{{
						Name: ControllerDeployment, Image: ControllerImage,
						Command: []string{"/kube-ovn/start-controller.sh"}, Args: c.args()[1:],
					}},
				},
			},
		},
	}
	return createOrUpdate(ctx, k, d, func(existing *appsv1.Deployment) { existing.Spec = d.Spec })
}
