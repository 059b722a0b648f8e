package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/vpcgw/vpcgw/internal/inspect"
)

// gatewayContainer is the container of a gateway pod that kube-ovn runs the NAT gateway in (the
// controller's --exec-container default, internal/transport.DefaultExecContainer; the plugin does
// not link the controller's transport).
const gatewayContainer = "vpc-nat-gw"

// ruleset prints `nft list table ip kube-ovn` of every running instance of the gateway, always
// through the Kubernetes exec API into the instance's vpc-nat-gw container: the plugin runs
// nothing on the user's own machine (in the lab, the lab node plays the kubelet's exec API).
func ruleset(ctx context.Context, cfg *rest.Config, v *inspect.View, gw string, out io.Writer) error {
	gp := v.Plan.Gateway(gw)
	switch {
	case gp == nil && v.Read.GatewaysUnknown():
		return fmt.Errorf("VpcNatGateway %q: unknown (you may not list vpc-nat-gateways.kubeovn.io; the ClusterRole %s grants it)", gw, inspect.ViewRole)
	case gp == nil:
		return fmt.Errorf("VpcNatGateway %q not found", gw)
	}
	if len(gp.Instances) == 0 {
		return fmt.Errorf("gateway %s has no running instance (or you may not list its pods)", gw)
	}
	argv := []string{"nft", "list", "table", "ip", "kube-ovn"}
	for _, inst := range gp.Instances {
		if _, err := fmt.Fprintf(out, "# %s/%s\n", inst.Pod.Namespace, inst.Pod.Name); err != nil {
			return fmt.Errorf("write ruleset header: %w", err)
		}
		b, err := execInPod(ctx, cfg, inst.Pod, gatewayContainer, argv)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", inst.Pod.Namespace, inst.Pod.Name, err)
		}
		if _, err := out.Write(b); err != nil {
			return err
		}
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
