package dataplane

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Agent converges one gateway instance's data plane to desired states: the table "ip kube-ovn"
// (SPEC D1-D4), the ClusterIPs held on lo (D5) and stale conntrack entries (D6). It remembers
// the state it last committed and sends only the difference to the kernel, as one atomic
// transaction per Apply. The first Apply (and the first after a failed one or after drift was
// found) lists the table once and reconciles it fully: it adopts what is there, leaves alone
// the identities whose objects already hold what it would write (read back on the netlink path,
// SPEC P7: see nlcontent.go), rewrites the others and deletes stale objects it owns.
//
// An Apply that creates more than stageChunk new identity chains (a cold sync) first commits
// their objects in staging transactions of stageChunk identities, while nothing references
// them, and then everything traffic can see in one final transaction (see stage): the kernel's
// cost per anonymous map grows with the transaction, so one transaction of 10,000 identities
// is quadratic (SPEC P2). Only the final transaction changes what traffic sees (SPEC D8).
//
// A complete state and a delta both become one change set, written, committed and booked by
// applyChanges (apply.go); a delta's is made from the delta alone, in O(changed) (applyDelta,
// SPEC P1). Identities the agent's validation or the kernel refuses are left out by name
// (admit.go, SPEC D8).
//
// Agent is safe for concurrent use (Apply, Verify and Retry are serialised).
type Agent struct {
	be    backend
	log   logr.Logger
	iface string
	vips  vipHolder         // nil: lo is not managed
	ct    flowCleaner       // nil: conntrack is not managed
	neigh neighborForgetter // nil: neighbour entries are not managed
	own   ownAddrLister     // nil: backends are not checked against the gateway's addresses (N2)
	watch *changeWatcher    // nil: only the periodic check finds drift (L8)
	// ctDeleted counts conntrack entries deleted since TakeConntrackDeleted last read it.
	ctDeleted int

	mu sync.Mutex
	// applied holds the committed identities that have at least one backend.
	applied map[gwstate.IdentityKey]gwstate.Identity
	// present holds every identity of the committed state, with or without backends.
	present map[gwstate.IdentityKey]gwstate.Identity
	// vipRefs counts the applied identities per VIP: VIPSet holds the VIPs counted here.
	vipRefs map[netip.Addr]int
	// guard indexes the applied identities' TCP endpoints: EndpointSet and ReplyMap hold what it
	// says (SPEC D9).
	guard guardIndex
	// held caches heldSet(heldFrom): the ClusterIPs of the last committed guard, whose
	// identities are not external (D9).
	held     map[netip.Addr]bool
	heldFrom []netip.Addr
	// last, with pending applied over it, is the last valid desired state, committed or not:
	// what Retry and Verify converge to. Read it through desired(). A delta applied by the fast
	// path (applyDelta) only records its identities in pending, lastGen and lastClusterIPs, so
	// that it costs O(changed); desired() merges them into last when the complete state is
	// needed (a retry, a repair, a delta the fast path does not take).
	last *gwstate.State
	// pending holds identities upserted (removed: false) or removed since last, by key.
	pending map[gwstate.IdentityKey]pendingID
	// lastGen and lastClusterIPs are the generation and the ClusterIPs of the desired state.
	lastGen        int64
	lastClusterIPs []netip.Addr
	// synced is false until a full reconcile succeeded, and again after any failed Apply or
	// when drift was found, so that the next transaction starts from what the kernel has.
	synced bool
	// released: the last state was a release (SPEC O4) and the agent removed its objects:
	// retries and drift repairs would only write them again.
	released bool
	// vipsSynced is false when the last lo convergence failed.
	vipsSynced bool
	// staged holds identities whose objects (identity chain and maps, affinity chains and sets)
	// were committed by a staging transaction of an Apply whose final transaction has not
	// succeeded: they are in the kernel, with exactly this content, but no service-ips element
	// points at them. A full sync reuses them (only the element is missing) or deletes them. It
	// is empty whenever synced is true.
	staged map[gwstate.IdentityKey]gwstate.Identity
	// stageChunk is the number of new identities per staging transaction; 0 disables staging.
	stageChunk int
	// refused are the identities of the desired state that are not programmed (admit.go): the
	// kernel holds their committed version in applied and present, or nothing.
	refused map[gwstate.IdentityKey]refusal
	// kernelRounds bounds the transactions of one message when the kernel refuses identities
	// (converge); 1 makes any refusal fail the message whole.
	kernelRounds int
	// intact, during a drift repair only, are the committed identities whose objects the drift
	// check found whole: the full sync writes only their element (fullApply).
	intact map[gwstate.IdentityKey]bool
	// repairing is true during a drift repair: committed identities that the check did not find
	// whole are restored by staging (planStaging), not in the one final transaction.
	repairing bool
	// commitTime is how long the last Apply's kernel transactions took (benchmarks, logs);
	// kernelTotal is the sum over the agent's life (each message's acknowledgement tells its
	// part of it, SPEC P3).
	commitTime, kernelTotal time.Duration
	// readTime is how long the last full sync took to list the table (benchmarks, logs).
	readTime time.Duration
	// loose, when set, keeps nf_conntrack_tcp_loose at 1 (SPEC D9), checked at the start and
	// with every drift check; warning is what the acknowledgements tell while it cannot.
	loose   *tcpLooseKeeper
	warning string
}

