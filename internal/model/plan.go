package model

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/gwinstance"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Plan is what the controller must make true.
type Plan struct {
	Services []ServicePlan // sorted by namespace/name
	Gateways []GatewayPlan // one per existing gateway, sorted by name
	// OrphanRecords are records whose owner Service (by UID) no longer exists (SPEC R4, R5, I3);
	// OrphanServiceRecords likewise, in the ServiceRecord form.
	OrphanRecords        []string
	OrphanServiceRecords []string
}

// GatewayPlan is what one gateway must serve.
type GatewayPlan struct {
	Name string
	// Instances are the gateway's running pods; every one gets State (SPEC D7).
	Instances []Instance
	// Refused are the running Pods that carry the gateway's labels in its namespace but that
	// kube-ovn's workload did not make: they get no state and are no next hop (SPEC N5).
	Refused []RefusedInstance
	State   gwstate.State // Generation is left to the sender
	// Routes are the gateway's VIP router policies (SPEC V1).
	Routes VIPRoutes
	// Services bound to the gateway through an EIP or a ClusterIP.
	Services []types.NamespacedName
	// Sharers is how many namespaces the gateway's bounds are split between (SPEC N4, bounds.go).
	Sharers int

	// update is State as a Planner made it (Update): the change from its previous state, and
	// the whole state built only when it is sent complete. A Planner's partial plan leaves State
	// empty.
	update gwstate.Update
}

// Update is what the transport sends for the plan: a Planner's change from its previous state
// (sent to instances that acknowledged that state) with the whole state built on demand, or,
// for a plan made without a Planner, State as a complete state.
func (gp *GatewayPlan) Update() gwstate.Update {
	if gp.update.Version == 0 {
		return gwstate.Complete(gp.State)
	}
	return gp.update
}

// Instance is one running pod of a gateway.
type Instance struct {
	Pod *corev1.Pod
	// LanIP is the instance's IPv4 address in the VPC (eth0).
	LanIP string
	// Initialized: kube-ovn ran the gateway's init (annotation vpc_nat_gw_init=true).
	Initialized bool
	// Workload and WorkloadNamespace are kube-ovn's workload of the gateway ("<prefix>-<gw>" and
	// its namespace): the transport checks the Pod's owner chain against them before it execs
	// (SPEC N5).
	Workload, WorkloadNamespace string
}

// RefusedInstance is a Pod that looks like an instance of a gateway but is not one (SPEC N5).
type RefusedInstance struct {
	Pod types.NamespacedName
	UID types.UID
	// Event is the Warning for the Pod: it names only the Pod's namespace's objects (SPEC N8).
	Event Event
}

// VIPRoutes are the Logical_Router_Policies of one gateway: priority 29210, match
// ip4.dst == <vip>, reroute to NextHops (SPEC V1). No next hops means no policies.
type VIPRoutes struct {
	Router   string // the VPC's logical router (named like the Vpc)
	Gateway  string
	NextHops []string
	VIPs     []string
}

// Compute turns a snapshot into a Plan. It is deterministic: the same snapshot in any order
// gives the same Plan.
func Compute(s Snapshot, gates Gates) Plan {
	ix := NewIndex(s, gates)
	plan := Plan{}
	live := map[types.UID]bool{}
	states := map[string]*GatewayPlan{}
	for name := range ix.gateways {
		if gp, ok := ix.GatewayBase(name); ok {
			states[name] = &gp
		}
	}
	order, programmed := ix.budgetOrder(s.Services)
	plans := ix.planInOrder(&s, order)
	for j, i := range order {
		svc, sp := &s.Services[i], plans[j]
		sp.programmed = programmed[j]
		live[svc.UID] = true
		if gp := states[sp.Gateway]; gp != nil {
			gp.Add(sp.Contribution())
		}
		plan.Services = append(plan.Services, sp)
	}
	plan.OrphanRecords, plan.OrphanServiceRecords = ix.orphans(live)
	slices.SortFunc(plan.Services, func(a, b ServicePlan) int { return compareKeys(a.Key, b.Key) })
	for name, gp := range states {
		gp.Sharers = ix.sharersOf[name]
		gp.Finish()
		plan.Gateways = append(plan.Gateways, *gp)
	}
	slices.SortFunc(plan.Gateways, func(a, b GatewayPlan) int { return strings.Compare(a.Name, b.Name) })
	return plan
}

