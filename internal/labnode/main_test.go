// covers: O1 (harness: a real kube-apiserver, the lab node, and a bridge per logical switch)
package labnode_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// roleEnv turns the test binary into a program a container runs: "echo" is netlab's echo server
// (`<binary> --name N --listen ip:port`), "probe" netlab's probe, "drain" a server that records
// its SIGTERM (prestop_test.go).
const roleEnv = "LABNODE_TEST_ROLE"

func TestMain(m *testing.M) {
	if labnode.MaybeRunExecHelper() {
		return
	}
	switch os.Getenv(roleEnv) {
	case "":
	case "echo":
		if err := netlab.EchoMain(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "drain":
		if err := drainMain(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "probe":
		if err := netlab.ProbeMain(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, os.Getenv(roleEnv))
		os.Exit(2)
	}
	code := m.Run()
	if e := shared.Value(); e != nil {
		e.stop()
	}
	os.Exit(code)
}

const nodeName = "lab-node-1"

type env struct {
	te     *envtest.Environment
	cfg    *rest.Config
	cs     kubernetes.Interface
	node   *labnode.Node
	net    *bridges
	assets string
	kcfg   string // kubeconfig file for kubectl
	dir    string
}

func (e *env) stop() {
	if e.node != nil {
		if err := e.node.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the lab node: %v\n", err)
		}
	}
	if e.net != nil {
		if err := e.net.lab.Cleanup(); err != nil {
			fmt.Fprintf(os.Stderr, "cleaning up the switches: %v\n", err)
		}
	}
	if err := e.te.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	_ = os.RemoveAll(e.dir)
}

var shared testutil.Lazy[*env]

func cluster(t *testing.T) *env {
	t.Helper()
	return shared.Get(t, func() (*env, string, error) {
		if err := netlab.Available(); err != nil {
			return nil, err.Error(), nil
		}
		assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd")
		if missing != "" {
			return nil, missing, nil
		}
		e, err := newEnv(assets)
		return e, "", err
	})
}

func newEnv(assets string) (*env, error) {
	te := &envtest.Environment{BinaryAssetsDirectory: assets}
	api := te.ControlPlane.GetAPIServer().Configure()
	api.Set("allow-privileged", "true")
	api.Set("disable-admission-plugins", "ServiceAccount")
	// The API server reaches the node's exec server at its InternalIP, as in a cluster.
	api.Set("kubelet-preferred-address-types", "InternalIP")
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &env{te: te, cfg: cfg, assets: assets}
	fail := func(err error) (*env, error) { e.stop(); return nil, err }
	if e.dir, err = os.MkdirTemp("", "labnode-test-"); err != nil {
		return fail(err)
	}
	user, err := te.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fail(err)
	}
	e.kcfg = e.dir + "/kubeconfig"
	if err := os.WriteFile(e.kcfg, kc, 0o600); err != nil {
		return fail(err)
	}
	if e.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return fail(err)
	}
	lab, err := netlab.New("lnt")
	if err != nil {
		return fail(err)
	}
	e.net = &bridges{lab: lab, switches: map[string]string{}, ports: map[string]string{}, clients: map[string]string{}}
	script := ""
	if dir, missing := testutil.KubeOVNAssets("nat-gateway.sh"); missing == "" {
		script = dir + "/nat-gateway.sh"
	}
	e.node, err = labnode.Start(context.Background(), labnode.Config{
		NodeName: nodeName, REST: cfg, Network: e.net, NatGatewayScript: script,
		RestartBackoff: 200 * time.Millisecond, MaxRestartBackoff: time.Second,
		Log: testLogger(),
	})
	if err != nil {
		return fail(err)
	}
	return e, nil
}

func testLogger() logr.Logger {
	if os.Getenv("LABNODE_TEST_LOG") == "" {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: 1})
}

// bridges is the test's Network: a namespace with a bridge per logical switch (or provider, for
// NICs kube-ovn gives no switch), each NIC a veth whose peer is a bridge port.
type bridges struct {
	lab *netlab.Lab

	mu       sync.Mutex
	switches map[string]string // switch → namespace
	ports    map[string]string // "<netns>/<nic>" → port
	clients  map[string]string // switch → client namespace
	next     int
}

func switchKey(nic labnode.NIC) string {
	if nic.LogicalSwitch != "" {
		return nic.LogicalSwitch
	}
	return nic.Provider
}

// switchNetns returns the namespace of the switch, creating it on first use.
func (b *bridges) switchNetns(name string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ns, ok := b.switches[name]; ok {
		return ns, nil
	}
	b.next++
	ns, err := b.lab.AddNetns("sw" + strconv.Itoa(b.next))
	if err != nil {
		return "", err
	}
	if err := b.lab.AddBridge(ns, "br0"); err != nil {
		return "", err
	}
	b.switches[name] = ns
	return ns, nil
}

func (b *bridges) Attach(ctx context.Context, _ *corev1.Pod, netns string, nic labnode.NIC) error {
	sw, err := b.switchNetns(switchKey(nic))
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.next++
	port := "p" + strconv.Itoa(b.next)
	b.ports[netns+"/"+nic.Name] = port
	b.mu.Unlock()
	if err := b.lab.VethToBridge(netns, nic.Name, sw, port, "br0"); err != nil {
		return err
	}
	return netlab.Configure(ctx, nic.Iface(netns))
}

func (b *bridges) Detach(_ context.Context, _ *corev1.Pod, netns string, nic labnode.NIC) error {
	sw, err := b.switchNetns(switchKey(nic))
	if err != nil {
		return err
	}
	b.mu.Lock()
	port := b.ports[netns+"/"+nic.Name]
	delete(b.ports, netns+"/"+nic.Name)
	b.mu.Unlock()
	_, err = netlab.Run("ip", "-n", sw, "link", "del", port)
	return err
}

func (b *bridges) attached(netns, nic string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.ports[netns+"/"+nic]
	return ok
}

// client returns the switch's client namespace, plugged into it with addr (e.g.
// "10.91.0.200/24") when first asked for.
func (b *bridges) client(t *testing.T, sw, addr string) string {
	t.Helper()
	swNs, err := b.switchNetns(sw)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ns, ok := b.clients[sw]; ok {
		return ns
	}
	b.next++
	port := "c" + strconv.Itoa(b.next)
	ns, err := b.lab.AddNetns("cli" + strconv.Itoa(b.next))
	if err != nil {
		t.Fatal(err)
	}
	b.clients[sw] = ns
	if err := b.lab.VethToBridge(ns, "eth0", swNs, port, "br0"); err != nil {
		t.Fatal(err)
	}
	if err := b.lab.AddAddr(ns, "eth0", addr); err != nil {
		t.Fatal(err)
	}
	return ns
}
