package inspect

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// TableOptions say how to print a table: Wide adds columns, NoHeaders leaves the header out,
// Namespaces gives the namespace a column of its own (-A and a gateway's Services, as kubectl's
// NAMESPACE column).
type TableOptions struct {
	Wide, NoHeaders, Namespaces bool
}

// errWriter keeps the first error of its writes, after which they write nothing: a printer writes
// line after line unchecked and returns err once, at the end.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// The print helpers drop the error they return: e keeps it.

func (e *errWriter) printf(format string, a ...any) { _, _ = fmt.Fprintf(e, format, a...) }

func (e *errWriter) println(a ...any) { _, _ = fmt.Fprintln(e, a...) }

func (e *errWriter) print(a ...any) { _, _ = fmt.Fprint(e, a...) }

// keep keeps err unless an earlier one is kept.
func (e *errWriter) keep(err error) {
	if e.err == nil {
		e.err = err
	}
}

// table is a tabwriter over w whose writes keep their first error as errWriter does.
type table struct {
	errWriter
	tw *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	return &table{errWriter: errWriter{w: tw}, tw: tw}
}

// flush writes the table out and returns the first error of its writes and of the flush.
func (t *table) flush() error {
	t.keep(t.tw.Flush())
	return t.err
}

// PrintServices writes one line per Service: gateway, EIP, ingress, identities, backends,
// affinity, ready and why not; wide adds type, ClusterIP, state and record. When the state of
// some Service is not the controller's rules' (they cannot be applied), a BASIS column says what
// it is based on.
func PrintServices(w io.Writer, items []ServiceStatus, opts TableOptions) error {
	basis := slices.ContainsFunc(items, func(st ServiceStatus) bool { return st.Basis != BasisRules })
	t := newTable(w)
	if !opts.NoHeaders {
		t.println(strings.Join(serviceRow(ServiceStatus{}, opts, basis, true), "\t"))
	}
	for _, st := range items {
		t.println(strings.Join(serviceRow(st, opts, basis, false), "\t"))
	}
	return t.flush()
}

// serviceRow is one line of PrintServices' table, or its header.
func serviceRow(st ServiceStatus, opts TableOptions, basis, header bool) []string {
	type col struct {
		name, value string
		shown       bool
	}
	ids, bs := identityTexts(st.Identities)
	cols := []col{
		{"NAMESPACE", st.Namespace, opts.Namespaces},
		{"SERVICE", st.Name, true},
		{"TYPE", st.Type, opts.Wide},
		{"GATEWAY", dash(st.Gateway), true},
		{"EIP", dash(st.EIP), true},
		{"INGRESS", dash(strings.Join(st.Ingress, ",")), true},
		{"CLUSTER-IP", dash(st.ClusterIP), opts.Wide},
		{"IDENTITIES", dash(strings.Join(ids, ",")), true},
		{"BACKENDS", dash(strings.Join(bs, ",")), true},
		{"AFFINITY", st.Affinity, true},
		{"STATE", st.State, opts.Wide},
		{"RECORD", recordText(st.Record), opts.Wide},
		{"READY", st.ReadyStatus, true},
		{"WHY NOT", dash(WhyNot(st)), true},
		{"BASIS", dash(st.Basis), basis},
	}
	out := make([]string, 0, len(cols))
	for _, c := range cols {
		switch {
		case !c.shown:
		case header:
			out = append(out, c.name)
		default:
			out = append(out, c.value)
		}
	}
	return out
}

// identityTexts are the identities as "vip:port/protocol" and their backends, each once, sorted.
func identityTexts(identities []Identity) (ids, backends []string) {
	ids = make([]string, 0, len(identities))
	set := map[string]bool{}
	for _, id := range identities {
		ids = append(ids, fmt.Sprintf("%s:%d/%s", id.VIP, id.Port, id.Protocol))
		for _, b := range id.Backends {
			set[b] = true
		}
	}
	backends = make([]string, 0, len(set))
	for b := range set {
		backends = append(backends, b)
	}
	slices.Sort(backends)
	return ids, backends
}

