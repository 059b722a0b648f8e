package inspect

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
)

// View is the controller's plan for a snapshot, with what the controller published.
type View struct {
	Read       Read
	Controller ControllerInfo
	// Published is the controller's status (nil: none).
	Published *status.Published
	Gates     model.Gates
	Plan      model.Plan

	services map[types.NamespacedName]*corev1.Service
}

// NewView plans the snapshot with the controller's gates.
func NewView(rd Read, info ControllerInfo, pub *status.Published) *View {
	v := &View{Read: rd, Controller: info, Published: pub, Gates: ModelGates(info), services: map[types.NamespacedName]*corev1.Service{}}
	v.Plan = model.Compute(rd.Snapshot, v.Gates)
	for i := range rd.Snapshot.Services {
		svc := &rd.Snapshot.Services[i]
		v.services[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = svc
	}
	return v
}

// Warnings are the view's warnings: the controller's state first.
func (v *View) Warnings() []string {
	var out []string
	if v.Controller.Message != "" {
		out = append(out, v.Controller.Message+"; the controller's rules are not applied: each Service is shown as far as its ingress "+
			"and the controller's events on it tell, else as Unknown")
	}
	return append(out, v.Read.Warnings...)
}

// ServicePlan is the plan of one Service (nil when the snapshot does not hold it).
func (v *View) ServicePlan(namespace, name string) *model.ServicePlan {
	for i := range v.Plan.Services {
		if sp := &v.Plan.Services[i]; sp.Key.Namespace == namespace && sp.Key.Name == name {
			return sp
		}
	}
	return nil
}

// Services are the statuses of the Services that name a gateway (or hold something of vpcgw's),
// in namespace ("": all).
func (v *View) Services(namespace string) []ServiceStatus {
	out := []ServiceStatus{}
	for i := range v.Plan.Services {
		sp := &v.Plan.Services[i]
		if namespace != "" && sp.Key.Namespace != namespace {
			continue
		}
		if svc := v.services[sp.Key]; svc == nil || (svc.Annotations[model.AnnotationGateway] == "" && !v.holdsSomething(sp, svc)) {
			continue // included for explain only
		}
		out = append(out, v.ServiceStatus(sp))
	}
	return out
}

func (v *View) holdsSomething(sp *model.ServicePlan, svc *corev1.Service) bool {
	return slices.Contains(svc.Finalizers, model.Finalizer) || v.recordOf(sp) != nil
}

// ServiceStatus describes one planned Service: by the controller's rules, or, when they cannot
// be applied, by what the user may read of it (evidence.go).
func (v *View) ServiceStatus(sp *model.ServicePlan) ServiceStatus {
	svc := v.services[sp.Key]
	st := ServiceStatus{Namespace: sp.Key.Namespace, Name: sp.Key.Name, Gateway: sp.Gateway, Ingress: []string{}, Identities: []Identity{}, Affinity: "None"}
	if svc != nil {
		describeService(&st, svc)
		if st.Gateway == "" {
			st.Gateway = svc.Annotations[model.AnnotationGateway]
		}
	}
	if v.RulesUnknown() {
		if len(v.Read.Unknown) == 0 {
			addIdentities(&st, sp) // the rules' identities, whether served or not
		}
		st.Record = v.existingRecord(sp)
		v.evidenceStatus(&st, sp, svc)
		return st
	}
	addIdentities(&st, sp)
	st.EIPPart, st.ClusterIPPart = v.parts(sp, svc)
	st.Record = v.record(sp)
	st.Ready = v.ready(sp)
	st.ReadyStatus = map[bool]string{true: ReadyTrue, false: ReadyFalse}[st.Ready]
	st.Basis = BasisRules
	st.State = serviceState(st)
	for _, ev := range sp.Events {
		st.Events = append(st.Events, Event{Type: ev.Type, Reason: ev.Reason, Message: ev.Message})
	}
	return st
}

// describeService fills what the Service's object says: type, EIP, ClusterIP and ingress.
func describeService(st *ServiceStatus, svc *corev1.Service) {
	st.Type = string(svc.Spec.Type)
	if st.Type == "" {
		st.Type = string(corev1.ServiceTypeClusterIP)
	}
	st.EIP = svc.Annotations[model.AnnotationEIP]
	st.ClusterIP = svc.Spec.ClusterIP
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			st.Ingress = append(st.Ingress, in.IP)
		}
	}
}

