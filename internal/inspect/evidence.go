package inspect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/model"
)

// When the controller's rules cannot be applied (its status is unknown, or the user may not read
// what they read), the plugin does not guess: a Service's state comes from what the user may
// read of it, each written by the controller only and never by a tenant, or stays Unknown.
//   - status.loadBalancer.ingress: the controller publishes the EIP's address there once the
//     gateway serves the EIP part and withdraws it when it stops (SPEC T1);
//   - the controller's events on it: the latest of NftableLbSvcServed (served) and its Warnings
//     that a part is not served (SPEC T3);
//   - its claim stamp (condition vpcgw.io/EIPClaimed): the controller saw the claim, which says
//     it runs, not that the Service is served.

// EventReporter is the controller's name on its events (internal/controller/run.go's recorder).
const EventReporter = "vpcgw-controller"

// ReasonServed is the controller's Normal event that a Service is served.
const ReasonServed = "NftableLbSvcServed"

// eipReasons are the Warning reasons about the EIP part alone: the ClusterIP part may be served.
var eipReasons = []string{model.ReasonEIPMissing, model.ReasonEIPNotReady}

// notServedReasons are the controller's Warning reasons that a part of the Service is not served
// (not BackendSkipped or VIPNotRouted: the Service is served then).
var notServedReasons = []string{model.ReasonConflict, model.ReasonEIPMissing, model.ReasonEIPNotReady, model.ReasonInvalidAnnotation,
	model.ReasonUnsupported, model.ReasonProgrammingFailed, model.ReasonNotAdmitted, model.ReasonLimit, model.ReasonQuarantined,
	model.ReasonKubeOVNServesEvent}

// isControllerEvent: the event is vpcgw's controller's, on a Service.
func isControllerEvent(ev *corev1.Event) bool {
	return ev.InvolvedObject.Kind == "Service" && (ev.ReportingController == EventReporter || ev.Source.Component == EventReporter) &&
		strings.HasPrefix(ev.Reason, "NftableLbSvc")
}

// eventTime is when the event was last seen: events.k8s.io events have an eventTime and a series,
// core ones timestamps.
func eventTime(ev *corev1.Event) time.Time {
	t := ev.EventTime.Time
	for _, c := range []time.Time{ev.LastTimestamp.Time, ev.FirstTimestamp.Time} {
		if c.After(t) {
			t = c
		}
	}
	if ev.Series != nil && ev.Series.LastObservedTime.After(t) {
		t = ev.Series.LastObservedTime.Time
	}
	if t.IsZero() {
		t = ev.CreationTimestamp.Time
	}
	return t
}

// RulesUnknown reports whether the controller's rules cannot be applied: no running controller
// published its gates, or the user may not read what the rules read.
func (v *View) RulesUnknown() bool { return !v.Controller.Running || len(v.Read.Unknown) > 0 }

// Unknown is what the plugin could not read for the rules, each with what is missing.
func (v *View) Unknown() []string {
	var out []string
	if !v.Controller.Running {
		out = append(out, v.Controller.Message)
	}
	for _, u := range v.Read.Unknown {
		out = append(out, fmt.Sprintf("%s: forbidden (the ClusterRole %s grants it)", u, ViewRole))
	}
	return out
}

// unknownCause is why the rules cannot be applied, short, for a part's reason.
func (v *View) unknownCause() string {
	var causes []string
	if !v.Controller.Running {
		causes = append(causes, "the controller's status is unknown")
	}
	if len(v.Read.Unknown) > 0 {
		causes = append(causes, "you may not "+JoinReads(v.Read.Unknown))
	}
	return strings.Join(causes, "; ")
}

// evidence is what the user may read of a Service that says whether it is served.
type evidence struct {
	// ingress is the address of status.loadBalancer.ingress that is the EIP's; ingressBasis
	// says how it is known to be the EIP's.
	ingress, ingressBasis string
	// latest is the controller's latest event on the Service that says whether it is served.
	latest *Event
	// events are the controller's events on the Service, oldest first.
	events []Event
	// claimed is the claim stamp's time (zero: none).
	claimed time.Time
}

