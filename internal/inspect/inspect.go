// Package inspect answers an operator's questions with the controller's own model: what each
// Service is served as, why one is not and what to do about it, and what a gateway's instances
// and routes hold (SPEC O2). The rules are the controller's: internal/model.Compute on a snapshot
// read through the API, with the gates the running controller publishes (internal/status). What
// each gateway's plan reads, the model says: the snapshot is read through the model's Reader
// (model.ReadScope over the lists read once), as the controller reads its cache. When the rules
// cannot be applied (no running controller's status, or a read they need is refused), nothing is
// assumed: a Service is shown as far as what the user may read of it tells (evidence.go), else
// as Unknown, and what is missing is said.
package inspect

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// SnapshotOptions say how to read a snapshot.
type SnapshotOptions struct {
	// Namespace is read alone when the user may not list Services, EndpointSlices, Pods or
	// Events in all namespaces (a tenant): the view is then partial, and a warning says so.
	Namespace string
	// KubeOVNNamespace is kube-ovn's namespace (the controller's --kube-ovn-namespace): its
	// ConfigMap ovn-vpc-nat-config names the gateway pods (SPEC K5).
	KubeOVNNamespace string
	// Include is a Service to plan even when it names no gateway (explain).
	Include *corev1.Service
	// Events: read the controller's events on Services (the view needs them when the rules
	// cannot be applied; they are read then anyway).
	Events bool
}

// Read is a snapshot and what could not be read.
type Read struct {
	Snapshot model.Snapshot
	// Warnings say what the view lacks.
	Warnings []string
	// RecordsUnknown: the records could not be read.
	RecordsUnknown bool
	// Unknown are the reads the controller's rules need that the user may not do, as
	// "list vpc-nat-gateways.kubeovn.io": with any, the rules are not applied to the Services.
	Unknown []string
	// Events are the controller's events on Services (read with SnapshotOptions.Events or
	// Unknown); EventsUnknown says why they could not be read.
	Events        []corev1.Event
	EventsUnknown string

	// denied are the reads refused, by what their lack costs (a denial), in the order found.
	denied []denial
}

// What a refused read costs the view (the warning names each).
const (
	costRules     = "the controller's rules cannot be applied without them: each Service is shown as far as its ingress and the controller's events on it tell"
	costRecords   = "whether the records are Ready is unknown"
	costInstances = "the instances shown are those the controller reports"
	costEvents    = "the controller's events on the Services are not read"
)

type denial struct{ read, cost string }

// deny notes a refused read and what it costs.
func (rd *Read) deny(read, cost string) {
	rd.denied = append(rd.denied, denial{read, cost})
	if cost == costRules {
		rd.Unknown = append(rd.Unknown, read)
	}
}

// deniedWarning is one warning for every refused read, grouped by what they cost.
func (rd *Read) deniedWarning() string {
	if len(rd.denied) == 0 {
		return ""
	}
	var costs []string
	byCost := map[string][]string{}
	for _, d := range rd.denied {
		if byCost[d.cost] == nil {
			costs = append(costs, d.cost)
		}
		byCost[d.cost] = append(byCost[d.cost], d.read)
	}
	parts := make([]string, 0, len(costs))
	for _, c := range costs {
		parts = append(parts, JoinReads(byCost[c])+" ("+c+")")
	}
	return "you may not " + strings.Join(parts, "; ") + ". The chart's ClusterRole " + ViewRole + " grants these reads"
}

// JoinReads joins reads as "list a, b, c": a verb is not repeated.
func JoinReads(reads []string) string {
	out := make([]string, 0, len(reads))
	verb := ""
	for _, r := range reads {
		v, what, _ := strings.Cut(r, " ")
		if v == verb {
			out = append(out, what)
			continue
		}
		verb = v
		out = append(out, r)
	}
	return strings.Join(out, ", ")
}

// ViewRole and TenantViewRole are the chart's ClusterRoles for the plugin's users, with the
// default fullname vpcgw (deploy/helm/vpcgw/templates/rbac-view.yaml): cluster-wide reads, and a
// tenant's reads in its namespace.
const (
	ViewRole       = "vpcgw-view"
	TenantViewRole = "vpcgw-tenant-view"
)

