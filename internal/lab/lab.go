// Package lab runs vpcgw end to end on one machine: a real kube-apiserver and etcd (envtest), the
// kube-ovn objects, a gateway, backends and an external client in network namespaces, and the
// controller programming the gateway's agent through the local transport (SPEC O1).
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/config/crd"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/labbin"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// kubeOVNDirEnv names the kube-ovn assets directory, as make sets it.
const kubeOVNDirEnv = "VPCGW_KUBEOVN"

// Options configure a lab.
type Options struct {
	// Bins are the binaries run inside the namespaces: Agent (vpcgw-agent) as the gateway's
	// agent, Lab (vpcgw-lab) as echo servers and probes. The controller runs in process, so
	// Vpcgw is not needed here (the bench's cold start runs it).
	Bins labbin.Binaries
	// AssetsDir holds kube-apiserver and etcd (KUBEBUILDER_ASSETS).
	AssetsDir string
	// KubeOVNDir holds kube-ovn's CRDs (VPCGW_KUBEOVN, filled by hack/tools/kubeovn/build.sh): the
	// lab installs kube-ovn's own, as a cluster has them (SPEC K1).
	KubeOVNDir string
	Log        logr.Logger
	// ServiceCIDR is the API server's --service-cluster-ip-range (default ServiceCIDR, a /24:
	// benchmarks with thousands of Services need a wider one).
	ServiceCIDR string
	// Controller, when set, adjusts the in-process controller's options before it starts
	// (benchmarks: OnProgrammed, MinSyncInterval, gates).
	Controller func(*controller.Options)
	// NoController leaves the in-process controller off (a benchmark runs its own).
	NoController bool
}

// Lab is a running lab.
type Lab struct {
	opts   Options
	env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	net    *netlab.Lab
	topo   *topology
	dir    string
	nb     *nbServer

	cancel   context.CancelFunc
	runCtx   context.Context
	ctrlOpts controller.Options
	kcm      *kcm.Process
	stopCtrl context.CancelFunc
	ctrlDone chan struct{}
	wg       sync.WaitGroup
	errMu    sync.Mutex
	errs     []error

	// Backends maps a backend pod name to its namespace and address.
	Backends map[string]Backend
}

// Backend is one lab backend.
type Backend struct {
	Pod   string `json:"pod"`
	Netns string `json:"netns"`
	IP    string `json:"ip"`
}

// Description is the machine-readable description of a running lab (SPEC O1).
type Description struct {
	Kubeconfig string  `json:"kubeconfig"`
	Namespaces []Netns `json:"namespaces"`
	Vpc        string  `json:"vpc"`
	Subnets    struct {
		VPC      string `json:"vpc"`
		External string `json:"external"`
	} `json:"subnets"`
	Gateway      string             `json:"gateway"`
	EIPs         map[string]string  `json:"eips"` // name -> address
	Backends     map[string]Backend `json:"backends"`
	DemoService  string             `json:"demoService"`
	AddBackendUI string             `json:"addBackend"`
}