// WhyNot is the reasons of the parts that are not served or unknown, in a line.
func WhyNot(st ServiceStatus) string {
	var parts []string
	why := func(p Part) bool { return p.State == PartNotServed || p.State == PartOff || p.State == PartUnknown }
	if why(st.EIPPart) {
		parts = append(parts, "EIP: "+st.EIPPart.Reason)
	}
	if why(st.ClusterIPPart) && st.ClusterIPPart.Reason != st.EIPPart.Reason {
		parts = append(parts, "ClusterIP: "+st.ClusterIPPart.Reason)
	}
	return strings.Join(parts, "; ")
}

func recordText(r *Record) string {
	switch {
	case r == nil:
		return "-"
	case len(r.Names) == 0:
		return "none"
	case r.Ready:
		return "Ready"
	}
	return "NotReady"
}

// PrintExplanation writes an explanation for a person.
func PrintExplanation(w io.Writer, ex ServiceExplanation, now time.Time) error {
	e := &errWriter{w: w}
	st := ex.Service
	printServiceHead(e, ex, now)
	e.println("\nParts:")
	printPart(e, "EIP", st.EIPPart, nil)
	printPart(e, "ClusterIP", st.ClusterIPPart, &st.EIPPart)
	printIdentities(e, st, ex.Controller)
	printIngressAndRecord(e, st)
	if g := ex.Gateway; g != nil {
		e.println()
		printGatewayState(e, *g, now)
	}
	printServiceRoutes(e, ex, now)
	printEvents(e, st.Events)
	return e.err
}

// printServiceHead writes the summary, then what the Service is and who serves it.
func printServiceHead(e *errWriter, ex ServiceExplanation, now time.Time) {
	st := ex.Service
	e.println(ex.Summary)
	e.printf("\nService:    %s/%s (%s)\n", st.Namespace, st.Name, st.Type)
	e.printf("State:      %s\n", st.State)
	e.printf("Ready:      %s\n", st.ReadyStatus)
	e.printf("Basis:      %s\n", st.Basis)
	e.printf("Controller: %s\n", controllerLine(ex.Controller, now))
	e.printf("Gates:      %s\n", GatesText(ex.Controller))
	if st.Gateway != "" {
		e.printf("Gateway:    %s\n", st.Gateway)
	}
	if st.EIP != "" {
		e.printf("EIP:        %s\n", st.EIP)
	}
	if len(ex.Unknown) > 0 {
		// What the plugin could not read, each with the permission or flag that is missing.
		e.println("Unknown:")
		for _, u := range ex.Unknown {
			e.printf("  - %s\n", u)
		}
	}
}

// printPart writes one part of a Service; a part not served for the same reason as the EIP part
// (eipPart, nil for the EIP part itself) says so rather than repeating it.
func printPart(e *errWriter, name string, p Part, eipPart *Part) {
	switch p.State {
	case PartServed:
		e.printf("  %-10s Served on %s\n", name, dash(p.VIP))
		return
	case PartNotApplicable:
		e.printf("  %-10s not applicable (not a LoadBalancer Service)\n", name)
		return
	}
	if eipPart != nil && p.Reason == eipPart.Reason && p.State == eipPart.State {
		e.printf("  %-10s %s: as the EIP part\n", name, p.State)
		return
	}
	e.printf("  %-10s %s: %s", name, p.State, p.Reason)
	if p.EventReason != "" {
		e.printf(" [%s]", p.EventReason)
	}
	e.println()
	if p.Fix != "" {
		e.printf("  %-10s fix: %s\n", "", p.Fix)
	}
}

