package lab

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Main is `vpcgw lab`: bring the lab up, show a LoadBalancer Service served through its EIP, and
// either tear everything down or (--stay) keep it up for the user's own Services.
func Main(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	stay := fs.Bool("stay", false, "keep the lab up after the demo, until interrupted, and write its description")
	assets := fs.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory with kube-apiserver and etcd")
	requests := fs.Int("requests", 20, "requests the external client sends through the EIP")
	verbose := fs.Bool("v", false, "show the components' logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The lab must always clean up: a closed output pipe (`vpcgw lab | head`) or a hang-up ends it
	// through ctx instead of killing it with its namespaces and servers left behind.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	logOut := io.Discard
	if *verbose {
		logOut = os.Stderr
	}
	log := zap.New(zap.WriteTo(logOut), zap.UseDevMode(true))
	ctrl.SetLogger(log)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	out := os.Stdout
	started := time.Now()
	fmt.Fprintln(out, "== vpcgw lab: starting kube-apiserver, etcd, namespaces and the controller")
	l, err := Start(ctx, Options{Exe: exe, AssetsDir: *assets, Log: log})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "== stopping the lab (namespaces, processes, API server)")
		if err := l.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "lab cleanup:", err)
		}
	}()

	ip, err := l.WaitIngress(ctx, DemoNamespace, DemoService, 60*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "== Service %s/%s (LoadBalancer, gateway %s, EIP %s) is served after %s\n",
		DemoNamespace, DemoService, GatewayName, EIPName, time.Since(started).Round(time.Millisecond))
	fmt.Fprintf(out, "NAMESPACE  NAME  TYPE          EXTERNAL-IP\n%-10s %-5s LoadBalancer  %s\n\n", DemoNamespace, DemoService, ip)

	var svc corev1.Service
	if err := l.Client.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: DemoService}, &svc); err != nil {
		return err
	}
	probes := []struct{ from, fromName, proto, target string }{
		{l.ExternalClient(), "the external client (" + ExternalIP + ")", "tcp", ip + ":80"},
		{l.ExternalClient(), "the external client (" + ExternalIP + ")", "udp", ip + ":5353"},
		{l.VPCClient(), "the VPC client (" + VPCClientIP + ")", "tcp", svc.Spec.ClusterIP + ":80"},
		{l.VPCClient(), "the VPC client (" + VPCClientIP + ")", "tcp", ip + ":80"},
	}
	for _, p := range probes {
		if err := l.WaitReachable(ctx, p.from, p.proto, p.target, 15*time.Second); err != nil {
			fmt.Fprintf(out, "== %s cannot reach %s: %v\n", p.fromName, p.target, err)
		}
		res, err := l.Probe(p.from, p.proto, p.target, *requests)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "== %d %s requests from %s to %s:\n", *requests, p.proto, p.fromName, p.target)
		for _, n := range slices.Sorted(maps.Keys(res.Answers)) {
			fmt.Fprintf(out, "   %-10s %d\n", n, res.Answers[n])
		}
		if res.Errors > 0 {
			fmt.Fprintf(out, "   failed     %d (%s)\n", res.Errors, res.LastError)
		}
	}
	policies, err := l.LRPolicyList()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== ovn-nbctl lr-policy-list %s (written by vpcgw; the lab's router follows them)\n%s", VpcName, policies)
	table, err := l.NftTable()
	if err != nil {
		return fmt.Errorf("listing the gateway's table: %w", err)
	}
	fmt.Fprintf(out, "\n== nft list table ip kube-ovn (in the gateway, netns %s)\n%s\n", l.GatewayNetns(), table)

	if !*stay {
		return nil
	}
	desc, kubeconfig, err := l.Describe()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "== the lab stays up; press Ctrl-C to end it\nexport KUBECONFIG=%s\nlab description: %s\n", kubeconfig, desc)
	<-ctx.Done()
	return nil
}
