package model

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// The planner plans one gateway at a time, and after its first full plan replans only the
// Services a change touches (kube-proxy's partial sync): it remembers what each Service of the
// gateway contributed at its last plan, and the gateway's whole state, which a partial plan
// changes only where the Services it replans changed it (gatewaystate.go). It decides
// everything about that without I/O:
//
//   - when a plan must be full (no valid memory, a gateway-wide input changed: Fingerprint, or a
//     change to the shares of the gateway's bounds: the namespaces sharing them, a namespace the
//     change leaves past its share; while a Service of the gateway waits for room, only the few
//     cases plannerroom.go lists, SPEC N4);
//   - which Services replan together: a changed Service, and every Service that shares a claim
//     (ClaimKeys) with it now or at its last plan, transitively, since one may take over what
//     another gives up and a Service's plan depends on every claimant of what it claims (SPEC I2);
//     while a Service waits for room (or for its draining flows), also every Service whose room
//     a change elsewhere may change (plannerroom.go);
//   - what the other Services already hold against the gateway's bounds.
//
// What to read is a Scope; ReadScope reads it through a Reader (the controller's cache, or a
// test's objects); Plan plans what was read and updates the memory. Plan(Scope(...)) equals a
// full plan after every change: TestPartialPlansEqualFullPlans.

// UnboundGateway is the planner key of Services that hold the finalizer but name no gateway:
// they only need releasing, and are always planned in full.
const UnboundGateway = ""

// Planner is the memory of one gateway's planning. Its zero value plans in full first. It is
// not safe for concurrent use: one gateway is planned by one worker at a time.
type Planner struct {
	valid       bool
	fingerprint string
	services    map[types.NamespacedName]*keptPlan
	// room is who waits for room and whose room a change elsewhere may change (SPEC N4,
	// plannerroom.go).
	room room
	// held is what the kept Services hold against the gateway's bounds, and nsHeld per
	// namespace; asking counts, per namespace, the kept Services that ask the gateway for room,
	// served or waiting. keep and forget keep them up to date, so that a partial plan does not
	// walk every identity. sharers is how many namespaces the last plan split the bounds between.
	held    Load
	nsHeld  map[string]Load
	asking  map[string]int
	sharers int
	// state is the gateway's whole state at the last plan (nil: none), changed by a partial plan
	// only where the Services it replans changed it (gatewaystate.go).
	state *gatewayState
}

// keptPlan is what the planner remembers of one Service's last plan.
type keptPlan struct {
	uid     types.UID
	part    Contribution
	load    Load
	demand  Load // what it asked of the bounds (ServicePlan.Demand), served or not
	limited bool
	// programmed and asks are those of its ServicePlan (plannerroom.go).
	programmed bool
	asks       Load
	claims     []string
}

// Changes are what changed since a gateway's last plan: Services to replan, and record owners
// whose records someone else changed (SPEC R4).
type Changes struct {
	Services map[types.NamespacedName]bool
	Owners   map[types.UID]bool
}

// Scope is what one plan of a gateway must read beyond the gateway-wide objects: everything
// bound to the gateway (Full), or the changed Services, every Service bound to the gateway that
// has one of Claims or of the changed Services' claims now, and the records of Owners.
type Scope struct {
	Full     bool
	Services []types.NamespacedName
	Claims   []string
	Owners   []types.UID

	fingerprint string
}

// Limited is how many Services of the gateway its last plan left waiting for room: the gateway's
// bounds, or their namespace's share of them, are reached (SPEC N4). A partial plan while one
// waits replans every waiting Service, so the count is always the whole gateway's.
func (p *Planner) Limited() int { return len(p.room.waiting) }

// Invalidate makes the next plan full (after a failed sync: what it decided is unknown).
func (p *Planner) Invalidate() { p.valid = false }