// Snapshot lists, through a live client, what the model reads. It is meant for one-off
// questions (a kubectl plugin), not for a controller: it lists every Service, slice and Pod. A
// read the user may not do is no error: Read says what it lacks.
func Snapshot(ctx context.Context, c client.Reader, o SnapshotOptions) (Read, error) {
	var rd Read
	s := &rd.Snapshot
	reader := &listReader{}
	scoped, err := rd.listWorkloads(ctx, c, o, reader)
	if err != nil {
		return rd, err
	}
	if err := rd.listKubeOVN(ctx, c); err != nil {
		return rd, err
	}
	if err := rd.listRecords(ctx, c, reader); err != nil {
		return rd, err
	}
	s.Placement = placement(ctx, c, o.KubeOVNNamespace)
	if scoped && s.Placement.KubeOVNNamespace != o.Namespace {
		// The gateway pods are kube-ovn's, in its namespace.
		if err := rd.listGatewayPods(ctx, c); err != nil {
			return rd, err
		}
	}
	if err := rd.listGatewayStatefulSets(ctx, c); err != nil {
		return rd, err
	}
	if err := rd.listAddresses(ctx, c, reader); err != nil {
		return rd, err
	}
	if o.Events || len(rd.Unknown) > 0 {
		if err := rd.listEvents(ctx, c, o.Namespace); err != nil {
			return rd, err
		}
	}
	if w := rd.deniedWarning(); w != "" {
		rd.Warnings = append(rd.Warnings, w)
	}
	// What each gateway's plan reads, the model says (model.ReadScope), as in the controller.
	read, err := readGateways(reader, *s, o.Include)
	if err != nil {
		return rd, err
	}
	rd.Snapshot = read
	return rd, nil
}

// listing is a list to read and what it holds, for messages.
type listing struct {
	list client.ObjectList
	what string
}

// listWorkloads lists the Services (with o.Include), EndpointSlices and Pods into l, the gateway
// pods into rd's snapshot. A tenant who may not list one of them in all namespaces gets those of
// o.Namespace and a warning; scoped says so. Services the user may not list even there are an
// error (there is nothing to show), unless one is included (explain); EndpointSlices and Pods
// are then unknown.
func (rd *Read) listWorkloads(ctx context.Context, c client.Reader, o SnapshotOptions, l *listReader) (scoped bool, err error) {
	var svcs corev1.ServiceList
	var eps discoveryv1.EndpointSliceList
	var pods corev1.PodList
	var narrowed []string
	for _, li := range []listing{{&svcs, "services"}, {&eps, "endpointslices.discovery.k8s.io"}, {&pods, "pods"}} {
		err := c.List(ctx, li.list)
		if apierrors.IsForbidden(err) && o.Namespace != "" {
			narrowed = append(narrowed, li.what)
			scoped = true
			err = c.List(ctx, li.list, client.InNamespace(o.Namespace))
		}
		switch {
		case apierrors.IsForbidden(err) && (li.what != "services" || o.Include != nil):
			rd.deny(fmt.Sprintf("list %s in namespace %s", li.what, o.Namespace), costRules)
		case apierrors.IsForbidden(err):
			return scoped, fmt.Errorf("listing %s: %w (the chart's ClusterRole %s, bound in the namespace, grants it)", li.what, err, TenantViewRole)
		case err != nil:
			return scoped, fmt.Errorf("listing %s: %w", li.what, err)
		}
	}
	if len(narrowed) > 0 {
		rd.Warnings = append(rd.Warnings, fmt.Sprintf("you may not list %s in all namespaces: only namespace %s is read, so a conflict with "+
			"another namespace's Service or its share of a gateway's bound is not seen", strings.Join(narrowed, ", "), o.Namespace))
	}
	l.services, l.slices = svcs.Items, eps.Items
	if o.Include != nil && !slices.ContainsFunc(l.services, func(svc corev1.Service) bool { return svc.UID == o.Include.UID }) {
		l.services = append(l.services, *o.Include)
	}
	for _, p := range pods.Items {
		if p.Labels[model.LabelGatewayPod] == "true" {
			rd.Snapshot.GatewayPods = append(rd.Snapshot.GatewayPods, p)
		} else {
			l.pods = append(l.pods, p)
		}
	}
	return scoped, nil
}

// listKubeOVN lists kube-ovn's gateways, EIPs, Subnets and Vpcs: the plan needs them all, so
// one the user may not list makes the rules unknown.
func (rd *Read) listKubeOVN(ctx context.Context, c client.Reader) error {
	s := &rd.Snapshot
	var gws kubeovnv1.VpcNatGatewayList
	var eips kubeovnv1.IptablesEIPList
	var subnets kubeovnv1.SubnetList
	var vpcs kubeovnv1.VpcList
	for _, li := range []listing{{&gws, "vpc-nat-gateways.kubeovn.io"}, {&eips, "iptables-eips.kubeovn.io"}, {&subnets, "subnets.kubeovn.io"}, {&vpcs, "vpcs.kubeovn.io"}} {
		switch err := c.List(ctx, li.list); {
		case apierrors.IsForbidden(err):
			rd.deny("list "+li.what, costRules)
		case err != nil:
			return fmt.Errorf("listing %s: %w", li.what, err)
		}
	}
	s.Gateways, s.EIPs, s.Subnets, s.Vpcs = gws.Items, eips.Items, subnets.Items, vpcs.Items
	return nil
}

// GatewaysUnknown reports whether the user may not list VpcNatGateways.
func (rd *Read) GatewaysUnknown() bool {
	return slices.Contains(rd.Unknown, "list vpc-nat-gateways.kubeovn.io")
}

// EIPsUnknown reports whether the user may not list IptablesEIPs.
func (rd *Read) EIPsUnknown() bool {
	return slices.Contains(rd.Unknown, "list iptables-eips.kubeovn.io")
}

