package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovsnode"
)

// Addresses of the lab. They exist only inside the namespaces the lab creates and the lab's OVN.
const (
	VPCCIDR        = "10.77.1.0/24"
	VPCGatewayIP   = "10.77.1.1" // the Subnet's gateway: the Vpc router's port
	GatewayLanIP   = "10.77.1.254"
	ClientCIDR     = "10.77.2.0/24" // a second Subnet of the Vpc, behind its router
	RouterClientIP = "10.77.2.1"    // that Subnet's gateway
	VPCClientIP    = "10.77.2.2"
	// ServiceCIDR is the API server's --service-cluster-ip-range, a /16 as in a cluster (room for
	// the bench's 10,000 Services).
	ServiceCIDR  = "10.96.0.0/16"
	ExternalCIDR = "172.31.100.0/24"
	// ExternalGatewayIP is the external Subnet's gateway (kube-ovn's GATEWAY_V4 for the gateway).
	ExternalGatewayIP = "172.31.100.1"
	ExternalIP        = "172.31.100.100"
	EIPAddress        = "172.31.100.10"
	BackendPort       = 8080
	// FlowsBackendPort is where the demo backends serve netlab's flow protocol (TCP and UDP),
	// FlowsPort the demo Service's port for it (DemoFlowsPortName, DemoFlowsUDPPortName).
	FlowsBackendPort = 8090
	FlowsPort        = 90
	// VPCClientNamespace and VPCClientPod name the VPC client: a Pod on the client Subnet, with
	// its address fixed by kube-ovn's annotation.
	VPCClientNamespace = "vpc-clients"
	VPCClientPod       = "vpc-client"
)

// Role says what a namespace stands for (SPEC O1).
type Role string

// The roles of the lab's namespaces.
const (
	RoleExternalClient Role = "external-client"
	RoleSwitch         Role = "switch"
	RoleRouter         Role = "vpc-router"
	RoleVPCClient      Role = "vpc-client"
	RolePod            Role = "pod" // a Pod the lab node runs: gateway instance or backend
	// RoleChassis is the OVN chassis's datapath namespace: ovs-vswitchd, its taps and the host
	// ends of every OVN NIC.
	RoleChassis Role = "ovn-chassis"
)

// Netns describes one namespace of the lab.
type Netns struct {
	Name      string            `json:"name"`
	Role      Role              `json:"role"`
	Pod       string            `json:"pod,omitempty"` // namespace/name, for RolePod
	Addresses map[string]string `json:"addresses"`     // interface -> CIDR
}

// network is the lab's L2/L3 topology. The custom Vpc's Subnets are OVN's: a chassis of the lab
// node (internal/ovsnode: ovs-vswitchd on the userspace datapath and ovn-controller, from
// kube-ovn's OVS and OVN build) carries every packet between the Vpc's Pods, the VPC client and
// the gateway's eth0, by the flows ovn-northd computes from what kube-ovn-controller and vpcgw
// write; a Pod's NIC is plugged as kube-ovn-cni plugs it. Two networks stay bridges: the
// external network (the gateway's net1, a macvlan attachment in a cluster, which is not OVN's in
// kube-ovn either) and, for now, the default network ovn-default with its router namespace
// (podnet.go), which reaches the host where a cluster's Pods take the node's join port.
//
//	ext client 172.31.100.100 ── [external bridge] ── net1 gateway pod eth0 ── OVN: lab-vpc-subnet ── backend pods
//	                                                                               │
//	                                                   OVN router lab-vpc 10.77.1.1, 10.77.2.1 ── lab-clients ── VPC client 10.77.2.2
type network struct {
	net     *netlab.Lab
	chassis *ovsnode.Chassis

	mu       sync.Mutex
	switches map[string]string // bridge key (provider, or ovn-default) -> bridge namespace
	ports    map[string]string // "<netns>/<nic>" -> port name on the bridge, or ovnPort
	next     int

	ext   string
	fixed []Netns
}

// ovnPort marks, in network.ports, a NIC the chassis plugged.
const ovnPort = "ovn"

// Switch keys: the Subnets' names, and the external network's provider (kube-ovn writes no
// logical switch for its attachment).
const (
	vpcSwitch = "lab-vpc-subnet"
	extSwitch = "ovn-vpc-external-network.kube-system"
)