// Scope says what the plan of gateway gw needs read, given the gateway-wide objects in base
// (everything but the plan:"service" fields) and the changes since the last plan.
func (p *Planner) Scope(base Snapshot, gw string, ch Changes) Scope {
	sc := Scope{fingerprint: Fingerprint(base)}
	if gw == UnboundGateway || !p.valid || p.fingerprint != sc.fingerprint || eipsShareAnAddress(base.EIPs, gw) {
		sc.Full = true
		return sc
	}
	claims := map[string]bool{}
	owners := maps.Clone(ch.Owners)
	if owners == nil {
		owners = map[types.UID]bool{}
	}
	add := func(k types.NamespacedName) {
		sc.Services = append(sc.Services, k)
		if kp := p.services[k]; kp != nil {
			for _, c := range kp.claims {
				claims[c] = true
			}
			owners[kp.uid] = true // its records, if the Service is gone or replaced
		}
	}
	for k := range ch.Services {
		add(k)
	}
	for _, k := range p.room.unsettled(ch.Services) { // room a change releases may go to them
		add(k)
	}
	slices.SortFunc(sc.Services, compareKeys)
	sc.Claims = slices.Sorted(maps.Keys(claims))
	sc.Owners = slices.Sorted(maps.Keys(owners))
	return sc
}

// Plan plans gateway gw from snap, which holds the gateway-wide objects and what ReadScope read
// for sc, and updates the memory. It returns the plan of the Services planned (all of the
// gateway's for a full plan; the controller writes those whose Gateway is gw) and the plan of
// the whole gateway (nil: the gateway does not exist, or gw is UnboundGateway); what its
// instances get is its Update (a partial plan leaves its State empty). ok is false, with
// nothing changed, when a partial plan cannot decide what a full one would (decides, SPEC N4).
// Then plan in full: Sync does.
func (p *Planner) Plan(sc Scope, snap Snapshot, replanned map[types.NamespacedName]bool, gates Gates, gw string) (plan Plan, gp *GatewayPlan, ok bool) {
	if sc.Full {
		plan := Compute(snap, gates)
		if gw == UnboundGateway {
			return plan, nil, true
		}
		p.valid, p.fingerprint = true, sc.fingerprint
		p.services, p.room, p.held = map[types.NamespacedName]*keptPlan{}, room{}, Load{}
		p.nsHeld, p.asking = map[string]Load{}, map[string]int{}
		p.keep(gw, plan.Services, snap.Services)
		gp := plan.Gateway(gw)
		p.sharers = sharersIn(plan, gw)
		p.fullState(gp)
		return plan, gp, true
	}
	outside := p.outside(replanned)
	snap.GatewayLoad = map[string]HeldLoad{gw: outside}
	plan = Compute(snap, gates)
	if !p.decides(sc, plan, outside, replanned, gates, gw) {
		return Plan{}, nil, false
	}
	keys := slices.SortedFunc(maps.Keys(replanned), compareKeys) // old and now in one order
	old := p.parts(keys)
	for _, k := range keys {
		p.forget(k)
	}
	p.keep(gw, plan.Services, snap.Services)
	p.sharers = sharersIn(plan, gw) // the same, unless a Service waited (plannerroom.go)
	if gp = plan.Gateway(gw); gp == nil {
		p.state = nil
		return plan, nil, true
	}
	var base uint64
	delta, same := gwstate.State{}, false
	if p.state == nil {
		p.state = rebuild(*gp, p.allParts())
	} else {
		prev := p.state
		base = prev.version
		p.state, delta = prev.update(old, p.parts(keys))
		same = sameList(prev.clusterIPs.sorted, p.state.clusterIPs.sorted)
	}
	p.state.release = gp.State.Release
	whole := p.state.plan(*gp, base, delta)
	whole.update.SameClusterIPs = same
	return plan, &whole, true
}

// fullState makes the whole state of a full plan's gateway gp the planner's, and gives gp its
// update: the change from the planner's previous state, diffed whole (O(n), as the full plan).
func (p *Planner) fullState(gp *GatewayPlan) {
	prev := p.state
	if gp == nil {
		p.state = nil
		return
	}
	p.state = newGatewayState(gp, p.allParts())
	var base uint64
	var delta gwstate.State
	if prev != nil {
		base, delta = prev.version, gwstate.Delta(prev.whole(), gp.State)
	}
	whole := gp.State
	gp.update = gwstate.NewUpdate(p.state.version, base, delta, whole.Release, whole.ClusterIPs, p.state.ids.n, p.state.backends,
		func() gwstate.State { return whole })
	gp.update.SameClusterIPs = prev != nil && slices.Equal(prev.clusterIPs.sorted, whole.ClusterIPs)
}

// allParts are the kept contributions of every Service.
func (p *Planner) allParts() []Contribution {
	out := make([]Contribution, 0, len(p.services))
	for _, kp := range p.services {
		out = append(out, kp.part)
	}
	return out
}