// keepTCPLoose checks nf_conntrack_tcp_loose and sets it to 1. Callers hold a.mu.
func (a *Agent) keepTCPLoose() {
	if a.loose == nil {
		return
	}
	w := a.loose.keep()
	if w != a.warning && w != "" {
		a.log.Info("the gateway cannot keep connections across the loss of its conntrack", "warning", w)
	}
	a.warning = w
}

// Warning is what the agent's acknowledgements report about the gateway ("" when all is well).
func (a *Agent) Warning() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.warning
}

// noteKernel counts a kernel transaction's time. Callers hold a.mu.
func (a *Agent) noteKernel(d time.Duration) {
	a.commitTime += d
	a.kernelTotal += d
}

// KernelTotal is the time the agent's kernel transactions took so far.
func (a *Agent) KernelTotal() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.kernelTotal
}

// defaultStageChunk is the number of new identities created per staging transaction. A cold
// sync of n new identities larger than this is committed as ceil(n/K) staging transactions plus
// one final transaction (see stage). Chosen with BenchmarkP2StageChunk (docs/benchmarks.md):
// 100 to 500 cost the same at 10,000 identities, 1,000 more.
const defaultStageChunk = 250

// NewAgent returns an agent that manages the table through knftables (the nft binary, or its
// Fake in tests), which must be an interface for family ip, table "kube-ovn"
// (knftables.New(knftables.IPv4Family, TableName)). It manages neither lo nor conntrack.
func NewAgent(nft knftables.Interface, log logr.Logger) *Agent {
	return newAgent(&knftBackend{nft: nft}, log, DefaultVPCInterface, nil, nil)
}

func newAgent(be backend, log logr.Logger, iface string, vips vipHolder, ct flowCleaner) *Agent {
	if iface == "" {
		iface = DefaultVPCInterface
	}
	return &Agent{be: be, log: log, iface: iface, vips: vips, ct: ct, stageChunk: defaultStageChunk, kernelRounds: defaultKernelRounds,
		applied: map[gwstate.IdentityKey]gwstate.Identity{}, present: map[gwstate.IdentityKey]gwstate.Identity{}, vipRefs: map[netip.Addr]int{}, guard: guardIndex{}}
}

// Config says how an agent reaches the kernel of the network namespace it runs in.
type Config struct {
	// VPCInterface is the gateway's interface into the VPC (hairpin, SPEC D4); default eth0.
	VPCInterface string
	// TextPath sends transactions through the nft binary (knftables) instead of netlink.
	TextPath bool
	// Pick is how identity chains choose among backends (SPEC D2); default PickHash.
	Pick Pick
	// NoLoopback and NoConntrack switch off lo VIPs (D5) and conntrack cleanup (D6).
	NoLoopback, NoConntrack bool
	// NoWatch leaves out the kernel's change notifications (SPEC L8): drift is then found by
	// the periodic check only.
	NoWatch bool
}