// addIdentities adds the plan's identities, each with its part, and the affinity they share.
func addIdentities(st *ServiceStatus, sp *model.ServicePlan) {
	for _, id := range sp.Identities {
		part := "ClusterIP"
		if id.VIP == sp.EIP {
			part = "EIP"
		}
		bs := make([]string, 0, len(id.Backends))
		for _, b := range id.Backends {
			bs = append(bs, b.String())
		}
		st.Identities = append(st.Identities, Identity{Part: part, VIP: id.VIP.String(), Port: id.Port, Protocol: string(id.Protocol), Backends: bs,
			AffinityTimeoutSeconds: id.AffinityTimeoutSeconds, SourceRanges: id.SourceRanges})
		if id.AffinityTimeoutSeconds > 0 {
			st.Affinity = fmt.Sprintf("ClientIP(%ds)", id.AffinityTimeoutSeconds)
		}
	}
}

// ready reports whether the controller has nothing left to write for a served Service; with the
// records unknown, whether its ingress and finalizer are written.
func (v *View) ready(sp *model.ServicePlan) bool {
	if v.Read.RecordsUnknown {
		return sp.Served() && !sp.IngressWrite && !sp.AddFinalizer
	}
	return sp.Served() && len(sp.CreateRecords)+len(sp.UpdateRecords)+len(sp.StatusRecords) == 0 && !sp.WriteRecord && !sp.IngressWrite && !sp.AddFinalizer
}

// serviceState is the Service's state from its parts and readiness.
func serviceState(st ServiceStatus) string {
	served, unserved := 0, 0
	for _, p := range []Part{st.EIPPart, st.ClusterIPPart} {
		switch p.State {
		case PartServed:
			served++
		case PartNotServed:
			unserved++
		}
	}
	switch {
	case served == 0:
		return StateNotServed
	case unserved > 0:
		return StatePartiallyServed
	case !st.Ready:
		return StatePending
	}
	return StateServed
}

// parts says, for each part, whether it is served and, if not, why and what to do.
func (v *View) parts(sp *model.ServicePlan, svc *corev1.Service) (eip, cip Part) {
	isLB := svc != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	switch {
	case !isLB:
		eip = Part{State: PartNotApplicable}
	case !v.Gates.LoadBalancer:
		eip = Part{State: PartOff, Reason: "the controller runs without --enable-gw-nftable-lb-svc", EventReason: ReasonGateOff}
	case sp.EIPServed:
		eip = Part{State: PartServed, VIP: sp.EIP.String()}
	default:
		eip = v.notServed(sp, svc, sp.EIPReason, "EIP")
	}
	switch {
	case !v.Gates.ClusterIP:
		cip = Part{State: PartOff, Reason: "the controller runs without --enable-gw-nftable-svc-cluster-ip", EventReason: ReasonGateOff}
	case sp.ClusterIPServed:
		cip = Part{State: PartServed, VIP: sp.ClusterIP.String()}
	default:
		cip = v.notServed(sp, svc, sp.ClusterIPReason, "ClusterIP")
	}
	if eip.State == PartOff {
		eip.Fix = "run the controller with --enable-gw-nftable-lb-svc (Helm: features.enableGwNftableLoadbalancerService=true), if kube-ovn runs with --enable-lb-svc=false"
	}
	if cip.State == PartOff {
		cip.Fix = "run the controller with --enable-gw-nftable-svc-cluster-ip (Helm: features.enableGwNftableServiceClusterIp=true), if kube-ovn runs with --enable-lb=false"
	}
	return eip, cip
}

func (v *View) notServed(sp *model.ServicePlan, svc *corev1.Service, reason, part string) Part {
	p := Part{State: PartNotServed, Reason: reason}
	for _, ev := range sp.Events {
		if ev.Message == reason {
			p.EventReason = ev.Reason
			break
		}
	}
	switch {
	case p.EventReason != "":
	case svc != nil && svc.Annotations[model.AnnotationGateway] == "":
		p.EventReason = ReasonNotOptedIn
	case svc != nil && svc.DeletionTimestamp != nil:
		p.EventReason = ReasonDeleting
	}
	if p.Reason == "" {
		p.Reason = "not served"
	}
	p.Fix = v.fix(p.EventReason, sp, svc, part)
	return p
}