// parts are the kept contributions of the Services keys, in their order.
func (p *Planner) parts(keys []types.NamespacedName) []Contribution {
	var out []Contribution
	for _, k := range keys {
		if kp := p.services[k]; kp != nil {
			out = append(out, kp.part)
		}
	}
	return out
}

// decides reports whether a partial plan of gateway gw, its Services planned after those outside
// it, decides what a full plan would (SPEC N4). While a Service waits for room, see
// plannerroom.go. Otherwise, when every Service holds all it asks, it does when every Service it
// replans does too (else, in the full plan's order, one it kept could be held back, or the
// draining flows of another could fit); the gateway's bounds are split between as many
// namespaces as before (a share that changes may change the room of Services it does not
// replan); and each namespace it replans stays within its share (past it, in the full plan's
// order, a Service it kept could be held back).
func (p *Planner) decides(sc Scope, plan Plan, outside HeldLoad, replanned map[types.NamespacedName]bool, gates Gates, gw string) bool {
	if !p.room.settled() {
		return p.decidesUnsettled(sc, plan, replanned, gw)
	}
	if sharersIn(plan, gw) != p.sharers {
		return false
	}
	now := map[string]Load{}
	for i := range plan.Services {
		sp := &plan.Services[i]
		if sp.Gateway != gw {
			continue
		}
		if !sp.getsAll() {
			return false
		}
		now[sp.Key.Namespace] = now[sp.Key.Namespace].plus(LoadOf(sp.Contribution().Identities))
	}
	share := gates.Share(p.sharers)
	for ns, l := range now {
		if !outside.Namespaces[ns].plus(l).fits(share) {
			return false
		}
	}
	return true
}

// sharersIn is GatewayPlan.Sharers of gateway gw in plan (0: no such gateway).
func sharersIn(plan Plan, gw string) int {
	if gp := plan.Gateway(gw); gp != nil {
		return gp.Sharers
	}
	return 0
}

// fullScope is sc made full: what to read when Plan could not decide from a partial one.
func fullScope(sc Scope) Scope { return Scope{Full: true, fingerprint: sc.fingerprint} }

// Sync is one plan of gateway gw, start to end: Scope, ReadScope through r, Plan, and a full
// plan when a partial one cannot decide. base holds the gateway-wide objects, ch the changes
// since the last plan. It returns the plan of the Services planned, the plan of the whole
// gateway (see Plan), the snapshot read and whether the plan was full.
func (p *Planner) Sync(r Reader, base Snapshot, gw string, ch Changes, gates Gates) (Plan, *GatewayPlan, Snapshot, bool, error) {
	sc := p.Scope(base, gw, ch)
	snap, replanned, err := ReadScope(r, base, gw, sc)
	if err != nil {
		return Plan{}, nil, snap, sc.Full, err
	}
	plan, gp, ok := p.Plan(sc, snap, replanned, gates, gw)
	if !ok {
		sc = fullScope(sc)
		if snap, replanned, err = ReadScope(r, base, gw, sc); err != nil {
			return Plan{}, nil, snap, true, err
		}
		plan, gp, _ = p.Plan(sc, snap, replanned, gates, gw)
	}
	return plan, gp, snap, sc.Full, nil
}

// QuarantineRetry is how long a gateway with quarantined Services waits before its state is sent
// again by itself (the refusal may have been the kernel's momentary state, or the gateway's own
// addresses that since changed): the agents try a refused identity again with every state.
const QuarantineRetry = time.Minute

// Quarantined are the Services of the gateway that have an identity the agents refused (SPEC D8,
// N4), each with the reason of the first: nothing of their new plan is confirmed (After(Held)),
// and they are replanned on the next sync.
func (p *Planner) Quarantined(refused map[gwstate.IdentityKey]string) (map[types.NamespacedName]string, map[types.NamespacedName]types.UID) {
	if len(refused) == 0 {
		return nil, nil
	}
	out := map[types.NamespacedName]string{}
	uids := map[types.NamespacedName]types.UID{}
	for k, kp := range p.services {
		for _, id := range kp.part.Identities {
			if reason, ok := refused[id.Key()]; ok {
				out[k], uids[k] = reason, kp.uid
				break
			}
		}
	}
	return out, uids
}

