// Package inspect answers an operator's questions with the controller's own model: what each
// Service is served as, why one is not, and what a gateway's data plane holds (SPEC O2).
package inspect

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Snapshot lists, through a live client, what the model reads. It is meant for one-off
// questions (a kubectl plugin), not for a controller: it lists every Service, slice and Pod.
func Snapshot(ctx context.Context, c client.Reader) (model.Snapshot, error) {
	var s model.Snapshot
	var svcs corev1.ServiceList
	var slices discoveryv1.EndpointSliceList
	var pods corev1.PodList
	var gws kubeovnv1.VpcNatGatewayList
	var eips kubeovnv1.IptablesEIPList
	var subnets kubeovnv1.SubnetList
	var vpcs kubeovnv1.VpcList
	var records kubeovnv1.IptablesDnatRuleList
	for _, l := range []client.ObjectList{&svcs, &slices, &pods, &gws, &eips, &subnets, &vpcs} {
		if err := c.List(ctx, l); err != nil {
			return s, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	if err := c.List(ctx, &records, client.MatchingLabels{model.LabelRecord: "true"}); err != nil {
		return s, fmt.Errorf("listing records: %w", err)
	}
	var serviceRecords vpcgwv1alpha1.ServiceRecordList
	if err := c.List(ctx, &serviceRecords, client.MatchingLabels{model.LabelRecord: "true"}); err != nil {
		return s, fmt.Errorf("listing ServiceRecords: %w", err)
	}
	owners := map[string]bool{}
	for _, r := range records.Items {
		owners[r.Labels[model.LabelRecordUID]] = true
	}
	for _, r := range serviceRecords.Items {
		owners[r.Labels[model.LabelRecordUID]] = true
	}
	s.ServiceRecords = serviceRecords.Items
	for _, svc := range svcs.Items {
		if svc.Annotations[model.AnnotationGateway] != "" || slicesContains(svc.Finalizers, model.Finalizer) || owners[string(svc.UID)] {
			s.Services = append(s.Services, svc)
		}
	}
	for _, p := range pods.Items {
		if p.Labels[model.LabelGatewayPod] == "true" {
			s.GatewayPods = append(s.GatewayPods, p)
		} else {
			s.Pods = append(s.Pods, p)
		}
	}
	s.EndpointSlices, s.Gateways, s.EIPs, s.Subnets, s.Records = slices.Items, gws.Items, eips.Items, subnets.Items, records.Items
	s.Vpcs = vpcs.Items
	return s, nil
}

func slicesContains(s []string, v string) bool { return slices.Contains(s, v) }

// Status writes one line per Service that names a gateway: gateway, EIP, ingress, identities,
// backends, affinity, ready, and the reason when something is not served.
func Status(w io.Writer, plan model.Plan, snap model.Snapshot) error {
	ingress := map[string]string{}
	eipOf := map[string]string{}
	for _, svc := range snap.Services {
		k := svc.Namespace + "/" + svc.Name
		var ips []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		ingress[k] = strings.Join(ips, ",")
		eipOf[k] = svc.Annotations[model.AnnotationEIP]
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tGATEWAY\tEIP\tINGRESS\tIDENTITIES\tBACKENDS\tAFFINITY\tREADY\tWHY NOT")
	for _, sp := range plan.Services {
		k := sp.Key.String()
		ids := make([]string, 0, len(sp.Identities))
		backendSet := map[string]bool{}
		affinity := "None"
		for _, id := range sp.Identities {
			ids = append(ids, fmt.Sprintf("%s:%d/%s", id.VIP, id.Port, id.Protocol))
			for _, b := range id.Backends {
				backendSet[b.String()] = true
			}
			if id.AffinityTimeoutSeconds > 0 {
				affinity = fmt.Sprintf("ClientIP(%ds)", id.AffinityTimeoutSeconds)
			}
		}
		bs := make([]string, 0, len(backendSet))
		for b := range backendSet {
			bs = append(bs, b)
		}
		slices.Sort(bs)
		ready := sp.Served() && len(sp.CreateRecords)+len(sp.UpdateRecords)+len(sp.StatusRecords) == 0 && !sp.WriteRecord && !sp.IngressWrite
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\n", k, dash(sp.Gateway), dash(eipOf[k]), dash(ingress[k]),
			dash(strings.Join(ids, ",")), dash(strings.Join(bs, ",")), affinity, ready, dash(whyNot(sp)))
	}
	return tw.Flush()
}

// Explain says in a sentence or two why a Service is or is not served.
func Explain(plan model.Plan, namespace, name string) (string, error) {
	for _, sp := range plan.Services {
		if sp.Key.Namespace != namespace || sp.Key.Name != name {
			continue
		}
		var b strings.Builder
		switch {
		case sp.EIPServed && sp.ClusterIPServed:
			fmt.Fprintf(&b, "Service %s is served by gateway %s through EIP %s and ClusterIP %s", sp.Key, sp.Gateway, sp.EIP, sp.ClusterIP)
		case sp.EIPServed:
			fmt.Fprintf(&b, "Service %s is served by gateway %s through EIP %s", sp.Key, sp.Gateway, sp.EIP)
		case sp.ClusterIPServed:
			fmt.Fprintf(&b, "Service %s is served by gateway %s through ClusterIP %s", sp.Key, sp.Gateway, sp.ClusterIP)
		default:
			fmt.Fprintf(&b, "Service %s is not served", sp.Key)
		}
		if !sp.Served() || sp.EIPReason != "" || sp.ClusterIPReason != "" {
			if why := whyNot(sp); why != "" {
				fmt.Fprintf(&b, ": %s", why)
			}
		}
		b.WriteString(".\n")
		n := 0
		for _, id := range sp.Identities {
			n += len(id.Backends)
		}
		if sp.Served() && n == 0 {
			b.WriteString("It has no ready backend: check its EndpointSlices and the Pods' readiness.\n")
		}
		for _, ev := range sp.Events {
			if ev.Reason == model.ReasonBackendSkipped {
				fmt.Fprintf(&b, "%s\n", ev.Message)
			}
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("Service %s/%s does not name a gateway (annotation %s) and holds nothing of vpcgw's", namespace, name, model.AnnotationGateway)
}

func whyNot(sp model.ServicePlan) string {
	var parts []string
	if !sp.EIPServed && sp.EIPReason != "" {
		parts = append(parts, "EIP: "+sp.EIPReason)
	}
	if !sp.ClusterIPServed && sp.ClusterIPReason != "" && sp.ClusterIPReason != sp.EIPReason {
		parts = append(parts, "ClusterIP: "+sp.ClusterIPReason)
	}
	return strings.Join(parts, "; ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
