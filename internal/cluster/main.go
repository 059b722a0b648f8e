package cluster

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/labout"
)

// Main is `vpcgw-lab lab`: bring the lab cluster up beside the real kube-ovn-controller, show the
// demo (pods, the Service's EXTERNAL-IP, traffic, a Deployment scaled 2 → 5 → 1, what vpcgw wrote,
// what kube-ovn-controller logged), then tear everything down or (--stay) keep it up, described
// in lab.json, for kubectl. It fails if any step did.
func Main(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	stay := fs.Bool("stay", false, "keep the lab up after the demo, until interrupted, and write lab.json")
	lf := LabFlags{Make: "lab"}
	if err := lf.Register(fs); err != nil {
		return err
	}
	requests := fs.Int("requests", 20, "requests per probe")
	noVpcgw := fs.Bool("no-vpcgw", false, "leave vpcgw out, to install it from --release as the user guide says (helm or install.sh); "+
		"implies --stay, and the demo waits until vpcgw serves its Service")
	releaseDir := fs.String("release", defaultReleaseDir(), "with --no-vpcgw: the release directory (make release) whose OCI archives the lab node runs vpcgw's Pods from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var rel Release
	if *noVpcgw {
		r, err := OpenRelease(*releaseDir)
		if err != nil {
			return fmt.Errorf("--no-vpcgw: %w", err)
		}
		rel, *stay = r, true
	}
	if err := lf.Check(); err != nil {
		return err
	}
	opts := Options{Bins: lf.Bins, AssetsDir: lf.Assets, KubeOVNDir: lf.KubeOVN, NoVpcgw: *noVpcgw, Agnhost: *noVpcgw}
	if *noVpcgw {
		opts.Images = rel.Images()
	}
	if *requests < 1 {
		return fmt.Errorf("--requests %d: must be at least 1", *requests)
	}
	ctx, stop, components := lf.Setup(ctx)
	defer stop()
	// The steps go to stdout through out, whose first write error Main returns; the bring-up
	// progress, written by the components' goroutines, goes to stdout on its own (best effort).
	out := labout.New(os.Stdout)
	defer func() {
		if werr := out.Err(); werr != nil {
			err = errors.Join(err, fmt.Errorf("write the lab's steps: %w", werr))
		}
	}()
	started := time.Now()
	log := logr.New(&progressSink{out: os.Stdout, start: started, inner: components.GetSink(), mu: &sync.Mutex{}})

	out.Println("== vpcgw-lab lab: starting kube-apiserver and etcd, kube-controller-manager, OVN NB/SB and ovn-northd,")
	if *noVpcgw {
		out.Println("   kube-ovn-controller and the lab node (the kubelet), without vpcgw (--no-vpcgw);")
	} else {
		out.Println("   kube-ovn-controller, the lab node (the kubelet), the vpcgw webhook and controller;")
	}
	out.Printf("   then Vpc %s, its Subnets, the external Subnet and VpcNatGateway %s, created as a kube-ovn user would\n", VpcName, GatewayName)
	opts.Log = log
	c, err := Start(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			// Start has stopped what it started; its error would only add the components' logs.
			return errors.New("interrupted during bring-up (everything started is stopped)")
		}
		return err
	}
	defer func() {
		out.Println("== stopping the lab (processes, namespaces, API server)")
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("lab cleanup: %w", serr))
		}
	}()
	out.Printf("   up after %s: kube-ovn made gateway pod %s/%s and initialised it (nat-gateway.sh init)\n", since(started), kubeovnrun.Namespace, c.GatewayPodName())
	out.Printf("== demo: IptablesEIP %s, Deployment %s/%s (2 echo replicas), LoadBalancer Service %s/%s\n", EIPName, DemoNamespace, DemoDeployment, DemoNamespace, DemoService)

	if *stay {
		path, _, err := c.WriteDescription(ctx)
		if err != nil {
			return err
		}
		out.Printf("   lab description: %s (kept up to date while the lab stays up)\n", path)
	}

	if *noVpcgw {
		if err := awaitInstall(ctx, c, rel, out); err != nil {
			return err
		}
	}
	demo := &Demo{C: c, Out: out, Requests: *requests}
	failed := runDemo(ctx, demo, out)
	if errs := c.Errors(); len(errs) > 0 {
		failed = append(failed, fmt.Errorf("the lab's own loops failed: %w", errors.Join(errs...)))
	}
	if ctx.Err() != nil {
		return errors.New("interrupted during the demo")
	}
	if len(failed) > 0 {
		out.Printf("== %d step(s) failed\n", len(failed))
		return errors.Join(failed...)
	}
	out.Printf("== every step succeeded (%s)\n", since(started))
	if !*stay {
		return nil
	}
	path, desc, err := c.WriteDescription(ctx)
	if err != nil {
		return err
	}
	out.Printf("\n== the lab stays up; Ctrl-C ends it\nlab description: %s\nexport KUBECONFIG=%s\n", path, c.Kubeconfig)
	kubectl := kubectlCmd(lf.Assets, "")
	out.Printf("%s get pods -A\n%s scale deployment/%s -n %s --replicas=3\n", kubectl, kubectl, DemoDeployment, DemoNamespace)
	out.Println("what kubectl cannot do (argv in lab.json):")
	for _, cmd := range desc.Commands {
		// Shown for copying only; nothing here runs through a shell.
		out.Printf("  # %s\n  %s\n", cmd.What, strings.Join(cmd.Argv, " "))
	}
	c.KeepDescription(ctx, 2*time.Second, func(err error) { fmt.Fprintf(os.Stderr, "lab.json not refreshed: %v\n", err) })
	return nil
}