// ServiceVIPs are the addresses one Service serves on its gateway: its EIP and its ClusterIP (the
// zero Addr when that part is not served).
type ServiceVIPs struct {
	UID            types.UID
	EIP, ClusterIP netip.Addr
}

// ServiceVIPs are the VIPs of every Service of the gateway that serves any at its last plan: the
// controller tells a Service when the VPC's routes would drop one of them (SPEC V3).
func (p *Planner) ServiceVIPs() map[types.NamespacedName]ServiceVIPs {
	out := make(map[types.NamespacedName]ServiceVIPs, len(p.services))
	for k, kp := range p.services {
		if kp.part.EIP.IsValid() || kp.part.ClusterIP.IsValid() {
			out[k] = ServiceVIPs{UID: kp.uid, EIP: kp.part.EIP, ClusterIP: kp.part.ClusterIP}
		}
	}
	return out
}

func (p *Planner) keep(gw string, plans []ServicePlan, svcs []corev1.Service) {
	if p.services == nil {
		p.services, p.nsHeld, p.asking = map[types.NamespacedName]*keptPlan{}, map[string]Load{}, map[string]int{}
	}
	claims := make(map[types.UID][]string, len(svcs))
	for i := range svcs {
		claims[svcs[i].UID] = ClaimKeys(&svcs[i])
	}
	for i := range plans {
		sp := &plans[i]
		if sp.Gateway != gw {
			continue
		}
		p.forget(sp.Key)
		kp := &keptPlan{uid: sp.UID, part: sp.Contribution(), demand: sp.Demand, limited: sp.Limited,
			programmed: sp.programmed, asks: sp.asks, claims: claims[sp.UID]}
		kp.load = LoadOf(kp.part.Identities)
		p.services[sp.Key] = kp
		p.held = p.held.plus(kp.load)
		p.nsHeld[sp.Key.Namespace] = p.nsHeld[sp.Key.Namespace].plus(kp.load)
		if kp.demand.Identities > 0 {
			p.asking[sp.Key.Namespace]++
		}
		p.room.add(sp.Key, kp)
	}
}

func (p *Planner) forget(k types.NamespacedName) {
	if kp := p.services[k]; kp != nil {
		p.room.remove(k, kp)
		p.held = p.held.minus(kp.load)
		// Namespaces that hold and ask nothing are dropped: outside copies these maps.
		if l := p.nsHeld[k.Namespace].minus(kp.load); l == (Load{}) {
			delete(p.nsHeld, k.Namespace)
		} else {
			p.nsHeld[k.Namespace] = l
		}
		if kp.demand.Identities > 0 {
			if p.asking[k.Namespace]--; p.asking[k.Namespace] <= 0 {
				delete(p.asking, k.Namespace)
			}
		}
		delete(p.services, k)
	}
}

// outside is what the kept Services outside replanned hold, in all and per namespace, and the
// namespaces of those that ask for room: what a partial plan's Services find taken, and who
// shares the gateway besides them (SPEC N4).
func (p *Planner) outside(replanned map[types.NamespacedName]bool) HeldLoad {
	h := HeldLoad{Load: p.held, Namespaces: maps.Clone(p.nsHeld), Asking: make(map[string]bool, len(p.asking))}
	if h.Namespaces == nil {
		h.Namespaces = map[string]Load{}
	}
	asking := maps.Clone(p.asking)
	for k := range replanned {
		if kp := p.services[k]; kp != nil {
			h.Load = h.Load.minus(kp.load)
			h.Namespaces[k.Namespace] = h.Namespaces[k.Namespace].minus(kp.load)
			if kp.demand.Identities > 0 {
				asking[k.Namespace]--
			}
		}
	}
	for ns, n := range asking {
		if n > 0 {
			h.Asking[ns] = true
		}
	}
	return h
}

// ServiceGatewayKeys are the planner keys a Service belongs to: its gateway, or UnboundGateway
// when it holds the finalizer or a claim stamp without naming one (both are released there).
func ServiceGatewayKeys(o metav1.Object) []string {
	if gw := o.GetAnnotations()[AnnotationGateway]; gw != "" {
		return []string{gw}
	}
	if slices.Contains(o.GetFinalizers(), Finalizer) {
		return []string{UnboundGateway}
	}
	if svc, ok := o.(*corev1.Service); ok && HasClaimStamp(svc) {
		return []string{UnboundGateway}
	}
	return nil
}

