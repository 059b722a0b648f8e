package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// The default Vpc's network as kube-ovn-controller makes it with the lab's flags: every Pod of a
// namespace not bound to a custom Vpc gets an address of Subnet ovn-default (vpcgw's own Pods,
// once installed from the chart, among them), behind Vpc ovn-cluster's router.
const (
	DefaultSubnet    = kubeovnrun.DefaultLogicalSwitch
	DefaultCIDR      = kubeovnrun.DefaultCIDR
	DefaultGatewayIP = kubeovnrun.DefaultGatewayIP
)

// clusterRouter plays, for the ovn-default Subnet, what a node gives Pods of the default network:
// the default Vpc's router (its port on ovn-default holds the Subnet's gateway), and behind it
// the node, where kube-proxy serves the Services whose endpoints are the node itself (the API
// server's Service `kubernetes`). The node of the lab is the host's loopback, which a Pod's
// namespace cannot reach, so the Service is served in the router's namespace by a listener on
// its ClusterIP that carries each connection to the endpoint on the host (serveHostService). The
// other direction, the API server dialling a Pod (admission webhooks, through
// --enable-aggregator-routing), takes the API server's egress selector: an HTTP CONNECT proxy
// (egressProxy) that dials Pod addresses from the router's namespace.
type clusterRouter struct {
	netns string
	log   logr.Logger

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]struct{} // open tunnels, closed by stop
	wg        sync.WaitGroup
}

// configurePodAccess sets what the API server needs for Pods of the default network, as a
// cluster's API server has it: the ServiceAccount admission plugin (every Pod gets its projected
// token, CA and namespace, which client-go's in-cluster configuration reads; envtest disables it
// as it runs no token controller), webhooks and the kubelet reached through the egress selector's
// cluster network (the lab's egress proxy), and Services resolved to their endpoints
// (--enable-aggregator-routing), as there is no kube-proxy on the API server's host.
func (c *Cluster) configurePodAccess(api *envtest.Arguments) error {
	c.egressSocket = filepath.Join(c.dir, "egress.sock")
	config := filepath.Join(c.dir, "egress-selector.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(egressSelectorConfig, c.egressSocket)), 0o600); err != nil {
		return err
	}
	api.Disable("disable-admission-plugins")
	api.Set("egress-selector-config-file", config)
	api.Set("enable-aggregator-routing", "true")
	return nil
}

// egressSelectorConfig routes the API server's connections to the cluster network (webhooks,
// the kubelet) through an HTTP CONNECT proxy on a unix socket (%s).
const egressSelectorConfig = `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`

// startPodNetwork builds the default network's router, serves the API server's Service to Pods
// and the API server's egress to Pods.
func (c *Cluster) startPodNetwork(ctx context.Context) error {
	var err error
	if c.router, err = c.network.newClusterRouter(c.opts.Log.WithName("cluster-router")); err != nil {
		return fmt.Errorf("the default network's router: %w", err)
	}
	if err := c.router.egressProxy(c.egressSocket); err != nil {
		return err
	}
	var svc corev1.Service
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, &svc); err != nil {
		return fmt.Errorf("the API server's Service: %w", err)
	}
	vip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || len(svc.Spec.Ports) == 0 {
		return fmt.Errorf("the API server's Service default/kubernetes has ClusterIP %q and ports %v", svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	apiURL, err := url.Parse(c.Config.Host)
	if err != nil {
		return err
	}
	if err := c.router.serveHostService(vip, int(svc.Spec.Ports[0].Port), apiURL.Host); err != nil {
		return err
	}
	return c.serveOVNNB(ctx)
}

// OVNNBService is kube-ovn's Service of the OVN northbound database in its namespace, which its
// install makes and the user guide reads for the chart's ovn.nbAddr (tcp:<its ClusterIP>:6641).
const (
	OVNNBService = "ovn-nb"
	OVNNBPort    = 6641
)

// OVNNBClusterIP is the ClusterIP of kube-ovn's Service ovn-nb.
func (c *Cluster) OVNNBClusterIP(ctx context.Context) (string, error) {
	var svc corev1.Service
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: OVNNBService}, &svc); err != nil {
		return "", fmt.Errorf("kube-ovn's Service %s/%s: %w", kubeovnrun.Namespace, OVNNBService, err)
	}
	return svc.Spec.ClusterIP, nil
}

// serveOVNNB makes kube-ovn's Service ovn-nb, as kube-ovn's install does, and serves it to the
// default network from the lab's NB on the host, so that vpcgw installed from the chart in the
// lab reaches OVN as it does in a cluster.
func (c *Cluster) serveOVNNB(ctx context.Context) error {
	target, ok := strings.CutPrefix(c.OVN.NBAddr(), "tcp:")
	if !ok {
		return fmt.Errorf("the lab's OVN NB listens on %q, not on a tcp: address", c.OVN.NBAddr())
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubeovnrun.Namespace, Name: OVNNBService, Labels: map[string]string{"app": "ovn-central"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "ovn-nb", Protocol: corev1.ProtocolTCP, Port: OVNNBPort}}},
	}
	if err := c.Client.Create(ctx, svc); err != nil {
		return fmt.Errorf("kube-ovn's Service %s/%s: %w", kubeovnrun.Namespace, OVNNBService, err)
	}
	vip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return fmt.Errorf("kube-ovn's Service %s/%s has ClusterIP %q", kubeovnrun.Namespace, OVNNBService, svc.Spec.ClusterIP)
	}
	return c.router.serveHostService(vip, OVNNBPort, target)
}