// printIdentities writes the Service's identities as a table, if it has any.
func printIdentities(e *errWriter, st ServiceStatus, c ControllerInfo) {
	switch {
	case len(st.Identities) == 0:
		return
	case st.Basis == BasisRules:
		e.printf("\nIdentities (affinity %s):\n", st.Affinity)
	case c.GatesSource == GatesUnknown:
		e.printf("\nIdentities the controller's rules would give it were both gates on (affinity %s):\n", st.Affinity)
	default:
		e.printf("\nIdentities the controller's rules would give it with the gates it last published (affinity %s):\n", st.Affinity)
	}
	t := newTable(e)
	for _, id := range st.Identities {
		extra := ""
		if len(id.SourceRanges) > 0 {
			extra = "  from " + strings.Join(id.SourceRanges, ",")
		}
		t.printf("  %s\t%s:%d/%s\t-> %s%s\n", id.Part, id.VIP, id.Port, id.Protocol, dash(strings.Join(id.Backends, ", ")), extra)
	}
	e.keep(t.flush())
}

// printIngressAndRecord writes the Service's ingress and, when there is one, its record.
func printIngressAndRecord(e *errWriter, st ServiceStatus) {
	e.printf("\nIngress:    %s\n", dash(strings.Join(st.Ingress, ", ")))
	r := st.Record
	if r == nil {
		return
	}
	e.printf("Record:     %s %s %s", r.Kind, dash(strings.Join(r.Names, ",")), map[bool]string{true: "Ready", false: "not Ready"}[r.Ready])
	if r.Message != "" {
		e.printf(" (%s)", r.Message)
	}
	e.println()
}

// printServiceRoutes writes the routes of the Service's VIPs, when it is served.
func printServiceRoutes(e *errWriter, ex ServiceExplanation, now time.Time) {
	rt := ex.Routes
	if rt == nil {
		return
	}
	e.printf("Routes of the Service's VIPs: %s\n", routesText(*rt, now))
	if rt.UnroutedVIPs > 0 {
		// The status says how many of the gateway's VIPs, not whose (SPEC N8).
		e.printf("  Warning: OVN drops %s of gateway %s before their VIP route applies: %s\n",
			vipCount(rt.UnroutedVIPs), ex.Service.Gateway, rt.Unrouted)
	}
}

// printEvents writes the events the controller gives the Service, if any.
func printEvents(e *errWriter, events []Event) {
	if len(events) == 0 {
		return
	}
	e.println("\nEvents the controller gives it:")
	for _, ev := range events {
		at := ""
		if !ev.Time.IsZero() {
			at = " (" + ev.Time.UTC().Format(time.RFC3339) + ")"
		}
		e.printf("  %s %s%s: %s\n", ev.Type, ev.Reason, at, ev.Message)
	}
}

// PrintGateway writes a gateway's status for a person; opts are for the table of its Services.
func PrintGateway(w io.Writer, gs GatewayStatus, opts TableOptions, now time.Time) error {
	e := &errWriter{w: w}
	e.printf("Controller: %s\n", controllerLine(gs.Controller, now))
	e.printf("Gates:      %s\n", GatesText(gs.Controller))
	for i, u := range gs.Unknown {
		e.printf("%s - %s\n", map[bool]string{true: "Unknown:   ", false: "           "}[i == 0], u)
	}
	e.println()
	printGatewayState(e, gs.GatewayState, now)
	if gs.Routes.Router != "" || len(gs.Routes.VIPs) > 0 {
		e.printf("Routes:     %s\n", routesText(gs.Routes, now))
		if gs.Routes.UnroutedVIPs > 0 {
			e.printf("  Warning: OVN drops %s of the gateway before their VIP route applies: %s\n", vipCount(gs.Routes.UnroutedVIPs), gs.Routes.Unrouted)
		}
	}
	e.printf("\nServices (%d):\n", len(gs.Services))
	opts.Namespaces = true                     // a gateway's Services are of every namespace
	return PrintServices(e, gs.Services, opts) // through e: an error so far is its answer
}