// planInOrder plans s's Services in budget order (plans[j] is that of s.Services[order[j]]).
// Each gateway's bounds are shared between its namespaces (bounds.go), and who shares them is
// known only once every Service's demand is: a first pass finds it, and the Services of a
// gateway where a share matters are planned again with the shares.
func (ix *Index) planInOrder(s *Snapshot, order []int) []ServicePlan {
	plans := make([]ServicePlan, len(order))
	for j, i := range order {
		plans[j] = ix.PlanService(&s.Services[i])
	}
	if again := ix.shareGateways(s.Services, order, plans); len(again) > 0 {
		for j, i := range order {
			if again[plans[j].Gateway] {
				plans[j] = ix.PlanService(&s.Services[i])
			}
		}
	}
	return plans
}

// orphans are the names of the records, of each form, whose owner is not a live Service, sorted.
func (ix *Index) orphans(live map[types.UID]bool) (records, serviceRecords []string) {
	for uid, rs := range ix.records {
		if !live[uid] {
			for _, r := range rs {
				records = append(records, r.Name)
			}
		}
	}
	for uid, rs := range ix.svcRecords {
		if !live[uid] {
			for _, r := range rs {
				serviceRecords = append(serviceRecords, r.Name)
			}
		}
	}
	slices.Sort(records)
	slices.Sort(serviceRecords)
	return records, serviceRecords
}

// budgetOrder is the order Services take identities from their gateway's bound (SPEC N4): those
// whose records say they are programmed first, so that a served Service is never pushed out by a
// newcomer, then in claim order (CompareClaims: the first claim, then the oldest, then by name).
// programmed[j] says whether order[j]'s records say it is programmed.
func (ix *Index) budgetOrder(svcs []corev1.Service) (order []int, programmed []bool) {
	type entry struct {
		i          int
		programmed bool
		rank       claimRank
	}
	entries := make([]entry, len(svcs))
	for i := range svcs {
		entries[i] = entry{i: i, programmed: len(ix.recordedIdentities(svcs[i].UID)) > 0, rank: rankOf(&svcs[i])}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		sa, sb := &svcs[a.i], &svcs[b.i]
		return cmp.Or(compareBool(b.programmed, a.programmed), compareRanks(a.rank, b.rank),
			strings.Compare(sa.Namespace, sb.Namespace), strings.Compare(sa.Name, sb.Name))
	})
	order, programmed = make([]int, len(entries)), make([]bool, len(entries))
	for j, e := range entries {
		order[j], programmed[j] = e.i, e.programmed
	}
	return order, programmed
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Contribution is what one Service adds to its gateway's plan. The controller keeps one per
// Service between syncs, so that a change replans only the Services it touches.
type Contribution struct {
	Service    types.NamespacedName
	Identities []gwstate.Identity
	// EIP and ClusterIP are the served addresses (the zero Addr when that part is not served).
	EIP, ClusterIP netip.Addr
}

// Contribution is what the Service adds to its gateway: nothing unless some part is served.
func (sp *ServicePlan) Contribution() Contribution {
	if !sp.Served() {
		return Contribution{Service: sp.Key}
	}
	return Contribution{Service: sp.Key, Identities: sp.Identities, EIP: sp.EIP, ClusterIP: sp.ClusterIP}
}

