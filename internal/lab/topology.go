package lab

import (
	"fmt"

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
	// ServiceCIDR is envtest's --service-cluster-ip-range: the VPC router has no route for it, so a
	// ClusterIP is reachable only through the VIP policies vpcgw writes.
	ServiceCIDR    = "10.0.0.0/24"
	ExternalCIDR   = "172.31.100.0/24"
	GatewayNet1IP  = "172.31.100.2"
	ExternalIP     = "172.31.100.100"
	EIPAddress     = "172.31.100.10"
	BackendPort    = 8080
	vpcPrefixLen   = "/24"
	extPrefixLen   = "/24"
	firstBackendIP = 11 // backends get 10.77.1.11, .12, ...
)

// Role says what a namespace stands for (SPEC O1).
type Role string

const (
	RoleExternalClient Role = "external-client"
	RoleGateway        Role = "gateway-instance"
	RoleBackend        Role = "backend"
	RoleSwitch         Role = "vpc-switch"
	RoleRouter         Role = "router"
	RoleVPCClient      Role = "vpc-client"
)

// Netns describes one namespace of the lab.
type Netns struct {
	Name      string            `json:"name"`
	Role      Role              `json:"role"`
	Addresses map[string]string `json:"addresses"` // interface -> CIDR
}

// topology builds the namespaces:
//
//	ext (172.31.100.100) ── net1 gw (EIP on net1; eth0 10.77.1.254) ── vpc switch ── backends (10.77.1.11, ...)
//	                                                                      │
//	                                             router (10.77.1.1, 10.77.2.1) ── vpc client (10.77.2.2)
//
// The VPC switch is a bridge standing in for the logical switch of the gateway's subnet; the
// router stands in for the VPC's logical router: its default route is the VPC's 0.0.0.0/0 static
// route to the gateway's lanIp, the Service CIDR is unreachable, and /32 routes for the VIPs come
// only from the NB policies vpcgw writes (the lab's translator).
type topology struct {
	net        *netlab.Lab
	ext, gw    string
	vpcSwitch  string
	router     string
	vpcClient  string
	namespaces []Netns
	backends   int
}

func buildTopology(net *netlab.Lab, serviceCIDR string) (*topology, error) {
	t := &topology{net: net}
	var err error
	if t.ext, err = net.AddNetns("ext"); err != nil {
		return nil, err
	}
	if t.gw, err = net.AddNetns("gw"); err != nil {
		return nil, err
	}
	if t.vpcSwitch, err = net.AddNetns("vpc"); err != nil {
		return nil, err
	}
	if t.router, err = net.AddNetns("rtr"); err != nil {
		return nil, err
	}
	if t.vpcClient, err = net.AddNetns("vcli"); err != nil {
		return nil, err
	}
	bridge := func(port string) func() error {
		return func() error {
			_, err := netlab.Run("ip", "-n", t.vpcSwitch, "link", "set", port, "master", "br0")
			return err
		}
	}
	steps := []func() error{
		func() error { return net.Veth(t.ext, "eth0", t.gw, "net1") },
		func() error { return net.AddAddr(t.ext, "eth0", ExternalIP+extPrefixLen) },
		func() error { return net.AddAddr(t.gw, "net1", GatewayNet1IP+extPrefixLen) },
		func() error { return net.Veth(t.gw, "eth0", t.vpcSwitch, "gw") },
		func() error { return net.AddAddr(t.gw, "eth0", GatewayLanIP+vpcPrefixLen) },
		func() error { return net.Sysctl(t.gw, "net.ipv4.ip_forward", "1") },
		func() error { return net.Sysctl(t.gw, "net.ipv4.conf.all.rp_filter", "0") },
		func() error {
			_, err := netlab.Run("ip", "-n", t.vpcSwitch, "link", "add", "br0", "type", "bridge")
			return err
		},
		func() error { _, err := netlab.Run("ip", "-n", t.vpcSwitch, "link", "set", "br0", "up"); return err },
		bridge("gw"),
		func() error { return net.Veth(t.router, "vpc0", t.vpcSwitch, "rtr") },
		bridge("rtr"),
		func() error { return net.AddAddr(t.router, "vpc0", VPCGatewayIP+vpcPrefixLen) },
		func() error { return net.Veth(t.router, "cli0", t.vpcClient, "eth0") },
		func() error { return net.AddAddr(t.router, "cli0", RouterClientIP+"/24") },
		func() error { return net.AddAddr(t.vpcClient, "eth0", VPCClientIP+"/24") },
		func() error { return net.AddRoute(t.vpcClient, "default", "via", RouterClientIP) },
		func() error { return net.Sysctl(t.router, "net.ipv4.ip_forward", "1") },
		func() error { return net.AddRoute(t.router, "default", "via", GatewayLanIP) },
		func() error { return net.AddRoute(t.router, "unreachable", serviceCIDR) },
		func() error { return net.AddRoute(t.gw, ClientCIDR, "via", VPCGatewayIP) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("building lab topology: %w", err)
		}
	}
	t.namespaces = append(t.namespaces,
		Netns{Name: t.ext, Role: RoleExternalClient, Addresses: map[string]string{"eth0": ExternalIP + extPrefixLen}},
		Netns{Name: t.gw, Role: RoleGateway, Addresses: map[string]string{"eth0": GatewayLanIP + vpcPrefixLen, "net1": GatewayNet1IP + extPrefixLen}},
		Netns{Name: t.vpcSwitch, Role: RoleSwitch, Addresses: map[string]string{}},
		Netns{Name: t.router, Role: RoleRouter, Addresses: map[string]string{"vpc0": VPCGatewayIP + vpcPrefixLen, "cli0": RouterClientIP + "/24"}},
		Netns{Name: t.vpcClient, Role: RoleVPCClient, Addresses: map[string]string{"eth0": VPCClientIP + "/24"}},
	)
	return t, nil
}

// addEIP plays kube-ovn's `eip-add`: the EIP lives on net1.
func (t *topology) addEIP(ip string) error {
	return t.net.AddAddr(t.gw, "net1", ip+extPrefixLen)
}

// addBackend creates a backend namespace on the VPC switch and returns its name and address.
func (t *topology) addBackend(short string) (ns, ip string, err error) {
	ip = fmt.Sprintf("10.77.1.%d", firstBackendIP+t.backends)
	t.backends++
	if ns, err = t.net.AddNetns(short); err != nil {
		return "", "", err
	}
	port := "p-" + short
	if len(port) > 15 {
		port = port[:15]
	}
	steps := []func() error{
		func() error { return t.net.Veth(ns, "eth0", t.vpcSwitch, port) },
		func() error {
			_, err := netlab.Run("ip", "-n", t.vpcSwitch, "link", "set", port, "master", "br0")
			return err
		},
		func() error { return t.net.AddAddr(ns, "eth0", ip+vpcPrefixLen) },
		func() error { return t.net.AddRoute(ns, "default", "via", VPCGatewayIP) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return "", "", fmt.Errorf("adding backend %s: %w", short, err)
		}
	}
	t.namespaces = append(t.namespaces, Netns{Name: ns, Role: RoleBackend, Addresses: map[string]string{"eth0": ip + vpcPrefixLen}})
	return ns, ip, nil
}
