package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Snapshots are read from the cache without copying (the model only reads; writers fetch their
// own copies).

// gatewayObjects reads what every Service of gateway key depends on: every gateway, EIP and
// Subnet (few), and the gateway's pods.
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
	placement, err := r.placement(ctx)
	if err != nil {
		return s, err
	}
	s.Placement = placement
	if key != unboundKey {
		var gwPods corev1.PodList
		if err := r.Client.List(ctx, &gwPods, client.MatchingLabels{
			model.LabelGatewayPod: "true", "app": placement.AppLabel(key),
		}, client.UnsafeDisableDeepCopy); err != nil {
			return s, fmt.Errorf("listing pods of gateway %s: %w", key, err)
		}
		s.GatewayPods = gwPods.Items
	}
	return s, nil
}

// fullSnapshot adds to s the Services bound to gateway key or owning its records, their
// EndpointSlices, the Pods those target, and the records.
func (r *GatewayReconciler) fullSnapshot(ctx context.Context, key string, s model.Snapshot) (model.Snapshot, error) {
	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.MatchingFields{indexServiceGateway: key}, client.UnsafeDisableDeepCopy); err != nil {
		return s, fmt.Errorf("listing Services of gateway %q: %w", key, err)
	}
	b := newSnapshotBuilder(r, s)
	for i := range svcs.Items {
		b.addService(svcs.Items[i])
	}
	if key != unboundKey {
		if err := b.addRecords(ctx, indexRecordGateway, key); err != nil {
			return s, err
		}
	}
	return b.finish(ctx)
}

