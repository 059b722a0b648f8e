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

// TableOptions say how to print a table: Wide adds columns, NoHeaders leaves the header out.
type TableOptions struct {
	Wide, NoHeaders bool
}

// PrintServices writes one line per Service: gateway, EIP, ingress, identities, backends,
// affinity, ready and why not; wide adds type, ClusterIP, state and record.
func PrintServices(w io.Writer, items []ServiceStatus, opts TableOptions) error {
	wide := opts.Wide
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	switch {
	case opts.NoHeaders:
	case wide:
		fmt.Fprintln(tw, "SERVICE\tTYPE\tGATEWAY\tEIP\tINGRESS\tCLUSTER-IP\tIDENTITIES\tBACKENDS\tAFFINITY\tSTATE\tRECORD\tREADY\tWHY NOT")
	default:
		fmt.Fprintln(tw, "SERVICE\tGATEWAY\tEIP\tINGRESS\tIDENTITIES\tBACKENDS\tAFFINITY\tREADY\tWHY NOT")
	}
	for _, st := range items {
		ids := make([]string, 0, len(st.Identities))
		set := map[string]bool{}
		for _, id := range st.Identities {
			ids = append(ids, fmt.Sprintf("%s:%d/%s", id.VIP, id.Port, id.Protocol))
			for _, b := range id.Backends {
				set[b] = true
			}
		}
		bs := make([]string, 0, len(set))
		for b := range set {
			bs = append(bs, b)
		}
		slices.Sort(bs)
		k := st.Namespace + "/" + st.Name
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\n", k, st.Type, dash(st.Gateway), dash(st.EIP), dash(strings.Join(st.Ingress, ",")),
				dash(st.ClusterIP), dash(strings.Join(ids, ",")), dash(strings.Join(bs, ",")), st.Affinity, st.State, recordText(st.Record), st.Ready, dash(WhyNot(st)))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\n", k, dash(st.Gateway), dash(st.EIP), dash(strings.Join(st.Ingress, ",")),
			dash(strings.Join(ids, ",")), dash(strings.Join(bs, ",")), st.Affinity, st.Ready, dash(WhyNot(st)))
	}
	return tw.Flush()
}