// NewKernelAgent returns an agent for the network namespace of the calling thread: netlink
// (github.com/google/nftables) for nftables unless cfg.TextPath, rtnetlink for lo and for the
// gateway's own addresses (refused as backends, SPEC N2), conntrack netlink for flows. The sockets are opened now, so a caller that switched namespaces on a
// locked thread may switch back afterwards.
func NewKernelAgent(cfg Config, log logr.Logger) (*Agent, error) {
	be, err := newKernelBackend(cfg)
	if err != nil {
		return nil, err
	}
	vips, ct, err := newFlowState(cfg)
	if err != nil {
		return nil, err
	}
	own, err := newRtnlAddrs()
	if err != nil {
		return nil, err
	}
	a := newAgent(be, log, cfg.VPCInterface, vips, ct)
	a.own = own
	a.loose = &tcpLooseKeeper{path: tcpLoosePath}
	a.keepTCPLoose()
	if !cfg.NoConntrack {
		// The same switch as conntrack: both are the kernel state of flows to backends, which
		// tests without a VPC interface leave alone.
		if a.neigh, err = newRtnlNeighbors(a.iface); err != nil {
			return nil, err
		}
	}
	if !cfg.NoWatch {
		if err := a.startWatch(be, vips); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// newKernelBackend opens the nftables backend: knftables (the nft binary) with cfg.TextPath,
// netlink otherwise.
func newKernelBackend(cfg Config) (backend, error) {
	if cfg.TextPath {
		nft, err := knftables.New(knftables.IPv4Family, TableName)
		if err != nil {
			return nil, fmt.Errorf("nftables is not usable: %w", err)
		}
		return &knftBackend{nft: nft, pick: cfg.Pick}, nil
	}
	nl, err := newNLBackend()
	if err != nil {
		return nil, err
	}
	nl.pick = cfg.Pick
	return nl, nil
}

// newFlowState opens what holds the VIPs on lo (unless cfg.NoLoopback) and what deletes
// conntrack flows (unless cfg.NoConntrack); each is nil when switched off.
func newFlowState(cfg Config) (vips vipHolder, ct flowCleaner, err error) {
	if !cfg.NoLoopback {
		lo, err := newLoVIPs()
		if err != nil {
			return nil, nil, err
		}
		vips = lo
	}
	if !cfg.NoConntrack {
		c, err := newCTCleaner()
		if err != nil {
			return nil, nil, err
		}
		ct = c
	}
	return vips, ct, nil
}

// startWatch opens the kernel change watcher (a.watch), which ignores the agent's own nftables
// port's changes and knows lo's index when the agent holds VIPs there.
func (a *Agent) startWatch(be backend, vips vipHolder) error {
	var ownPorts []uint32
	nl, isNL := be.(*nlBackend)
	if isNL {
		p, err := nl.port()
		if err != nil {
			return err
		}
		ownPorts = append(ownPorts, p)
	}
	loIndex := 0
	if lo, ok := vips.(*loVIPs); ok {
		link, err := lo.lo()
		if err != nil {
			return err
		}
		loIndex = link.Attrs().Index
	}
	var err error
	if a.watch, err = newChangeWatcher(ownPorts, loIndex); err != nil {
		return err
	}
	if isNL {
		nl.watch = a.watch
	}
	return nil
}

// TakeConntrackDeleted returns how many conntrack entries were deleted since the last call.
func (a *Agent) TakeConntrackDeleted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.ctDeleted
	a.ctDeleted = 0
	return n
}

// Apply converges the kernel to st, which must be normalized. Identities that the agent's
// validation or the kernel refuses are not programmed (see admit.go; Refusals names them). On
// error the table and the agent's memory keep the previous state; the error carries the kernel's
// message.
func (a *Agent) Apply(ctx context.Context, st gwstate.State) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = false
	if err := a.converge(ctx, st, true, nil); err != nil || !st.Release {
		return err
	}
	return a.release(ctx)
}

// Retry re-applies the last desired state if it is not committed (after a failed Apply). It
// reports whether there was anything to retry.
func (a *Agent) Retry(ctx context.Context) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil || a.released || (a.synced && a.vipsSynced) {
		return false, nil
	}
	return true, a.convergeDesired(ctx, nil)
}

