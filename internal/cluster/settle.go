package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// ControllerMetrics reads the running controller's /metrics: each sample by its name with its
// labels as printed (`vpcgw_gateway_agents_connected{gateway="lab-gw"}`).
func (c *Cluster) ControllerMetrics(ctx context.Context) (map[string]float64, error) {
	return netlab.ScrapeMetrics(ctx, c.MetricsURL())
}

// GatewayMetric is the controller's sample of a per-gateway metric for the lab's gateway, and
// whether it has one.
func GatewayMetric(samples map[string]float64, name string) (float64, bool) {
	v, ok := samples[name+`{gateway="`+GatewayName+`"}`]
	return v, ok
}

// WaitSettled waits until the lab is in the state every test may start from, whatever the test
// before it did: kube-ovn's gateway Pod runs and kube-ovn has initialised it; exactly one agent
// runs in it; the vpcgw controller runs with one agent stream up on the gateway and no change
// waiting; and,
// with the demo, the demo Service has its EXTERNAL-IP and answers TCP through it (and through its
// ClusterIP when the ClusterIP gate is on). A test that replaced the gateway or restarted a component thus never leaves its
// aftermath to the next one.
func (c *Cluster) WaitSettled(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.waitGateway(ctx, timeout); err != nil {
		return fmt.Errorf("settling: %w", err)
	}
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if c.Controller == nil || c.Controller.exited() {
			return false, errors.New("the vpcgw controller is not running")
		}
		if _, ok := c.GatewayNetns(); !ok {
			last = "the gateway Pod has no network namespace on the lab node"
			return false, nil
		}
		if agents, err := c.GatewayAgents(); err != nil || len(agents) != 1 {
			last = fmt.Sprintf("%d agents run in the gateway Pod (%v)", len(agents), err)
			return false, nil
		}
		samples, err := c.ControllerMetrics(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		connected, _ := GatewayMetric(samples, "vpcgw_gateway_agents_connected")
		pending, ok := GatewayMetric(samples, "vpcgw_gateway_pending_since_timestamp_seconds")
		if connected != 1 || !ok || pending != 0 {
			last = fmt.Sprintf("agent streams up %v, a change pending since %v", connected, pending)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("settling the lab (%s): %w", last, err)
	}
	if c.opts.NoDemo {
		return nil
	}
	var svc corev1.Service
	if _, err := c.WaitIngress(ctx, DemoNamespace, DemoService, timeout); err != nil {
		return fmt.Errorf("settling: %w", err)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: DemoService}, &svc); err != nil {
		return fmt.Errorf("settling: %w", err)
	}
	port := servicePort(&svc, corev1.ProtocolTCP)
	probes := []struct{ from, target string }{{c.ExternalClient(), net.JoinHostPort(svc.Status.LoadBalancer.Ingress[0].IP, port)}}
	if slices.Contains(c.controllerArgs, "--enable-gw-nftable-svc-cluster-ip") {
		probes = append(probes, struct{ from, target string }{c.VPCClient(), net.JoinHostPort(svc.Spec.ClusterIP, port)})
	}
	for _, probe := range probes {
		if err := c.WaitReachable(ctx, probe.from, "tcp", probe.target, timeout); err != nil {
			return fmt.Errorf("settling: %s in %s/%s: %w", probe.target, kubeovnrun.Namespace, c.GatewayPodName(), err)
		}
	}
	return nil
}