// WhyNot is the reasons of the parts that are not served, in a line.
func WhyNot(st ServiceStatus) string {
	var parts []string
	if st.EIPPart.State == PartNotServed || st.EIPPart.State == PartOff {
		parts = append(parts, "EIP: "+st.EIPPart.Reason)
	}
	if (st.ClusterIPPart.State == PartNotServed || st.ClusterIPPart.State == PartOff) && st.ClusterIPPart.Reason != st.EIPPart.Reason {
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
	st := ex.Service
	fmt.Fprintln(w, ex.Summary)
	fmt.Fprintf(w, "\nService:    %s/%s (%s)\n", st.Namespace, st.Name, st.Type)
	fmt.Fprintf(w, "State:      %s\n", st.State)
	fmt.Fprintf(w, "Controller: %s\n", controllerLine(ex.Controller, now))
	fmt.Fprintf(w, "Gates:      %s\n", GatesText(ex.Controller))
	if st.Gateway != "" {
		fmt.Fprintf(w, "Gateway:    %s\n", st.Gateway)
	}
	if st.EIP != "" {
		fmt.Fprintf(w, "EIP:        %s\n", st.EIP)
	}
	fmt.Fprintln(w, "\nParts:")
	for _, p := range []struct {
		name string
		p    Part
	}{{"EIP", st.EIPPart}, {"ClusterIP", st.ClusterIPPart}} {
		switch p.p.State {
		case PartServed:
			fmt.Fprintf(w, "  %-10s Served on %s\n", p.name, p.p.VIP)
		case PartNotApplicable:
			fmt.Fprintf(w, "  %-10s not applicable (not a LoadBalancer Service)\n", p.name)
		default:
			if p.name == "ClusterIP" && p.p.Reason == st.EIPPart.Reason && p.p.State == st.EIPPart.State {
				fmt.Fprintf(w, "  %-10s %s: as the EIP part\n", p.name, p.p.State)
				continue
			}
			fmt.Fprintf(w, "  %-10s %s: %s", p.name, p.p.State, p.p.Reason)
			if p.p.EventReason != "" {
				fmt.Fprintf(w, " [%s]", p.p.EventReason)
			}
			fmt.Fprintln(w)
			if p.p.Fix != "" {
				fmt.Fprintf(w, "  %-10s fix: %s\n", "", p.p.Fix)
			}
		}
	}
	if len(st.Identities) > 0 {
		fmt.Fprintf(w, "\nIdentities (affinity %s):\n", st.Affinity)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, id := range st.Identities {
			extra := ""
			if len(id.SourceRanges) > 0 {
				extra = "  from " + strings.Join(id.SourceRanges, ",")
			}
			fmt.Fprintf(tw, "  %s\t%s:%d/%s\t-> %s%s\n", id.Part, id.VIP, id.Port, id.Protocol, dash(strings.Join(id.Backends, ", ")), extra)
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\nIngress:    %s\n", dash(strings.Join(st.Ingress, ", ")))
	if r := st.Record; r != nil {
		fmt.Fprintf(w, "Record:     %s %s %s", r.Kind, dash(strings.Join(r.Names, ",")), map[bool]string{true: "Ready", false: "not Ready"}[r.Ready])
		if r.Message != "" {
			fmt.Fprintf(w, " (%s)", r.Message)
		}
		fmt.Fprintln(w)
	}
	if g := ex.Gateway; g != nil {
		fmt.Fprintln(w)
		printGatewayState(w, *g, now)
	}
	if rt := ex.Routes; rt != nil {
		fmt.Fprintf(w, "Routes of the Service's VIPs: %s\n", routesText(*rt, now))
		if rt.UnroutedVIPs > 0 {
			// The status says how many of the gateway's VIPs, not whose (SPEC N8).
			fmt.Fprintf(w, "  Warning: OVN drops %s of gateway %s before their VIP route applies: %s\n",
				vipCount(rt.UnroutedVIPs), ex.Service.Gateway, rt.Unrouted)
		}
	}
	if len(st.Events) > 0 {
		fmt.Fprintln(w, "\nEvents the controller gives it:")
		for _, ev := range st.Events {
			fmt.Fprintf(w, "  %s %s: %s\n", ev.Type, ev.Reason, ev.Message)
		}
	}
	return nil
}

// PrintGateway writes a gateway's status for a person; opts are for the table of its Services.
func PrintGateway(w io.Writer, gs GatewayStatus, opts TableOptions, now time.Time) error {
	fmt.Fprintf(w, "Controller: %s\n", controllerLine(gs.Controller, now))
	fmt.Fprintf(w, "Gates:      %s\n\n", GatesText(gs.Controller))
	printGatewayState(w, gs.GatewayState, now)
	if gs.Routes.Router != "" || len(gs.Routes.VIPs) > 0 {
		fmt.Fprintf(w, "Routes:     %s\n", routesText(gs.Routes, now))
		if gs.Routes.UnroutedVIPs > 0 {
			fmt.Fprintf(w, "  Warning: OVN drops %s of the gateway before their VIP route applies: %s\n", vipCount(gs.Routes.UnroutedVIPs), gs.Routes.Unrouted)
		}
	}
	fmt.Fprintf(w, "\nServices (%d):\n", len(gs.Services))
	return PrintServices(w, gs.Services, opts)
}

func printGatewayState(w io.Writer, g GatewayState, now time.Time) {
	if !g.Exists {
		fmt.Fprintf(w, "Gateway %s: VpcNatGateway %s does not exist\n", g.Name, g.Name)
		return
	}
	fmt.Fprintf(w, "Gateway %s (Vpc %s, lanIp %s): %d identities by the controller's rules", g.Name, dash(g.Vpc), dash(g.LanIP), g.Identities)
	if p := g.Programmed; p != nil {
		// The controller publishes at most every 10 s: what it reports may trail the rules.
		fmt.Fprintf(w, "; the controller last reported generation %d with %d identities, programmed %s", p.Generation, p.Identities, ago(p.LastSyncTime, now))
		if p.LastError != "" {
			fmt.Fprintf(w, "; last sync failed: %s", p.LastError)
		}
	} else {
		fmt.Fprint(w, "; the controller reports nothing about it")
	}
	fmt.Fprintln(w)
	if len(g.Instances) == 0 {
		fmt.Fprintln(w, "  no running instance")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  INSTANCE\tLAN IP\tINITIALIZED\tACKED\tCURRENT\tAGENT\tLAST ACK\tERROR")
	for _, in := range g.Instances {
		acked, last := "-", "-"
		if in.Reported {
			acked, last = fmt.Sprint(in.AckedGeneration), ago(in.LastAckTime, now)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%t\t%s\t%t\t%s\t%s\t%s\n", in.Pod, dash(in.LanIP), in.Initialized, acked, in.Current, dash(in.AgentVersion), last, dash(in.LastError))
	}
	_ = tw.Flush()
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
	fmt.Fprintf(w, "kubectl-vpcgw: %s\n", v.Plugin)
	if v.Controller == nil {
		return nil
	}
	if v.Controller.Running {
		fmt.Fprintf(w, "controller:    %s (%s, holder %s, heartbeat %s)\n", v.Controller.Version, v.Controller.ConfigMap, dash(v.Controller.Holder), ago(v.Controller.Heartbeat, now))
		return nil
	}
	fmt.Fprintf(w, "controller:    %s\n", v.Controller.Message)
	if v.Controller.Version != "" {
		fmt.Fprintf(w, "               last published version %s\n", v.Controller.Version)
	}
	return nil
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
