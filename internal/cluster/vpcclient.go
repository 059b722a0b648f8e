package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClientImage names the VPC client's image; the lab node runs its command from the host's
// filesystem.
const ClientImage = "vpcgw.io/lab-client:latest"

// vpcClientObjects are the VPC client: a Pod on the Vpc's client Subnet, at the address the
// lab's docs and tests name (kube-ovn's ip_address annotation), plugged by the lab node as any
// Pod. A Pod, not a logical switch port the lab makes itself: kube-ovn-controller's garbage
// collection deletes every port no Pod owns, on the second --gc-interval pass that finds it
// orphaned (v1.16.2 gc.go markAndCleanLSP; without --enable-external-vpc, its default, the
// vendor mark does not protect it), which cut the VPC client off 12 minutes into a lab.
func vpcClientObjects() []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: VPCClientNamespace}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: VPCClientPod, Namespace: VPCClientNamespace, Labels: map[string]string{"app": VPCClientPod},
				Annotations: map[string]string{
					"ovn.kubernetes.io/logical_switch": ClientSubnetName,
					"ovn.kubernetes.io/ip_address":     VPCClientIP,
				}},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers:                    []corev1.Container{{Name: "client", Image: ClientImage, Command: []string{"sleep", "infinity"}}},
			},
		},
	}
}

// startVPCClient creates the VPC client's Pod and waits until it is Ready: the lab node starts
// its container only once ovn-controller has installed its port and the Subnet's gateway
// answered its ARP, as kube-ovn-cni waits.
func (c *Cluster) startVPCClient(ctx context.Context, timeout time.Duration) error {
	if err := createAll(ctx, c.Client, vpcClientObjects()...); err != nil {
		return err
	}
	var pod corev1.Pod
	key := client.ObjectKey{Namespace: VPCClientNamespace, Name: VPCClientPod}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, key, &pod); err != nil {
			return false, nil
		}
		_, plugged := c.Node.PodNetns(VPCClientNamespace, VPCClientPod)
		return plugged && podReady(&pod), nil
	})
	if err != nil {
		return fmt.Errorf("the VPC client (pod %s) is not ready (phase %q): %w", key, pod.Status.Phase, err)
	}
	return nil
}
