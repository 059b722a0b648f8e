package labnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

// Network is the lab's L2/L3 topology, which owns the logical switches. For each NIC of a Pod,
// Attach creates the interface nic.Name inside the pod's network namespace netns, plugged into
// the switch of the NIC (nic.LogicalSwitch, or nic.Provider where kube-ovn writes no switch, as
// for non-OVN attachments such as the external network's macvlan), configured as kube-ovn's CNI
// configures it (nic.Iface(netns), netlab.Configure): MAC, addresses, link up, routes. The CNI's
// order is the network's: OVN's chassis configures a NIC only once ovn-controller installed its
// port. Detach undoes Attach; the namespace is deleted right after, so removing the pod's end is
// optional.
type Network interface {
	Attach(ctx context.Context, pod *corev1.Pod, netns string, nic NIC) error
	Detach(ctx context.Context, pod *corev1.Pod, netns string, nic NIC) error
}

// NIC is one interface of a Pod as kube-ovn's IPAM annotations describe it.
type NIC struct {
	// Name is eth0 for the primary network, net1, net2... (or the requested name) for the
	// attachments listed in k8s.v1.cni.cncf.io/networks, as multus names them.
	Name string
	// Provider is the kube-ovn provider whose annotations describe the NIC: "ovn", or
	// "<nad>.<ns>.ovn" (an OVN attachment) or "<nad>.<ns>" (an IPAM-only attachment).
	Provider string
	// Attachment is the NetworkAttachmentDefinition "<ns>/<name>" the NIC comes from; "" for
	// kube-ovn's own default network.
	Attachment string
	// LogicalSwitch is the Subnet (kube-ovn writes none for non-OVN subnets).
	LogicalSwitch string
	// IPs are the addresses with the subnet's prefix length.
	IPs []netip.Prefix
	MAC net.HardwareAddr
	// Gateways are the subnet's gateways, one per address family.
	Gateways []netip.Addr
	// DefaultRoute: the NIC gets the default route via its gateway (eth0 unless
	// <provider>.kubernetes.io/default_route says otherwise).
	DefaultRoute bool
	// Routes are <provider>.kubernetes.io/routes; a 0.0.0.0/0 or ::/0 among them replaces the
	// default route the pod had, as kube-ovn's CNI does for attachments.
	Routes []Route
}

// Route is one entry of <provider>.kubernetes.io/routes.
type Route = netlab.Route

// Annotation keys, as kube-ovn writes them (pkg/util/const.go).
const (
	ovnProvider             = "ovn"
	networksAnnotation      = "k8s.v1.cni.cncf.io/networks"
	networkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
	defaultNetAnnotation    = "v1.multus-cni.io/default-network"
	allocatedTemplate       = "%s.kubernetes.io/allocated"
	routedTemplate          = "%s.kubernetes.io/routed"
	ipAddressTemplate       = "%s.kubernetes.io/ip_address"
	macAddressTemplate      = "%s.kubernetes.io/mac_address"
	cidrTemplate            = "%s.kubernetes.io/cidr"
	gatewayTemplate         = "%s.kubernetes.io/gateway"
	logicalSwitchTemplate   = "%s.kubernetes.io/logical_switch"
	routesTemplate          = "%s.kubernetes.io/routes"
	defaultRouteTemplate    = "%s.kubernetes.io/default_route"
)

// attachment is one element of k8s.v1.cni.cncf.io/networks.
type attachment struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Interface string `json:"interface"`
}

// parseNetworks parses the multus annotation: a JSON list or "ns/name@if, name, ...".
func parseNetworks(value, podNamespace string) ([]attachment, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, nil
	}
	var out []attachment
	if strings.HasPrefix(value, "[") {
		if err := json.Unmarshal([]byte(value), &out); err != nil {
			return nil, fmt.Errorf("parsing %s %q: %w", networksAnnotation, value, err)
		}
	} else {
		for _, item := range strings.Split(value, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			var a attachment
			if i := strings.Index(item, "@"); i >= 0 {
				a.Interface, item = item[i+1:], item[:i]
			}
			if i := strings.Index(item, "/"); i >= 0 {
				a.Namespace, item = item[:i], item[i+1:]
			}
			a.Name = item
			out = append(out, a)
		}
	}
	for i := range out {
		if out[i].Namespace == "" {
			out[i].Namespace = podNamespace
		}
		if out[i].Name == "" {
			return nil, fmt.Errorf("%s %q: an attachment has no name", networksAnnotation, value)
		}
	}
	return out, nil
}