func printGatewayState(e *errWriter, g GatewayState, now time.Time) {
	if g.ExistsUnknown && !g.Exists {
		e.printf("Gateway %s: unknown (you may not list vpc-nat-gateways.kubeovn.io)\n", g.Name)
		return
	}
	if !g.Exists {
		e.printf("Gateway %s: VpcNatGateway %s does not exist\n", g.Name, g.Name)
		return
	}
	e.printf("Gateway %s (Vpc %s, lanIp %s): %d identities by the controller's rules", g.Name, dash(g.Vpc), dash(g.LanIP), g.Identities)
	if p := g.Programmed; p != nil {
		// The controller publishes at most every 10 s: what it reports may trail the rules.
		e.printf("; the controller last reported generation %d with %d identities, programmed %s", p.Generation, p.Identities, ago(p.LastSyncTime, now))
		if p.LastError != "" {
			e.printf("; last sync failed: %s", p.LastError)
		}
	} else {
		e.print("; the controller reports nothing about it")
	}
	e.println()
	if len(g.Instances) == 0 {
		e.println("  no running instance")
		return
	}
	t := newTable(e)
	t.println("  INSTANCE\tLAN IP\tINITIALIZED\tACKED\tCURRENT\tAGENT\tLAST ACK\tERROR")
	for _, in := range g.Instances {
		acked, last := "-", "-"
		if in.Reported {
			acked, last = fmt.Sprint(in.AckedGeneration), ago(in.LastAckTime, now)
		}
		t.printf("  %s\t%s\t%t\t%s\t%t\t%s\t%s\t%s\n", in.Pod, dash(in.LanIP), in.Initialized, acked, in.Current, dash(in.AgentVersion), last, dash(in.LastError))
	}
	e.keep(t.flush())
}

func routesText(rt Routes, now time.Time) string {
	if !rt.Written {
		return fmt.Sprintf("not written by the controller (no --ovn-nb-addr): route %s to the gateway by hand", dash(strings.Join(rt.VIPs, ", ")))
	}
	s := fmt.Sprintf("router %s, %s -> %s", dash(rt.Router), dash(strings.Join(rt.VIPs, ", ")), dash(strings.Join(rt.NextHops, ", ")))
	switch {
	case rt.Synced == nil:
		s += " (write state unknown)"
	case *rt.Synced:
		s += " (written " + ago(rt.LastSyncTime, now) + ")"
	default:
		s += " (last write failed: " + rt.LastError + ")"
	}
	return s
}

func vipCount(n int) string {
	if n == 1 {
		return "1 VIP"
	}
	return fmt.Sprintf("%d VIPs", n)
}

func controllerLine(c ControllerInfo, now time.Time) string {
	if !c.Running {
		return c.Message
	}
	line := fmt.Sprintf("vpcgw %s running (%s, holder %s, heartbeat %s)", c.Version, c.ConfigMap, dash(c.Holder), ago(c.Heartbeat, now))
	if c.StandingAside != "" {
		line += "; it serves and releases nothing: " + c.StandingAside
	}
	return line
}

// PrintVersion writes the plugin's and the controller's versions.
func PrintVersion(w io.Writer, v VersionInfo, now time.Time) error {
	e := &errWriter{w: w}
	e.printf("kubectl-vpcgw: %s\n", v.Plugin)
	switch c := v.Controller; {
	case c == nil:
	case c.Running:
		e.printf("controller:    %s (%s, holder %s, heartbeat %s)\n", c.Version, c.ConfigMap, dash(c.Holder), ago(c.Heartbeat, now))
	default:
		e.printf("controller:    %s\n", c.Message)
		if c.Version != "" {
			e.printf("               last published version %s\n", c.Version)
		}
	}
	return e.err
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	if d := now.Sub(t); d >= time.Second {
		return duration.HumanDuration(d) + " ago"
	}
	return "just now"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