// partialSnapshot adds to s what replanning the Services of w needs: each dirty Service, the
// Services that share a claim with it (SPEC I2), their records, EndpointSlices and Pods, and the
// records of owners that are gone. It returns the keys replanned.
func (r *GatewayReconciler) partialSnapshot(ctx context.Context, key string, s model.Snapshot, w work) (model.Snapshot, map[types.NamespacedName]bool, error) {
	b := newSnapshotBuilder(r, s)
	replanned := map[types.NamespacedName]bool{}
	for k := range w.dirty {
		replanned[k] = true
		var svc corev1.Service
		switch err := r.Client.Get(ctx, k, &svc, client.UnsafeDisableDeepCopy); {
		case err == nil:
			b.addService(svc)
		case !apierrors.IsNotFound(err):
			return s, nil, fmt.Errorf("reading Service %s: %w", k, err)
		}
	}
	// Services sharing an EIP port with a dirty Service, now or at its last plan: one may take
	// over what the other gives up.
	type claim struct {
		eip   string
		ports []corev1.ServicePort
	}
	var claims []claim
	for _, svc := range b.s.Services {
		claims = append(claims, claim{svc.Annotations[model.AnnotationEIP], svc.Spec.Ports})
	}
	for _, p := range w.previous {
		claims = append(claims, claim{p.eip, p.ports})
	}
	// Each EIP port once: many Services share an EIP, each on its own ports.
	listed := map[string]bool{}
	for _, c := range claims {
		if c.eip == "" {
			continue
		}
		for _, p := range c.ports {
			k := claimKey(c.eip, p)
			if listed[k] {
				continue
			}
			listed[k] = true
			var svcs corev1.ServiceList
			if err := r.Client.List(ctx, &svcs, client.MatchingFields{indexServiceClaim: k}, client.UnsafeDisableDeepCopy); err != nil {
				return s, nil, fmt.Errorf("listing Services of EIP port %s: %w", k, err)
			}
			for i := range svcs.Items {
				svc := &svcs.Items[i]
				if slices.Contains(serviceGatewayKeys(svc), key) {
					replanned[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
					b.addService(*svc)
				}
			}
		}
	}
	// Records of owners replaced or gone, and of owners whose records someone else changed.
	for k, p := range w.previous {
		if cur, ok := b.uids[k]; !ok || cur != p.uid {
			if err := b.addRecords(ctx, indexRecordOwner, string(p.uid)); err != nil {
				return s, nil, err
			}
		}
	}
	for uid := range w.owners {
		if err := b.addRecords(ctx, indexRecordOwner, string(uid)); err != nil {
			return s, nil, err
		}
	}
	s, err := b.finish(ctx)
	for _, svc := range s.Services {
		replanned[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
	}
	return s, replanned, err
}

// snapshotBuilder collects Services and records, then completes them with the record owners,
// EndpointSlices and Pods.
type snapshotBuilder struct {
	r    *GatewayReconciler
	s    model.Snapshot
	uids map[types.NamespacedName]types.UID
	seen map[types.UID]bool
	// records are collected straight into the snapshot (one copy of each: at 10,000 Services a
	// full snapshot holds 100,000 of them); recordNames dedupes.
	recordNames        map[string]bool
	serviceRecordNames map[string]bool
}

func newSnapshotBuilder(r *GatewayReconciler, s model.Snapshot) *snapshotBuilder {
	return &snapshotBuilder{r: r, s: s, uids: map[types.NamespacedName]types.UID{}, seen: map[types.UID]bool{}, recordNames: map[string]bool{}, serviceRecordNames: map[string]bool{}}
}

func (b *snapshotBuilder) addService(svc corev1.Service) {
	k := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	if _, dup := b.uids[k]; dup {
		return
	}
	b.uids[k] = svc.UID
	b.seen[svc.UID] = true
	b.s.Services = append(b.s.Services, svc)
}

// addRecords adds the records, of both ledger forms, of one index value. Indexed lookups: a
// label selector would scan every record of the cluster.
func (b *snapshotBuilder) addRecords(ctx context.Context, index, value string) error {
	var srs vpcgwv1alpha1.ServiceRecordList
	if err := b.r.Client.List(ctx, &srs, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing ServiceRecords: %w", err)
	}
	for i := range srs.Items {
		if name := srs.Items[i].Name; !b.serviceRecordNames[name] {
			b.serviceRecordNames[name] = true
			b.s.ServiceRecords = append(b.s.ServiceRecords, srs.Items[i])
		}
	}
	var rs kubeovnv1.IptablesDnatRuleList
	if err := b.r.Client.List(ctx, &rs, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing records: %w", err)
	}
	for i := range rs.Items {
		if name := rs.Items[i].Name; !b.recordNames[name] {
			b.recordNames[name] = true
			b.s.Records = append(b.s.Records, rs.Items[i])
		}
	}
	return nil
}

// recordOwners are the owners the records collected so far name, of both forms.
func (b *snapshotBuilder) recordOwners() []recordOwner {
	out := make([]recordOwner, 0, len(b.s.ServiceRecords)+len(b.s.Records))
	add := func(l map[string]string) {
		out = append(out, recordOwner{
			key: types.NamespacedName{Namespace: l[model.LabelRecordNamespace], Name: l[model.LabelRecordName]},
			uid: types.UID(l[model.LabelRecordUID]),
		})
	}
	for i := range b.s.ServiceRecords {
		add(b.s.ServiceRecords[i].Labels)
	}
	for i := range b.s.Records {
		add(b.s.Records[i].Labels)
	}
	return out
}

type recordOwner struct {
	key types.NamespacedName
	uid types.UID
}

func (b *snapshotBuilder) finish(ctx context.Context) (model.Snapshot, error) {
	s := b.s
	// The records of every Service; then a record's owner is part of the snapshot, or the model
	// takes the record for an orphan.
	for _, svc := range s.Services {
		if err := b.addRecords(ctx, indexRecordOwner, string(svc.UID)); err != nil {
			return s, err
		}
	}
	for _, o := range b.recordOwners() {
		owner, uid := o.key, o.uid
		if b.seen[uid] || owner.Name == "" {
			continue
		}
		var svc corev1.Service
		switch err := b.r.Client.Get(ctx, owner, &svc, client.UnsafeDisableDeepCopy); {
		case err == nil && svc.UID == uid:
			b.addService(svc)
			if err := b.addRecords(ctx, indexRecordOwner, string(uid)); err != nil {
				return s, err
			}
		case err != nil && !apierrors.IsNotFound(err):
			return s, fmt.Errorf("reading record owner %s: %w", owner, err)
		}
	}
	s.Services, s.Records, s.ServiceRecords = b.s.Services, b.s.Records, b.s.ServiceRecords

	pods := map[types.NamespacedName]bool{}
	for _, svc := range s.Services {
		var es discoveryv1.EndpointSliceList
		if err := b.r.Client.List(ctx, &es, client.InNamespace(svc.Namespace), client.MatchingFields{indexSliceService: svc.Name}, client.UnsafeDisableDeepCopy); err != nil {
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
		switch err := b.r.Client.Get(ctx, k, &p, client.UnsafeDisableDeepCopy); {
		case err == nil:
			s.Pods = append(s.Pods, p)
		case !apierrors.IsNotFound(err):
			return s, fmt.Errorf("reading backend pod %s: %w", k, err)
		}
	}
	return s, nil
}
