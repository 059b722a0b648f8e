// Package cluster runs on one machine what a kube-ovn cluster with vpcgw runs, with the real
// parts wherever they can run here (SPEC O1): kube-apiserver and etcd, kube-controller-manager,
// kube-ovn-controller v1.16.2 with its own CRDs and OVN NB/SB databases and ovn-northd, the vpcgw
// controller and webhook as their own processes under their own identities and the shipped RBAC,
// the webhook registered over TLS as shipped. A lab node plays the kubelet (Pods as network
// namespaces, the kubelet's exec API) and runs an OVN chassis (OVS on the userspace datapath and
// ovn-controller, kube-ovn's build) that carries the custom Vpc's traffic by OVN's own flows; the
// external network and, for now, the default network are bridges. The lab creates only what a
// kube-ovn user creates; kube-ovn makes the gateway, its Pod, the addresses and the EIP's
// status.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/config/crd"
	"github.com/vpcgw/vpcgw/deploy/manifests"
	deploywebhook "github.com/vpcgw/vpcgw/deploy/webhook"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/labbin"
	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovsnode"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/webhook"
)

// Identities of the processes, as a real install names them.
const (
	// InstallNamespace is where the lab installs vpcgw, as the manifests and install.sh do.
	InstallNamespace = status.DefaultNamespace
	NodeName         = "lab-node"
	ControllerUser   = webhook.DefaultControllerUser // from the chart's service account
	WebhookUser      = "system:serviceaccount:" + InstallNamespace + ":vpcgw-webhook"
	KubeOVNUser      = webhook.DefaultKubeOVNUser
)

// Options configure a lab cluster.
type Options struct {
	// Bins are the binaries the lab runs: vpcgw for the controller and webhook processes,
	// vpcgw-agent for the agent in kube-ovn's gateway container, vpcgw-lab for echo backends,
	// probes and kube-ovn-controller's mount helper.
	Bins labbin.Binaries
	// AssetsDir holds kube-apiserver, etcd and kube-controller-manager (KUBEBUILDER_ASSETS);
	// KubeOVNDir what hack/tools/kubeovn/build.sh gathers (VPCGW_KUBEOVN).
	AssetsDir, KubeOVNDir string
	Log                   logr.Logger
	// KubeOVNArgs are extra kube-ovn-controller flags. The lab runs it with --enable-lb=false: the
	// gateway serves ClusterIPs (SPEC F2); the K4 tests turn it on.
	KubeOVNArgs []string
	// ControllerArgs replace the vpcgw controller's feature flags (default: both gates on,
	// --enable-lb=false, as kube-ovn runs).
	ControllerArgs []string
	// ControllerEnv are added to the vpcgw controller's environment (e.g. GOMEMLIMIT, as the
	// chart sets it from the container's memory limit).
	ControllerEnv []string
	// NoDemo leaves the demo objects (EIP, Deployment, Service) out.
	NoDemo bool
	// GatewayNamePrefix, when set, is kube-ovn's natGwNamePrefix (ConfigMap ovn-vpc-nat-config),
	// set as an operator would before creating gateways (SPEC K5).
	GatewayNamePrefix string
	// NoVpcgw leaves vpcgw out: no CRD, RBAC, webhook or controller of the lab's. The caller
	// installs it as an operator does (helm install of the release's chart, install.sh), and
	// the lab node runs its Pods from Images.
	NoVpcgw bool
	// Images are the lab node's images: repository to an OCI image layout or archive (the
	// release's vpcgw-<version>.oci.tar). labnode.Config.Images.
	Images map[string]string
	// Agnhost adds Kubernetes' agnhost (AgnhostImage, built by make assets) to the lab node's
	// images: the backend image of the user guide's walkthrough.
	Agnhost bool
}