// podNICs returns the Pod's NICs when kube-ovn has allocated all of them, or ok=false with what
// it is still waiting for. Providers follow kube-ovn (pkg/controller/pod.go
// getPodAttachmentNet): an attachment <ns>/<name> is "<name>.<ns>.ovn" when its NAD is kube-ovn's
// own type and "<name>.<ns>" when it only uses kube-ovn's IPAM; the node does not read NADs, so it
// takes whichever of the two kube-ovn annotated. With a default-network annotation the primary
// NIC is that attachment's.
func podNICs(pod *corev1.Pod) (nics []NIC, waiting string, err error) {
	if pod.Spec.HostNetwork {
		return nil, "", fmt.Errorf("hostNetwork pods are not run by the lab node (their processes would share the host's network)")
	}
	ann := pod.Annotations
	primary := attachment{Name: ovnProvider}
	primaryProvider := ovnProvider
	if dn := strings.TrimSpace(ann[defaultNetAnnotation]); dn != "" {
		list, err := parseNetworks(dn, pod.Namespace)
		if err != nil || len(list) != 1 {
			return nil, "", fmt.Errorf("annotation %s=%q must name one attachment", defaultNetAnnotation, dn)
		}
		primary = list[0]
		primaryProvider = ""
	}
	atts, err := parseNetworks(ann[networksAnnotation], pod.Namespace)
	if err != nil {
		return nil, "", err
	}
	counts := map[string]int{}
	for _, a := range atts {
		counts[a.Namespace+"/"+a.Name]++
	}
	type want struct {
		name, attachment string
		candidates       []string
	}
	wants := []want{{name: "eth0", candidates: []string{primaryProvider}}}
	if primaryProvider == "" {
		wants[0].candidates = []string{primary.Name + "." + primary.Namespace + ".ovn", primary.Name + "." + primary.Namespace}
		wants[0].attachment = primary.Namespace + "/" + primary.Name
	}
	for i, a := range atts {
		ifName := a.Interface
		if ifName == "" {
			ifName = fmt.Sprintf("net%d", i+1)
		}
		base := []string{a.Name + "." + a.Namespace + ".ovn", a.Name + "." + a.Namespace}
		var cands []string
		if counts[a.Namespace+"/"+a.Name] > 1 && a.Interface != "" {
			// kube-ovn appends the interface name when one NAD is attached more than once.
			for _, b := range base {
				cands = append(cands, b+"."+a.Interface)
			}
		}
		wants = append(wants, want{name: ifName, attachment: a.Namespace + "/" + a.Name, candidates: append(cands, base...)})
	}
	for _, w := range wants {
		provider := ""
		for _, c := range w.candidates {
			if ann[fmt.Sprintf(allocatedTemplate, c)] == "true" {
				provider = c
				break
			}
		}
		if provider == "" {
			return nil, fmt.Sprintf("%s of %s", fmt.Sprintf(allocatedTemplate, w.candidates[0]), w.name), nil
		}
		nic, err := nicFromAnnotations(ann, w.name, provider)
		if err != nil {
			return nil, "", err
		}
		nic.Attachment = w.attachment
		if nic.DefaultRoute && isOVNProvider(provider) && ann[fmt.Sprintf(routedTemplate, provider)] != "true" {
			// kube-ovn's CNI waits for the route too before it configures a default-route NIC.
			return nil, fmt.Sprintf(routedTemplate, provider), nil
		}
		nics = append(nics, nic)
	}
	return nics, "", nil
}

func isOVNProvider(p string) bool {
	if p == "" || p == ovnProvider {
		return true
	}
	f := strings.Split(p, ".")
	return len(f) == 3 && f[2] == ovnProvider
}

