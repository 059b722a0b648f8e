package cluster

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Names of the objects the lab creates as a kube-ovn user would.
const (
	VpcName            = "lab-vpc"
	VpcSubnetName      = vpcSwitch
	ClientSubnetName   = "lab-clients"
	ExternalSubnetName = "ovn-vpc-external-network" // kube-ovn's default external network
	GatewayName        = "lab-gw"
	EIPName            = "lab-eip"
	DemoNamespace      = "demo"
	DemoService        = "web"
	DemoDeployment     = "web"
	// DemoFlowsPortName and DemoFlowsUDPPortName name the demo Service's ports of the flow
	// protocol (long-lived flows, SPEC D9), which the request probes of DemoStreams leave alone.
	DemoFlowsPortName    = "flows"
	DemoFlowsUDPPortName = "flows-udp"
	// EchoImage names the backend containers' image; the lab node runs their command from the
	// host's filesystem, so the name only says what they are.
	EchoImage = "vpcgw.io/lab-echo:latest"
	// DemoDrainSeconds is the demo Pods' preStop sleep, DemoServeOnSeconds how long their server
	// answers on after SIGTERM (not ready meanwhile), DemoGraceSeconds their grace period.
	DemoDrainSeconds   = 3
	DemoServeOnSeconds = 4
	DemoGraceSeconds   = 15
)

// userObjects are the kube-ovn objects of the lab: a Vpc (namespace demo bound to it, its default
// route to the gateway), its Subnets, the external Subnet on kube-ovn's NAD, and the VPC NAT
// gateway. kube-ovn-controller makes everything else (the router, the gateway StatefulSet, Pod
// addresses, the EIP's status).
func userObjects() []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}},
		&kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: VpcName}, Spec: kubeovnv1.VpcSpec{
			Namespaces: []string{DemoNamespace},
			StaticRoutes: []*kubeovnv1.StaticRoute{{
				Policy: kubeovnv1.PolicyDst, CIDR: "0.0.0.0/0", NextHopIP: GatewayLanIP,
			}},
		}},
		&kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: VpcSubnetName}, Spec: kubeovnv1.SubnetSpec{
			Vpc: VpcName, CIDRBlock: VPCCIDR, Gateway: VPCGatewayIP, Protocol: "IPv4", Provider: "ovn",
			Namespaces: []string{DemoNamespace}, ExcludeIps: []string{VPCGatewayIP, GatewayLanIP}}},
		&kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: ClientSubnetName}, Spec: kubeovnv1.SubnetSpec{
			Vpc: VpcName, CIDRBlock: ClientCIDR, Gateway: RouterClientIP, Protocol: "IPv4", Provider: "ovn",
			ExcludeIps: []string{RouterClientIP}}},
		&kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: ExternalSubnetName}, Spec: kubeovnv1.SubnetSpec{
			CIDRBlock: ExternalCIDR, Gateway: ExternalGatewayIP, Protocol: "IPv4", Provider: extSwitch,
			ExcludeIps: []string{ExternalGatewayIP, ExternalIP}}},
		&kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: GatewayName}, Spec: kubeovnv1.VpcNatGatewaySpec{
			Vpc: VpcName, Subnet: VpcSubnetName, LanIP: GatewayLanIP, ExternalSubnets: []string{ExternalSubnetName}}},
	}
}

// EIP is an IptablesEIP of the lab's gateway, as a user writes it (kube-ovn makes it Ready).
func EIP(name, ip string) *kubeovnv1.IptablesEIP {
	return &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kubeovnv1.IptablesEIPSpec{
		V4ip: ip, NatGwDp: GatewayName, ExternalSubnet: ExternalSubnetName}}
}

// EchoDeployment is a Deployment of echo servers answering with their Pod's name on BackendPort
// (TCP and UDP) and serving netlab's flow protocol on FlowsBackendPort (TCP and UDP), labelled
// app=<name>.
func EchoDeployment(exe, namespace, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// Drains as Kubernetes' documentation asks (SPEC L11): the preStop sleep keeps
					// the server answering while its endpoint turns terminating and vpcgw stops
					// sending it new connections. A terminating endpoint still serving keeps its
					// UDP flows (as with kube-proxy), so at SIGTERM the server fails its readiness
					// and answers on: the flows move once the EndpointSlice says it no longer
					// serves, before it stops. All well inside the grace period.
					TerminationGracePeriodSeconds: ptr.To[int64](DemoGraceSeconds),
					Containers: []corev1.Container{{
						Name: "echo", Image: EchoImage,
						Command: []string{exe, "echo", "--name", "$(POD_NAME)", "--listen", "$(POD_IP):" + strconv.Itoa(BackendPort),
							"--drain", strconv.Itoa(DemoServeOnSeconds) + "s", "--flows", "$(POD_IP):" + strconv.Itoa(FlowsBackendPort)},
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						},
						Ports: []corev1.ContainerPort{{ContainerPort: BackendPort, Protocol: corev1.ProtocolTCP}, {ContainerPort: BackendPort, Protocol: corev1.ProtocolUDP},
							{ContainerPort: FlowsBackendPort, Protocol: corev1.ProtocolTCP}, {ContainerPort: FlowsBackendPort, Protocol: corev1.ProtocolUDP}},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: DemoDrainSeconds}}},
						// Ready once it serves (it opens its UDP socket before HTTP), so that a new
						// replica gets traffic only when it can answer, as an operator deploys it;
						// not ready at the first failure once it drains.
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(BackendPort)}}},
					}},
				},
			},
		},
	}
}

// DemoServiceObject is the LoadBalancer Service the lab serves through the EIP: HTTP on 80 and
// UDP on 5353, both to the backends' echo server, and the flow protocol on FlowsPort, TCP and
// UDP, to the echo server's flows port.
func DemoServiceObject() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: DemoService, Namespace: DemoNamespace, Annotations: map[string]string{
			model.AnnotationGateway: GatewayName,
			model.AnnotationEIP:     EIPName,
		}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			Selector:                      map[string]string{"app": DemoDeployment},
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(BackendPort)},
				{Name: "udp", Port: 5353, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(BackendPort)},
				{Name: DemoFlowsPortName, Port: FlowsPort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(FlowsBackendPort)},
				{Name: DemoFlowsUDPPortName, Port: FlowsPort, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(FlowsBackendPort)},
			},
		},
	}
}

func createAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
