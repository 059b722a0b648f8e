package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller/wake"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Snapshots are read from the cache without copying (the model only reads; writers fetch their
// own copies).

// gatewayObjects reads what every Service of gateway key depends on: every gateway, EIP and
// Subnet (few), and the gateway's pods and StatefulSet.
func (r *GatewayReconciler) gatewayObjects(ctx context.Context, key string) (model.Snapshot, error) {
	var s model.Snapshot
	var gws kubeovnv1.VpcNatGatewayList
	var eips kubeovnv1.IptablesEIPList
	var subnets kubeovnv1.SubnetList
	var vpcs kubeovnv1.VpcList
	for _, l := range []client.ObjectList{&gws, &eips, &subnets, &vpcs} {
		if err := r.Client.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return s, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	s.Gateways, s.EIPs, s.Subnets, s.Vpcs = gws.Items, eips.Items, subnets.Items, vpcs.Items
	if err := r.kubeOVNNat(ctx, key, &s); err != nil {
		return s, err
	}
	placement, err := r.placement(ctx)
	if err != nil {
		return s, err
	}
	s.Placement = placement
	if key != unboundKey {
		if err := r.gatewayWorkload(ctx, key, placement, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// gatewayWorkload reads gateway key's pods and kube-ovn's StatefulSet that should own them: a
// pod is an instance only as one of its replicas (SPEC N5).
func (r *GatewayReconciler) gatewayWorkload(ctx context.Context, key string, placement model.GatewayPlacement, s *model.Snapshot) error {
	labels := client.MatchingLabels{model.LabelGatewayPod: "true", "app": placement.AppLabel(key)}
	var gwPods corev1.PodList
	if err := r.Client.List(ctx, &gwPods, labels, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing pods of gateway %s: %w", key, err)
	}
	var sets appsv1.StatefulSetList
	if err := r.Client.List(ctx, &sets, labels, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing StatefulSets of gateway %s: %w", key, err)
	}
	s.GatewayPods, s.GatewayStatefulSets = gwPods.Items, sets.Items
	return nil
}

// kubeOVNNat reads kube-ovn's own NAT on the EIPs of gateway key: its DNAT rules (not records)
// through their EIP index, and its floating IPs (few).
func (r *GatewayReconciler) kubeOVNNat(ctx context.Context, key string, s *model.Snapshot) error {
	own := map[string]bool{}
	for i := range s.EIPs {
		if e := &s.EIPs[i]; e.Spec.NatGwDp == key && key != unboundKey {
			own[e.Name] = true
			var rules kubeovnv1.IptablesDnatRuleList
			if err := r.Client.List(ctx, &rules, client.MatchingFields{wake.IndexNatEIP: e.Name}, client.UnsafeDisableDeepCopy); err != nil {
				return fmt.Errorf("listing kube-ovn's DNAT rules of EIP %s: %w", e.Name, err)
			}
			s.KubeOVNDnatRules = append(s.KubeOVNDnatRules, rules.Items...)
		}
	}
	if len(own) == 0 {
		return nil
	}
	var fips kubeovnv1.IptablesFIPRuleList
	if err := r.Client.List(ctx, &fips, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing kube-ovn's floating IPs: %w", err)
	}
	for i := range fips.Items {
		if own[fips.Items[i].Spec.EIP] {
			s.KubeOVNFIPRules = append(s.KubeOVNFIPRules, fips.Items[i])
		}
	}
	return nil
}

// cacheReader is the planner's model.Reader: the controller's cache, through its indexes,
// without copying (the model only reads; writers fetch their own copies).
type cacheReader struct {
	ctx context.Context
	c   client.Reader
}

var _ model.Reader = cacheReader{}

func (r cacheReader) list(l client.ObjectList, opts ...client.ListOption) error {
	return r.c.List(r.ctx, l, append(opts, client.UnsafeDisableDeepCopy)...)
}

func (r cacheReader) GatewayServices(gw string) ([]corev1.Service, error) {
	var l corev1.ServiceList
	if err := r.list(&l, client.MatchingFields{wake.IndexServiceGateway: gw}); err != nil {
		return nil, fmt.Errorf("listing Services of gateway %q: %w", gw, err)
	}
	return l.Items, nil
}

func (r cacheReader) Service(k types.NamespacedName) (*corev1.Service, error) {
	var svc corev1.Service
	if err := r.c.Get(r.ctx, k, &svc, client.UnsafeDisableDeepCopy); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &svc, nil
}

func (r cacheReader) ClaimingServices(claim string) ([]corev1.Service, error) {
	var l corev1.ServiceList
	if err := r.list(&l, client.MatchingFields{wake.IndexServiceClaim: claim}); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (r cacheReader) records(index, value string) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	var srs vpcgwv1alpha1.ServiceRecordList
	if err := r.list(&srs, client.MatchingFields{index: value}); err != nil {
		return nil, nil, fmt.Errorf("listing ServiceRecords: %w", err)
	}
	var drs kubeovnv1.IptablesDnatRuleList
	if err := r.list(&drs, client.MatchingFields{index: value}); err != nil {
		return nil, nil, fmt.Errorf("listing records: %w", err)
	}
	return srs.Items, drs.Items, nil
}

func (r cacheReader) GatewayRecords(gw string) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	return r.records(wake.IndexRecordGateway, gw)
}

func (r cacheReader) OwnerRecords(uid types.UID) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	return r.records(wake.IndexRecordOwner, string(uid))
}

func (r cacheReader) ServiceSlices(ns, name string) ([]discoveryv1.EndpointSlice, error) {
	var l discoveryv1.EndpointSliceList
	if err := r.list(&l, client.InNamespace(ns), client.MatchingFields{wake.IndexSliceService: name}); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (r cacheReader) PodAddresses(k types.NamespacedName) ([]kubeovnv1.IP, error) {
	var l kubeovnv1.IPList
	if err := r.list(&l, client.MatchingFields{wake.IndexAddressPod: k.Namespace + "/" + k.Name}); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (r cacheReader) Pod(k types.NamespacedName) (*corev1.Pod, error) {
	var p corev1.Pod
	if err := r.c.Get(r.ctx, k, &p, client.UnsafeDisableDeepCopy); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &p, nil
}