func newNetwork(n *netlab.Lab) (*network, error) {
	t := &network{net: n, switches: map[string]string{}, ports: map[string]string{}}
	var err error
	if t.ext, err = n.AddNetns("ext"); err != nil {
		return nil, err
	}
	extSw, err := t.switchNetns(extSwitch)
	if err != nil {
		return nil, err
	}
	if err := n.VethToBridge(t.ext, "eth0", extSw, "ext", "br0"); err != nil {
		return nil, fmt.Errorf("building the lab network: %w", err)
	}
	if err := n.AddAddr(t.ext, "eth0", ExternalIP+"/24"); err != nil {
		return nil, fmt.Errorf("building the lab network: %w", err)
	}
	t.fixed = []Netns{
		{Name: t.ext, Role: RoleExternalClient, Addresses: map[string]string{"eth0": ExternalIP + "/24"}},
		{Name: extSw, Role: RoleSwitch, Addresses: map[string]string{}},
	}
	return t, nil
}

// useChassis makes ch carry the OVN NICs plugged from now on.
func (t *network) useChassis(ch *ovsnode.Chassis) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.chassis = ch
	t.fixed = append(t.fixed, Netns{Name: ch.Netns(), Role: RoleChassis, Addresses: map[string]string{}})
}

// switchNetns returns the bridge namespace of a switch, creating it on first use.
func (t *network) switchNetns(key string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ns, ok := t.switches[key]; ok {
		return ns, nil
	}
	t.next++
	ns, err := t.net.AddNetns("sw" + strconv.Itoa(t.next))
	if err != nil {
		return "", err
	}
	if err := t.net.AddBridge(ns, "br0"); err != nil {
		return "", err
	}
	t.switches[key] = ns
	return ns, nil
}

func switchKey(nic labnode.NIC) string {
	if nic.LogicalSwitch != "" {
		return nic.LogicalSwitch
	}
	return nic.Provider
}

// viaOVN reports whether the chassis carries nic: every NIC on a logical switch but the default
// network's, which stays a bridge (podnet.go).
func (t *network) viaOVN(nic labnode.NIC) bool {
	return nic.LogicalSwitch != "" && nic.LogicalSwitch != DefaultSubnet
}

// ovnPortOf is the chassis's view of a Pod NIC: kube-ovn's logical switch port name from the Pod,
// namespace and provider, and veth names from the sandbox's ID (the lab's sandboxes are named by
// the Pod's UID, so a sandbox made again for the same Pod gets the same names; Plug removes a
// pair left behind first).
func ovnPortOf(pod *corev1.Pod, netns string, nic labnode.NIC) ovsnode.Port {
	in := nic.Iface(netns)
	in.WaitGateway = true
	return ovsnode.Port{Pod: pod.Name, Namespace: pod.Namespace, Provider: nic.Provider,
		ContainerID: strings.ReplaceAll(string(pod.UID), "-", ""), Iface: in}
}

// Attach plugs a Pod's NIC into its switch and configures it (labnode.Network).
func (t *network) Attach(ctx context.Context, pod *corev1.Pod, netns string, nic labnode.NIC) error {
	key := switchKey(nic)
	if key == "" {
		return fmt.Errorf("pod %s/%s NIC %s names neither a logical switch nor a provider", pod.Namespace, pod.Name, nic.Name)
	}
	if t.viaOVN(nic) {
		t.mu.Lock()
		ch := t.chassis
		t.mu.Unlock()
		if ch == nil {
			return fmt.Errorf("pod %s/%s NIC %s: the lab's OVN chassis is not running yet", pod.Namespace, pod.Name, nic.Name)
		}
		if err := ch.Plug(ctx, ovnPortOf(pod, netns, nic)); err != nil {
			return err
		}
		t.mu.Lock()
		t.ports[netns+"/"+nic.Name] = ovnPort
		t.mu.Unlock()
		return nil
	}
	// A network the lab did not build (an attachment a user made) gets a bridge of its own.
	sw, err := t.switchNetns(key)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.next++
	port := "p" + strconv.Itoa(t.next)
	t.ports[netns+"/"+nic.Name] = port
	t.mu.Unlock()
	if err := t.net.VethToBridge(netns, nic.Name, sw, port, "br0"); err != nil {
		return err
	}
	return netlab.Configure(ctx, nic.Iface(netns))
}

// Detach removes a Pod's NIC from its switch.
func (t *network) Detach(ctx context.Context, pod *corev1.Pod, netns string, nic labnode.NIC) error {
	t.mu.Lock()
	port, ok := t.ports[netns+"/"+nic.Name]
	delete(t.ports, netns+"/"+nic.Name)
	ch := t.chassis
	t.mu.Unlock()
	if !ok {
		return nil
	}
	if port == ovnPort {
		return ch.Unplug(ctx, ovnPortOf(pod, netns, nic))
	}
	sw, err := t.switchNetns(switchKey(nic))
	if err != nil {
		return err
	}
	_, err = netlab.Run("ip", "-n", sw, "link", "del", port)
	return err
}
