package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vpcgw/vpcgw/internal/gwinstance"
)

// Labels kube-ovn puts on a gateway's workload and its Pods (kube-ovn v1.16.2
// pkg/util/vpc_nat_gateway.go GenNatGwLabels): app=<prefix>-<gateway>, and this one "true".
const (
	gatewayAppLabel = "app"
	gatewayPodLabel = "ovn.kubernetes.io/vpc-nat-gw"
	// DefaultWorkloadPrefix is kube-ovn's default natGwNamePrefix: the workload of gateway gw is
	// "vpc-nat-gw-<gw>" unless Instance.Workload says otherwise.
	DefaultWorkloadPrefix = "vpc-nat-gw"
)

// ErrNotAGatewayPod is returned (wrapped) for a Pod that is not an instance of the gateway it is
// dialled for: no agent is started in it.
var ErrNotAGatewayPod = errors.New("not a pod of the gateway")

// PodVerifier decides, before the exec transport starts an agent in a Pod, whether the Pod is an
// instance of the gateway it is dialled for (SPEC N5).
type PodVerifier interface {
	VerifyPod(ctx context.Context, inst Instance, container string) error
}

// OwnerChainVerifier accepts a Pod only when kube-ovn's workload for the gateway owns it. Labels
// alone prove nothing (anyone who may create a Pod may label it); the owner chain does: the
// Pod's controller is the StatefulSet <prefix>-<gateway> (kube-ovn v1.16.2 and master; or, on
// master with spec.replicas > 1, a ReplicaSet whose controller is the Deployment of that name) in
// the namespace where kube-ovn runs the gateway (Instance.WorkloadNamespace), whose UID is the one
// in the Pod's owner reference, and which carries kube-ovn's gateway labels. A tenant who may
// create Pods there can still forge the labels and that owner reference, so a StatefulSet's Pod
// must also be one of its replicas: named "<workload>-<ordinal>", the ordinal below spec.replicas,
// names its own Pods hold. A tenant's labelled Pod, or its look-alike StatefulSet in its own
// namespace, gets no agent. It reads with get only: pods, statefulsets, replicasets, deployments
// in the gateway namespaces, live (not from a cache).
type OwnerChainVerifier struct {
	Client kubernetes.Interface
}

var _ PodVerifier = (*OwnerChainVerifier)(nil)

// VerifyPod implements PodVerifier.
func (v *OwnerChainVerifier) VerifyPod(ctx context.Context, inst Instance, container string) error {
	refuse := refusal(inst)
	if err := checkInstance(inst, refuse); err != nil {
		return err
	}
	workload := inst.Workload
	if workload == "" {
		workload = DefaultWorkloadPrefix + "-" + inst.Gateway
	}
	pod, err := v.Client.CoreV1().Pods(inst.Namespace).Get(ctx, inst.Pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("verifying pod %s/%s of gateway %s: %w", inst.Namespace, inst.Pod, inst.Gateway, err)
	}
	if err := checkPod(refuse, pod, inst, container, workload); err != nil {
		return err
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return refuse("it has no controller; kube-ovn's StatefulSet %s/%s must own it", inst.Namespace, workload)
	}
	switch {
	case ref.APIVersion == "apps/v1" && ref.Kind == "StatefulSet":
		return v.verifyStatefulSet(ctx, refuse, inst, ref, workload)
	case ref.APIVersion == "apps/v1" && ref.Kind == "ReplicaSet":
		return v.verifyReplicaSet(ctx, refuse, inst, ref, workload)
	}
	return refuse("its controller is %s %s %s, not kube-ovn's StatefulSet or Deployment %s", ref.APIVersion, ref.Kind, ref.Name, workload)
}

// refusal returns the function that makes VerifyPod's refusals of inst (ErrNotAGatewayPod).
func refusal(inst Instance) func(string, ...any) error {
	return func(format string, args ...any) error {
		return fmt.Errorf("pod %s/%s: %w %s: %s", inst.Namespace, inst.Pod, ErrNotAGatewayPod, inst.Gateway, fmt.Sprintf(format, args...))
	}
}

// checkInstance: the instance names a gateway and the namespace of kube-ovn's workload, and its
// Pod is in that namespace.
func checkInstance(inst Instance, refuse func(string, ...any) error) error {
	if inst.Gateway == "" {
		return refuse("the instance names no gateway")
	}
	if inst.WorkloadNamespace == "" {
		return refuse("the instance names no namespace of kube-ovn's workload")
	}
	if inst.Namespace != inst.WorkloadNamespace {
		return refuse("it is not in %s, where kube-ovn runs the gateway", inst.WorkloadNamespace)
	}
	return nil
}

