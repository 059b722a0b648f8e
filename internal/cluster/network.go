package cluster

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// Addresses of the lab. They exist only inside the namespaces the lab creates.
const (
	VPCCIDR        = "10.77.1.0/24"
	VPCGatewayIP   = "10.77.1.1" // the subnet gateway: the VPC router's port
	GatewayLanIP   = "10.77.1.254"
	ClientCIDR     = "10.77.2.0/24" // a second VPC subnet, behind the router
	RouterClientIP = "10.77.2.1"
	VPCClientIP    = "10.77.2.2"
	// ServiceCIDR is the API server's --service-cluster-ip-range, a /16 as in a cluster (room
	// for the bench's 10,000 Services): the VPC router has no route for it, so a ClusterIP is
	// reachable only through the VIP policies vpcgw writes.
	ServiceCIDR  = "10.96.0.0/16"
	ExternalCIDR = "172.31.100.0/24"
	// ExternalGatewayIP is the external Subnet's gateway (kube-ovn's GATEWAY_V4 for the gateway).
	ExternalGatewayIP = "172.31.100.1"
	ExternalIP        = "172.31.100.100"
	EIPAddress        = "172.31.100.10"
	BackendPort       = 8080
)

// Role says what a namespace stands for (SPEC O1).
type Role string

const (
	RoleExternalClient Role = "external-client"
	RoleSwitch         Role = "switch"
	RoleRouter         Role = "vpc-router"
	RoleVPCClient      Role = "vpc-client"
	RolePod            Role = "pod" // a Pod the lab node runs: gateway instance or backend
)

// Netns describes one namespace of the lab.
type Netns struct {
	Name      string            `json:"name"`
	Role      Role              `json:"role"`
	Pod       string            `json:"pod,omitempty"` // namespace/name, for RolePod
	Addresses map[string]string `json:"addresses"`     // interface -> CIDR
}

// network is the lab's L2/L3 topology, standing in for OVN's data path where OVS cannot run: a
// bridge namespace per logical switch (kube-ovn Subnet) and per non-OVN attachment network, the
// VPC router as a namespace, and the two clients. Pods are plugged into the switches by the lab
// node (labnode.Network), from kube-ovn's own IPAM annotations.
//
//	ext client 172.31.100.100 ── [external switch] ── net1 gateway pod eth0 ── [VPC switch] ── backend pods
//	                                                                               │
//	                                                      router 10.77.1.1, 10.77.2.1 ── VPC client 10.77.2.2
type network struct {
	net *netlab.Lab

	mu       sync.Mutex
	switches map[string]string // switch key (logical switch or provider) -> bridge namespace
	ports    map[string]string // "<netns>/<nic>" -> port name on the bridge
	next     int

	ext, router, vpcClient string
	fixed                  []Netns
}

// Switch keys: the Subnets' names, and the external network's provider (kube-ovn writes no
// logical switch for its attachment).
const (
	vpcSwitch = "lab-vpc-subnet"
	extSwitch = "ovn-vpc-external-network.kube-system"
)

func newNetwork(n *netlab.Lab, serviceCIDR string) (*network, error) {
	t := &network{net: n, switches: map[string]string{}, ports: map[string]string{}}
	var err error
	for _, ns := range []struct {
		short string
		into  *string
	}{{"ext", &t.ext}, {"rtr", &t.router}, {"vcli", &t.vpcClient}} {
		if *ns.into, err = n.AddNetns(ns.short); err != nil {
			return nil, err
		}
	}
	vpcSw, err := t.switchNetns(vpcSwitch)
	if err != nil {
		return nil, err
	}
	extSw, err := t.switchNetns(extSwitch)
	if err != nil {
		return nil, err
	}
	steps := []func() error{
		func() error { return n.VethToBridge(t.ext, "eth0", extSw, "ext", "br0") },
		func() error { return n.AddAddr(t.ext, "eth0", ExternalIP+"/24") },
		func() error { return n.VethToBridge(t.router, "vpc0", vpcSw, "rtr", "br0") },
		func() error { return n.AddAddr(t.router, "vpc0", VPCGatewayIP+"/24") },
		func() error { return n.Veth(t.router, "cli0", t.vpcClient, "eth0") },
		func() error { return n.AddAddr(t.router, "cli0", RouterClientIP+"/24") },
		func() error { return n.AddAddr(t.vpcClient, "eth0", VPCClientIP+"/24") },
		func() error { return n.AddRoute(t.vpcClient, "default", "via", RouterClientIP) },
		func() error { return n.Sysctl(t.router, "net.ipv4.ip_forward", "1") },
		// The Vpc's static route 0.0.0.0/0 -> the gateway's lanIp (the lab creates the Vpc so).
		func() error { return n.AddRoute(t.router, "default", "via", GatewayLanIP) },
		func() error { return n.AddRoute(t.router, "unreachable", serviceCIDR) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("building the lab network: %w", err)
		}
	}
	t.fixed = []Netns{
		{Name: t.ext, Role: RoleExternalClient, Addresses: map[string]string{"eth0": ExternalIP + "/24"}},
		{Name: t.router, Role: RoleRouter, Addresses: map[string]string{"vpc0": VPCGatewayIP + "/24", "cli0": RouterClientIP + "/24"}},
		{Name: t.vpcClient, Role: RoleVPCClient, Addresses: map[string]string{"eth0": VPCClientIP + "/24"}},
		{Name: vpcSw, Role: RoleSwitch, Addresses: map[string]string{}},
		{Name: extSw, Role: RoleSwitch, Addresses: map[string]string{}},
	}
	return t, nil
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

// Attach plugs a Pod's NIC into its switch (labnode.Network).
func (t *network) Attach(_ context.Context, pod *corev1.Pod, netns string, nic labnode.NIC) error {
	key := switchKey(nic)
	if key == "" {
		return fmt.Errorf("pod %s/%s NIC %s names neither a logical switch nor a provider", pod.Namespace, pod.Name, nic.Name)
	}
	// A switch the lab did not build (another Subnet a user made) gets a bridge of its own.
	sw, err := t.switchNetns(key)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.next++
	port := "p" + strconv.Itoa(t.next)
	t.ports[netns+"/"+nic.Name] = port
	t.mu.Unlock()
	return t.net.VethToBridge(netns, nic.Name, sw, port, "br0")
}

// Detach removes a Pod's NIC from its switch.
func (t *network) Detach(_ context.Context, _ *corev1.Pod, netns string, nic labnode.NIC) error {
	sw, err := t.switchNetns(switchKey(nic))
	if err != nil {
		return err
	}
	t.mu.Lock()
	port, ok := t.ports[netns+"/"+nic.Name]
	delete(t.ports, netns+"/"+nic.Name)
	t.mu.Unlock()
	if !ok {
		return nil
	}
	_, err = netlab.Run("ip", "-n", sw, "link", "del", port)
	return err
}