// fixes are what a user or an administrator does about the reasons whose fix names nothing of
// the Service's.
var fixes = map[string]string{
	ReasonDeleting:                "none: the Service is being deleted; the controller releases it",
	model.ReasonInvalidAnnotation: "a binding cannot be changed: delete the Service and create it again with valid object names in " + model.AnnotationGateway + " and " + model.AnnotationEIP,
	model.ReasonConflict:          "use another port or EIP, or wait: the Service takes the identity over when its holder releases it",
	model.ReasonLimit:             "ask for fewer ports or backends, or have a cluster administrator raise the controller's bound the reason names",
	model.ReasonUnsupported:       "change what the reason names: vpcgw serves IPv4 TCP and UDP ports of LoadBalancer and ClusterIP Services with Cluster traffic policies and no other loadBalancerClass",
	model.ReasonQuarantined:       "fix the change the gateway refused (the reason), then change the Service to try again",
}

// fix is what a user or an administrator does about a reason.
func (v *View) fix(reason string, sp *model.ServicePlan, svc *corev1.Service, part string) string {
	ns, name, gw := sp.Key.Namespace, sp.Key.Name, sp.Gateway
	eip := ""
	if svc != nil {
		eip = svc.Annotations[model.AnnotationEIP]
	}
	switch reason {
	case ReasonNotOptedIn:
		return fmt.Sprintf("annotate the Service with its VpcNatGateway: kubectl annotate service %s -n %s %s=<gateway>", name, ns, model.AnnotationGateway) +
			map[bool]string{true: fmt.Sprintf(" %s=<IptablesEIP of that gateway>", model.AnnotationEIP), false: ""}[svc != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer]
	case model.ReasonNotAdmitted:
		return v.notAdmittedFix(sp, eip, part)
	case model.ReasonEIPMissing:
		if eip == "" {
			return fmt.Sprintf("annotate the Service with an IptablesEIP of gateway %s: kubectl annotate service %s -n %s %s=<IptablesEIP>", gw, name, ns, model.AnnotationEIP)
		}
		return fmt.Sprintf("create IptablesEIP %s with spec.natGwDp: %s (it is served as soon as kube-ovn makes it Ready), or delete the Service and create it again with an EIP of that gateway (the binding is immutable)", eip, gw)
	case model.ReasonEIPNotReady:
		return fmt.Sprintf("wait for kube-ovn to make IptablesEIP %s Ready (kubectl get iptables-eips %s); if it stays not Ready, look at kube-ovn-controller's log and the gateway's pod", eip, eip)
	case model.ReasonProgrammingFailed:
		return fmt.Sprintf("look at the gateway's instances (kubectl vpcgw status gw/%s) and the controller's log; it retries by itself", gw)
	}
	return fixes[reason]
}

// notAdmittedFix is the fix for a namespace the gateway, or the EIP, does not admit.
func (v *View) notAdmittedFix(sp *model.ServicePlan, eip, part string) string {
	ns, gw := sp.Key.Namespace, sp.Gateway
	if part == "EIP" && strings.Contains(sp.EIPReason, "IptablesEIP") {
		return fmt.Sprintf("a cluster administrator adds %s to the %s annotation of IptablesEIP %s, or the Service uses another EIP of gateway %s", ns, model.AnnotationAllowedNamespaces, eip, gw)
	}
	g := v.gateway(gw)
	if g == nil {
		return fmt.Sprintf("a cluster administrator creates VpcNatGateway %s and admits namespace %s to it, or delete the Service and create it again naming a gateway the namespace may use (the binding is immutable)", gw, ns)
	}
	vpc := "its Vpc"
	if g.Spec.Vpc != "" {
		vpc = "Vpc " + g.Spec.Vpc
	}
	return fmt.Sprintf("a cluster administrator admits namespace %s: adds it to spec.namespaces of %s, or to the %s annotation of VpcNatGateway %s", ns, vpc, model.AnnotationAllowedNamespaces, gw)
}

