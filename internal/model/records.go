package model

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// ServiceRecordName is "lb-<service name, truncated>-<12 hex of sha256(ns/name/uid)>", at most 63
// characters and a valid DNS-1123 label. The UID is part of it, so that a Service recreated with
// the same name gets a record of its own while the old one is released (SPEC I3).
func ServiceRecordName(ns, name string, uid types.UID) string {
	sum := sha256.Sum256([]byte(ns + "/" + name + "/" + string(uid)))
	const maxName = 63 - len("lb-") - len("-") - 12
	base := strings.Trim(name[:min(len(name), maxName)], "-.")
	base = strings.ReplaceAll(base, ".", "-")
	return "lb-" + base + "-" + hex.EncodeToString(sum[:])[:12]
}

// desiredServiceRecord is the ledger entry of a served Service in the ServiceRecord form: every
// served port with its backends, built from the identities just planned (SPEC R1-R3, R6).
func desiredServiceRecord(svc *corev1.Service, b binding, sp *ServicePlan, timeout int32) *vpcgwv1alpha1.ServiceRecord {
	labels := map[string]string{
		LabelRecordNamespace: svc.Namespace,
		LabelRecordName:      svc.Name,
		LabelRecordUID:       string(svc.UID),
		LabelRecord:          "true",
		LabelGateway:         b.gateway,
	}
	rec := &vpcgwv1alpha1.ServiceRecord{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceRecordName(svc.Namespace, svc.Name, svc.UID), Labels: labels},
		Spec: vpcgwv1alpha1.ServiceRecordSpec{
			Service:                       vpcgwv1alpha1.ServiceReference{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID},
			Gateway:                       b.gateway,
			ClusterIP:                     addrText(sp.ClusterIP),
			SessionAffinityTimeoutSeconds: timeout,
			Ports:                         []vpcgwv1alpha1.RecordPort{},
		},
	}
	if sp.EIP.IsValid() {
		labels[LabelEIPAddress] = sp.EIP.String()
		labels[LabelEIPUID] = string(b.eip.UID)
		rec.Spec.EIP, rec.Spec.EIPUID, rec.Spec.EIPAddress = b.eipName, b.eip.UID, sp.EIP.String()
	}
	for _, id := range sp.Identities {
		if id.VIP == sp.EIP && len(id.SourceRanges) > 0 {
			rec.Spec.SourceRanges = id.SourceRanges // the same on every EIP identity of the Service
			break
		}
	}
	// Both identities of a port have the same backends (SPEC I1): take them from one VIP.
	vip := cmp.Or(sp.EIP, sp.ClusterIP)
	addrs := map[netip.Addr]bool{}
	var ports []string
	for _, id := range sp.Identities {
		if id.VIP != vip {
			continue
		}
		p := vpcgwv1alpha1.RecordPort{Port: id.Port, Protocol: string(id.Protocol)}
		for _, be := range id.Backends {
			p.Backends = append(p.Backends, be.String())
			addrs[be.IP] = true
		}
		rec.Spec.Ports = append(rec.Spec.Ports, p)
	}
	slices.SortFunc(rec.Spec.Ports, func(a, b vpcgwv1alpha1.RecordPort) int {
		return cmp.Or(strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	for _, p := range rec.Spec.Ports {
		ports = append(ports, strconv.Itoa(int(p.Port))+"/"+p.Protocol)
	}
	rec.Status = vpcgwv1alpha1.ServiceRecordStatus{Ready: true, Ports: strings.Join(ports, ","), Backends: int32(len(addrs))}
	return rec
}

// serviceRecordCurrent reports whether an existing ServiceRecord already says what want says.
func serviceRecordCurrent(cur, want *vpcgwv1alpha1.ServiceRecord) bool {
	return labelsInclude(cur.Labels, want.Labels) && cur.Status == want.Status && serviceRecordSpecEqual(&cur.Spec, &want.Spec)
}

func serviceRecordSpecEqual(a, b *vpcgwv1alpha1.ServiceRecordSpec) bool {
	return a.Service == b.Service && a.Gateway == b.Gateway && a.EIP == b.EIP && a.EIPUID == b.EIPUID &&
		a.EIPAddress == b.EIPAddress && a.ClusterIP == b.ClusterIP &&
		a.SessionAffinityTimeoutSeconds == b.SessionAffinityTimeoutSeconds && slices.Equal(a.SourceRanges, b.SourceRanges) &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y vpcgwv1alpha1.RecordPort) bool {
			return x.Port == y.Port && x.Protocol == y.Protocol && slices.Equal(x.Backends, y.Backends)
		})
}