// firstServiceIP is the ClusterIP the API server gives its own Service: the first address of
// the Service CIDR.
func firstServiceIP(cidr string) netip.Addr {
	return netip.MustParsePrefix(cidr).Masked().Addr().Next()
}

// newClusterRouter creates the router's namespace and plugs it into the ovn-default switch with
// the Subnet's gateway address.
func (t *network) newClusterRouter(log logr.Logger) (*clusterRouter, error) {
	ns, err := t.net.AddNetns("dvr")
	if err != nil {
		return nil, err
	}
	sw, err := t.switchNetns(DefaultSubnet)
	if err != nil {
		return nil, err
	}
	prefix := netip.MustParsePrefix(DefaultCIDR)
	if err := t.net.VethToBridge(ns, "ovn0", sw, "dvr", "br0"); err != nil {
		return nil, err
	}
	if err := t.net.AddAddr(ns, "ovn0", DefaultGatewayIP+"/"+strconv.Itoa(prefix.Bits())); err != nil {
		return nil, err
	}
	t.fixed = append(t.fixed,
		Netns{Name: ns, Role: RoleRouter, Addresses: map[string]string{"ovn0": DefaultGatewayIP + "/" + strconv.Itoa(prefix.Bits())}},
		Netns{Name: sw, Role: RoleSwitch, Addresses: map[string]string{}})
	return &clusterRouter{netns: ns, log: log, conns: map[net.Conn]struct{}{}}, nil
}

// serveHostService serves a Service whose endpoint is on the host, as kube-proxy does on a node
// for a Service backed by the node (hostNetwork endpoints, the API server): connections to
// vip:port from the default network reach target on the host. TCP only.
func (r *clusterRouter) serveHostService(vip netip.Addr, port int, target string) error {
	if _, err := netlab.Run("ip", "-n", r.netns, "addr", "add", vip.String()+"/32", "dev", "lo"); err != nil {
		return err
	}
	l, err := netlab.ListenInNetns(r.netns, "tcp", net.JoinHostPort(vip.String(), strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("serving %s:%d in %s: %w", vip, port, r.netns, err)
	}
	r.mu.Lock()
	r.listeners = append(r.listeners, l)
	r.mu.Unlock()
	r.wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			r.wg.Go(func() {
				up, err := net.DialTimeout("tcp", target, 10*time.Second)
				if err != nil {
					r.log.V(1).Info("host service: endpoint unreachable", "vip", vip, "port", port, "target", target, "err", err)
					_ = conn.Close()
					return
				}
				r.tunnel(conn, up)
			})
		}
	})
	return nil
}

// egressProxy serves the API server's egress selector for the cluster network
// (--egress-selector-config-file, HTTPConnect over a unix socket): each CONNECT is dialled from
// where its target lives, the host for loopback (the kubelet's server, the lab's own webhook) and
// the default network's router for Pod addresses (webhook Pods installed from the chart).
func (r *clusterRouter) egressProxy(socket string) error {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	r.mu.Lock()
	r.listeners = append(r.listeners, l)
	r.mu.Unlock()
	srv := &http.Server{Handler: http.HandlerFunc(r.connect), ReadHeaderTimeout: 10 * time.Second}
	r.wg.Go(func() { _ = srv.Serve(l) })
	return nil
}

func (r *clusterRouter) connect(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodConnect {
		http.Error(w, "only CONNECT is served here", http.StatusMethodNotAllowed)
		return
	}
	host, _, err := net.SplitHostPort(req.Host)
	if err != nil {
		http.Error(w, "CONNECT target must be host:port", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	var up net.Conn
	if addr, perr := netip.ParseAddr(host); perr == nil && !addr.IsLoopback() {
		up, err = netlab.DialInNetns(ctx, r.netns, "tcp", req.Host)
	} else {
		up, err = (&net.Dialer{}).DialContext(ctx, "tcp", req.Host)
	}
	if err != nil {
		r.log.V(1).Info("egress proxy: dial failed", "target", req.Host, "err", err)
		http.Error(w, fmt.Sprintf("dialing %s: %v", req.Host, err), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		_ = up.Close()
		return
	}
	r.tunnel(&bufferedConn{Conn: conn, r: buf.Reader}, up)
}

// tunnel splices a and b, and lets stop end them.
func (r *clusterRouter) tunnel(a, b net.Conn) {
	r.mu.Lock()
	if r.conns == nil { // stopped
		r.mu.Unlock()
		_ = a.Close()
		_ = b.Close()
		return
	}
	r.conns[a], r.conns[b] = struct{}{}, struct{}{}
	r.mu.Unlock()
	splice(a, b)
	r.mu.Lock()
	delete(r.conns, a)
	delete(r.conns, b)
	r.mu.Unlock()
}

// stop closes the listeners and waits for the connections to end.
func (r *clusterRouter) stop() {
	r.mu.Lock()
	for _, l := range r.listeners {
		_ = l.Close()
	}
	r.listeners = nil
	for c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}

// bufferedConn is a hijacked connection whose reads first drain what the HTTP server buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// splice copies both ways; when either side ends it closes both (the protocols carried, TLS and
// HTTP, never half-close a connection and wait for more).
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	_ = a.Close()
	_ = b.Close()
	<-done
}