// Cluster is a running lab cluster.
type Cluster struct {
	opts Options
	dir  string
	env  *envtest.Environment

	// Config and Client are an admin's (system:masters); Kubeconfig is its file.
	Config     *rest.Config
	Client     client.Client
	Kubeconfig string

	OVN     *kubeovnrun.OVN
	KubeOVN *kubeovnrun.Controller
	// Chassis is the lab node's OVN chassis (ovs-vswitchd and ovn-controller): it carries the
	// custom Vpc's traffic.
	Chassis *ovsnode.Chassis
	Node    *labnode.Node
	kcm     *kcm.Process
	net     *netlab.Lab
	network *network
	// router is the default network's router and the node's Service proxy (podnet.go).
	router *clusterRouter
	// caFile is the cluster CA (kube-controller-manager publishes it as kube-root-ca.crt);
	// egressSocket the API server's egress proxy for the cluster network.
	caFile, egressSocket string

	Webhook, Controller *process
	// metricsAddr is where the running controller serves /metrics (plain HTTP, loopback only).
	metricsAddr         string
	controllerArgs      []string
	extraControllerArgs []string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	errs   []error
}

// Start brings everything up and waits until kube-ovn's gateway Pod runs (and, with the demo,
// until the demo Service has its EXTERNAL-IP).
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.AssetsDir == "" || opts.KubeOVNDir == "" {
		return nil, errors.New("cluster: AssetsDir and KubeOVNDir are required")
	}
	if err := opts.Bins.Check(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := netlab.Available(); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, tail(c.Logs(), 60))
			_ = c.Stop()
		}
	}()
	// A short directory: unix socket paths are limited to 108 bytes.
	if c.dir, err = os.MkdirTemp("", "vcl-"); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx); err != nil {
		return nil, err
	}
	if err := kubeovnrun.InstallCluster(ctx, c.Client, opts.KubeOVNDir); err != nil {
		return nil, err
	}
	if opts.GatewayNamePrefix != "" {
		var cm corev1.ConfigMap
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: kubeovnrun.NatConfigMap}, &cm); err != nil {
			return nil, err
		}
		cm.Data[model.GatewayConfigNamePrefix] = opts.GatewayNamePrefix
		if err := c.Client.Update(ctx, &cm); err != nil {
			return nil, fmt.Errorf("setting kube-ovn's natGwNamePrefix: %w", err)
		}
	}
	if c.OVN, err = kubeovnrun.StartOVN(c.dir, opts.KubeOVNDir); err != nil {
		return nil, err
	}
	if c.net, err = netlab.New("vc"); err != nil {
		return nil, err
	}
	if c.network, err = newNetwork(c.net); err != nil {
		return nil, err
	}
	if err := c.startPodNetwork(ctx); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel

	nodeCfg, err := c.userConfig("system:node:"+NodeName, "system:masters", "system:nodes")
	if err != nil {
		return nil, err
	}
	images, err := c.nodeImages()
	if err != nil {
		return nil, err
	}
	if c.Node, err = labnode.Start(runCtx, labnode.Config{
		NodeName: NodeName, REST: nodeCfg, Network: c.network, InternalIP: netip.MustParseAddr("127.0.0.1"),
		NetnsPrefix: "vp", Log: opts.Log.WithName("labnode"), Images: images,
	}); err != nil {
		return nil, fmt.Errorf("starting the lab node: %w", err)
	}
	if err := kubeovnrun.AddNode(ctx, c.Client, c.OVN, kubeovnrun.Node{Name: NodeName, Address: "127.0.0.1", KubeletPort: int32(c.Node.ExecPort())}); err != nil {
		return nil, err
	}
	// The node's OVN chassis, as kube-ovn's ovs-ovn Pod runs it, under the system-id the Node's
	// chassis annotation names.
	if c.Chassis, err = ovsnode.Start(ctx, ovsnode.Options{
		Dir: filepath.Join(c.dir, "ch"), Node: NodeName, SystemID: kubeovnrun.ChassisName(NodeName),
		SBAddr: c.OVN.SBAddr(), TakeOverEncap: true, NetnsPrefix: "vc",
		Logf: func(format string, args ...any) { opts.Log.V(1).Info(fmt.Sprintf(format, args...)) },
	}); err != nil {
		return nil, fmt.Errorf("the lab node's OVN chassis: %w", err)
	}
	c.network.useChassis(c.Chassis)
	kcmKC, err := kubeovnrun.AdminKubeconfig(c.env, "system:kube-controller-manager")
	if err != nil {
		return nil, err
	}
	if c.kcm, err = kcm.StartWith(opts.AssetsDir, kcmKC, c.dir, kcm.Options{Controllers: kcm.ClusterControllers, RootCAFile: c.caFile}); err != nil {
		return nil, err
	}
	kubeOVNKC, err := kubeovnrun.AdminKubeconfig(c.env, KubeOVNUser)
	if err != nil {
		return nil, err
	}
	if c.KubeOVN, err = kubeovnrun.Start(kubeovnrun.Options{
		KubeOVNDir: opts.KubeOVNDir, Dir: filepath.Join(c.dir, "kube-ovn"), Kubeconfig: kubeOVNKC,
		NBAddr: c.OVN.NBAddr(), SBAddr: c.OVN.SBAddr(), NodeName: NodeName, ServiceCIDR: ServiceCIDR,
		// -v=3: kube-ovn logs every command it executes in a gateway ("executing NAT gateway
		// command"), which the lab's report and the K tests read.
		ExtraArgs: append([]string{"--enable-lb=false", "--v=3"}, opts.KubeOVNArgs...), HelperExe: opts.Bins.Lab,
	}); err != nil {
		return nil, err
	}
	if err := c.KubeOVN.WaitReady(ctx, c.Client, c.OVN); err != nil {
		return nil, fmt.Errorf("kube-ovn-controller: %w", err)
	}
	// Before vpcgw starts: it reads kube-ovn-controller's flags from there (SPEC K10).
	if err := c.KubeOVN.RecordDeployment(ctx, c.Client); err != nil {
		return nil, err
	}

	if !opts.NoVpcgw {
		if err := c.installRBAC(ctx); err != nil {
			return nil, err
		}
		if err := c.startWebhook(ctx); err != nil {
			return nil, err
		}
		c.controllerArgs = opts.ControllerArgs
		if c.controllerArgs == nil {
			c.controllerArgs = []string{"--enable-gw-nftable-lb-svc", "--enable-gw-nftable-svc-cluster-ip", "--enable-lb=false"}
		}
		if err := c.StartController(ctx); err != nil {
			return nil, err
		}
	}

	if err := createAll(ctx, c.Client, userObjects()...); err != nil {
		return nil, err
	}
	if err := c.startVPCClient(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	if err := c.waitGateway(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	if opts.NoDemo {
		return c, nil
	}
	if err := createAll(ctx, c.Client, EIP(EIPName, EIPAddress), EchoDeployment(opts.Bins.Lab, DemoNamespace, DemoDeployment, 2), DemoServiceObject()); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startAPIServer(_ context.Context) error {
	own, err := crd.All()
	if err != nil {
		return err
	}
	hooks, err := deploywebhook.Configuration()
	if err != nil {
		return err
	}
	scheme, err := controller.Scheme()
	if err != nil {
		return err
	}
	// The webhook configuration is installed as shipped: envtest points clientConfig.service at
	// the local server and injects its CA.
	c.env = &envtest.Environment{
		BinaryAssetsDirectory: c.opts.AssetsDir,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: own},
		WebhookInstallOptions: envtest.WebhookInstallOptions{ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{hooks}},
		Scheme:                scheme,
		// envtest's 20 s is short for a cold kube-apiserver on a shared machine under load.
		ControlPlaneStartTimeout: apiServerStartTimeout,
	}
	if c.opts.NoVpcgw {
		// What an operator's install brings, the operator installs.
		c.env.CRDInstallOptions.CRDs, c.env.WebhookInstallOptions = nil, envtest.WebhookInstallOptions{}
	}
	kubeovnrun.ConfigureEnvtest(c.env, c.opts.KubeOVNDir, ServiceCIDR)
	// A certificate directory of the lab's own: envtest keeps the serving certificates and the
	// service-account keys of a directory it did not create, so that RestartAPIServer brings the
	// same server back for every client. The serving certificate names the `kubernetes` Service
	// too, which Pods dial.
	certDir := filepath.Join(c.dir, "apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	api := c.env.ControlPlane.GetAPIServer()
	api.CertDir = certDir
	if api.CA, err = writeAPIServerCerts(certDir, firstServiceIP(ServiceCIDR)); err != nil {
		return err
	}
	c.caFile = filepath.Join(certDir, clusterCAFile)
	if err := c.configurePodAccess(api.Configure()); err != nil {
		return err
	}
	c.opts.Log.Info("starting kube-apiserver and etcd", "assets", c.opts.AssetsDir)
	if c.Config, err = c.env.Start(); err != nil {
		return fmt.Errorf("starting the API server (are kube-apiserver and etcd in %q? make assets): %w", c.opts.AssetsDir, err)
	}
	if c.Client, err = client.New(c.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	kc, err := kubeovnrun.AdminKubeconfig(c.env, "lab-admin")
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	return os.WriteFile(c.Kubeconfig, kc, 0o600)
}

// userConfig is the REST config of a new API server user.
func (c *Cluster) userConfig(name string, groups ...string) (*rest.Config, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return u.Config(), nil
}

// userKubeconfig writes the kubeconfig of a new user that authenticates as a service account
// (its groups as the API server gives them to tokens) and returns the file.
func (c *Cluster) userKubeconfig(name, file string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + InstallNamespace, "system:authenticated"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, file)
	return path, os.WriteFile(path, kc, 0o600)
}

// installRBAC applies the service accounts and RBAC of the shipped manifests, and the admission
// policy that bounds the controller's writes (SPEC N5): the controller and the webhook run with
// exactly what an install grants them.
func (c *Cluster) installRBAC(ctx context.Context) error {
	objs, err := manifests.Objects("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicy" && c.opts.GatewayNamePrefix != "" {
			// What the chart renders with --set kubeOvn.gatewayNamePrefix=<prefix>: the exec
			// policy admits the gateway Pods kube-ovn names with its natGwNamePrefix.
			if err := withGatewayPrefix(o, c.opts.GatewayNamePrefix); err != nil {
				return err
			}
		}
		if err := c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("vpcgw-lab"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// withGatewayPrefix rewrites the default gateway Pod name prefix in an admission policy's
// expressions and messages to prefix.
func withGatewayPrefix(o *unstructured.Unstructured, prefix string) error {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	data = bytes.ReplaceAll(data, []byte(model.GatewayAppPrefix), []byte(prefix+"-"))
	return json.Unmarshal(data, &o.Object)
}

func (c *Cluster) startWebhook(ctx context.Context) error {
	kc, err := c.userKubeconfig(WebhookUser, "webhook.kubeconfig")
	if err != nil {
		return err
	}
	health, err := freePort()
	if err != nil {
		return err
	}
	wio := &c.env.WebhookInstallOptions
	c.Webhook = &process{name: "vpcgw webhook", argv: []string{c.opts.Bins.Vpcgw, "webhook",
		"--kubeconfig", kc, "--cert-dir", wio.LocalServingCertDir,
		"--host", wio.LocalServingHost, "--port", strconv.Itoa(wio.LocalServingPort),
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(health),
		"--controller-user", ControllerUser, "--kube-ovn-user", KubeOVNUser,
	}}
	if err := c.Webhook.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, "vpcgw webhook", c.Webhook, "http://127.0.0.1:"+strconv.Itoa(health)+"/readyz", 60*time.Second)
}

// StartController starts the vpcgw controller process (again, after StopController), as the
// controller's service account.
func (c *Cluster) StartController(ctx context.Context) error {
	kc, err := c.userKubeconfig(ControllerUser, "controller.kubeconfig")
	if err != nil {
		return err
	}
	health, err := freePort()
	if err != nil {
		return err
	}
	metrics, err := freePort()
	if err != nil {
		return err
	}
	agents, err := c.agentBinaries()
	if err != nil {
		return err
	}
	c.metricsAddr = "127.0.0.1:" + strconv.Itoa(metrics)
	argv := append([]string{c.opts.Bins.Vpcgw, "controller",
		"--kubeconfig", kc, "--transport", "exec", "--agent-binaries", agents,
		"--ovn-nb-addr", c.OVN.NBAddr(), "--kube-ovn-namespace", kubeovnrun.Namespace,
		"--metrics-bind-address", c.metricsAddr, "--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(health),
	}, append(slices.Clone(c.controllerArgs), c.extraControllerArgs...)...)
	c.Controller = &process{name: "vpcgw controller", argv: argv}
	if len(c.opts.ControllerEnv) > 0 {
		c.Controller.env = append(os.Environ(), c.opts.ControllerEnv...)
	}
	if err := c.Controller.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, "vpcgw controller", c.Controller, "http://127.0.0.1:"+strconv.Itoa(health)+"/readyz", 60*time.Second)
}

// Release runs `vpcgw release` to its end as the chart's pre-delete hook does: as the
// controller's service account, with the controller's flags (SPEC O4). It returns what the
// command printed; an error when it exited non-zero.
func (c *Cluster) Release(ctx context.Context) (string, error) {
	kc, err := c.userKubeconfig(ControllerUser, "release.kubeconfig")
	if err != nil {
		return "", err
	}
	agents, err := c.agentBinaries()
	if err != nil {
		return "", err
	}
	argv := append([]string{"release",
		"--kubeconfig", kc, "--transport", "exec", "--agent-binaries", agents,
		"--ovn-nb-addr", c.OVN.NBAddr(), "--kube-ovn-namespace", kubeovnrun.Namespace, "--release-timeout", "3m",
	}, append(slices.Clone(c.controllerArgs), c.extraControllerArgs...)...)
	out, err := exec.CommandContext(ctx, c.opts.Bins.Vpcgw, argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("vpcgw release: %w\n%s", err, tail(string(out), 40))
	}
	return string(out), nil
}

// MetricsURL is the running controller's /metrics (plain HTTP on loopback, as the chart's
// controller.metricsSecure=false serves it).
func (c *Cluster) MetricsURL() string { return "http://" + c.metricsAddr + "/metrics" }

// SetExtraControllerArgs adds args to the controller's command line from its next start.
func (c *Cluster) SetExtraControllerArgs(args ...string) { c.extraControllerArgs = args }

// ControllerOutput is what the running (or last) controller process wrote.
func (c *Cluster) ControllerOutput() string {
	if c.Controller == nil {
		return ""
	}
	return c.Controller.output()
}

// AgentBinary is the agent build the controller delivers at its next start.
func (c *Cluster) AgentBinary() string { return c.opts.Bins.Agent }

// SetAgentBinary makes path the agent build the controller delivers from its next start: a vpcgw
// upgrade, as a new controller image brings a new agent.
func (c *Cluster) SetAgentBinary(path string) { c.opts.Bins.Agent = path }

// agentBinaries is the directory the controller delivers the agent from, as the controller
// image's /usr/lib/vpcgw/agents: the lab's vpcgw-agent build for this machine's architecture. The
// gateway container has no vpcgw binary; the controller copies this one in (SPEC K5, O5). A file
// replaced here (a new build) reaches the gateways as an upgrade does: at the controller's next
// start, each gateway's next stream.
func (c *Cluster) agentBinaries() (string, error) {
	dir := filepath.Join(c.dir, "agents")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := os.ReadFile(c.opts.Bins.Agent)
	if err != nil {
		return "", fmt.Errorf("the agent binary: %w", err)
	}
	dst := filepath.Join(dir, transport.DefaultAgentBinary+"-linux-"+runtime.GOARCH)
	if err := os.WriteFile(dst+".tmp", data, 0o755); err != nil {
		return "", err
	}
	return dir, os.Rename(dst+".tmp", dst)
}

// StopController ends the controller process (its agents' streams end with it).
func (c *Cluster) StopController() {
	if c.Controller != nil {
		c.Controller.stop()
	}
}

// waitGateway waits until kube-ovn's gateway Pod runs and kube-ovn has initialised it.
func (c *Cluster) waitGateway(ctx context.Context, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var pod corev1.Pod
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}, &pod); err != nil {
			last = err.Error()
			return false, client.IgnoreNotFound(err)
		}
		last = fmt.Sprintf("phase %s, init %q", pod.Status.Phase, pod.Annotations["ovn.kubernetes.io/vpc_nat_gw_init"])
		if pod.DeletionTimestamp != nil {
			last = "being deleted"
			return false, nil
		}
		return pod.Status.Phase == corev1.PodRunning && pod.Annotations["ovn.kubernetes.io/vpc_nat_gw_init"] == "true", nil
	})
	if err != nil {
		return fmt.Errorf("kube-ovn's gateway pod %s/%s (%s): %w", kubeovnrun.Namespace, c.GatewayPodName(), last, err)
	}
	return nil
}

