package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// snapshot reads, from the cache and without copying (the model only reads; writers fetch their
// own copies), what the model needs to plan gateway key: every gateway, EIP
// and Subnet (few), the Services bound to the gateway or owning its records, their
// EndpointSlices, the Pods those target, the gateway's pods and the records.
func (r *GatewayReconciler) snapshot(ctx context.Context, key string) (model.Snapshot, error) {
	var s model.Snapshot
	var gws kubeovnv1.VpcNatGatewayList
	var eips kubeovnv1.IptablesEIPList
	var subnets kubeovnv1.SubnetList
	for _, l := range []client.ObjectList{&gws, &eips, &subnets} {
		if err := r.Client.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return s, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	s.Gateways, s.EIPs, s.Subnets = gws.Items, eips.Items, subnets.Items

	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.MatchingFields{indexServiceGateway: key}, client.UnsafeDisableDeepCopy); err != nil {
		return s, fmt.Errorf("listing Services of gateway %q: %w", key, err)
	}
	s.Services = svcs.Items
	seen := map[types.UID]bool{}
	for _, svc := range s.Services {
		seen[svc.UID] = true
	}

	// Records of this gateway, and of the Services found so far: a record's owner is part of the
	// snapshot, or the model takes the record for an orphan.
	records := map[string]kubeovnv1.IptablesDnatRule{}
	// Indexed lookups: a label selector would scan every record of the cluster per Service.
	addRecords := func(index, value string) error {
		var rs kubeovnv1.IptablesDnatRuleList
		if err := r.Client.List(ctx, &rs, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing records: %w", err)
		}
		for _, rec := range rs.Items {
			records[rec.Name] = rec
		}
		return nil
	}
	if key != unboundKey {
		if err := addRecords(indexRecordGateway, key); err != nil {
			return s, err
		}
	}
	for _, svc := range s.Services {
		if err := addRecords(indexRecordOwner, string(svc.UID)); err != nil {
			return s, err
		}
	}
	for _, rec := range records {
		owner := types.NamespacedName{Namespace: rec.Labels[model.LabelRecordNamespace], Name: rec.Labels[model.LabelRecordName]}
		uid := types.UID(rec.Labels[model.LabelRecordUID])
		if seen[uid] || owner.Name == "" {
			continue
		}
		var svc corev1.Service
		switch err := r.Client.Get(ctx, owner, &svc); {
		case err == nil && svc.UID == uid:
			seen[uid] = true
			s.Services = append(s.Services, svc)
		case err != nil && !apierrors.IsNotFound(err):
			return s, fmt.Errorf("reading record owner %s: %w", owner, err)
		}
	}
	for _, rec := range records {
		s.Records = append(s.Records, rec)
	}

	pods := map[types.NamespacedName]bool{}
	for _, svc := range s.Services {
		var es discoveryv1.EndpointSliceList
		if err := r.Client.List(ctx, &es, client.InNamespace(svc.Namespace), client.MatchingFields{indexSliceService: svc.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return s, fmt.Errorf("listing EndpointSlices of %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		s.EndpointSlices = append(s.EndpointSlices, es.Items...)
		for _, slice := range es.Items {
			for _, ep := range slice.Endpoints {
				if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
					ns := ref.Namespace
					if ns == "" {
						ns = slice.Namespace
					}
					pods[types.NamespacedName{Namespace: ns, Name: ref.Name}] = true
				}
			}
		}
	}
	for k := range pods {
		var p corev1.Pod
		switch err := r.Client.Get(ctx, k, &p); {
		case err == nil:
			s.Pods = append(s.Pods, p)
		case !apierrors.IsNotFound(err):
			return s, fmt.Errorf("reading backend pod %s: %w", k, err)
		}
	}

	if key != unboundKey {
		var gwPods corev1.PodList
		if err := r.Client.List(ctx, &gwPods, client.MatchingLabels{
			model.LabelGatewayPod: "true", "app": model.GatewayAppPrefix + key,
		}); err != nil {
			return s, fmt.Errorf("listing pods of gateway %s: %w", key, err)
		}
		s.GatewayPods = gwPods.Items
	}
	return s, nil
}
