package kubeovnrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Names kube-ovn's install gives its cluster-wide objects (v1.16.2 dist/images/install.sh and
// pkg/util/const.go).
const (
	Namespace              = "kube-system"
	NatConfigMap           = "ovn-vpc-nat-config"    // data.image: the gateway pod's image
	NatGwConfigMap         = "ovn-vpc-nat-gw-config" // data.enable-vpc-nat-gw: "true"
	ExternalNetwork        = "ovn-vpc-external-network"
	ExternalSubnetProvider = ExternalNetwork + "." + Namespace
	// NatGatewayImage is the image kube-ovn v1.16.2 runs its VPC NAT gateways from.
	NatGatewayImage = "docker.io/kubeovn/vpc-nat-gateway:v1.16.2"
	// FieldManager is the field manager of the objects installed here.
	FieldManager = "kube-ovn-install"
)

// InstallCluster installs into the API server what a kube-ovn operator's install puts there for
// VPC NAT gateways: kube-ovn's CRDs and the NetworkAttachmentDefinition CRD from kubeOVNDir
// (server-side apply; waits until Established), the ConfigMaps that enable the gateways and name
// their image, and the NetworkAttachmentDefinition of the external network. It is idempotent.
func InstallCluster(ctx context.Context, c client.Client, kubeOVNDir string) error {
	for _, f := range []string{CRDFile, NADCRDFile} {
		if err := applyCRDs(ctx, c, filepath.Join(kubeOVNDir, f)); err != nil {
			return err
		}
	}
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: NatConfigMap, Namespace: Namespace}, Data: map[string]string{"image": NatGatewayImage}},
		{ObjectMeta: metav1.ObjectMeta{Name: NatGwConfigMap, Namespace: Namespace}, Data: map[string]string{"enable-vpc-nat-gw": "true"}},
	} {
		if err := createOrUpdate(ctx, c, cm, func(existing *corev1.ConfigMap) { existing.Data = cm.Data }); err != nil {
			return err
		}
	}
	// The external network as kube-ovn's documentation defines it: macvlan on the node's second
	// NIC, addresses from kube-ovn's IPAM through the provider the external Subnet names.
	nad := &unstructured.Unstructured{}
	nad.SetAPIVersion("k8s.cni.cncf.io/v1")
	nad.SetKind("NetworkAttachmentDefinition")
	nad.SetName(ExternalNetwork)
	nad.SetNamespace(Namespace)
	_ = unstructured.SetNestedField(nad.Object, `{"cniVersion":"0.3.0","type":"macvlan","master":"eth1","mode":"bridge",`+
		`"ipam":{"type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":"`+ExternalSubnetProvider+`"}}`,
		"spec", "config")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(nad), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("kubeovnrun: applying NetworkAttachmentDefinition %s/%s: %w", Namespace, ExternalNetwork, err)
	}
	return seedDefaultVpc(ctx, c)
}

// Names of kube-ovn's default network (its flags' defaults, which Start keeps).
const (
	DefaultVpc           = "ovn-cluster" // --cluster-router
	DefaultLogicalSwitch = "ovn-default" // --default-ls
	JoinSwitch           = "join"        // --node-switch
	// DefaultCIDR is ovn-default's CIDR (--default-cidr) and DefaultGatewayIP its gateway
	// (--default-gateway: kube-ovn takes the CIDR's first address).
	DefaultCIDR      = "10.16.0.0/16"
	DefaultGatewayIP = "10.16.0.1"
)

// seedDefaultVpc creates the default Vpc with the status kube-ovn-controller's first start gives
// it (v1.16.2 pkg/controller/init.go:88-123, InitDefaultVpc), so every start of the controller
// here is like a restart on a running cluster. On a first start kube-ovn races itself: InitDefaultVpc
// sets status.standby, and handleUpdateVpcStatus (vpc.go:153-188), run for the join Subnet's add
// event, merge-patches the whole status from its informer's copy, which may not have seen that
// write yet, with "standby": false. Then the default Vpc waits for the join switch (vpc.go:387-395)
// and the join Subnet waits for a standby Vpc (subnet.go:355-359) for ever, and kube-ovn never
// starts its other workers (controller.go:1314-1321). With the status already stored, every copy
// it patches from says standby.
func seedDefaultVpc(ctx context.Context, c client.Client) error {
	vpc := &unstructured.Unstructured{}
	vpc.SetAPIVersion("kubeovn.io/v1")
	vpc.SetKind("Vpc")
	vpc.SetName(DefaultVpc)
	if err := c.Create(ctx, vpc); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubeovnrun: creating the default Vpc %s: %w", DefaultVpc, err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: DefaultVpc}, vpc); err != nil {
			return fmt.Errorf("kubeovnrun: reading the default Vpc %s: %w", DefaultVpc, err)
		}
	}
	status, _, _ := unstructured.NestedMap(vpc.Object, "status")
	if status["default"] == true && status["standby"] == true && status["router"] == DefaultVpc && status["defaultLogicalSwitch"] == DefaultLogicalSwitch {
		return nil
	}
	if status == nil {
		status = map[string]any{}
	}
	status["default"], status["standby"], status["router"], status["defaultLogicalSwitch"] = true, true, DefaultVpc, DefaultLogicalSwitch
	if err := unstructured.SetNestedMap(vpc.Object, status, "status"); err != nil {
		return fmt.Errorf("kubeovnrun: default Vpc status: %w", err)
	}
	if err := c.Status().Update(ctx, vpc); err != nil {
		return fmt.Errorf("kubeovnrun: setting the default Vpc %s status: %w", DefaultVpc, err)
	}
	return nil
}