func (v *View) gateway(name string) *kubeovnv1.VpcNatGateway {
	for i := range v.Read.Snapshot.Gateways {
		if v.Read.Snapshot.Gateways[i].Name == name {
			return &v.Read.Snapshot.Gateways[i]
		}
	}
	return nil
}

// recordOf is the Service's existing record in the ledger's form (nil: none).
func (v *View) recordOf(sp *model.ServicePlan) *Record {
	uid := string(sp.UID)
	if v.Gates.Ledger == model.LedgerDnatRule {
		var rec *Record
		for _, r := range v.Read.Snapshot.Records {
			if r.Labels[model.LabelRecordUID] == uid {
				if rec == nil {
					rec = &Record{Kind: "IptablesDnatRule", Ready: true}
				}
				rec.Names = append(rec.Names, r.Name)
				rec.Ready = rec.Ready && r.Status.Ready
			}
		}
		return rec
	}
	for _, r := range v.Read.Snapshot.ServiceRecords {
		if r.Labels[model.LabelRecordUID] == uid {
			return &Record{Kind: "ServiceRecord", Names: []string{r.Name}, Ready: r.Status.Ready}
		}
	}
	return nil
}

// existingRecord is the Service's record as it is, without the rules' word on it.
func (v *View) existingRecord(sp *model.ServicePlan) *Record {
	if v.Read.RecordsUnknown {
		return &Record{Kind: "ServiceRecord", Names: []string{}, Message: "unknown: you may not read the records"}
	}
	rec := v.recordOf(sp)
	if rec != nil {
		slices.Sort(rec.Names)
	}
	return rec
}

// record is the Service's record state: the existing record against what the controller would
// write.
func (v *View) record(sp *model.ServicePlan) *Record {
	kind := "ServiceRecord"
	if v.Gates.Ledger == model.LedgerDnatRule {
		kind = "IptablesDnatRule"
	}
	if v.Read.RecordsUnknown {
		return &Record{Kind: kind, Names: []string{}, Message: "unknown: you may not read the records"}
	}
	rec := v.recordOf(sp)
	switch {
	case rec == nil && !sp.Served():
		return nil
	case rec == nil:
		return &Record{Kind: kind, Names: []string{}, Message: "not written yet: the controller writes it once every instance of the gateway serves the Service"}
	case !sp.Served():
		rec.Ready = false
		rec.Message = "left from when the Service was served: the controller releases it"
	case sp.WriteRecord || len(sp.CreateRecords)+len(sp.UpdateRecords)+len(sp.StatusRecords) > 0:
		rec.Ready = false
		rec.Message = "differs from what the gateway must serve now: the controller rewrites it once the gateway serves that"
	case !rec.Ready:
		rec.Message = "not Ready: the gateway has not acknowledged it yet"
	}
	slices.Sort(rec.Names)
	return rec
}