// checkPod: the Pod is the instance's (same UID, when the instance has one), carries kube-ovn's
// gateway labels and has the container.
func checkPod(refuse func(string, ...any) error, pod *corev1.Pod, inst Instance, container, workload string) error {
	if inst.UID != "" && pod.UID != inst.UID {
		return refuse("its UID is %s, the instance's %s (the pod was replaced)", pod.UID, inst.UID)
	}
	if err := gatewayLabels(pod.Labels, workload); err != nil {
		return refuse("%v", err)
	}
	if !hasContainer(pod, container) {
		return refuse("it has no container %q", container)
	}
	return nil
}

// verifyStatefulSet checks a Pod controlled (ref) by a StatefulSet: it must be kube-ovn's
// workload, read now, and the Pod one of its replicas: named "<workload>-<ordinal>" with the
// ordinal below its replicas. A Pod anyone made with a forged owner reference has a name the
// StatefulSet does not give while its own Pod exists.
func (v *OwnerChainVerifier) verifyStatefulSet(ctx context.Context, refuse func(string, ...any) error, inst Instance, ref *metav1.OwnerReference, workload string) error {
	if ref.Name != workload {
		return refuse("its controller is StatefulSet %s, not %s", ref.Name, workload)
	}
	sts, err := v.Client.AppsV1().StatefulSets(inst.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("verifying pod %s/%s of gateway %s: its StatefulSet: %w", inst.Namespace, inst.Pod, inst.Gateway, err)
	}
	if err := checkWorkload(refuse, "StatefulSet", &sts.ObjectMeta, ref, workload, inst.Gateway); err != nil {
		return err
	}
	if err := gwinstance.CheckOrdinal(inst.Pod, sts); err != nil {
		return refuse("%v", err)
	}
	return nil
}

// verifyReplicaSet checks a Pod controlled (ref) by a ReplicaSet: the ReplicaSet must be the one
// referenced, controlled by kube-ovn's Deployment.
func (v *OwnerChainVerifier) verifyReplicaSet(ctx context.Context, refuse func(string, ...any) error, inst Instance, ref *metav1.OwnerReference, workload string) error {
	rs, err := v.Client.AppsV1().ReplicaSets(inst.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("verifying pod %s/%s of gateway %s: its ReplicaSet: %w", inst.Namespace, inst.Pod, inst.Gateway, err)
	}
	if rs.UID != ref.UID {
		return refuse("its ReplicaSet %s has UID %s, the owner reference %s", rs.Name, rs.UID, ref.UID)
	}
	dref := metav1.GetControllerOf(rs)
	if dref == nil || dref.APIVersion != "apps/v1" || dref.Kind != "Deployment" || dref.Name != workload {
		return refuse("its ReplicaSet %s is not controlled by Deployment %s", rs.Name, workload)
	}
	d, err := v.Client.AppsV1().Deployments(inst.Namespace).Get(ctx, dref.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("verifying pod %s/%s of gateway %s: its Deployment: %w", inst.Namespace, inst.Pod, inst.Gateway, err)
	}
	return checkWorkload(refuse, "Deployment", &d.ObjectMeta, dref, workload, inst.Gateway)
}

// checkWorkload: the workload is the one the reference names (same UID: not a namesake made
// after it), carries kube-ovn's labels, and is controlled by nothing but (where kube-ovn sets an
// owner) the gateway.
func checkWorkload(refuse func(string, ...any) error, kind string, m *metav1.ObjectMeta, ref *metav1.OwnerReference, workload, gateway string) error {
	if m.UID != ref.UID {
		return refuse("its %s %s has UID %s, the owner reference %s", kind, m.Name, m.UID, ref.UID)
	}
	if err := gatewayLabels(m.Labels, workload); err != nil {
		return refuse("its %s %s: %v", kind, m.Name, err)
	}
	if c := metav1.GetControllerOfNoCopy(m); c != nil && (c.Kind != "VpcNatGateway" || !strings.HasPrefix(c.APIVersion, "kubeovn.io/") || c.Name != gateway) {
		return refuse("its %s %s is controlled by %s %s, not by kube-ovn's VpcNatGateway %s", kind, m.Name, c.Kind, c.Name, gateway)
	}
	return nil
}

func gatewayLabels(l map[string]string, workload string) error {
	if l[gatewayAppLabel] != workload || l[gatewayPodLabel] != "true" {
		return fmt.Errorf("labels %s=%q %s=%q, want %q and \"true\"", gatewayAppLabel, l[gatewayAppLabel], gatewayPodLabel, l[gatewayPodLabel], workload)
	}
	return nil
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}