// GatewayBase is the part of a gateway's plan that does not come from Services: its instances
// and the next hops of its VIP routes. ok is false when the gateway is missing or being deleted.
func (ix *Index) GatewayBase(name string) (gp GatewayPlan, ok bool) {
	gw := ix.gateways[name]
	if gw == nil || gw.DeletionTimestamp != nil {
		return gp, false
	}
	// Release: the agents also remove what they keep for an empty state (SPEC O4).
	gp = GatewayPlan{Name: name, State: gwstate.State{Identities: []gwstate.Identity{}, Release: ix.gates.Release}}
	gp.Instances, gp.Refused = ix.instances(name)
	gp.Routes = VIPRoutes{Router: gw.Spec.Vpc, Gateway: name}
	for _, inst := range gp.Instances {
		if inst.Initialized && inst.LanIP != "" {
			gp.Routes.NextHops = append(gp.Routes.NextHops, inst.LanIP)
		}
	}
	return gp, true
}

// Base is the plan without its Services: instances, next hops and sharers only.
func (gp GatewayPlan) Base() GatewayPlan {
	return GatewayPlan{
		Name:      gp.Name,
		Instances: gp.Instances,
		Refused:   gp.Refused,
		State:     gwstate.State{Identities: []gwstate.Identity{}, Release: gp.State.Release},
		Routes:    VIPRoutes{Router: gp.Routes.Router, Gateway: gp.Routes.Gateway, NextHops: gp.Routes.NextHops},
		Sharers:   gp.Sharers,
	}
}

// Add adds one served Service to the gateway's state, ClusterIPs and route VIPs. Call Finish
// when every Service is in.
func (gp *GatewayPlan) Add(c Contribution) {
	if !c.EIP.IsValid() && !c.ClusterIP.IsValid() {
		return
	}
	gp.State.Identities = append(gp.State.Identities, c.Identities...)
	gp.Services = append(gp.Services, c.Service)
	if c.ClusterIP.IsValid() {
		gp.State.ClusterIPs = append(gp.State.ClusterIPs, c.ClusterIP)
	}
	for _, vip := range []netip.Addr{c.EIP, c.ClusterIP} {
		if vip.IsValid() {
			gp.Routes.VIPs = append(gp.Routes.VIPs, vip.String())
		}
	}
}

// Finish sorts the plan, so that the same Services in any order give the same plan.
func (gp *GatewayPlan) Finish() {
	// Backends come sorted and de-duplicated from backendsFor.
	gp.State.SortIdentities()
	gp.Routes.NextHops = sortAddrs(gp.Routes.NextHops)
	gp.Routes.VIPs = sortAddrs(gp.Routes.VIPs)
	slices.SortFunc(gp.Services, compareKeys)
}

// sortAddrs sorts route addresses (text: the OVN writer's vocabulary) in address order and
// removes duplicates. They are the text of addresses the model parsed, so each parses again.
func sortAddrs(addrs []string) []string {
	parsed := make([]netip.Addr, 0, len(addrs))
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil {
			parsed = append(parsed, a)
		}
	}
	slices.SortFunc(parsed, netip.Addr.Compare)
	out := addrs[:0]
	for _, a := range slices.Compact(parsed) {
		out = append(out, a.String())
	}
	return out
}

func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// Gateway returns the plan of one gateway, or nil.
func (p Plan) Gateway(name string) *GatewayPlan {
	for i := range p.Gateways {
		if p.Gateways[i].Name == name {
			return &p.Gateways[i]
		}
	}
	return nil
}

// instances lists a gateway's running pods, sorted by name (kube-ovn's getNatGwPods), and those
// that look like them (namespace, labels, phase) but that kube-ovn's workload did not make.
func (ix *Index) instances(gw string) ([]Instance, []RefusedInstance) {
	g := ix.gateways[gw]
	ns, app := ix.placement.Namespace(g), ix.placement.AppLabel(gw)
	var out []Instance
	var refused []RefusedInstance
	for _, p := range ix.gatewayPods[gw] {
		if p.Namespace != ns || p.Labels["app"] != app || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		if why := ix.notAnInstance(p, app, gw); why != "" {
			refused = append(refused, refusal(p, gw, why))
			continue
		}
		// The route's next hop comes from the Pod's status (the kubelet's report of the address
		// kube-ovn allocated), never from an annotation its owner could write (SPEC N5).
		lan, _ := firstIPv4([]string{p.Status.PodIP})
		out = append(out, Instance{Pod: p, LanIP: addrText(lan), Initialized: p.Annotations[AnnotationGwInit] == "true", Workload: app, WorkloadNamespace: ns})
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.Pod.Name, b.Pod.Name) })
	slices.SortFunc(refused, func(a, b RefusedInstance) int { return compareKeys(a.Pod, b.Pod) })
	return out, refused
}