// Start brings the whole lab up: API server, CRDs, namespaces, kube-ovn objects, backends, the
// demo Service, the lab's EndpointSlice controller and the vpcgw controller.
func Start(ctx context.Context, opts Options) (l *Lab, err error) {
	if opts.Bins.Agent == "" || opts.Bins.Lab == "" {
		return nil, errors.New("lab: the vpcgw-agent and vpcgw-lab binaries are required")
	}
	if err := netlab.Available(); err != nil {
		return nil, err
	}
	if opts.KubeOVNDir == "" {
		opts.KubeOVNDir = os.Getenv(kubeOVNDirEnv)
	}
	crds, err := crd.WithKubeOVN(opts.KubeOVNDir)
	if err != nil {
		return nil, fmt.Errorf("loading kube-ovn's CRDs (run hack/tools/kubeovn/build.sh, or make kubeovn): %w", err)
	}
	l = &Lab{opts: opts, Backends: map[string]Backend{}}
	defer func() {
		if err != nil {
			_ = l.Stop()
		}
	}()
	if l.dir, err = os.MkdirTemp("", "vpcgw-lab-"); err != nil {
		return nil, err
	}

	if opts.ServiceCIDR == "" {
		opts.ServiceCIDR = ServiceCIDR
		l.opts.ServiceCIDR = ServiceCIDR
	}
	l.env = &envtest.Environment{
		BinaryAssetsDirectory: opts.AssetsDir,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
		ErrorIfCRDPathMissing: true,
	}
	l.env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", opts.ServiceCIDR)
	opts.Log.Info("starting kube-apiserver and etcd", "assets", opts.AssetsDir)
	if l.Config, err = l.env.Start(); err != nil {
		return nil, fmt.Errorf("starting the API server (are kube-apiserver and etcd in %q? run hack/tools/build-assets.sh): %w", opts.AssetsDir, err)
	}
	scheme, err := controller.Scheme()
	if err != nil {
		return nil, err
	}
	if l.Client, err = client.New(l.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}

	if l.nb, err = startNB(l.dir); err != nil {
		return nil, fmt.Errorf("starting the OVN northbound DB: %w", err)
	}
	// kube-ovn creates a logical router per VPC, named like the Vpc, with the Vpc's static route
	// to the gateway: OVN routes before it applies the VIP policies (SPEC V3).
	if _, err := l.nb.nbctl("lr-add", VpcName, "--", "lr-route-add", VpcName, "0.0.0.0/0", GatewayLanIP); err != nil {
		return nil, err
	}
	if l.net, err = netlab.New("vl"); err != nil {
		return nil, err
	}
	if l.topo, err = buildTopology(l.net, opts.ServiceCIDR); err != nil {
		return nil, err
	}
	if err := createKubeOVNObjects(ctx, l.Client, l.topo.gw); err != nil {
		return nil, err
	}
	if err := l.AddEIP(ctx, EIPName, EIPAddress, true); err != nil {
		return nil, err
	}
	// The demo's namespace, and vpcgw's own, where a controller publishes its status (SPEC O2).
	for _, ns := range []string{DemoNamespace, status.DefaultNamespace} {
		if err := l.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	for _, name := range []string{"web-be1", "web-be2"} {
		if _, err := l.AddBackend(ctx, DemoNamespace, name, DemoService); err != nil {
			return nil, err
		}
	}
	if err := l.Client.Create(ctx, demoService()); err != nil {
		return nil, fmt.Errorf("creating Service %s/%s: %w", DemoNamespace, DemoService, err)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	if err := l.startEndpointSlices(); err != nil {
		return nil, err
	}
	reader, err := ovn.NewWriter(runCtx, ovn.Config{Address: l.nb.addr()}, opts.Log.WithName("translator-nb"))
	if err != nil {
		return nil, err
	}
	l.run("translator", func() error {
		defer reader.Close()
		return RunVIPRouteTranslator(runCtx, reader, VpcName, l.topo.router, opts.Log.WithName("translator"))
	})
	ctrlOpts := controller.Options{
		Flags:       controller.Flags{EnableGwNftableLbSvc: true, EnableGwNftableSvcClusterIP: true},
		NB:          ovn.Config{Address: l.nb.addr()},
		Dialer:      &transport.LocalNetns{AgentCommand: []string{opts.Bins.Agent}, Netns: transport.NetnsFromPods(l.Client), Log: opts.Log.WithName("transport")},
		MetricsAddr: "0",
		HealthAddr:  "0",
	}
	if opts.Controller != nil {
		opts.Controller(&ctrlOpts)
	}
	l.ctrlOpts, l.runCtx = ctrlOpts, runCtx
	if opts.NoController {
		return l, nil
	}
	l.StartController()
	return l, nil
}

// controllerStarts numbers the in-process controllers.
var controllerStarts atomic.Int64

// StartController starts the in-process controller (again, after StopController).
func (l *Lab) StartController() {
	ctrlCtx, stopCtrl := context.WithCancel(l.runCtx)
	done := make(chan struct{})
	l.stopCtrl, l.ctrlDone = stopCtrl, done
	opts := l.ctrlOpts
	opts.Name = fmt.Sprintf("vpcgw-gateway-%d", controllerStarts.Add(1)) // one name per controller in a process
	l.run("controller", func() error {
		defer close(done)
		return controller.Run(ctrlCtx, l.Config, opts, l.opts.Log.WithName("controller"))
	})
}

// StopController stops the in-process controller (and with it the gateway's agent) and waits
// until it has ended; the rest of the lab keeps running. A benchmark then runs its own
// controller against the lab (Describe gives a kubeconfig; the gateway pod names its netns).
func (l *Lab) StopController() {
	if l.stopCtrl == nil {
		return
	}
	l.stopCtrl()
	<-l.ctrlDone
	l.stopCtrl = nil
}

// NB is the address of the lab's OVN northbound DB.
func (l *Lab) NB() string { return l.nb.addr() }

func (l *Lab) run(name string, f func() error) {
	l.wg.Go(func() {
		if err := f(); err != nil {
			l.errMu.Lock()
			l.errs = append(l.errs, fmt.Errorf("%s: %w", name, err))
			l.errMu.Unlock()
			l.opts.Log.Error(err, "lab component stopped", "component", name)
		}
	})
}

// AddBackend creates a backend: a namespace on the VPC switch running an echo server that answers
// with the pod's name, and its Running, Ready Pod labelled app=<app>.
func (l *Lab) AddBackend(ctx context.Context, namespace, pod, app string) (Backend, error) {
	ns, ip, err := l.topo.addBackend(pod)
	if err != nil {
		return Backend{}, err
	}
	if _, err := l.net.StartEcho(ns, []string{l.opts.Bins.Lab, "echo"}, pod, fmt.Sprintf("%s:%d", ip, BackendPort)); err != nil {
		return Backend{}, fmt.Errorf("starting echo server of %s: %w", pod, err)
	}
	if err := createBackendPod(ctx, l.Client, namespace, pod, app, ip); err != nil {
		return Backend{}, err
	}
	b := Backend{Pod: pod, Netns: ns, IP: ip}
	l.Backends[pod] = b
	return b, nil
}

// AddEIP creates an IptablesEIP of the lab's gateway. A ready EIP is bound to the gateway's net1
// first, as kube-ovn does; an EIP that is not ready waits for MarkEIPReady.
func (l *Lab) AddEIP(ctx context.Context, name, ip string, ready bool) error {
	if ready {
		if err := l.topo.addEIP(ip); err != nil {
			return err
		}
	}
	return createEIP(ctx, l.Client, name, ip, ready)
}

// MarkEIPReady binds the EIP's address to net1 and marks it Ready (kube-ovn's `eip-add`).
func (l *Lab) MarkEIPReady(ctx context.Context, name string) error {
	var eip kubeovnv1.IptablesEIP
	if err := l.Client.Get(ctx, client.ObjectKey{Name: name}, &eip); err != nil {
		return err
	}
	if err := l.topo.addEIP(eip.Spec.V4ip); err != nil {
		return err
	}
	eip.Status.Ready, eip.Status.IP = true, eip.Spec.V4ip
	return l.Client.Status().Update(ctx, &eip)
}

// ExternalClient is the namespace of the external client.
func (l *Lab) ExternalClient() string { return l.topo.ext }

// VPCClient is the namespace of the client inside the VPC, behind the router.
func (l *Lab) VPCClient() string { return l.topo.vpcClient }

// RouterNetns is the namespace of the VPC router.
func (l *Lab) RouterNetns() string { return l.topo.router }

// LRPolicyList is `ovn-nbctl lr-policy-list <vpc>` against the lab's NB DB.
func (l *Lab) LRPolicyList() (string, error) { return l.nb.nbctl("lr-policy-list", VpcName) }

// GatewayNetns is the namespace of the gateway instance.
func (l *Lab) GatewayNetns() string { return l.topo.gw }

// WaitIngress waits until the Service publishes a LoadBalancer ingress and returns its IP.
func (l *Lab) WaitIngress(ctx context.Context, ns, name string, timeout time.Duration) (string, error) {
	var ip string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var svc corev1.Service
		if err := l.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			ip = svc.Status.LoadBalancer.Ingress[0].IP
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the ingress of %s/%s: %w (component errors: %v)", ns, name, err, l.Errors())
	}
	return ip, nil
}

// Probe sends n requests from namespace ns to addr ("ip:port") over proto ("tcp" or "udp"), each
// a new flow, and counts the answers per backend name.
func (l *Lab) Probe(ns, proto, addr string, n int) (netlab.ProbeResult, error) {
	return l.net.Probe(ns, []string{l.opts.Bins.Lab, "probe"}, netlab.ProbeOptions{Target: addr, Proto: proto, Count: n})
}

// WaitReachable waits until one request from ns to target is answered (routes and rules
// converge asynchronously after the ingress is published).
func (l *Lab) WaitReachable(ctx context.Context, ns, proto, target string, timeout time.Duration) error {
	var last netlab.ProbeResult
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		res, err := l.net.Probe(ns, []string{l.opts.Bins.Lab, "probe"}, netlab.ProbeOptions{Target: target, Proto: proto, Count: 1, Timeout: 500 * time.Millisecond})
		if err != nil {
			return false, err
		}
		last = res
		return res.Total() == 1, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last.LastError)
	}
	return nil
}

