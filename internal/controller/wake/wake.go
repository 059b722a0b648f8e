// Package wake knows which gateways an object's event wakes (and marks what changed for the
// gateway's next partial plan), and the cache indexes that tells it and the model's reads.
package wake

import (
	"cmp"
	"context"
	"fmt"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// The cache indexes (RegisterIndexes).
const (
	IndexServiceGateway = "vpcgw.gateway" // annotation, or model.UnboundGateway for finalizer holders without one
	indexServiceEIP     = "vpcgw.eip"
	IndexServiceClaim   = "vpcgw.eip-port" // "<EIP name>/<port>/<protocol>" per port: who may conflict (SPEC I2)
	IndexSliceService   = "vpcgw.service"
	indexSlicePod       = "vpcgw.pod"            // namespace/name of the Pods an EndpointSlice targets
	IndexRecordOwner    = "vpcgw.record-owner"   // a Service record's owner UID
	IndexRecordGateway  = "vpcgw.record-gateway" // a Service record's gateway
	IndexAddressPod     = "vpcgw.address-pod"    // namespace/name of the Pod a kube-ovn IP is allocated to
	IndexNatEIP         = "vpcgw.nat-eip"        // the EIP of kube-ovn's own DNAT rules (not records)
)

// Marks records what changed, per gateway (the controller's change tracker): the mappers mark
// before they return the gateways to wake, so a sync that takes the marks reads a cache that
// already holds the change.
type Marks interface {
	MarkService(gateways []string, key types.NamespacedName)
	MarkOwner(gateway string, key types.NamespacedName, uid types.UID)
}

// Mapper maps events to the gateways they wake, reading the cache through Client.
type Mapper struct {
	Client client.Reader
	Marks  Marks
	Log    logr.Logger
}

// RegisterIndexes adds the indexes the mappers and the model's reads use.
func RegisterIndexes(ctx context.Context, idx client.FieldIndexer) error {
	for _, ix := range []struct {
		obj  client.Object
		name string
		fn   client.IndexerFunc
	}{
		{&corev1.Service{}, IndexServiceGateway, func(o client.Object) []string { return model.ServiceGatewayKeys(o) }},
		{&corev1.Service{}, indexServiceEIP, func(o client.Object) []string { return nonEmpty(o.GetAnnotations()[model.AnnotationEIP]) }},
		{&corev1.Service{}, IndexServiceClaim, func(o client.Object) []string {
			if svc, ok := o.(*corev1.Service); ok {
				return model.ClaimKeys(svc)
			}
			return nil
		}},
		{&discoveryv1.EndpointSlice{}, IndexSliceService, func(o client.Object) []string {
			return nonEmpty(o.GetLabels()[discoveryv1.LabelServiceName])
		}},
		{&discoveryv1.EndpointSlice{}, indexSlicePod, slicePods},
		{&kubeovnv1.IptablesDnatRule{}, IndexNatEIP, func(o client.Object) []string {
			if r, ok := o.(*kubeovnv1.IptablesDnatRule); ok && !model.IsRecord(r) {
				return nonEmpty(r.Spec.EIP)
			}
			return nil
		}},
		{&kubeovnv1.IP{}, IndexAddressPod, func(o client.Object) []string {
			if a, ok := o.(*kubeovnv1.IP); ok && a.Spec.PodName != "" {
				return []string{a.Spec.Namespace + "/" + a.Spec.PodName}
			}
			return nil
		}},
		{&kubeovnv1.IptablesDnatRule{}, IndexRecordOwner, func(o client.Object) []string { return recordLabel(o, model.LabelRecordUID) }},
		{&kubeovnv1.IptablesDnatRule{}, IndexRecordGateway, func(o client.Object) []string { return recordLabel(o, model.LabelGateway) }},
		{&vpcgwv1alpha1.ServiceRecord{}, IndexRecordOwner, func(o client.Object) []string { return recordLabel(o, model.LabelRecordUID) }},
		{&vpcgwv1alpha1.ServiceRecord{}, IndexRecordGateway, func(o client.Object) []string { return recordLabel(o, model.LabelGateway) }},
	} {
		if err := idx.IndexField(ctx, ix.obj, ix.name, ix.fn); err != nil {
			return fmt.Errorf("index %s: %w", ix.name, err)
		}
	}
	return nil
}

// ServiceChanged marks a Service for replanning on the gateways it wakes, and returns them.
func (m *Mapper) ServiceChanged(o client.Object) []string {
	keys := model.ServiceGatewayKeys(o)
	m.Marks.MarkService(keys, types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()})
	return keys
}