// GatewayPod is the name kube-ovn gives the lab gateway's Pod with its default natGwNamePrefix.
func GatewayPod() string { return "vpc-nat-gw-" + GatewayName + "-0" }

// GatewayPodName is the name kube-ovn gives the lab gateway's Pod in this cluster:
// "<natGwNamePrefix>-<gateway>-0".
func (c *Cluster) GatewayPodName() string {
	return model.GatewayPlacement{NamePrefix: c.opts.GatewayNamePrefix}.AppLabel(GatewayName) + "-0"
}

// GatewayNetns is the network namespace of the gateway's Pod.
func (c *Cluster) GatewayNetns() (string, bool) {
	return c.Node.PodNetns(kubeovnrun.Namespace, c.GatewayPodName())
}

// ExternalClient is the external client's namespace.
func (c *Cluster) ExternalClient() string { return c.network.ext }

// VPCClient is the VPC client's namespace: its Pod's.
func (c *Cluster) VPCClient() string {
	ns, _ := c.Node.PodNetns(VPCClientNamespace, VPCClientPod)
	return ns
}

// WaitIngress waits until the Service has an EXTERNAL-IP and returns it; a timeout of 0 waits until
// ctx ends.
func (c *Cluster) WaitIngress(ctx context.Context, ns, name string, timeout time.Duration) (string, error) {
	var ip string
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var svc corev1.Service
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 {
			ip = ing[0].IP
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("service %s/%s has no EXTERNAL-IP after %s: %w", ns, name, timeout, err)
	}
	return ip, nil
}