// Verify looks for drift: the agent's objects in the table have the content it committed
// (elements, ownership sets, base chains with their one rule, each chain of the agent's with
// its number of rules, all carrying the agent's comment: see compareTable), and lo holds
// exactly the desired VIPs. The netlink path first asks the kernel for the ruleset's
// generation: when no one committed since the last check found the table whole (other than the
// agent's own transactions), nothing is read. Objects that are not the agent's (kube-ovn's share
// DNAT identities) are not drift. On drift it logs what it found, reconciles fully and logs the
// repair. It returns the drift found ("" if none).
func (a *Agent) Verify(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keepTCPLoose()
	if a.last == nil || a.released {
		return "", nil
	}
	if !a.synced || !a.vipsSynced {
		return "", a.convergeDesired(ctx, nil)
	}
	drift, intact, err := a.be.check(ctx, a.expectation())
	if err != nil {
		return "", fmt.Errorf("verifying: %w", err)
	}
	if drift == "" && a.vips != nil {
		have, err := a.vips.list()
		if err != nil {
			return "", fmt.Errorf("verifying lo: %w", err)
		}
		if want := wantVIPs(a.lastClusterIPs); !slices.Equal(have, want) {
			drift = fmt.Sprintf("lo holds %v with label %s, want %v", have, VIPLabel, want)
		}
	}
	if drift == "" {
		return "", nil
	}
	a.log.Info("drift detected, repairing with a full reconcile", "drift", drift, "intactIdentities", len(intact), "identities", len(a.applied))
	a.synced = false
	a.vipsSynced = false
	// The identities found whole get only their element (SPEC L8: a hand-removed element at
	// 10,000 identities is one small transaction, not a rewrite of every chain).
	a.intact, a.repairing = intact, true
	err = a.convergeDesired(ctx, nil)
	a.intact, a.repairing = nil, false
	if err != nil {
		return drift, fmt.Errorf("repairing drift (%s): %w", drift, err)
	}
	a.log.Info("drift repaired", "drift", drift, "generation", a.lastGen)
	return drift, nil
}

func (a *Agent) expectation() expectation {
	return expectation{ids: a.applied, vips: a.vipRefs, guard: a.guard}
}

// wantVIPs is the set lo must hold: ips sorted, without duplicates (a copy: ips is a state's).
func wantVIPs(ips []netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// Applied returns a copy of the identities the agent believes are installed, sorted by key.
func (a *Agent) Applied() []gwstate.Identity {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]gwstate.Identity, 0, len(a.applied))
	for _, id := range a.applied {
		out = append(out, id)
	}
	slices.SortFunc(out, func(x, y gwstate.Identity) int { return x.Key().Compare(y.Key()) })
	return out
}

// planStaging decides which desired identities get their objects written ahead of the final
// transaction (SPEC P2 with D8). inv is nil for an incremental Apply.
//
// ready are identities whose objects are in the kernel, unreferenced and with the desired
// content (staged by an earlier Apply whose final transaction failed): the final transaction
// only adds their element. stage are identities whose identity chain does not exist (a full
// sync: not in inv; incremental: not committed); they are returned only when they are more than
// one chunk, so that small changes stay one transaction (SPEC P1).
//
// Only objects that no element points at are written ahead, so nothing new is reachable before
// the final transaction commits, and a failed final transaction leaves what traffic sees whole.
// One exception, in a drift repair only (SPEC L8): a committed identity whose desired content is
// what the agent committed, and whose objects the check did not find whole, is staged too, chain
// present or not. Its staged write puts back exactly what was committed, so traffic again sees
// nothing the agent had not committed; a flushed table at 10,000 identities is then restored
// like a cold sync, in chunks, instead of one quadratic transaction.
func (a *Agent) planStaging(inv *inventory, ids []gwstate.Identity) (ready map[gwstate.IdentityKey]bool, stage []gwstate.Identity) {
	if inv == nil {
		ready, stage = map[gwstate.IdentityKey]bool{}, a.unappliedIdentities(ids)
	} else {
		ready, stage = a.planFromTable(inv, ids)
	}
	if a.stageChunk <= 0 || len(stage) <= a.stageChunk {
		stage = nil
	}
	return ready, stage
}

