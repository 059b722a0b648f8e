// Package inspect answers an operator's questions with the controller's own model: what each
// Service is served as, why one is not and what to do about it, and what a gateway's instances
// and routes hold (SPEC O2). The rules are the controller's: internal/model.Compute on a snapshot
// read through the API, with the gates the running controller publishes (internal/status). What
// each gateway's plan reads, the model says: the snapshot is read through the model's Reader
// (model.ReadScope over the lists read once), as the controller reads its cache.
package inspect

import (
	"context"
	"fmt"
	"slices"

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
	// Namespace is read alone when the user may not list Services, EndpointSlices or Pods in all
	// namespaces (a tenant): the view is then partial, and a warning says so.
	Namespace string
	// KubeOVNNamespace is kube-ovn's namespace (the controller's --kube-ovn-namespace): its
	// ConfigMap ovn-vpc-nat-config names the gateway pods (SPEC K5).
	KubeOVNNamespace string
	// Include is a Service to plan even when it names no gateway (explain).
	Include *corev1.Service
}

// Read is a snapshot and what could not be read.
type Read struct {
	Snapshot model.Snapshot
	// Warnings say what the view lacks.
	Warnings []string
	// RecordsUnknown: the records could not be read.
	RecordsUnknown bool
}

// Snapshot lists, through a live client, what the model reads. It is meant for one-off
// questions (a kubectl plugin), not for a controller: it lists every Service, slice and Pod.
func Snapshot(ctx context.Context, c client.Reader, o SnapshotOptions) (Read, error) {
	var rd Read
	s := &rd.Snapshot
	reader := &listReader{}
	scoped, err := rd.listWorkloads(ctx, c, o, reader)
	if err != nil {
		return rd, err
	}
	if err := listKubeOVN(ctx, c, s); err != nil {
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
// o.Namespace and a warning; scoped says so.
func (rd *Read) listWorkloads(ctx context.Context, c client.Reader, o SnapshotOptions, l *listReader) (scoped bool, err error) {
	var svcs corev1.ServiceList
	var eps discoveryv1.EndpointSliceList
	var pods corev1.PodList
	for _, li := range []listing{{&svcs, "Services"}, {&eps, "EndpointSlices"}, {&pods, "Pods"}} {
		err := c.List(ctx, li.list)
		if apierrors.IsForbidden(err) && o.Namespace != "" {
			rd.Warnings = append(rd.Warnings, fmt.Sprintf("you may not list %s in all namespaces: only namespace %s is read, so a conflict with "+
				"another namespace's Service or its share of a gateway's bound is not seen", li.what, o.Namespace))
			scoped = true
			err = c.List(ctx, li.list, client.InNamespace(o.Namespace))
		}
		if err != nil {
			return scoped, fmt.Errorf("listing %s: %w", li.what, err)
		}
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

// listKubeOVN lists kube-ovn's gateways, EIPs, Subnets and Vpcs into s: the plan needs them all.
func listKubeOVN(ctx context.Context, c client.Reader, s *model.Snapshot) error {
	var gws kubeovnv1.VpcNatGatewayList
	var eips kubeovnv1.IptablesEIPList
	var subnets kubeovnv1.SubnetList
	var vpcs kubeovnv1.VpcList
	for _, li := range []listing{{&gws, "VpcNatGateways"}, {&eips, "IptablesEIPs"}, {&subnets, "Subnets"}, {&vpcs, "Vpcs"}} {
		if err := c.List(ctx, li.list); err != nil {
			if apierrors.IsForbidden(err) {
				return fmt.Errorf("listing %s: %w (the plugin reads kube-ovn's VpcNatGateways, IptablesEIPs, Subnets and Vpcs, as the controller does)", li.what, err)
			}
			return fmt.Errorf("listing %s: %w", li.what, err)
		}
	}
	s.Gateways, s.EIPs, s.Subnets, s.Vpcs = gws.Items, eips.Items, subnets.Items, vpcs.Items
	return nil
}

// listRecords lists the controller's records of both forms into l; a user who may not gets a
// warning, and RecordsUnknown.
func (rd *Read) listRecords(ctx context.Context, c client.Reader, l *listReader) error {
	var records kubeovnv1.IptablesDnatRuleList
	var serviceRecords vpcgwv1alpha1.ServiceRecordList
	for _, list := range []client.ObjectList{&records, &serviceRecords} {
		if err := c.List(ctx, list, client.MatchingLabels{model.LabelRecord: "true"}); err != nil {
			if !apierrors.IsForbidden(err) {
				return fmt.Errorf("listing records: %w", err)
			}
			if !rd.RecordsUnknown {
				rd.Warnings = append(rd.Warnings, "you may not list the controller's records (ServiceRecords, IptablesDnatRules): whether they are Ready is unknown")
			}
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
		rd.Warnings = append(rd.Warnings, fmt.Sprintf("you may not list the gateway pods in namespace %s: the instances shown are those the controller reports", ns))
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
		rd.Warnings = append(rd.Warnings, fmt.Sprintf("you may not list the gateways' StatefulSets in namespace %s: the instances shown are those the controller reports", ns))
	case err != nil:
		return fmt.Errorf("listing the gateways' StatefulSets: %w", err)
	default:
		rd.Snapshot.GatewayStatefulSets = sets.Items
	}
	return nil
}

// listAddresses lists kube-ovn's IP objects into l: a backend's address comes only from them
// (SPEC N2).
func (rd *Read) listAddresses(ctx context.Context, c client.Reader, l *listReader) error {
	var addrs kubeovnv1.IPList
	switch err := c.List(ctx, &addrs); {
	case apierrors.IsForbidden(err):
		rd.Warnings = append(rd.Warnings, "you may not list kube-ovn's IP objects (ips.kubeovn.io): backends of Pods cannot be resolved and are shown as skipped")
	case err != nil:
		return fmt.Errorf("listing IPs: %w", err)
	default:
		l.addresses = addrs.Items
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