// defaultReleaseDir is $VPCGW_RELEASE, or the release `make release` writes beside this binary
// (bin/release).
func defaultReleaseDir() string {
	if d := os.Getenv("VPCGW_RELEASE"); d != "" {
		return d
	}
	self, err := os.Executable()
	if err != nil {
		return filepath.Join("bin", "release")
	}
	return filepath.Join(filepath.Dir(self), "release")
}

// awaitInstall tells how to install vpcgw from the release into the lab, as the user guide's
// walkthrough does, and waits (until ctx ends) for the demo Service to be served: then the demo
// runs as in a lab with vpcgw of its own.
func awaitInstall(ctx context.Context, c *Cluster, rel Release, out *labout.Writer) error {
	helm := cmp.Or(os.Getenv("VPCGW_HELM"), "helm")
	kubectl := kubectlCmd(c.opts.AssetsDir, "")
	out.Printf("\n== vpcgw is not installed (--no-vpcgw): install release %s as the user guide says\n", rel.Version)
	out.Printf("   (Installing, Installing from a release); the lab node runs its images from %s, no registry needed:\n", rel.Dir)
	nb, err := c.OVNNBClusterIP(ctx)
	if err != nil {
		return err
	}
	out.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
	out.Printf("%s install vpcgw %s --namespace %s --create-namespace --set ovn.nbAddr=tcp:%s:%d\n", helm, rel.Chart(), InstallNamespace, nb, OVNNBPort)
	out.Printf("   or: HELM=%s KUBECTL=%s OVN_NB_ADDR=tcp:%s:%d %s\n", helm, kubectl, nb, OVNNBPort, rel.Path("install.sh"))
	if img, err := AgnhostImage(c.opts.AssetsDir); err == nil {
		out.Printf("   The lab node also runs %s, the walkthrough's backend (\"Your first Service\"; any Vpc but %s, whose namespace is %s).\n", img, VpcName, DemoNamespace)
	}
	out.Printf("   The demo (Service %s/%s, EIP %s on gateway %s of Vpc %s) runs once vpcgw serves it; Ctrl-C ends the lab.\n",
		DemoNamespace, DemoService, EIPName, GatewayName, VpcName)
	started := time.Now()
	ip, err := c.WaitIngress(ctx, DemoNamespace, DemoService, 0)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted while waiting for vpcgw to be installed")
		}
		return err
	}
	out.Printf("== vpcgw serves Service %s/%s through %s, %s after the lab was up\n", DemoNamespace, DemoService, ip, since(started))
	return nil
}

// usageWindow is how long the lab measures its idle CPU use.
const usageWindow = 10 * time.Second