func nicFromAnnotations(ann map[string]string, name, provider string) (NIC, error) {
	get := func(tmpl string) string { return strings.TrimSpace(ann[fmt.Sprintf(tmpl, provider)]) }
	nic := NIC{Name: name, Provider: provider, LogicalSwitch: get(logicalSwitchTemplate)}
	wrap := func(key string, err error) error {
		return fmt.Errorf("annotation %s: %w", fmt.Sprintf(key, provider), err)
	}
	ips, cidrs := splitList(get(ipAddressTemplate)), splitList(get(cidrTemplate))
	if len(ips) == 0 {
		return NIC{}, wrap(ipAddressTemplate, fmt.Errorf("no address"))
	}
	for _, s := range ips {
		addr, err := netip.ParseAddr(s)
		if err != nil {
			return NIC{}, wrap(ipAddressTemplate, err)
		}
		bits := -1
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Contains(addr) {
				bits = p.Bits()
			}
		}
		if bits < 0 {
			return NIC{}, wrap(cidrTemplate, fmt.Errorf("no CIDR in %q contains %s", get(cidrTemplate), addr))
		}
		nic.IPs = append(nic.IPs, netip.PrefixFrom(addr, bits))
	}
	if m := get(macAddressTemplate); m != "" {
		mac, err := net.ParseMAC(m)
		if err != nil {
			return NIC{}, wrap(macAddressTemplate, err)
		}
		nic.MAC = mac
	}
	for _, g := range splitList(get(gatewayTemplate)) {
		a, err := netip.ParseAddr(g)
		if err != nil {
			return NIC{}, wrap(gatewayTemplate, err)
		}
		nic.Gateways = append(nic.Gateways, a)
	}
	switch get(defaultRouteTemplate) {
	case "true":
		nic.DefaultRoute = true
	case "false":
	default:
		nic.DefaultRoute = name == "eth0"
	}
	if s := get(routesTemplate); s != "" {
		var rs []struct {
			Dst string `json:"dst"`
			Gw  string `json:"gw"`
		}
		if err := json.Unmarshal([]byte(s), &rs); err != nil {
			return NIC{}, wrap(routesTemplate, err)
		}
		for _, r := range rs {
			var rt Route
			var err error
			if r.Gw != "" {
				if rt.Via, err = netip.ParseAddr(r.Gw); err != nil {
					return NIC{}, wrap(routesTemplate, err)
				}
			}
			switch {
			case r.Dst != "":
				if rt.Dst, err = netip.ParsePrefix(r.Dst); err != nil {
					return NIC{}, wrap(routesTemplate, err)
				}
			case rt.Via.Is6():
				rt.Dst = netip.MustParsePrefix("::/0")
			default:
				rt.Dst = netip.MustParsePrefix("0.0.0.0/0")
			}
			nic.Routes = append(nic.Routes, rt)
		}
	}
	return nic, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Iface is the NIC as it is configured in namespace netns once it exists there (what kube-ovn's
// CNI does: MAC, addresses, up, the default route via the gateway, then the annotated routes).
func (nic NIC) Iface(netns string) netlab.Iface {
	return netlab.Iface{Netns: netns, Name: nic.Name, MAC: nic.MAC, IPs: nic.IPs, Gateways: nic.Gateways,
		DefaultRoute: nic.DefaultRoute, Routes: nic.Routes}
}

// networkStatus is the k8s.v1.cni.cncf.io/network-status annotation multus writes once the
// NICs exist (kube-ovn reads it in non-primary-CNI mode to find the gateway's interfaces).
func networkStatus(nics []NIC) (string, error) {
	type entry struct {
		Name      string   `json:"name"`
		Interface string   `json:"interface"`
		IPs       []string `json:"ips,omitempty"`
		MAC       string   `json:"mac,omitempty"`
		Default   bool     `json:"default,omitempty"`
		DNS       struct{} `json:"dns"`
	}
	out := make([]entry, 0, len(nics))
	for _, nic := range nics {
		e := entry{Name: nic.Attachment, Interface: nic.Name, Default: nic.Name == "eth0"}
		if e.Name == "" {
			e.Name = "kube-ovn"
		}
		for _, p := range nic.IPs {
			e.IPs = append(e.IPs, p.Addr().String())
		}
		if nic.MAC != nil {
			e.MAC = nic.MAC.String()
		}
		out = append(out, e)
	}
	b, err := json.Marshal(out)
	return string(b), err
}