// RecordName is "lb-<service name, truncated>-<12 hex of sha256(ns/name/proto/port/backendIP/
// targetPort)>", at most 63 characters and a valid DNS-1123 label (SPEC R1).
func RecordName(ns, name string, proto gwstate.Protocol, port int32, backendIP string, targetPort int32) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%s/%d/%s/%d", ns, name, proto, port, backendIP, targetPort)))
	hash := hex.EncodeToString(sum[:])[:12]
	const maxName = 63 - len("lb-") - len("-") - 12
	base := strings.Trim(name[:min(len(name), maxName)], "-.")
	base = strings.ReplaceAll(base, ".", "-")
	return "lb-" + base + "-" + hash
}

// recordLabels are the labels of a Service's records on one port (SPEC R2). The records of that
// port share the map: treat it as read-only.
func recordLabels(svc *corev1.Service, b binding, sp *ServicePlan, port int32) map[string]string {
	l := map[string]string{
		LabelRecordNamespace: svc.Namespace,
		LabelRecordName:      svc.Name,
		LabelRecordUID:       string(svc.UID),
		LabelRecord:          "true",
		LabelGateway:         b.gateway,
		LabelExternalPort:    strconv.Itoa(int(port)),
	}
	if sp.EIP.IsValid() {
		l[LabelEIPAddress] = sp.EIP.String()
		l[LabelEIPUID] = string(b.eip.UID)
	}
	return l
}

// desiredRecord is the ledger entry of one (Service port, backend) (SPEC R1, R3).
func desiredRecord(svc *corev1.Service, b binding, sp *ServicePlan, labels map[string]string, p corev1.ServicePort, proto gwstate.Protocol, be gwstate.Backend, timeout int32) kubeovnv1.IptablesDnatRule {
	port := labels[LabelExternalPort]
	target := strconv.Itoa(int(be.Port))
	r := kubeovnv1.IptablesDnatRule{
		ObjectMeta: metav1.ObjectMeta{
			Name:   RecordName(svc.Namespace, svc.Name, proto, p.Port, be.IP.String(), be.Port),
			Labels: labels,
		},
		Spec: kubeovnv1.IptablesDnatRuleSpec{
			Type:         kubeovnv1.DnatRuleTypeShare,
			EIP:          b.eipName,
			ExternalPort: port,
			Protocol:     string(proto),
			InternalIP:   be.IP.String(),
			InternalPort: target,
			ClusterIP:    addrText(sp.ClusterIP),
		},
		Status: kubeovnv1.IptablesDnatRuleStatus{
			Ready: true, NatGwDp: b.gateway, Protocol: string(proto),
			InternalIP: be.IP.String(), InternalPort: target, ExternalPort: port,
			V4IP: addrText(cmp.Or(sp.EIP, sp.ClusterIP)),
		},
	}
	if !sp.EIP.IsValid() {
		r.Spec.EIP = ""
	}
	if timeout > 0 {
		r.Spec.SessionAffinity = kubeovnv1.DnatSessionAffinityClientIP
		r.Spec.SessionAffinityTimeoutSeconds = timeout
	}
	return r
}

func dedupeRecords(rs *[]kubeovnv1.IptablesDnatRule) {
	slices.SortFunc(*rs, func(a, b kubeovnv1.IptablesDnatRule) int { return strings.Compare(a.Name, b.Name) })
	*rs = slices.CompactFunc(*rs, func(a, b kubeovnv1.IptablesDnatRule) bool { return a.Name == b.Name })
}

// recordGateway is the gateway named by a Service's existing records, of either form.
func (ix *Index) recordGateway(uid types.UID) string {
	for _, r := range ix.svcRecords[uid] {
		if gw := r.Labels[LabelGateway]; gw != "" {
			return gw
		}
	}
	for _, r := range ix.records[uid] {
		if gw := r.Labels[LabelGateway]; gw != "" {
			return gw
		}
	}
	return ""
}

// planWrites compares the desired Service state with the snapshot (SPEC R1-R5, T1, T2, L2, L3).
func (ix *Index) planWrites(svc *corev1.Service, b binding, sp *ServicePlan) {
	ix.planRecordWrites(svc, sp)
	ix.planServiceRecordWrites(svc, sp)
	planClaim(svc, b, sp)
	ix.planFinalizerAndIngress(svc, sp)
}