func slicePods(o client.Object) []string {
	es, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil
	}
	var out []string
	for _, ep := range es.Endpoints {
		if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
			ns := ref.Namespace
			if ns == "" {
				ns = es.Namespace
			}
			out = append(out, ns+"/"+ref.Name)
		}
	}
	return out
}

// GatewayOfSlice wakes the gateways of the Service an EndpointSlice belongs to (SPEC B1).
func (m *Mapper) GatewayOfSlice(ctx context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" {
		return nil
	}
	var svc corev1.Service
	if err := m.Client.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, &svc, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return requests(m.ServiceChanged(&svc))
}

// GatewaysOfEIP wakes the gateways of every Service that names the EIP (SPEC S4: served as soon
// as the EIP is Ready, woken by the EIP's own events).
func (m *Mapper) GatewaysOfEIP(ctx context.Context, o client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := m.Client.List(ctx, &svcs, client.MatchingFields{indexServiceEIP: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		m.Log.Error(err, "listing Services of EIP", "eip", o.GetName())
		return nil
	}
	var keys []string
	for i := range svcs.Items {
		keys = append(keys, m.ServiceChanged(&svcs.Items[i])...)
	}
	if eip, ok := o.(*kubeovnv1.IptablesEIP); ok {
		keys = append(keys, nonEmpty(eip.Spec.NatGwDp)...)
	}
	return requests(keys)
}

// GatewaysOfPod wakes a gateway pod's gateway, and the gateways of Services whose endpoints
// target the pod (SPEC B2).
func (m *Mapper) GatewaysOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	var keys []string
	if o.GetLabels()[model.LabelGatewayPod] == "true" {
		keys = append(keys, nonEmpty(o.GetAnnotations()[model.AnnotationGatewayPod])...)
	}
	return requests(append(keys, m.gatewaysOfBackend(ctx, o.GetNamespace(), o.GetName())...))
}

// GatewayOfStatefulSet wakes the gateway of one of kube-ovn's gateway StatefulSets: its replicas
// and UID decide which of the gateway's pods are instances (SPEC N5). The gateway is the one its
// Pod template names, or its controller (a VpcNatGateway).
func (m *Mapper) GatewayOfStatefulSet(_ context.Context, o client.Object) []reconcile.Request {
	sts, ok := o.(*appsv1.StatefulSet)
	if !ok || sts.Labels[model.LabelGatewayPod] != "true" {
		return nil
	}
	keys := nonEmpty(sts.Spec.Template.Annotations[model.AnnotationGatewayPod])
	if c := metav1.GetControllerOfNoCopy(sts); c != nil && c.Kind == "VpcNatGateway" {
		keys = append(keys, c.Name)
	}
	return requests(keys)
}

// GatewaysOfAddress wakes the gateways of Services whose endpoints target the Pod a kube-ovn IP
// is allocated to.
func (m *Mapper) GatewaysOfAddress(ctx context.Context, o client.Object) []reconcile.Request {
	a, ok := o.(*kubeovnv1.IP)
	if !ok || a.Spec.PodName == "" {
		return nil
	}
	return requests(m.gatewaysOfBackend(ctx, a.Spec.Namespace, a.Spec.PodName))
}

// gatewaysOfBackend marks the Services whose endpoints target Pod namespace/name and returns
// their gateways.
func (m *Mapper) gatewaysOfBackend(ctx context.Context, namespace, name string) []string {
	var keys []string
	var es discoveryv1.EndpointSliceList
	if err := m.Client.List(ctx, &es, client.MatchingFields{indexSlicePod: namespace + "/" + name}); err == nil {
		for i := range es.Items {
			keys = append(keys, reqNames(m.GatewayOfSlice(ctx, &es.Items[i]))...)
		}
	}
	return keys
}