// unappliedIdentities are the identities of ids with backends that are not committed (an
// incremental change's new identities).
func (a *Agent) unappliedIdentities(ids []gwstate.Identity) []gwstate.Identity {
	var stage []gwstate.Identity
	for _, id := range ids {
		if len(id.Backends) == 0 {
			continue
		}
		if _, ok := a.applied[id.Key()]; !ok {
			stage = append(stage, id)
		}
	}
	return stage
}

// planFromTable plans a full sync from the listed table: identities whose chain is missing (or
// that a drift repair restores) are staged; those staged already with the same content, present
// whole and referenced by no element, are ready; so are those whose objects the table holds as
// the agent would write them (adopted, SPEC P7: a restart over an unchanged table rewrites
// nothing).
func (a *Agent) planFromTable(inv *inventory, ids []gwstate.Identity) (ready map[gwstate.IdentityKey]bool, stage []gwstate.Identity) {
	ready = map[gwstate.IdentityKey]bool{}
	chains, sets := nameSet(inv.chains), nameSet(inv.sets)
	referenced := make(map[string]bool, len(inv.elements))
	for _, e := range inv.elements {
		if _, c, ok := strings.Cut(e.value, " "); ok {
			referenced[c] = true
		}
	}
	for _, id := range ids {
		if len(id.Backends) == 0 {
			continue
		}
		idc := IdentityChain(id.Key())
		if !chains[idc] || a.restorable(id) {
			stage = append(stage, id)
			continue
		}
		if old, ok := a.staged[id.Key()]; ok {
			if identityEqual(old, id) && !referenced[idc] && present(id, chains, sets) {
				ready[id.Key()] = true
			}
			continue // staged with other content: rewritten from it (writeDesired)
		}
		if inv.content != nil && inv.content.identityMatches(id) {
			ready[id.Key()] = true
		}
	}
	return ready, stage
}

// restorable reports whether a drift repair restores id by staging (see planStaging): committed
// with this content and not found whole by the check.
func (a *Agent) restorable(id gwstate.Identity) bool {
	if !a.repairing || a.intact[id.Key()] {
		return false
	}
	old, ok := a.applied[id.Key()]
	return ok && identityEqual(old, id)
}