// runDemo runs the demo's steps in order and returns the failures. A step that later steps need
// (the Service being served) ends the demo when it fails.
func runDemo(ctx context.Context, d *Demo, out *labout.Writer) []error {
	c := d.C
	var failed []error
	check := func(err error) {
		if err != nil {
			out.Printf("!! %v\n", err)
			failed = append(failed, err)
		}
	}
	out.Println("== waiting for kube-ovn and vpcgw to serve the demo")
	svc, err := d.Served(ctx)
	if err != nil {
		check(err)
		return failed
	}
	steps := []func() error{
		func() error {
			out.Printf("\n== kubectl get pods -A -o wide (read through the API; the same with the real kubectl:\n   %s get pods -A -o wide)\n", kubectlCmd(c.opts.AssetsDir, c.Kubeconfig))
			rows, err := ListPods(ctx, c.Client)
			if err != nil {
				return err
			}
			if err := WritePods(out, rows); err != nil {
				return err
			}
			return gatewayListedReady(rows, c.GatewayPodName())
		},
		func() error {
			out.Printf("\n== kubectl get service -n %s %s\n", DemoNamespace, DemoService)
			if err := WriteService(out, svc); err != nil {
				return err
			}
			e, err := c.eip(ctx)
			if err != nil {
				return err
			}
			out.Println("== kubectl get iptables-eips")
			if err := WriteEIP(out, e); err != nil {
				return err
			}
			out.Println()
			return nil
		},
		func() error { _, err := d.Traffic(ctx, svc); return err },
		func() error { out.Println(); _, err := d.Scale(ctx, svc, 5); return err },
		func() error { _, err := d.Scale(ctx, svc, 1); return err },
		func() error { out.Println(); _, err := d.ShowDataPlane(); return err },
		func() error {
			out.Printf("\n== what the lab uses, per component (%s without traffic)\n", usageWindow)
			us, err := LabUsage(usageWindow)
			if err != nil {
				return err
			}
			return WriteUsage(out, us, usageWindow)
		},
	}
	for _, step := range steps {
		if ctx.Err() != nil {
			return append(failed, ctx.Err())
		}
		check(step())
	}
	out.Println("== what kube-ovn-controller logged during the lab run")
	// A write error stays in out, which Main checks.
	_ = SummarizeKubeOVNLog(c.KubeOVN.Logs(), LogTopics).Write(out, LogTopics, 15, 240)
	return failed
}

// gatewayListedReady checks the listing shows kube-ovn's gateway pod Running and Ready 1/1.
func gatewayListedReady(rows []PodRow, gatewayPod string) error {
	for _, r := range rows {
		if r.Namespace == kubeovnrun.Namespace && r.Name == gatewayPod {
			if r.Ready != "1/1" || r.Status != "Running" {
				return fmt.Errorf("kube-ovn's gateway pod %s/%s is %s %s, want Running 1/1", r.Namespace, r.Name, r.Status, r.Ready)
			}
			return nil
		}
	}
	return fmt.Errorf("kube-ovn's gateway pod %s/%s is not listed", kubeovnrun.Namespace, gatewayPod)
}

// kubectlCmd is the kubectl command line a user types (kubeconfig empty: from $KUBECONFIG).
func kubectlCmd(assets, kubeconfig string) string {
	kubectl := "kubectl"
	if p := assets + "/kubectl"; fileExists(p) {
		kubectl = p
	}
	if kubeconfig == "" {
		return kubectl
	}
	return kubectl + " --kubeconfig " + kubeconfig
}

// progressSink prints the lab's own top-level Info messages to out as bring-up progress, with
// the time since start, and passes everything to inner (the components' log, shown with -v).
type progressSink struct {
	out   io.Writer
	start time.Time
	name  string
	inner logr.LogSink
	mu    *sync.Mutex
}

func (s *progressSink) Init(info logr.RuntimeInfo) { s.inner.Init(info) }

func (s *progressSink) Enabled(level int) bool { return level == 0 || s.inner.Enabled(level) }

func (s *progressSink) Info(level int, msg string, kv ...any) {
	if level == 0 && s.name == "" {
		var b strings.Builder
		for i := 0; i+1 < len(kv); i += 2 {
			fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
		}
		s.mu.Lock()
		// Progress on the console, best effort: a failed write must not stop the bring-up.
		_, _ = fmt.Fprintf(s.out, "   [%6.1fs] %s%s\n", time.Since(s.start).Seconds(), msg, b.String())
		s.mu.Unlock()
	}
	if s.inner.Enabled(level) {
		s.inner.Info(level, msg, kv...)
	}
}

func (s *progressSink) Error(err error, msg string, kv ...any) { s.inner.Error(err, msg, kv...) }

func (s *progressSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.inner = s.inner.WithValues(kv...)
	return &c
}

func (s *progressSink) WithName(name string) logr.LogSink {
	c := *s
	c.name = strings.TrimPrefix(s.name+"."+name, ".")
	c.inner = s.inner.WithName(name)
	return &c
}