// GatewaysOfSubnet wakes the gateways of a Subnet's VPC.
func (m *Mapper) GatewaysOfSubnet(ctx context.Context, o client.Object) []reconcile.Request {
	sub, ok := o.(*kubeovnv1.Subnet)
	if !ok {
		return nil
	}
	vpc := &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: cmp.Or(sub.Spec.Vpc, kubeovnv1.DefaultVpc)}}
	return m.GatewaysOfVpc(ctx, vpc)
}

// GatewaysOfVpc wakes the gateways of a Vpc.
func (m *Mapper) GatewaysOfVpc(ctx context.Context, o client.Object) []reconcile.Request {
	var gws kubeovnv1.VpcNatGatewayList
	if err := m.Client.List(ctx, &gws); err != nil {
		m.Log.Error(err, "listing gateways")
		return nil
	}
	var keys []string
	for i := range gws.Items {
		if gws.Items[i].Spec.Vpc == o.GetName() {
			keys = append(keys, gws.Items[i].Name)
		}
	}
	return requests(keys)
}

// AllGateways wakes every gateway.
func (m *Mapper) AllGateways(ctx context.Context, _ client.Object) []reconcile.Request {
	var gws kubeovnv1.VpcNatGatewayList
	if err := m.Client.List(ctx, &gws); err != nil {
		m.Log.Error(err, "listing gateways")
		return nil
	}
	keys := make([]string, 0, len(gws.Items))
	for i := range gws.Items {
		keys = append(keys, gws.Items[i].Name)
	}
	return requests(keys)
}

// recordLabel indexes Service records (not kube-ovn's own rules) by one of their labels.
func recordLabel(o client.Object, label string) []string {
	if o.GetLabels()[model.LabelRecord] != "true" {
		return nil
	}
	return nonEmpty(o.GetLabels()[label])
}

// GatewayOfRecord wakes only a record's gateway (SPEC R3), which replans the record's owner; an
// object without record labels is one of kube-ovn's own rules (GatewayOfNatRule).
func (m *Mapper) GatewayOfRecord(ctx context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if !model.HasRecordLabels(l) {
		return m.GatewayOfNatRule(ctx, o)
	}
	if l[model.LabelGateway] == "" {
		return nil
	}
	m.Marks.MarkOwner(l[model.LabelGateway], types.NamespacedName{Namespace: l[model.LabelRecordNamespace], Name: l[model.LabelRecordName]}, types.UID(l[model.LabelRecordUID]))
	return requests([]string{l[model.LabelGateway]})
}

// GatewayOfNatRule wakes the gateway of the EIP that one of kube-ovn's own DNAT or FIP rules
// uses: what it forwards is held (SPEC N3), and the gateway's next plan is full.
func (m *Mapper) GatewayOfNatRule(ctx context.Context, o client.Object) []reconcile.Request {
	var eipName string
	switch rule := o.(type) {
	case *kubeovnv1.IptablesDnatRule:
		eipName = rule.Spec.EIP
	case *kubeovnv1.IptablesFIPRule:
		eipName = rule.Spec.EIP
	}
	if eipName == "" {
		return nil
	}
	var eip kubeovnv1.IptablesEIP
	if err := m.Client.Get(ctx, types.NamespacedName{Name: eipName}, &eip); err != nil {
		return nil
	}
	return requests(nonEmpty(eip.Spec.NatGwDp))
}

func requests(keys []string) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(keys))
	for _, k := range keys {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: k}})
	}
	return out
}

func reqNames(rs []reconcile.Request) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

// Enqueue adds the gateways keys to the work queue q.
func Enqueue(q workqueue.TypedRateLimitingInterface[reconcile.Request], keys []string) {
	for _, r := range requests(keys) {
		q.Add(r)
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