// listRecords lists the controller's records of both forms into l; a user who may not gets a
// warning, and RecordsUnknown.
func (rd *Read) listRecords(ctx context.Context, c client.Reader, l *listReader) error {
	var records kubeovnv1.IptablesDnatRuleList
	var serviceRecords vpcgwv1alpha1.ServiceRecordList
	for _, li := range []listing{{&serviceRecords, "servicerecords.vpcgw.io"}, {&records, "iptables-dnat-rules.kubeovn.io"}} {
		if err := c.List(ctx, li.list, client.MatchingLabels{model.LabelRecord: "true"}); err != nil {
			if !apierrors.IsForbidden(err) {
				return fmt.Errorf("listing records: %w", err)
			}
			rd.deny("list "+li.what, costRecords)
			rd.RecordsUnknown = true
		}
	}
	l.records, l.serviceRecords = records.Items, serviceRecords.Items
	return nil
}

// listGatewayPods lists the gateway pods in kube-ovn's namespace, for a tenant whose own
// namespace's Pods do not include them.
func (rd *Read) listGatewayPods(ctx context.Context, c client.Reader) error {
	ns := rd.Snapshot.Placement.KubeOVNNamespace
	var gwPods corev1.PodList
	switch err := c.List(ctx, &gwPods, client.InNamespace(ns), client.MatchingLabels{model.LabelGatewayPod: "true"}); {
	case apierrors.IsForbidden(err):
		rd.deny("list pods in namespace "+ns, costInstances)
	case err != nil:
		return fmt.Errorf("listing gateway pods: %w", err)
	default:
		rd.Snapshot.GatewayPods = gwPods.Items
	}
	return nil
}

// listGatewayStatefulSets lists kube-ovn's gateway StatefulSets (by its label), as the controller
// reads them: a gateway pod is an instance only as one of their replicas (SPEC N5). A user who may
// not list them in all namespaces gets those of kube-ovn's namespace, else a warning.
func (rd *Read) listGatewayStatefulSets(ctx context.Context, c client.Reader) error {
	ns := rd.Snapshot.Placement.KubeOVNNamespace
	sel := client.MatchingLabels{model.LabelGatewayPod: "true"}
	var sets appsv1.StatefulSetList
	err := c.List(ctx, &sets, sel)
	if apierrors.IsForbidden(err) {
		err = c.List(ctx, &sets, sel, client.InNamespace(ns))
	}
	switch {
	case apierrors.IsForbidden(err):
		rd.deny("list statefulsets.apps in namespace "+ns, costInstances)
	case err != nil:
		return fmt.Errorf("listing the gateways' StatefulSets: %w", err)
	default:
		rd.Snapshot.GatewayStatefulSets = sets.Items
	}
	return nil
}

// listAddresses lists kube-ovn's IP objects into l: a backend's address comes only from them
// (SPEC N2), so without them the rules are unknown.
func (rd *Read) listAddresses(ctx context.Context, c client.Reader, l *listReader) error {
	var addrs kubeovnv1.IPList
	switch err := c.List(ctx, &addrs); {
	case apierrors.IsForbidden(err):
		rd.deny("list ips.kubeovn.io", costRules)
	case err != nil:
		return fmt.Errorf("listing IPs: %w", err)
	default:
		l.addresses = addrs.Items
	}
	return nil
}

// listEvents lists the controller's events on Services (all namespaces, or namespace for a
// user who may not list them all).
func (rd *Read) listEvents(ctx context.Context, c client.Reader, namespace string) error {
	var evs corev1.EventList
	onServices := client.MatchingFields{"involvedObject.kind": "Service"}
	err := c.List(ctx, &evs, onServices)
	if apierrors.IsForbidden(err) && namespace != "" {
		err = c.List(ctx, &evs, onServices, client.InNamespace(namespace))
	}
	switch {
	case apierrors.IsForbidden(err):
		rd.EventsUnknown = "you may not list events in namespace " + namespace
		rd.deny("list events in namespace "+namespace, costEvents)
	case err != nil:
		return fmt.Errorf("listing events: %w", err)
	}
	for _, ev := range evs.Items {
		if isControllerEvent(&ev) {
			rd.Events = append(rd.Events, ev)
		}
	}
	return nil
}

// placement reads where kube-ovn runs gateway pods, as the controller does (gateway.go:placement):
// kube-ovn's namespace and the natGwNamePrefix of its ConfigMap there (missing or unreadable:
// kube-ovn's default).
func placement(ctx context.Context, c client.Reader, kubeOVNNamespace string) model.GatewayPlacement {
	if kubeOVNNamespace == "" {
		kubeOVNNamespace = model.DefaultGatewayNamespace
	}
	p := model.GatewayPlacement{KubeOVNNamespace: kubeOVNNamespace}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: kubeOVNNamespace, Name: model.GatewayConfigMap}, &cm); err == nil {
		p.NamePrefix = cm.Data[model.GatewayConfigNamePrefix]
	}
	return p
}