// refusal is the Warning for Pod p that claims to be an instance of gateway gw. It is given to
// the Pod, in the gateway's namespace, and names only objects of that namespace (SPEC N8).
func refusal(p *corev1.Pod, gw, why string) RefusedInstance {
	return RefusedInstance{Pod: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, UID: p.UID,
		Event: *warning(ReasonNotAGatewayInstance, "pod %s carries the labels of gateway %s's pods but is not its instance: %s; it gets no state and is no route's next hop", p.Name, gw, why)}
}

// notAnInstance explains why a gateway Pod is not one kube-ovn's workload for the gateway made
// ("" when it is one): that is its StatefulSet "<prefix>-<gateway>" (v1.16.x, master with one
// replica; Pods "<prefix>-<gateway>-<ordinal>") or a ReplicaSet of its Deployment of that name
// (master with replicas > 1; Pods "<replicaset>-<suffix>"). Labels and an owner reference anyone
// who may create Pods in the namespace can write; the StatefulSet's UID and replicas they cannot
// (SPEC N5).
func (ix *Index) notAnInstance(p *corev1.Pod, app, gw string) string {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return "it has no controller owner reference"
	}
	switch {
	case ref.APIVersion == "apps/v1" && ref.Kind == "StatefulSet":
		return ix.notOfStatefulSet(p, ref, app, gw)
	case ref.APIVersion == "apps/v1" && ref.Kind == "ReplicaSet":
		// The ReplicaSets are not in the snapshot: the name, then the exec transport's owner
		// chain check, decide.
		if strings.HasPrefix(ref.Name, app+"-") && strings.HasPrefix(p.Name, ref.Name+"-") {
			return ""
		}
		return fmt.Sprintf("its controller, ReplicaSet %s, is not one of Deployment %s", ref.Name, app)
	}
	return fmt.Sprintf("its controller is %s %s, not StatefulSet %s (apps/v1)", ref.Kind, ref.Name, app)
}

// notOfStatefulSet explains why a Pod controlled (ref) by a StatefulSet is not one of the
// replicas of kube-ovn's StatefulSet app, in the Pod's namespace ("" when it is one).
func (ix *Index) notOfStatefulSet(p *corev1.Pod, ref *metav1.OwnerReference, app, gw string) string {
	if ref.Name != app {
		return fmt.Sprintf("its controller is StatefulSet %s, not %s", ref.Name, app)
	}
	sts := ix.statefulSets[types.NamespacedName{Namespace: p.Namespace, Name: app}]
	switch {
	case sts == nil:
		return fmt.Sprintf("there is no StatefulSet %s with kube-ovn's labels", app)
	case sts.UID != ref.UID:
		return fmt.Sprintf("its owner reference is not to StatefulSet %s (another UID)", app)
	case sts.Labels["app"] != app || sts.Labels[LabelGatewayPod] != "true":
		return fmt.Sprintf("StatefulSet %s has not kube-ovn's labels", app)
	}
	if c := metav1.GetControllerOfNoCopy(sts); c != nil && (c.Kind != "VpcNatGateway" || !strings.HasPrefix(c.APIVersion, "kubeovn.io/") || c.Name != gw) {
		return fmt.Sprintf("StatefulSet %s is controlled by %s %s, not by VpcNatGateway %s", app, c.Kind, c.Name, gw)
	}
	if err := gwinstance.CheckOrdinal(p.Name, sts); err != nil {
		return err.Error()
	}
	return ""
}