// EIPReady waits until kube-ovn made IptablesEIP name Ready.
func (c *Cluster) EIPReady(ctx context.Context, name string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var e kubeovnv1.IptablesEIP
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &e); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return e.Status.Ready && e.Status.IP != "", nil
	})
}

// Probe sends n requests from namespace ns to addr ("ip:port") with proto and counts the answers.
func (c *Cluster) Probe(ns, proto, addr string, n int) (netlab.ProbeResult, error) {
	return c.net.Probe(ns, []string{c.opts.Bins.Lab, "probe"}, netlab.ProbeOptions{Proto: proto, Target: addr, Count: n})
}

// WaitReachable polls with single probes until target answers.
func (c *Cluster) WaitReachable(ctx context.Context, ns, proto, target string, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		r, err := c.Probe(ns, proto, target, 1)
		if err != nil {
			last = err
			return false, nil
		}
		return r.Total() > 0, nil
	})
	if err != nil {
		return fmt.Errorf("%s %s not reachable from %s: %v (%w)", proto, target, ns, last, err)
	}
	return nil
}

// Namespaces describes the lab's network namespaces: the fixed ones and every Pod's.
func (c *Cluster) Namespaces(ctx context.Context) ([]Netns, error) {
	out := append([]Netns(nil), c.network.fixed...)
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods); err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		ns, ok := c.Node.PodNetns(p.Namespace, p.Name)
		if !ok {
			continue
		}
		n := Netns{Name: ns, Role: RolePod, Pod: p.Namespace + "/" + p.Name, Addresses: map[string]string{}}
		if p.Namespace == VPCClientNamespace && p.Name == VPCClientPod {
			n.Role = RoleVPCClient
		}
		if p.Status.PodIP != "" {
			n.Addresses["eth0"] = p.Status.PodIP
		}
		out = append(out, n)
	}
	return out, nil
}