// NftTable returns `nft list table ip kube-ovn` from the gateway.
func (l *Lab) NftTable() (string, error) {
	out, err := l.net.Exec(l.topo.gw, "nft", "list", "table", "ip", "kube-ovn")
	return string(out), err
}

// Errors returns what lab components reported when they stopped.
func (l *Lab) Errors() []error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return append([]error(nil), l.errs...)
}

// Describe writes the lab's description (with a kubeconfig for an admin user) into the lab's
// directory and returns the paths of the description and of the kubeconfig.
func (l *Lab) Describe() (descPath, kubeconfig string, err error) {
	user, err := l.env.AddUser(envtest.User{Name: "lab-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", "", fmt.Errorf("creating the lab's admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", "", err
	}
	kcPath := filepath.Join(l.dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return "", "", err
	}
	d := Description{
		Kubeconfig: kcPath, Namespaces: l.topo.namespaces, Vpc: VpcName, Gateway: GatewayName,
		EIPs: map[string]string{EIPName: EIPAddress}, Backends: l.Backends, DemoService: DemoNamespace + "/" + DemoService,
		AddBackendUI: "Go API: (*lab.Lab).AddBackend(ctx, namespace, pod, app) in internal/lab creates a backend network namespace on the VPC switch, " +
			"its HTTP/UDP echo server and its Running, Ready Pod labelled app=<app>; kube-controller-manager then puts it in the EndpointSlices of matching Services",
	}
	d.Subnets.VPC, d.Subnets.External = VpcSubnetName, ExternalSubnetName
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", "", err
	}
	p := filepath.Join(l.dir, "lab.json")
	return p, kcPath, os.WriteFile(p, append(data, '\n'), 0o644)
}

// Stop ends the controller, every process and namespace the lab started, and the API server.
func (l *Lab) Stop() error {
	var errs []error
	if l.cancel != nil {
		l.cancel()
		l.wg.Wait()
	}
	l.kcm.Stop()
	if l.net != nil {
		errs = append(errs, l.net.Cleanup())
	}
	if l.nb != nil {
		l.nb.stop()
	}
	if l.env != nil && l.Config != nil {
		errs = append(errs, l.env.Stop())
	}
	if l.dir != "" {
		errs = append(errs, os.RemoveAll(l.dir))
	}
	return errors.Join(errs...)
}