// planRecordWrites compares the desired IptablesDnatRule records with the Service's existing ones:
// which to create, update, give their status and delete.
func (ix *Index) planRecordWrites(svc *corev1.Service, sp *ServicePlan) {
	existing := map[string]*kubeovnv1.IptablesDnatRule{}
	for _, r := range ix.records[svc.UID] {
		existing[r.Name] = r
	}
	want := map[string]bool{}
	for i := range sp.Records {
		d := &sp.Records[i]
		want[d.Name] = true
		cur := existing[d.Name]
		switch {
		case cur == nil:
			sp.CreateRecords = append(sp.CreateRecords, d)
			sp.StatusRecords = append(sp.StatusRecords, d)
		case cur.Spec != d.Spec || !labelsInclude(cur.Labels, d.Labels):
			sp.UpdateRecords = append(sp.UpdateRecords, d)
			sp.StatusRecords = append(sp.StatusRecords, d)
		case !statusEqual(&cur.Status, &d.Status):
			sp.StatusRecords = append(sp.StatusRecords, d)
		}
	}
	for name := range existing {
		if !want[name] {
			sp.DeleteRecords = append(sp.DeleteRecords, name)
		}
	}
	slices.Sort(sp.DeleteRecords)
}

// planServiceRecordWrites compares the desired ServiceRecord with the Service's existing ones:
// whether to write it, and which others to delete.
func (ix *Index) planServiceRecordWrites(svc *corev1.Service, sp *ServicePlan) {
	for _, r := range ix.svcRecords[svc.UID] {
		switch {
		case sp.Record == nil || r.Name != sp.Record.Name:
			sp.DeleteServiceRecords = append(sp.DeleteServiceRecords, r.Name)
		case !serviceRecordCurrent(r, sp.Record):
			sp.WriteRecord = true
		}
	}
	if sp.Record != nil && !slices.ContainsFunc(ix.svcRecords[svc.UID], func(r *vpcgwv1alpha1.ServiceRecord) bool { return r.Name == sp.Record.Name }) {
		sp.WriteRecord = true
	}
	slices.Sort(sp.DeleteServiceRecords)
}

// planClaim decides the claim stamp. A Service claims identities once its EIP is Ready and it
// may use it (eipAddr): then its claim is stamped. The stamp is current when it names the
// annotated gateway and EIP (ClaimedSince). Not before: while kube-ovn readies the EIP it also
// updates the new Service, and a write of ours then would meet its Update (a conflict kube-ovn
// logs).
func planClaim(svc *corev1.Service, b binding, sp *ServicePlan) {
	switch _, current := ClaimedSince(svc); {
	case b.eipAddr.IsValid() && !current:
		sp.Claim, sp.ClaimedEIP = ClaimStamp, b.eipName
	case !b.eipAddr.IsValid() && HasClaimStamp(svc):
		sp.Claim = ClaimClear
	}
}

// planFinalizerAndIngress decides the finalizer and, for a LoadBalancer Service, its ingress.
// What vpcgw publishes is known from its own ledger, not from the finalizer, which anyone who may
// edit the Service can strip: served for its EIP, the ingress is that EIP; otherwise the ingress
// loses exactly the addresses the Service's records say vpcgw published, and keeps whatever
// another implementation wrote (SPEC T1, O4).
func (ix *Index) planFinalizerAndIngress(svc *corev1.Service, sp *ServicePlan) {
	hasFinalizer := slices.Contains(svc.Finalizers, Finalizer)
	served := sp.Served()
	sp.AddFinalizer = served && !hasFinalizer
	sp.ReleaseFinalizer = !served && hasFinalizer
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return
	}
	cur := svc.Status.LoadBalancer.Ingress
	if sp.EIPServed {
		sp.Ingress = []corev1.LoadBalancerIngress{{IP: sp.EIP.String()}}
	} else {
		published := ix.publishedAddresses(svc.UID)
		for _, in := range cur {
			if !published[in.IP] {
				sp.Ingress = append(sp.Ingress, in)
			}
		}
	}
	sp.IngressWrite = !ingressEqual(cur, sp.Ingress)
}

// publishedAddresses are the EIP addresses the Service's records (either form) say vpcgw
// programmed, and so published as its ingress.
func (ix *Index) publishedAddresses(uid types.UID) map[string]bool {
	out := map[string]bool{}
	for _, r := range ix.svcRecords[uid] {
		if r.Spec.EIPAddress != "" {
			out[r.Spec.EIPAddress] = true
		}
	}
	for _, r := range ix.records[uid] {
		if a := r.Labels[LabelEIPAddress]; a != "" {
			out[a] = true
		}
	}
	return out
}

// statusEqual compares the part of a record's status the model decides.
func statusEqual(a, b *kubeovnv1.IptablesDnatRuleStatus) bool {
	return a.Ready == b.Ready && a.V4IP == b.V4IP && a.V6IP == b.V6IP && a.NatGwDp == b.NatGwDp && a.Protocol == b.Protocol &&
		a.InternalIP == b.InternalIP && a.InternalPort == b.InternalPort && a.ExternalPort == b.ExternalPort
}

func labelsInclude(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func ingressEqual(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool { return x.IP == y.IP && x.Hostname == y.Hostname })
}

// addrText is an address as the objects spell it: "" for the zero Addr (a part not served).
func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
