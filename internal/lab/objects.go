package lab

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// Names of the kube-ovn objects the lab creates, playing kube-ovn's part.
const (
	VpcName            = "lab-vpc"
	VpcSubnetName      = "lab-vpc-subnet"
	ExternalSubnetName = "lab-external"
	GatewayName        = "lab-gw"
	EIPName            = "lab-eip"
	DemoNamespace      = "demo"
	DemoService        = "web"
	// BenchNamespace is where vpcgw bench creates its Services.
	BenchNamespace   = "bench"
	GatewayNamespace = model.DefaultGatewayNamespace
	labNode          = "lab-node"
)

// createKubeOVNObjects creates the Vpc, its Subnet, the external Subnet and the gateway, and the
// gateway pod that the controller finds by kube-ovn's labels (netns given by annotation).
func createKubeOVNObjects(ctx context.Context, c client.Client, gwNetns string) error {
	// The Node every lab Pod runs on: the EndpointSlice controller leaves out Pods without one.
	if err := kcm.EnsureNode(ctx, c, labNode); err != nil {
		return err
	}
	objs := []client.Object{
		// The demo's namespace and the benchmark's are bound to the VPC (SPEC N1).
		// Its default route to the gateway, as kube-ovn's gateway examples give it (SPEC V3).
		&kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: VpcName}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{DemoNamespace, BenchNamespace},
			StaticRoutes: []*kubeovnv1.StaticRoute{{Policy: kubeovnv1.PolicyDst, CIDR: "0.0.0.0/0", NextHopIP: GatewayLanIP}}}},
		&kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: VpcSubnetName}, Spec: kubeovnv1.SubnetSpec{
			Vpc: VpcName, CIDRBlock: VPCCIDR, Gateway: VPCGatewayIP, Protocol: "IPv4", Provider: "ovn"}},
		&kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: ExternalSubnetName}, Spec: kubeovnv1.SubnetSpec{
			CIDRBlock: ExternalCIDR, Gateway: "172.31.100.1", Protocol: "IPv4", Provider: ExternalSubnetName + "." + GatewayNamespace}},
		&kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: GatewayName}, Spec: kubeovnv1.VpcNatGatewaySpec{
			Vpc: VpcName, Subnet: VpcSubnetName, LanIP: GatewayLanIP, Replicas: 1, ExternalSubnets: []string{ExternalSubnetName}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: model.GatewayAppPrefix + GatewayName + "-0", Namespace: GatewayNamespace,
			// As kube-ovn's StatefulSet makes it (this lab plays kube-ovn's part).
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: model.GatewayAppPrefix + GatewayName, UID: "uid-lab-sts", Controller: ptr.To(true)}},
			Labels:          map[string]string{"app": model.GatewayAppPrefix + GatewayName, model.LabelGatewayPod: "true"},
			Annotations: map[string]string{
				model.AnnotationGatewayPod:          GatewayName,
				transport.NetnsAnnotation:           gwNetns,
				"ovn.kubernetes.io/ip_address":      GatewayLanIP,
				"ovn.kubernetes.io/logical_switch":  VpcSubnetName,
				"ovn.kubernetes.io/vpc_nat_gw_init": "true",
			},
		},
		Spec: corev1.PodSpec{NodeName: labNode, Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "vpcgw-lab"}}},
	}
	return createRunningPod(ctx, c, pod, GatewayLanIP)
}

// createEIP creates an IptablesEIP of the lab's gateway; ready marks it bound, as kube-ovn does
// after `eip-add` on net1.
func createEIP(ctx context.Context, c client.Client, name, ip string, ready bool) error {
	eip := &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kubeovnv1.IptablesEIPSpec{V4ip: ip, NatGwDp: GatewayName, ExternalSubnet: ExternalSubnetName}}
	if err := c.Create(ctx, eip); err != nil {
		return fmt.Errorf("creating IptablesEIP %s: %w", name, err)
	}
	if !ready {
		return nil
	}
	eip.Status.Ready = true
	eip.Status.IP = ip
	if err := c.Status().Update(ctx, eip); err != nil {
		return fmt.Errorf("marking IptablesEIP %s Ready: %w", name, err)
	}
	return nil
}

// createBackendPod creates a Running, Ready pod with kube-ovn's address annotations.
func createBackendPod(ctx context.Context, c client.Client, ns, name, app, ip string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app},
			Annotations: map[string]string{
				"ovn.kubernetes.io/ip_address":     ip,
				"ovn.kubernetes.io/logical_switch": VpcSubnetName,
				"ovn.kubernetes.io/allocated":      "true",
			}},
		Spec: corev1.PodSpec{NodeName: labNode, Containers: []corev1.Container{{
			Name: "echo", Image: "vpcgw-lab",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: BackendPort}},
		}}},
	}
	// kube-ovn's IPAM, played: the IP object kube-ovn writes with the annotations is what
	// decides a backend's address (SPEC N2).
	if err := c.Create(ctx, kubeovnv1.NewIP(name, ns, kubeovnv1.DefaultProvider, VpcSubnetName, ip)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the IP of pod %s/%s: %w", ns, name, err)
	}
	return createRunningPod(ctx, c, pod, ip)
}

// createRunningPod creates the pod and sets the status a kubelet would (envtest has none).
func createRunningPod(ctx context.Context, c client.Client, pod *corev1.Pod, ip string) error {
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return kcm.SetPodRunning(ctx, c, pod, ip, true)
}

// SetPodReady flips a pod's Ready condition, as a kubelet does when a readiness probe fails.
func SetPodReady(ctx context.Context, c client.Client, ns, name string, ready bool) error {
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		return err
	}
	return kcm.SetPodRunning(ctx, c, &pod, pod.Status.PodIP, ready)
}

// demoService is the LoadBalancer Service the lab serves through the EIP: HTTP on 80 and UDP on
// 5353, both to the backends' echo server on 8080.
func demoService() *corev1.Service {
	noNodePorts := false
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: DemoService, Namespace: DemoNamespace, Annotations: map[string]string{
			model.AnnotationGateway: GatewayName,
			model.AnnotationEIP:     EIPName,
		}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			Selector:                      map[string]string{"app": DemoService},
			AllocateLoadBalancerNodePorts: &noNodePorts,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(BackendPort)},
				{Name: "udp", Port: 5353, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(BackendPort)},
			},
		},
	}
}