// GatewayState describes gateway name: its object, instances, programming and routes.
func (v *View) GatewayState(name string) GatewayState {
	gs := GatewayState{Name: name, Instances: []Instance{}, Routes: Routes{VIPs: []string{}, NextHops: []string{}}}
	if g := v.gateway(name); g != nil {
		gs.Exists = g.DeletionTimestamp == nil
		gs.Vpc, gs.LanIP = g.Spec.Vpc, g.Spec.LanIP
	}
	gs.ExistsUnknown = v.Read.GatewaysUnknown()
	gp := v.Plan.Gateway(name)
	var pub *status.Gateway
	if v.Published != nil {
		if g, ok := v.Published.Gateways[name]; ok {
			pub = &g
		}
	}
	if v.Controller.Flags != nil {
		gs.Routes.Written = v.Controller.Flags.VIPRoutes
	}
	byPod := map[string]*Instance{}
	if gp != nil {
		gs.Identities = len(gp.State.Identities)
		for _, inst := range gp.Instances {
			in := Instance{Pod: inst.Pod.Namespace + "/" + inst.Pod.Name, LanIP: inst.LanIP, Initialized: inst.Initialized}
			gs.Instances = append(gs.Instances, in)
		}
		gs.Routes.Router = gp.Routes.Router
		gs.Routes.VIPs = append(gs.Routes.VIPs, gp.Routes.VIPs...)
		gs.Routes.NextHops = append(gs.Routes.NextHops, gp.Routes.NextHops...)
	}
	if pub != nil {
		gs.Programmed = &Programmed{Generation: pub.Generation, Identities: pub.Identities, LastSyncTime: pub.LastSyncTime, LastError: pub.LastError}
		for _, pi := range pub.Instances {
			if !slices.ContainsFunc(gs.Instances, func(in Instance) bool { return in.Pod == pi.Pod }) {
				gs.Instances = append(gs.Instances, Instance{Pod: pi.Pod})
			}
		}
		if rt := pub.Routes; rt != nil {
			gs.Routes.Synced = &rt.Synced
			gs.Routes.LastError, gs.Routes.LastSyncTime = rt.LastError, rt.LastSyncTime
			gs.Routes.UnroutedVIPs, gs.Routes.Unrouted = rt.UnroutedVIPs, rt.Unrouted
		}
	}
	for i := range gs.Instances {
		byPod[gs.Instances[i].Pod] = &gs.Instances[i]
	}
	if pub != nil {
		for _, pi := range pub.Instances {
			in := byPod[pi.Pod]
			in.Reported, in.AckedGeneration, in.AgentVersion, in.LastAckTime, in.LastError = true, pi.AckedGeneration, pi.AgentVersion, pi.LastAckTime, pi.LastError
			in.Current = pub.Generation > 0 && pi.AckedGeneration == pub.Generation
		}
	}
	slices.SortFunc(gs.Instances, func(a, b Instance) int { return strings.Compare(a.Pod, b.Pod) })
	return gs
}

// Gateway is the status of one gateway and the Services bound to it.
func (v *View) Gateway(name string) GatewayStatus {
	gs := GatewayStatus{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindGatewayStatus}, Controller: v.Controller, Warnings: v.Warnings(),
		Unknown: v.Unknown(), GatewayState: v.GatewayState(name), Services: []ServiceStatus{}}
	for _, st := range v.Services("") {
		if st.Gateway == name {
			gs.Services = append(gs.Services, st)
		}
	}
	return gs
}

// Explain explains one Service; svc must be in the snapshot (SnapshotOptions.Include).
func (v *View) Explain(namespace, name string) (ServiceExplanation, error) {
	sp := v.ServicePlan(namespace, name)
	if sp == nil {
		return ServiceExplanation{}, fmt.Errorf("Service %s/%s is not in the snapshot", namespace, name)
	}
	st := v.ServiceStatus(sp)
	ex := ServiceExplanation{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindServiceExplanation}, Controller: v.Controller, Warnings: v.Warnings(),
		Unknown: v.Unknown(), Served: st.State == StateServed, Service: st}
	if st.Gateway != "" {
		gs := v.GatewayState(st.Gateway)
		ex.Gateway = &gs
		if sp.Served() && !v.RulesUnknown() {
			rt := gs.Routes
			rt.VIPs = []string{}
			for _, vip := range []netip.Addr{sp.EIP, sp.ClusterIP} {
				if vip.IsValid() {
					rt.VIPs = append(rt.VIPs, vip.String())
				}
			}
			ex.Routes = &rt
		}
	}
	if v.RulesUnknown() {
		ex.Summary = evidenceSummary(&st)
	} else {
		ex.Summary = v.summary(sp, &st, ex.Gateway)
	}
	return ex, nil
}

// summary is the explanation's first line: whether and how the Service is served, and what it
// waits for or lacks.
func (v *View) summary(sp *model.ServicePlan, st *ServiceStatus, gw *GatewayState) string {
	var b strings.Builder
	switch st.State {
	case StateServed:
		fmt.Fprintf(&b, "Service %s is served by gateway %s through %s.", sp.Key, sp.Gateway, servedThrough(st))
	case StatePending:
		pendingSummary(&b, sp, st)
	case StatePartiallyServed:
		partialSummary(&b, sp, st)
	default:
		notServedSummary(&b, sp, st)
	}
	if sp.Served() {
		servedNotes(&b, sp, gw)
	}
	return b.String()
}