// evidenceOf reads the Service's evidence.
func (v *View) evidenceOf(svc *corev1.Service) evidence {
	var ev evidence
	if svc == nil {
		return ev
	}
	ev.ingress, ev.ingressBasis = v.eipIngress(svc)
	for i := range v.Read.Events {
		e := &v.Read.Events[i]
		if e.InvolvedObject.UID != svc.UID || e.InvolvedObject.Namespace != svc.Namespace || e.InvolvedObject.Name != svc.Name {
			continue
		}
		ev.events = append(ev.events, Event{Type: e.Type, Reason: e.Reason, Message: e.Message, Time: eventTime(e)})
	}
	slices.SortStableFunc(ev.events, func(a, b Event) int { return a.Time.Compare(b.Time) })
	for i := range ev.events {
		e := &ev.events[i]
		if e.Reason == ReasonServed || e.Type == corev1.EventTypeWarning && slices.Contains(notServedReasons, e.Reason) {
			ev.latest = e
		}
	}
	if t, ok := model.ClaimedSince(svc); ok {
		ev.claimed = t
	}
	return ev
}

// eipIngress is the Service's ingress address that is its EIP's: the EIP's own address when the
// user may read the EIP, else any (the controller alone writes a Service's ingress; it is the
// EIP's address, SPEC T1), with how it is known.
func (v *View) eipIngress(svc *corev1.Service) (addr, basis string) {
	name := svc.Annotations[model.AnnotationEIP]
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || name == "" {
		return "", ""
	}
	var ips []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			ips = append(ips, in.IP)
		}
	}
	if len(ips) == 0 {
		return "", ""
	}
	if v.Read.EIPsUnknown() {
		return ips[0], fmt.Sprintf("its ingress holds %s, which only the controller writes, as the address of IptablesEIP %s "+
			"(you may not read the EIP to compare)", ips[0], name)
	}
	for _, e := range v.Read.Snapshot.EIPs {
		if e.Name != name {
			continue
		}
		for _, a := range []string{e.Status.IP, e.Spec.V4ip} {
			if a != "" && slices.Contains(ips, a) {
				return a, fmt.Sprintf("its ingress holds %s, the address of IptablesEIP %s", a, name)
			}
		}
	}
	return "", ""
}

// evidenceStatus fills the parts, state and basis of a Service whose rules cannot be applied.
func (v *View) evidenceStatus(st *ServiceStatus, sp *model.ServicePlan, svc *corev1.Service) {
	ev := v.evidenceOf(svc)
	st.Events = ev.events
	switch {
	case svc != nil && svc.Annotations[model.AnnotationGateway] == "" && !v.holdsSomething(sp, svc):
		// No controller serves a Service that names no gateway, whatever its gates.
		st.EIPPart, st.ClusterIPPart = v.notServed(sp, svc, sp.EIPReason, "EIP"), v.notServed(sp, svc, sp.ClusterIPReason, "ClusterIP")
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			st.EIPPart = Part{State: PartNotApplicable}
		}
		st.Basis = "it has no " + model.AnnotationGateway + " annotation"
	default:
		st.EIPPart, st.ClusterIPPart = v.evidenceParts(svc, ev)
		st.Basis = evidenceBasis(ev, st)
	}
	st.State, st.ReadyStatus = evidenceState(*st)
	st.Ready = st.ReadyStatus == ReadyTrue
}

// evidenceParts are the parts as the ingress and the latest event show them, Unknown otherwise.
func (v *View) evidenceParts(svc *corev1.Service, ev evidence) (eip, cip Part) {
	unknown := Part{State: PartUnknown, Reason: v.unknownCause() + ", and nothing you may read of the Service shows whether it is served",
		Fix: "ask for the reads listed under Unknown, or wait for the controller's event on the Service"}
	eip, cip = unknown, unknown
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		eip = Part{State: PartNotApplicable}
	}
	if ev.ingress != "" {
		eip = Part{State: PartServed, VIP: ev.ingress}
	}
	switch l := ev.latest; {
	case l == nil:
	case l.Reason == ReasonServed:
		if eip.State == PartUnknown {
			eip = Part{State: PartServed}
		}
		cip = Part{State: PartServed}
		if svc != nil {
			cip.VIP = svc.Spec.ClusterIP
		}
	case ev.ingress != "":
		// The EIP part is served (its ingress); which part the event is about is unknown.
	default:
		notServed := Part{State: PartNotServed, Reason: l.Message, EventReason: l.Reason, Fix: fixes[l.Reason]}
		if eip.State != PartNotApplicable {
			eip = notServed
		}
		if eip.State == PartNotApplicable || !slices.Contains(eipReasons, l.Reason) {
			cip = notServed
		}
	}
	return eip, cip
}