// applyCRDs server-side applies every CRD of a multi-document YAML file and waits until each is
// Established.
func applyCRDs(ctx context.Context, c client.Client, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("kubeovnrun: reading CRDs: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var names []string
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("kubeovnrun: decoding %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue // an empty document between "---" separators
		}
		if u.GetKind() != "CustomResourceDefinition" {
			return fmt.Errorf("kubeovnrun: %s holds a %s %q, want only CustomResourceDefinitions", path, u.GetKind(), u.GetName())
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("kubeovnrun: applying CRD %s from %s: %w", u.GetName(), path, err)
		}
		names = append(names, u.GetName())
	}
	if len(names) == 0 {
		return fmt.Errorf("kubeovnrun: %s holds no CRD", path)
	}
	for _, n := range names {
		if err := waitEstablished(ctx, c, n); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, c client.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiextensions.k8s.io/v1")
		u.SetKind("CustomResourceDefinition")
		err := c.Get(ctx, client.ObjectKey{Name: name}, u)
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, raw := range conds {
				if m, ok := raw.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeovnrun: CRD %s not Established: %w (last error: %v)", name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// createOrUpdate creates obj, or when it exists, applies mutate to the stored one and updates it.
func createOrUpdate[T any, P interface {
	*T
	client.Object
}](ctx context.Context, c client.Client, obj P, mutate func(P)) error {
	err := c.Create(ctx, obj)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubeovnrun: creating %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	existing := P(new(T))
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return fmt.Errorf("kubeovnrun: reading %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	mutate(existing)
	if err := c.Update(ctx, existing); err != nil {
		return fmt.Errorf("kubeovnrun: updating %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// Node is a cluster node as kube-ovn-controller needs to see it.
type Node struct {
	Name        string
	Address     string // InternalIP: where the API server reaches the node's kubelet
	KubeletPort int32  // the kubelet's port (status.daemonEndpoints); 0 means 10250
}

// AddNode creates the Node (Ready, with its InternalIP and kubelet port) and the OVN SB Chassis
// that ovn-controller would register on it, which kube-ovn-controller looks up by host name
// before it accepts the node.
func AddNode(ctx context.Context, c client.Client, o *OVN, n Node) error {
	ip := net.ParseIP(n.Address)
	if n.Name == "" || ip == nil || ip.To4() == nil {
		return fmt.Errorf("kubeovnrun: node %q: want a name and an IPv4 InternalIP, got %q", n.Name, n.Address)
	}
	port := n.KubeletPort
	if port == 0 {
		port = 10250
	}
	// The chassis annotation is kube-ovn-cni's (initChassisAnno, from the OVS system-id):
	// kube-ovn-controller's gcChassis deletes every SB chassis no Node names so.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
		"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux",
	}, Annotations: map[string]string{ChassisAnnotation: ChassisName(n.Name)}}}
	if err := c.Create(ctx, node); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubeovnrun: creating Node %s: %w", n.Name, err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
			return fmt.Errorf("kubeovnrun: reading Node %s: %w", n.Name, err)
		}
	}
	now := metav1.Now()
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.Address}, {Type: corev1.NodeHostName, Address: n.Name}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("kubeovnrun: setting Node %s status: %w", n.Name, err)
	}
	chassis := ChassisName(n.Name)
	if _, err := o.SBCtl("--may-exist", "chassis-add", chassis, "geneve", n.Address); err != nil {
		return fmt.Errorf("kubeovnrun: adding SB chassis for node %s: %w", n.Name, err)
	}
	if _, err := o.SBCtl("set", "chassis", chassis, "hostname="+n.Name); err != nil {
		return fmt.Errorf("kubeovnrun: setting SB chassis host name for node %s: %w", n.Name, err)
	}
	return nil
}

// ChassisAnnotation is the Node annotation kube-ovn-cni writes with its chassis's system-id.
const ChassisAnnotation = "ovn.kubernetes.io/chassis"

// ChassisName is the SB Chassis name AddNode gives a node (ovn-controller would use the host's
// system-id).
func ChassisName(node string) string { return "chassis-" + node }