func nameSet(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// present reports whether every chain and set of id is in the listed table.
func present(id gwstate.Identity, chains, sets map[string]bool) bool {
	cs, ss := objectNames(id)
	for _, c := range cs {
		if !chains[c] {
			return false
		}
	}
	for _, s := range ss {
		if !sets[s] {
			return false
		}
	}
	return true
}

// stage commits the objects of new identities (writeObjects: identity chain with its anonymous
// maps, affinity chains and sets), a.stageChunk identities per transaction, and marks them ready
// and staged. The first transaction also adds the table, the service-ips map and the two base
// chains if they are missing, all empty: the base chains get their rules (dispatch, hairpin)
// and the map its elements only in the final transaction. The objects are unreferenced:
// traffic sees none of this before the final transaction (SPEC D8).
//
// Why: the kernel's cost per anonymous map grows with the size of its transaction (binding a
// rule to an anonymous map walks the whole transaction), so one transaction of 10,000 identities
// is quadratic; in chunks of K it is O(K) per map. What stays quadratic is the kernel's walk of
// the table's list of sets by name (three per map), see addAnonymousMap (SPEC P2).
func (a *Agent) stage(ctx context.Context, stage []gwstate.Identity, ready map[gwstate.IdentityKey]bool) (ops, transactions int, err error) {
	if len(stage) == 0 {
		return 0, 0, nil
	}
	if a.staged == nil {
		a.staged = make(map[gwstate.IdentityKey]gwstate.Identity, len(stage))
	}
	chunks := (len(stage) + a.stageChunk - 1) / a.stageChunk
	for i := 0; i < len(stage); i += a.stageChunk {
		chunk := stage[i:min(i+a.stageChunk, len(stage))]
		tx := a.be.begin()
		if i == 0 {
			// Created first, as writeBase does, so that `nft list` shows the same order as
			// a one-transaction sync. The base chains stay empty (policy accept) until the
			// final transaction adds their rules; on a table that exists these are no-ops.
			addBaseObjects(tx)
		}
		for j := range chunk {
			writeObjects(tx, nil, &chunk[j])
		}
		tx.identity(nil)
		ops += tx.size()
		start := time.Now()
		err := a.be.commit(ctx, tx)
		a.noteKernel(time.Since(start))
		if err != nil {
			return ops, transactions, fmt.Errorf("%s staging transaction %d of %d (%d operations) failed: %w", a.be.name(), transactions+1, chunks, tx.size(), err)
		}
		transactions++
		for _, id := range chunk {
			a.staged[id.Key()] = id
			ready[id.Key()] = true
		}
	}
	return ops, transactions, nil
}

// fullSync writes a transaction that makes the listed table exactly desired, as far as the
// agent's objects go. Desired identities are rewritten in place (add, flush and re-add in the
// same transaction), so traffic sees no gap (SPEC L7); those in ready (written by stage, found
// whole by a drift check, or adopted: see planFromTable) only get their element and OwnedSet key
// if the table lacks them. The base (writeBase) is written unless the table holds it as written
// (SPEC P7). An identity is the agent's when its key is in OwnedSet (or staged, or
// desired): other elements and their dnat-, ep- and aff- objects are kube-ovn's share DNAT
// identities (or someone else's) and stay as they are (SPEC D8, K8). A table of an agent from
// before OwnedSet (legacyHairpinChain present) is adopted by object names, as it did.
func (a *Agent) fullSync(tx txn, inv *inventory, ids []gwstate.Identity, desired map[gwstate.IdentityKey]gwstate.Identity, ready map[gwstate.IdentityKey]bool, guard guardIndex) {
	if inv.content == nil || !inv.content.baseMatches(a.iface) {
		writeBase(tx, a.iface)
	}
	own := a.ownership(inv, desired)
	if own.legacy {
		tx.flushChain(legacyHairpinChain)
		tx.deleteChain(legacyHairpinChain)
		a.log.Info("adopting a table of an older agent by object names", "chain", legacyHairpinChain)
	}
	removeStaleElements(tx, inv, desired, own)
	syncVIPs(tx, inv, desired)
	syncGuard(tx, inv, guard)
	keep := a.writeDesired(tx, inv, ids, ready, own)
	a.removeStaleObjects(tx, inv, own, keep)
}

// heldVIPs is the set of clusterIPs (the cached one when they did not change: a delta carries
// the same slice), and the addresses that entered or left it since the set the last commit
// used. It changes nothing: the commit records the set (guardPlan.commit).
func (a *Agent) heldVIPs(clusterIPs []netip.Addr) (held map[netip.Addr]bool, flipped []netip.Addr) {
	same := len(clusterIPs) == len(a.heldFrom) && a.held != nil &&
		(len(clusterIPs) == 0 || &clusterIPs[0] == &a.heldFrom[0] || slices.Equal(clusterIPs, a.heldFrom))
	if same {
		return a.held, nil
	}
	next := heldSet(clusterIPs)
	for ip := range next {
		if !a.held[ip] {
			flipped = append(flipped, ip)
		}
	}
	for ip := range a.held {
		if !next[ip] {
			flipped = append(flipped, ip)
		}
	}
	return next, flipped
}

// guardChanges plans the guard's change for c: the committed versions of its identities leave,
// the new ones with backends come in. A committed identity whose VIP became or stopped being a
// held ClusterIP is planned again too, as its being external changed.
func (a *Agent) guardChanges(c changes, clusterIPs []netip.Addr) *guardPlan {
	held, flipped := a.heldVIPs(clusterIPs)
	p := a.guard.plan()
	p.held, p.heldFrom = held, clusterIPs
	touched := make(map[gwstate.IdentityKey]bool, len(c.upserts)+len(c.removed))
	for _, old := range c.removed {
		touched[old.Key()] = true
		if was, ok := a.applied[old.Key()]; ok {
			p.remove(was)
		}
	}
	for _, id := range c.upserts {
		touched[id.Key()] = true
		if was, ok := a.applied[id.Key()]; ok {
			p.remove(was)
		}
		if len(id.Backends) > 0 {
			p.add(id, !held[id.VIP])
		}
	}
	if slices.ContainsFunc(flipped, func(ip netip.Addr) bool { return a.vipRefs[ip] > 0 }) {
		for k, id := range a.applied {
			if !touched[k] && slices.Contains(flipped, k.VIP) {
				p.remove(id)
				p.add(id, !held[id.VIP])
			}
		}
	}
	return p
}

// ownership tells which of a table's objects are the agent's.
type ownership struct {
	// legacy: the table is an older agent's, adopted by object names.
	legacy bool
	// mine holds the idhashes whose objects are the agent's.
	mine map[string]bool
	// ownedKeys holds OwnedSet's keys, joined as in the inventory's elements.
	ownedKeys map[string]bool
}

// ownership collects the idhashes that are the agent's: those of OwnedSet's keys, the staged
// identities and the desired ones.
func (a *Agent) ownership(inv *inventory, desired map[gwstate.IdentityKey]gwstate.Identity) ownership {
	own := ownership{
		legacy:    slices.Contains(inv.chains, legacyHairpinChain),
		mine:      make(map[string]bool, len(inv.owned)+len(desired)+len(a.staged)),
		ownedKeys: make(map[string]bool, len(inv.owned)),
	}
	for _, k := range inv.owned {
		own.mine[keyHash(k)] = true
		own.ownedKeys[strings.Join(k, " . ")] = true
	}
	for k := range a.staged {
		own.mine[IdentityHash(k)] = true
	}
	for k := range desired {
		own.mine[IdentityHash(k)] = true
	}
	return own
}

// isMine tells whether the object named name is the agent's.
func (o ownership) isMine(name string) bool {
	h, ok := objectHash(name)
	return ok && (o.legacy || o.mine[h])
}

// removeStaleElements deletes the agent's elements that name no desired identity, or point
// elsewhere than they should; so does an element of someone else's for a key the agent serves
// (one key, one verdict). OwnedSet loses the keys no longer desired.
func removeStaleElements(tx txn, inv *inventory, desired map[gwstate.IdentityKey]gwstate.Identity, own ownership) {
	wantElem := make(map[string]string, len(desired))
	for _, id := range desired {
		wantElem[strings.Join(elementKey(id), " . ")] = strings.Join(elementValue(id), " ")
	}
	for _, e := range inv.elements {
		k := strings.Join(e.key, " . ")
		v, want := wantElem[k]
		switch {
		case want && v == e.value:
			continue
		case want, own.legacy, own.ownedKeys[k], own.mine[keyHash(e.key)]:
			tx.deleteElementKey(e.key)
		}
	}
	for _, k := range inv.owned {
		if _, ok := wantElem[strings.Join(k, " . ")]; !ok {
			tx.deleteOwnedKey(k)
		}
	}
}

// syncVIPs makes VIPSet exactly the desired identities' VIPs, adding only those it lacks.
func syncVIPs(tx txn, inv *inventory, desired map[gwstate.IdentityKey]gwstate.Identity) {
	wantVIPs := make(map[netip.Addr]bool, len(desired))
	for k := range desired {
		wantVIPs[k.VIP] = true
	}
	for _, v := range inv.vips {
		if wantVIPs[v] {
			delete(wantVIPs, v)
		} else {
			tx.deleteVIP(v)
		}
	}
	vips := slices.SortedFunc(maps.Keys(wantVIPs), netip.Addr.Compare)
	for _, v := range vips {
		tx.addVIP(v)
	}
}

// keptObjects are the chains and sets a full sync keeps, and those it has deleted already.
type keptObjects struct {
	chains, sets map[string]bool
	// deleted holds the objects deleted by writeIdentity (a staged identity rewritten from its
	// known content), which are not deleted again as stale.
	deleted map[string]bool
}

// keepIdentity marks the chains and sets of id as kept.
func (k keptObjects) keepIdentity(id gwstate.Identity) {
	k.chains[IdentityChain(id.Key())] = true
	if len(id.SourceRanges) > 0 {
		k.sets[SourceSet(id)] = true
	}
	if id.AffinityTimeoutSeconds > 0 {
		for _, b := range id.Backends {
			k.chains[EndpointChain(id, b)] = true
			k.sets[AffinitySet(id, b)] = true
		}
	}
}

// markRewritten records the objects of old that its rewrite as id deleted.
func (k keptObjects) markRewritten(old, id gwstate.Identity) {
	oldChains, oldSets := objectNames(old)
	newChains, newSets := objectNames(id)
	for _, c := range oldChains {
		k.deleted[c] = !slices.Contains(newChains, c)
	}
	for _, s := range oldSets {
		k.deleted[s] = !slices.Contains(newSets, s)
	}
}

// writeDesired writes every desired identity that has backends: for those in ready, the element
// and OwnedSet key if the table lacks them (addMissing); a rewrite from the staged content for a
// leftover of a failed staged sync; all of it for the others. It returns the objects to keep.
func (a *Agent) writeDesired(tx txn, inv *inventory, ids []gwstate.Identity, ready map[gwstate.IdentityKey]bool, own ownership) keptObjects {
	keep := keptObjects{chains: map[string]bool{}, sets: map[string]bool{}, deleted: map[string]bool{}}
	var chains, sets map[string]bool
	if len(a.staged) > 0 {
		chains, sets = nameSet(inv.chains), nameSet(inv.sets)
	}
	elems := make(map[string]string, len(inv.elements))
	for _, e := range inv.elements {
		elems[strings.Join(e.key, " . ")] = e.value
	}
	for _, id := range ids {
		if len(id.Backends) == 0 {
			continue
		}
		old, staged := a.staged[id.Key()]
		switch {
		case ready[id.Key()]:
			// A staged identity's key went into OwnedSet with its objects.
			addMissing(tx, id, elems, staged || own.ownedKeys[strings.Join(elementKey(id), " . ")])
		case staged && present(old, chains, sets):
			// A leftover of a failed staged sync with other content: rewrite it from what it
			// is, so that affinity sets whose timeout changed are recreated (SPEC D3).
			writeIdentity(tx, &old, &id)
			keep.markRewritten(old, id)
		default:
			writeIdentity(tx, nil, &id)
		}
		keep.keepIdentity(id)
	}
	return keep
}

// addMissing adds the element and the OwnedSet key of an identity whose objects are in the table
// already, unless the table has them (elems: service-ips' elements by joined key, as listed;
// hasKey: the key is in OwnedSet). An element with another value was deleted by
// removeStaleElements.
func addMissing(tx txn, id gwstate.Identity, elems map[string]string, hasKey bool) {
	hasElem := elems[strings.Join(elementKey(id), " . ")] == strings.Join(elementValue(id), " ")
	if hasKey && hasElem {
		return
	}
	tx.identity(&id)
	if !hasKey {
		tx.addOwnedKey(elementKey(id))
	}
	if !hasElem {
		tx.addElement(id)
	}
	tx.identity(nil)
}

// removeStaleObjects deletes the agent's chains and sets that no desired identity keeps.
func (a *Agent) removeStaleObjects(tx txn, inv *inventory, own ownership, keep keptObjects) {
	staleChains := staleNames(inv.chains, own, keep.chains, keep.deleted)
	staleSets := staleNames(inv.sets, own, keep.sets, keep.deleted)
	// Flush every stale chain before deleting any, so goto references between them are gone.
	for _, c := range staleChains {
		tx.flushChain(c)
	}
	for _, c := range staleChains {
		tx.deleteChain(c)
	}
	for _, s := range staleSets {
		tx.deleteSet(s)
	}
	if len(staleChains)+len(staleSets) > 0 {
		a.log.Info("removing stale objects", "chains", len(staleChains), "sets", len(staleSets))
	}
}

// staleNames returns, sorted, the names of the agent's objects that are neither kept nor deleted
// already.
func staleNames(names []string, own ownership, kept, deleted map[string]bool) []string {
	var stale []string
	for _, n := range names {
		if own.isMine(n) && !kept[n] && !deleted[n] {
			stale = append(stale, n)
		}
	}
	slices.Sort(stale)
	return stale
}