// servedThrough names the served parts' VIPs.
func servedThrough(st *ServiceStatus) string {
	var parts []string
	if st.EIPPart.State == PartServed {
		parts = append(parts, "EIP "+st.EIPPart.VIP)
	}
	if st.ClusterIPPart.State == PartServed {
		parts = append(parts, "ClusterIP "+st.ClusterIPPart.VIP)
	}
	return strings.Join(parts, " and ")
}

func pendingSummary(b *strings.Builder, sp *model.ServicePlan, st *ServiceStatus) {
	fmt.Fprintf(b, "Service %s is to be served by gateway %s through %s, but the controller has not confirmed it yet", sp.Key, sp.Gateway, servedThrough(st))
	switch {
	case st.Record != nil && st.Record.Message != "":
		fmt.Fprintf(b, ": its record is %s.", st.Record.Message)
	case sp.IngressWrite:
		b.WriteString(": its ingress is not published yet.")
	default:
		b.WriteString(".")
	}
}

func partialSummary(b *strings.Builder, sp *model.ServicePlan, st *ServiceStatus) {
	fmt.Fprintf(b, "Service %s is served by gateway %s through %s only:", sp.Key, sp.Gateway, servedThrough(st))
	for _, p := range []struct {
		name string
		p    Part
	}{{"EIP", st.EIPPart}, {"ClusterIP", st.ClusterIPPart}} {
		if p.p.State == PartNotServed {
			fmt.Fprintf(b, " its %s part is not served: %s.", p.name, p.p.Reason)
		}
	}
}

func notServedSummary(b *strings.Builder, sp *model.ServicePlan, st *ServiceStatus) {
	eip, cip := st.EIPPart, st.ClusterIPPart
	reason := cip.Reason
	if eip.State == PartNotServed || eip.State == PartOff && cip.State == PartOff {
		reason = eip.Reason
	}
	if eip.State == PartOff && cip.State == PartOff {
		reason = "the controller runs with --enable-gw-nftable-lb-svc and --enable-gw-nftable-svc-cluster-ip off"
	}
	fmt.Fprintf(b, "Service %s is not served: %s.", sp.Key, strings.TrimSuffix(reason, "."))
	if cip.State == PartNotServed && eip.State == PartNotServed && cip.Reason != eip.Reason {
		fmt.Fprintf(b, " Its ClusterIP part: %s.", strings.TrimSuffix(cip.Reason, "."))
	}
}

// servedNotes adds, for a served Service, that it has no ready backend and that the gateway's
// last sync failed.
func servedNotes(b *strings.Builder, sp *model.ServicePlan, gw *GatewayState) {
	n := 0
	for _, id := range sp.Identities {
		n += len(id.Backends)
	}
	if n == 0 {
		b.WriteString(" It has no ready backend: check its EndpointSlices and the Pods' readiness.")
	}
	if gw != nil && gw.Programmed != nil && gw.Programmed.LastError != "" {
		fmt.Fprintf(b, " The gateway's last sync failed: %s.", strings.TrimSuffix(gw.Programmed.LastError, "."))
	}
}

// List is the ServiceStatusList of namespace ("": all).
func (v *View) List(namespace string) ServiceStatusList {
	return ServiceStatusList{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindServiceStatusList}, Controller: v.Controller, Warnings: v.Warnings(),
		Unknown: v.Unknown(), Items: v.Services(namespace)}
}

// Select keeps the items whose Service's labels sel matches (kubectl's -l); a nil or empty sel
// keeps every item.
func (v *View) Select(items []ServiceStatus, sel labels.Selector) []ServiceStatus {
	if sel == nil || sel.Empty() {
		return items
	}
	byKey := map[string]labels.Set{}
	for _, svc := range v.Read.Snapshot.Services {
		byKey[svc.Namespace+"/"+svc.Name] = svc.Labels
	}
	out := make([]ServiceStatus, 0, len(items))
	for _, st := range items {
		if sel.Matches(byKey[st.Namespace+"/"+st.Name]) {
			out = append(out, st)
		}
	}
	return out
}

// Gateways are the names of the gateways in the snapshot.
func (v *View) Gateways() []string {
	names := map[string]bool{}
	for _, g := range v.Read.Snapshot.Gateways {
		names[g.Name] = true
	}
	return slices.Sorted(maps.Keys(names))
}