// Errors are the failures of the lab's own loops so far.
func (c *Cluster) Errors() []error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return append([]error(nil), c.errs...)
}

// Logs is the output of vpcgw's processes and kube-ovn-controller.
func (c *Cluster) Logs() string {
	var out string
	if c.Controller != nil {
		out += "== vpcgw controller\n" + c.Controller.output()
	}
	if c.Webhook != nil {
		out += "== vpcgw webhook\n" + c.Webhook.output()
	}
	if c.KubeOVN != nil {
		out += "== kube-ovn-controller\n" + c.KubeOVN.Logs()
	}
	return out
}

// Stop ends every process and removes every namespace the lab made.
func (c *Cluster) Stop() error {
	var errs []error
	if c.Controller != nil {
		c.Controller.stop()
	}
	if c.Webhook != nil {
		c.Webhook.stop()
	}
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	if c.Node != nil {
		if err := c.Node.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Chassis != nil {
		if err := c.Chassis.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.KubeOVN != nil {
		c.KubeOVN.Stop()
	}
	if c.kcm != nil {
		c.kcm.Stop()
	}
	if c.OVN != nil {
		c.OVN.Stop()
	}
	if c.router != nil {
		c.router.stop()
	}
	if c.net != nil {
		if err := c.net.Cleanup(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	return errors.Join(errs...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }() // only its port was wanted
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