// ClaimKeys are the EIP ports a Service asks for ("<EIP name>/<port>/<protocol>"): Services that
// share one replan together (SPEC I2). The model decides conflicts by the EIP's address; an EIP
// whose address another EIP has too makes every plan full (eipsShareAnAddress), so the name is
// as good a key.
func ClaimKeys(svc *corev1.Service) []string {
	eip := svc.Annotations[AnnotationEIP]
	if eip == "" {
		return nil
	}
	out := make([]string, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		out = append(out, eip+"/"+strconv.Itoa(int(p.Port))+"/"+string(PortProtocol(p.Protocol)))
	}
	return out
}

// eipsShareAnAddress reports whether two EIPs of gateway gw have the same address: Services
// claiming ports of either then conflict (SPEC I2), which ClaimKeys, keyed by EIP name, would not
// group. (A Service's EIP of another gateway serves nothing, SPEC S3.)
func eipsShareAnAddress(eips []kubeovnv1.IptablesEIP, gw string) bool {
	holder := make(map[string]string, len(eips)) // address -> EIP name
	for i := range eips {
		if eips[i].Spec.NatGwDp != gw {
			continue
		}
		for _, a := range []string{eips[i].Status.IP, eips[i].Spec.V4ip} {
			if a == "" {
				continue
			}
			if other, ok := holder[a]; ok && other != eips[i].Name {
				return true
			}
			holder[a] = eips[i].Name
		}
	}
	return false
}

// byGeneration are the gateway-wide kinds whose changes count by generation, not
// resourceVersion, in Fingerprint: kube-ovn writes their status often (a Subnet's on every IP
// allocation), and the model reads only their spec and deletion.
var byGeneration = map[reflect.Type]bool{
	reflect.TypeFor[kubeovnv1.Subnet](): true,
	reflect.TypeFor[kubeovnv1.Vpc]():    true,
}

// Fingerprint names the versions of every gateway-wide input of s: each field of Snapshot not
// tagged plan:"service", whatever it is. A partial plan is only made while it is unchanged: an
// input added to Snapshot is covered without anyone remembering to.
func Fingerprint(s Snapshot) string {
	h := sha256.New()
	v := reflect.ValueOf(s)
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("plan") == "service" {
			continue
		}
		_, _ = fmt.Fprintf(h, "%s{", f.Name) // a hash.Hash never fails a write
		fv := v.Field(i)
		if fv.Kind() != reflect.Slice {
			_, _ = fmt.Fprintf(h, "%#v", fv.Interface())
		} else {
			versions := make([]string, fv.Len())
			for j := range fv.Len() {
				versions[j] = objectVersion(fv.Index(j))
			}
			slices.Sort(versions) // cache lists come in map order
			h.Write([]byte(strings.Join(versions, ";")))
		}
		h.Write([]byte("}"))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func objectVersion(v reflect.Value) string {
	obj, ok := v.Addr().Interface().(metav1.Object)
	if !ok {
		return fmt.Sprintf("%#v", v.Interface())
	}
	version := "rv" + obj.GetResourceVersion()
	if byGeneration[v.Type()] {
		version = "g" + strconv.FormatInt(obj.GetGeneration(), 10)
	}
	deleting := ""
	if obj.GetDeletionTimestamp() != nil {
		deleting = "-deleting"
	}
	return obj.GetNamespace() + "/" + obj.GetName() + "/" + string(obj.GetUID()) + "@" + version + deleting
}

// Reader reads what a plan needs beyond the gateway-wide objects. The controller's reads its
// cache through indexes; a missing object is (nil, nil).
type Reader interface {
	// GatewayServices are the Services whose ServiceGatewayKeys hold gw.
	GatewayServices(gw string) ([]corev1.Service, error)
	Service(key types.NamespacedName) (*corev1.Service, error)
	// ClaimingServices are the Services whose ClaimKeys hold claim.
	ClaimingServices(claim string) ([]corev1.Service, error)
	// GatewayRecords and OwnerRecords are the records, of both ledger forms, that name gateway
	// gw, or whose owner is uid.
	GatewayRecords(gw string) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error)
	OwnerRecords(uid types.UID) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error)
	// ServiceSlices are the EndpointSlices of Service namespace/name.
	ServiceSlices(namespace, name string) ([]discoveryv1.EndpointSlice, error)
	Pod(key types.NamespacedName) (*corev1.Pod, error)
	// PodAddresses are kube-ovn's IP objects allocated to Pod key (spec.namespace, spec.podName).
	PodAddresses(key types.NamespacedName) ([]kubeovnv1.IP, error)
}