// evidenceBasis says what the parts are based on.
func evidenceBasis(ev evidence, st *ServiceStatus) string {
	var basis []string
	if ev.ingress != "" {
		basis = append(basis, ev.ingressBasis)
	}
	if l := ev.latest; l != nil && (l.Reason == ReasonServed || ev.ingress == "") {
		basis = append(basis, fmt.Sprintf("the controller's latest event on it is %s %s (%s)", l.Type, l.Reason, l.Time.UTC().Format(time.RFC3339)))
	}
	if len(basis) == 0 {
		basis = append(basis, "nothing you may read shows whether it is served ("+nothingShows(st)+")")
	}
	if !ev.claimed.IsZero() {
		basis = append(basis, "the controller saw its claim of the EIP at "+ev.claimed.UTC().Format(time.RFC3339))
	}
	return strings.Join(basis, "; ")
}

// nothingShows names what would have shown whether the Service is served.
func nothingShows(st *ServiceStatus) string {
	if st.EIPPart.State == PartNotApplicable {
		return "no event of the controller saying so"
	}
	return "no ingress with its EIP's address, no event of the controller saying so"
}

// evidenceState is the state and readiness of evidence parts: Served or PartiallyServed as far as
// a part is shown served, NotServed when every part is shown not served, Unknown otherwise (not
// ready when a part is shown not served).
func evidenceState(st ServiceStatus) (state, ready string) {
	served, unserved, unknown := 0, 0, 0
	for _, p := range []Part{st.EIPPart, st.ClusterIPPart} {
		switch p.State {
		case PartServed:
			served++
		case PartNotServed:
			unserved++
		case PartUnknown:
			unknown++
		}
	}
	switch {
	case served > 0 && unserved > 0:
		return StatePartiallyServed, ReadyFalse
	case served > 0:
		return StateServed, ReadyTrue
	case unserved > 0 && unknown == 0:
		return StateNotServed, ReadyFalse
	case unserved > 0:
		return StateUnknown, ReadyFalse
	}
	return StateUnknown, ReadyUnknown
}

// evidenceSummary is an explanation's first line when the rules cannot be applied.
func evidenceSummary(st *ServiceStatus) string {
	key := st.Namespace + "/" + st.Name
	var through []string
	for _, p := range []struct {
		name string
		p    Part
	}{{"EIP", st.EIPPart}, {"ClusterIP", st.ClusterIPPart}} {
		if p.p.State == PartServed {
			through = append(through, strings.TrimSpace(p.name+" "+p.p.VIP))
		}
	}
	var reason Part
	for _, p := range []Part{st.EIPPart, st.ClusterIPPart} {
		if p.State == PartNotServed && reason.State == "" {
			reason = p
		}
	}
	switch {
	case reason.EventReason == ReasonNotOptedIn:
		return fmt.Sprintf("Service %s is not served: it names no gateway (no %s annotation).", key, model.AnnotationGateway)
	case st.State == StateServed:
		return fmt.Sprintf("Service %s is served through %s: %s.", key, strings.Join(through, " and "), st.Basis)
	case st.ReadyStatus == ReadyFalse:
		return fmt.Sprintf("Service %s is not (fully) served: the controller says %q [%s]; %s.", key, reason.Reason, reason.EventReason, st.Basis)
	}
	return fmt.Sprintf("Whether Service %s is served is unknown: the controller's rules cannot be applied (Unknown below says what is missing), "+
		"and nothing you may read of it shows it (%s).", key, nothingShows(st))
}
