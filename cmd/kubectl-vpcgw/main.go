// Command kubectl-vpcgw is the kubectl plugin of vpcgw (`kubectl vpcgw ...`): it shows what the
// controller serves and why, with the controller's own model, and a gateway's nft table.
//
//	kubectl vpcgw status                  every Service that names a gateway
//	kubectl vpcgw explain svc/<name>      why a Service is or is not served
//	kubectl vpcgw ruleset <gateway>       the programmed table ip kube-ovn of each instance
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/inspect"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/transport"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl vpcgw:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kubectl-vpcgw", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	namespace := fs.String("n", "default", "namespace of the Service (explain)")
	lb := fs.Bool("enable-gw-nftable-lb-svc", true, "the controller serves EIPs (as its flag)")
	cip := fs.Bool("enable-gw-nftable-svc-cluster-ip", true, "the controller serves ClusterIPs (as its flag)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kubectl vpcgw [flags] status | explain svc/<name> | ruleset <gateway>")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("no command")
	}
	if *kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", *kubeconfig); err != nil {
			return err
		}
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	s, err := controller.Scheme()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	gates := model.Gates{LoadBalancer: *lb, ClusterIP: *cip}
	switch rest[0] {
	case "status":
		snap, err := inspect.Snapshot(ctx, c)
		if err != nil {
			return err
		}
		return inspect.Status(os.Stdout, model.Compute(snap, gates), snap)
	case "explain":
		if len(rest) != 2 || !strings.HasPrefix(rest[1], "svc/") {
			return errors.New("usage: kubectl vpcgw explain svc/<name> [-n namespace]")
		}
		snap, err := inspect.Snapshot(ctx, c)
		if err != nil {
			return err
		}
		text, err := inspect.Explain(model.Compute(snap, gates), *namespace, strings.TrimPrefix(rest[1], "svc/"))
		if err != nil {
			return err
		}
		fmt.Print(text)
		return nil
	case "ruleset":
		if len(rest) != 2 {
			return errors.New("usage: kubectl vpcgw ruleset <gateway>")
		}
		return ruleset(ctx, cfg, c, gates, rest[1])
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", rest[0])
}

// ruleset prints `nft list table ip kube-ovn` of every running instance of the gateway: through
// the Kubernetes exec API in a cluster, or in the instance's network namespace in the lab.
func ruleset(ctx context.Context, cfg *rest.Config, c client.Client, gates model.Gates, gw string) error {
	snap, err := inspect.Snapshot(ctx, c)
	if err != nil {
		return err
	}
	gp := model.Compute(snap, gates).Gateway(gw)
	if gp == nil {
		return fmt.Errorf("VpcNatGateway %s does not exist", gw)
	}
	if len(gp.Instances) == 0 {
		return fmt.Errorf("gateway %s has no running instance", gw)
	}
	argv := []string{"nft", "list", "table", "ip", "kube-ovn"}
	for _, inst := range gp.Instances {
		fmt.Printf("# %s/%s\n", inst.Pod.Namespace, inst.Pod.Name)
		var out []byte
		if ns := inst.Pod.Annotations[transport.NetnsAnnotation]; ns != "" {
			out, err = netlab.Run(append([]string{"ip", "netns", "exec", ns}, argv...)...)
		} else {
			out, err = execInPod(ctx, cfg, inst.Pod, "vpc-nat-gw", argv)
		}
		if err != nil {
			return fmt.Errorf("%s/%s: %w", inst.Pod.Namespace, inst.Pod.Name, err)
		}
		os.Stdout.Write(out)
	}
	return nil
}

func execInPod(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, container string, argv []string) ([]byte, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
