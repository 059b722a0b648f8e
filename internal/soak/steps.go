package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// vpcEditRoute is the policy route the Vpc edit adds and removes again: an operator's own route,
// which kube-ovn reconciles into the VPC router beside vpcgw's VIP routes.
var vpcEditRoute = kubeovnv1.PolicyRoute{Priority: 31000, Match: "ip4.src == 198.51.100.0/24", Action: kubeovnv1.PolicyRouteActionAllow}

// Schedule is one round of the soak: every fault the issue names, each followed by endpoint
// churn (the demo Deployment scaled up or down), so that faults and churn alternate. Long-lived
// flows (SPEC D9) run across the faults that take the gateway's state away: the agent killed,
// the gateway Pod deleted (kube-ovn's whole re-initialisation) and its table flushed.
func Schedule() []Step {
	faults := []Step{
		{"the agent killed", Harmless, FlowsSurvive, func(_ context.Context, s *Soak) error {
			n, err := s.C.KillAgents()
			if err == nil && n == 0 {
				err = errors.New("no agent runs in the gateway Pod")
			}
			return err
		}},
		{"the gateway Pod deleted", RemovesDataPath, FlowsNewGateway, func(ctx context.Context, s *Soak) error {
			return s.C.DeleteGatewayPod(ctx)
		}},
		{"the vpcgw controller killed", Harmless, NoFlows, func(ctx context.Context, s *Soak) error {
			s.C.KillController()
			s.life.restarted()
			return s.C.StartController(ctx)
		}},
		{"kube-ovn-controller restarted", Harmless, NoFlows, func(ctx context.Context, s *Soak) error {
			if err := s.C.KubeOVN.Restart(); err != nil {
				return err
			}
			return s.C.KubeOVN.WaitReady(ctx, s.C.Client, s.C.OVN)
		}},
		{"the API server restarted", Harmless, NoFlows, func(ctx context.Context, s *Soak) error {
			return s.C.RestartAPIServer(ctx)
		}},
		{"OVN NB restarted", Harmless, NoFlows, func(_ context.Context, s *Soak) error {
			return s.C.OVN.RestartNB()
		}},
		// OVN's data path (the lab node's chassis and OVN central): the Vpc's packets cross
		// ovs-vswitchd by ovn-controller's flows, which northd computes.
		{"ovn-controller restarted", Harmless, NoFlows, func(ctx context.Context, s *Soak) error {
			return s.C.Chassis.RestartOVNController(ctx)
		}},
		{"ovs-vswitchd restarted", RemovesDataPath, NoFlows, func(ctx context.Context, s *Soak) error {
			return s.C.Chassis.RestartVswitchd(ctx)
		}},
		{"ovn-northd restarted", Harmless, NoFlows, func(_ context.Context, s *Soak) error {
			return s.C.OVN.RestartNorthd()
		}},
		{"the gateway's table flushed", RemovesDataPath, FlowsSurvive, func(_ context.Context, s *Soak) error {
			ns, ok := s.C.GatewayNetns()
			if !ok {
				return errors.New("the gateway Pod has no network namespace")
			}
			_, err := netlab.Run("ip", "netns", "exec", ns, "nft", "flush", "table", "ip", "kube-ovn")
			return err
		}},
		{"the Vpc edited", Harmless, NoFlows, editVpc},
	}
	var out []Step
	for i, f := range faults {
		out = append(out, f)
		out = append(out, scale(int32(3-i%2)))
	}
	return out
}

// scale changes the demo's scale. Its Pods drain as Kubernetes asks (SPEC L11: a preStop sleep,
// then not ready and answering on after SIGTERM), so a scale-down may lose nothing either.
func scale(replicas int32) Step {
	return Step{fmt.Sprintf("the Deployment scaled to %d", replicas), Harmless, NoFlows, func(ctx context.Context, s *Soak) error {
		s.replicas = replicas
		return s.C.ScaleDeployment(ctx, cluster.DemoNamespace, cluster.DemoDeployment, replicas)
	}}
}

// editVpc adds the operator's policy route to the lab's Vpc, or removes it when the last edit
// added it.
func editVpc(ctx context.Context, s *Soak) error {
	var vpc kubeovnv1.Vpc
	if err := s.C.Client.Get(ctx, client.ObjectKey{Name: cluster.VpcName}, &vpc); err != nil {
		return err
	}
	before := vpc.DeepCopy()
	vpc.Spec.PolicyRoutes = slices.DeleteFunc(vpc.Spec.PolicyRoutes, func(r *kubeovnv1.PolicyRoute) bool { return *r == vpcEditRoute })
	if !s.vpcRouteOn {
		r := vpcEditRoute
		vpc.Spec.PolicyRoutes = append(vpc.Spec.PolicyRoutes, &r)
	}
	if err := s.C.Client.Patch(ctx, &vpc, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("editing Vpc %s: %w", cluster.VpcName, err)
	}
	s.vpcRouteOn = !s.vpcRouteOn
	return nil
}