// ReadScope reads through r what sc asks for and adds it to base, the gateway-wide objects. It
// returns the snapshot and the Services it replans: those read, and the changed Services that
// are gone.
func ReadScope(r Reader, base Snapshot, gw string, sc Scope) (Snapshot, map[types.NamespacedName]bool, error) {
	b := &scopeReader{r: r, s: base, keys: map[types.NamespacedName]types.UID{}, recs: map[string]bool{}}
	b.s.Services, b.s.EndpointSlices, b.s.Pods, b.s.PodAddresses, b.s.Records, b.s.ServiceRecords = nil, nil, nil, nil, nil, nil
	replanned := map[types.NamespacedName]bool{}
	var err error
	if sc.Full {
		err = b.readGateway(gw)
	} else {
		err = b.readChanged(gw, sc, replanned)
	}
	if err != nil {
		return base, nil, err
	}
	s, err := b.finish()
	for _, svc := range s.Services {
		replanned[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
	}
	return s, replanned, err
}

// readGateway reads every Service of gateway gw and, for a gateway, the records that name it.
func (b *scopeReader) readGateway(gw string) error {
	svcs, err := b.r.GatewayServices(gw)
	if err != nil {
		return err
	}
	for i := range svcs {
		b.add(&svcs[i])
	}
	if gw == UnboundGateway {
		return nil
	}
	return b.records(b.r.GatewayRecords(gw))
}

// readChanged reads the changed Services of sc (marking them replanned, read or gone), every
// Service of gateway gw that shares a claim with one of them, transitively (a Service's plan
// depends on every claimant of each identity it claims, SPEC I2, N3), and the records of sc's
// owners.
func (b *scopeReader) readChanged(gw string, sc Scope, replanned map[types.NamespacedName]bool) error {
	claims := claimQueue{seen: map[string]bool{}}
	claims.add(sc.Claims)
	for _, k := range sc.Services {
		replanned[k] = true
		svc, err := b.r.Service(k)
		if err != nil {
			return fmt.Errorf("reading Service %s: %w", k, err)
		}
		if svc != nil {
			b.add(svc)
			claims.add(ClaimKeys(svc))
		}
	}
	for len(claims.todo) > 0 {
		c := claims.todo[0]
		claims.todo = claims.todo[1:]
		svcs, err := b.r.ClaimingServices(c)
		if err != nil {
			return fmt.Errorf("listing Services of EIP port %s: %w", c, err)
		}
		for i := range svcs {
			if slices.Contains(ServiceGatewayKeys(&svcs[i]), gw) && b.add(&svcs[i]) {
				claims.add(ClaimKeys(&svcs[i]))
			}
		}
	}
	return b.readOwners(sc.Owners)
}

// claimQueue is the claims still to read, each queued once.
type claimQueue struct {
	seen map[string]bool
	todo []string
}

func (q *claimQueue) add(claims []string) {
	for _, c := range claims {
		if !q.seen[c] {
			q.seen[c] = true
			q.todo = append(q.todo, c)
		}
	}
}

// readOwners reads the records of owners whose Service is not read: finish reads those of every
// Service read.
func (b *scopeReader) readOwners(owners []types.UID) error {
	read := make(map[types.UID]bool, len(b.keys))
	for _, uid := range b.keys {
		read[uid] = true
	}
	for _, uid := range owners {
		if read[uid] {
			continue
		}
		if err := b.records(b.r.OwnerRecords(uid)); err != nil {
			return err
		}
	}
	return nil
}

type scopeReader struct {
	r    Reader
	s    Snapshot
	keys map[types.NamespacedName]types.UID
	recs map[string]bool // record names read, per form ("sr/" or "dr/" prefix)
}

// add adds svc unless it is read already, and reports whether it did.
func (b *scopeReader) add(svc *corev1.Service) bool {
	k := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	if _, dup := b.keys[k]; dup {
		return false
	}
	b.keys[k] = svc.UID
	b.s.Services = append(b.s.Services, *svc)
	return true
}

func (b *scopeReader) records(srs []vpcgwv1alpha1.ServiceRecord, drs []kubeovnv1.IptablesDnatRule, err error) error {
	if err != nil {
		return fmt.Errorf("listing records: %w", err)
	}
	for i := range srs {
		if n := "sr/" + srs[i].Name; !b.recs[n] {
			b.recs[n] = true
			b.s.ServiceRecords = append(b.s.ServiceRecords, srs[i])
		}
	}
	for i := range drs {
		if n := "dr/" + drs[i].Name; !b.recs[n] {
			b.recs[n] = true
			b.s.Records = append(b.s.Records, drs[i])
		}
	}
	return nil
}

// finish adds the records of every Service read, the live owners those records name (or the
// model takes the records for orphans), and the EndpointSlices, the Pods they target and those
// Pods' addresses.
func (b *scopeReader) finish() (Snapshot, error) {
	for i := 0; i < len(b.s.Services); i++ {
		if err := b.records(b.r.OwnerRecords(b.s.Services[i].UID)); err != nil {
			return b.s, err
		}
	}
	if err := b.readRecordOwners(); err != nil {
		return b.s, err
	}
	pods, err := b.readSlices()
	if err != nil {
		return b.s, err
	}
	if err := b.readPods(pods); err != nil {
		return b.s, err
	}
	return b.s, nil
}

// recordOwner is the Service a record's labels name.
type recordOwner struct {
	key types.NamespacedName
	uid types.UID
}

func recordOwnerOf(l map[string]string) recordOwner {
	return recordOwner{types.NamespacedName{Namespace: l[LabelRecordNamespace], Name: l[LabelRecordName]}, types.UID(l[LabelRecordUID])}
}

// readRecordOwners reads the Services the records read name, when they are still the records'
// owners (same UID), and those Services' records.
func (b *scopeReader) readRecordOwners() error {
	seen := map[types.UID]bool{}
	for _, uid := range b.keys {
		seen[uid] = true
	}
	owners := make([]recordOwner, 0, len(b.s.ServiceRecords)+len(b.s.Records))
	for i := range b.s.ServiceRecords {
		owners = append(owners, recordOwnerOf(b.s.ServiceRecords[i].Labels))
	}
	for i := range b.s.Records {
		owners = append(owners, recordOwnerOf(b.s.Records[i].Labels))
	}
	for _, o := range owners {
		if seen[o.uid] || o.key.Name == "" {
			continue
		}
		seen[o.uid] = true
		svc, err := b.r.Service(o.key)
		if err != nil {
			return fmt.Errorf("reading record owner %s: %w", o.key, err)
		}
		if svc != nil && svc.UID == o.uid {
			b.add(svc)
			if err := b.records(b.r.OwnerRecords(o.uid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// readSlices reads the EndpointSlices of every Service read, and returns the Pods they target.
func (b *scopeReader) readSlices() (map[types.NamespacedName]bool, error) {
	pods := map[types.NamespacedName]bool{}
	for _, svc := range b.s.Services {
		slices, err := b.r.ServiceSlices(svc.Namespace, svc.Name)
		if err != nil {
			return nil, fmt.Errorf("listing EndpointSlices of %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		b.s.EndpointSlices = append(b.s.EndpointSlices, slices...)
		for _, es := range slices {
			for _, ep := range es.Endpoints {
				if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
					pods[types.NamespacedName{Namespace: cmp.Or(ref.Namespace, es.Namespace), Name: ref.Name}] = true
				}
			}
		}
	}
	return pods, nil
}

// readPods reads the Pods pods (those that exist) and the addresses kube-ovn allocated to them,
// in name order.
func (b *scopeReader) readPods(pods map[types.NamespacedName]bool) error {
	for _, k := range slices.SortedFunc(maps.Keys(pods), compareKeys) {
		p, err := b.r.Pod(k)
		if err != nil {
			return fmt.Errorf("reading backend pod %s: %w", k, err)
		}
		if p == nil {
			continue
		}
		b.s.Pods = append(b.s.Pods, *p)
		addrs, err := b.r.PodAddresses(k)
		if err != nil {
			return fmt.Errorf("reading the addresses kube-ovn allocated to pod %s: %w", k, err)
		}
		b.s.PodAddresses = append(b.s.PodAddresses, addrs...)
	}
	return nil
}
