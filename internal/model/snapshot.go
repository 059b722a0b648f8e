package model

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Gates are the two feature gates of SPEC F1, and the form of the ledger the controller keeps
// (SPEC R6).
type Gates struct {
	LoadBalancer bool // --enable-gw-nftable-lb-svc
	ClusterIP    bool // --enable-gw-nftable-svc-cluster-ip
	// KubeOVNLoadBalancers is --enable-lb: kube-ovn's OVN load balancers serve the ClusterIPs
	// (SPEC F2), so a Service served for its EIP is told where its ClusterIP is served instead.
	KubeOVNLoadBalancers bool
	Ledger               LedgerForm
	// EndpointsWithoutPods allows endpoints without a Pod target as backends, within the Subnets
	// of the gateway's VPC (SPEC N2; off by default).
	EndpointsWithoutPods bool
	// MaxPortsPerService and MaxBackendsPerIdentity bound what one Service may ask of its
	// gateway (SPEC N4); 0 means the defaults. Their product also bounds a ServiceRecord's size
	// (etcd refuses objects over 1.5 MiB).
	MaxPortsPerService, MaxBackendsPerIdentity int
	// MaxIdentitiesPerGateway and MaxBackendsPerGateway bound what all Services together may ask
	// of one gateway (SPEC N4; backends and source ranges count as backends); 0 means the
	// defaults. Each namespace gets an even share of them (bounds.go); Services that already hold
	// identities keep them first, then the oldest: a Service that would pass a bound or its
	// namespace's share is not served (event) until room is freed.
	MaxIdentitiesPerGateway, MaxBackendsPerGateway int
	// Release is vpcgw's uninstall (vpcgw release, SPEC O4): no Service is served, whatever the
	// gates, so every Service, record and route is released as for both gates off, and the
	// gateways' states tell the agents to remove what they keep even for an empty state.
	Release bool
}

// Default bounds of SPEC N4: 64 × 512 entries keep a ServiceRecord under about 1 MB; 65,536
// identities per gateway are well above the 10,000 Services × 2 identities of SPEC P1-P7.
const (
	DefaultMaxPortsPerService      = 64
	DefaultMaxBackendsPerIdentity  = 512
	DefaultMaxIdentitiesPerGateway = 65536
	// DefaultMaxBackendsPerGateway keeps a gateway's complete state, with every identity at its
	// largest, near half the agent's line bound (gwstate.MaxEncodedSize; the controller refuses
	// bounds that pass it): 10,000 Services × 2 identities × 10 backends use two fifths of it.
	DefaultMaxBackendsPerGateway = 500000
)

func (g Gates) maxIdentities() int {
	if g.MaxIdentitiesPerGateway > 0 {
		return g.MaxIdentitiesPerGateway
	}
	return DefaultMaxIdentitiesPerGateway
}

func (g Gates) maxGatewayBackends() int {
	if g.MaxBackendsPerGateway > 0 {
		return g.MaxBackendsPerGateway
	}
	return DefaultMaxBackendsPerGateway
}

func (g Gates) maxPorts() int {
	if g.MaxPortsPerService > 0 {
		return g.MaxPortsPerService
	}
	return DefaultMaxPortsPerService
}

func (g Gates) maxBackends() int {
	if g.MaxBackendsPerIdentity > 0 {
		return g.MaxBackendsPerIdentity
	}
	return DefaultMaxBackendsPerIdentity
}

// LedgerForm is where the records of served Services live (SPEC R6, K2).
type LedgerForm string

const (
	// LedgerServiceRecord keeps one vpcgw.io ServiceRecord per Service, which kube-ovn never
	// acts on: the default, and the only safe form beside kube-ovn v1.16.x and master.
	LedgerServiceRecord LedgerForm = "service-record"
	// LedgerDnatRule is the seed's form: one share IptablesDnatRule per (Service port, backend).
	// Only for a kube-ovn that treats such records as a ledger (SPEC R6).
	LedgerDnatRule LedgerForm = "iptables-dnat-rule"
)

// ParseLedgerForm accepts the two forms ("" is the default).
func ParseLedgerForm(s string) (LedgerForm, error) {
	switch LedgerForm(s) {
	case "", LedgerServiceRecord:
		return LedgerServiceRecord, nil
	case LedgerDnatRule:
		return LedgerDnatRule, nil
	}
	return "", fmt.Errorf("unknown ledger form %q: use %s (the default) or %s", s, LedgerServiceRecord, LedgerDnatRule)
}

// dnatRuleLedger reports whether records are written as IptablesDnatRules.
func (g Gates) dnatRuleLedger() bool { return g.Ledger == LedgerDnatRule }

// Snapshot is what the model reads. Order does not matter. Fields tagged plan:"service" are read
// per Service (a partial plan holds only the replanned Services' part of them); every other field
// is what all of a gateway's Services depend on, and Fingerprint covers it (planner.go).
type Snapshot struct {
	// Services: every Service that names a gateway, carries the finalizer or owns a record.
	Services       []corev1.Service            `plan:"service"`
	EndpointSlices []discoveryv1.EndpointSlice `plan:"service"`
	// Placement says where kube-ovn runs the gateways' pods (SPEC K5).
	Placement GatewayPlacement
	// Pods the endpoints point at (for NIC resolution, SPEC B2).
	Pods []corev1.Pod `plan:"service"`
	// PodAddresses are kube-ovn's IP objects of those Pods: the only source of a backend's
	// address, as a tenant cannot write them (SPEC N2).
	PodAddresses []kubeovnv1.IP `plan:"service"`
	Subnets      []kubeovnv1.Subnet
	Vpcs         []kubeovnv1.Vpc
	Gateways     []kubeovnv1.VpcNatGateway
	GatewayPods  []corev1.Pod
	// GatewayStatefulSets are kube-ovn's StatefulSets of the gateways: a gateway Pod is an
	// instance only when the one of its gateway controls it within its replicas (SPEC N5).
	GatewayStatefulSets []appsv1.StatefulSet
	EIPs                []kubeovnv1.IptablesEIP
	// KubeOVNDnatRules and KubeOVNFIPRules are kube-ovn's own NAT on the gateway's EIPs: its
	// DNAT rules that are not records, and its floating IPs. What they forward is held (SPEC N3).
	KubeOVNDnatRules []kubeovnv1.IptablesDnatRule
	KubeOVNFIPRules  []kubeovnv1.IptablesFIPRule
	// Records are the existing share IptablesDnatRules labelled as Service records (the seed's
	// ledger form; in the ServiceRecord form they are left from an earlier form and released).
	Records []kubeovnv1.IptablesDnatRule `plan:"service"`
	// ServiceRecords are the existing vpcgw.io ServiceRecords (in the seed's form, likewise left
	// from the other form and released).
	ServiceRecords []vpcgwv1alpha1.ServiceRecord `plan:"service"`
	// GatewayLoad is, per gateway, what Services outside this snapshot already have there (a
	// partial plan's snapshot holds only the changed Services); it counts against the gateway's
	// bounds and its namespaces' shares before any Service of the snapshot. Nil for a full
	// snapshot.
	GatewayLoad map[string]HeldLoad `plan:"service"`
}

// Index is a snapshot prepared for lookups. Building it is linear in the snapshot; planning one
// Service with it costs what that Service has (ports, endpoints, records), not the cluster.
type Index struct {
	gates       Gates
	placement   GatewayPlacement
	vpcs        map[string]*kubeovnv1.Vpc
	gateways    map[string]*kubeovnv1.VpcNatGateway
	eips        map[string]*kubeovnv1.IptablesEIP
	subnets     map[string]*kubeovnv1.Subnet
	pods        map[types.NamespacedName]*corev1.Pod
	podAddrs    map[types.NamespacedName][]*kubeovnv1.IP // by the Pod they are allocated to
	gatewayPods map[string][]*corev1.Pod                 // by gateway
	// statefulSets are kube-ovn's gateway StatefulSets by namespace/name (SPEC N5).
	statefulSets map[types.NamespacedName]*appsv1.StatefulSet
	slices       map[types.NamespacedName][]*discoveryv1.EndpointSlice
	records      map[types.UID][]*kubeovnv1.IptablesDnatRule  // by owner UID label
	svcRecords   map[types.UID][]*vpcgwv1alpha1.ServiceRecord // by owner UID label
	// claims lists, per identity, the Services that could serve it, best claim first (I2). A
	// ClusterIP is unique in a cluster, but a snapshot is input like any other.
	claims map[gwstate.IdentityKey][]claimant
	// load counts, per gateway, what was given so far (SPEC N4): GatewayLoad, then each Service
	// as PlanService serves it; nsLoad the same per namespace. shares is what each namespace may
	// hold of a gateway, split between sharersOf namespaces (bounds.go); nil in the first pass,
	// which only finds who asks.
	held      map[string]HeldLoad
	load      map[string]Load
	nsLoad    map[string]map[string]Load
	shares    map[string]Load
	sharersOf map[string]int
	// infra caches, per gateway, the addresses of its VPC's machinery (backends.go).
	infra map[string][]infraRange
	// nat is what kube-ovn's own NAT holds on the EIPs (SPEC N3).
	nat KubeOVNNat
}

type claimant struct {
	key types.NamespacedName
	// programmed: the Service's records say the gateway serves this identity for it. A programmed
	// identity stays with its holder whatever another Service's age (SPEC N3).
	programmed bool
	rank       claimRank // otherwise the first claim wins (claim.go)
}

// NewIndex prepares a snapshot for planning with the given gates.
func NewIndex(s Snapshot, gates Gates) *Index {
	ix := &Index{
		gates:        gates,
		placement:    s.Placement,
		vpcs:         make(map[string]*kubeovnv1.Vpc, len(s.Vpcs)),
		gateways:     make(map[string]*kubeovnv1.VpcNatGateway, len(s.Gateways)),
		eips:         make(map[string]*kubeovnv1.IptablesEIP, len(s.EIPs)),
		subnets:      make(map[string]*kubeovnv1.Subnet, len(s.Subnets)),
		pods:         make(map[types.NamespacedName]*corev1.Pod, len(s.Pods)),
		podAddrs:     make(map[types.NamespacedName][]*kubeovnv1.IP, len(s.PodAddresses)),
		gatewayPods:  map[string][]*corev1.Pod{},
		statefulSets: make(map[types.NamespacedName]*appsv1.StatefulSet, len(s.GatewayStatefulSets)),
		slices:       map[types.NamespacedName][]*discoveryv1.EndpointSlice{},
		records:      map[types.UID][]*kubeovnv1.IptablesDnatRule{},
		svcRecords:   map[types.UID][]*vpcgwv1alpha1.ServiceRecord{},
		claims:       map[gwstate.IdentityKey][]claimant{},
		held:         s.GatewayLoad,
		load:         map[string]Load{},
		nsLoad:       map[string]map[string]Load{},
		infra:        map[string][]infraRange{},
	}
	ix.nat = NewKubeOVNNat(s.KubeOVNDnatRules, s.KubeOVNFIPRules)
	for gw, h := range s.GatewayLoad {
		ix.load[gw], ix.nsLoad[gw] = h.Load, maps.Clone(h.Namespaces)
	}
	ix.indexKubeOVN(&s)
	ix.indexPods(&s)
	ix.indexSlicesAndRecords(&s)
	for i := range s.Services {
		ix.addClaims(&s.Services[i])
	}
	for k, cs := range ix.claims {
		slices.SortFunc(cs, compareClaimants)
		ix.claims[k] = cs
	}
	return ix
}

// indexKubeOVN indexes kube-ovn's gateways, Vpcs, EIPs and Subnets by name.
func (ix *Index) indexKubeOVN(s *Snapshot) {
	for i := range s.Gateways {
		ix.gateways[s.Gateways[i].Name] = &s.Gateways[i]
	}
	for i := range s.Vpcs {
		ix.vpcs[s.Vpcs[i].Name] = &s.Vpcs[i]
	}
	for i := range s.EIPs {
		ix.eips[s.EIPs[i].Name] = &s.EIPs[i]
	}
	for i := range s.Subnets {
		ix.subnets[s.Subnets[i].Name] = &s.Subnets[i]
	}
}

// indexPods indexes the backend Pods by name, kube-ovn's IPs by the Pod they are allocated to,
// the gateway pods by gateway and the gateways' StatefulSets by name.
func (ix *Index) indexPods(s *Snapshot) {
	for i := range s.Pods {
		p := &s.Pods[i]
		ix.pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	for i := range s.PodAddresses {
		a := &s.PodAddresses[i]
		if a.DeletionTimestamp != nil {
			// An address kube-ovn is releasing is no longer the Pod's: it may be handed to
			// another Pod as soon as the object is gone.
			continue
		}
		k := types.NamespacedName{Namespace: a.Spec.Namespace, Name: a.Spec.PodName}
		ix.podAddrs[k] = append(ix.podAddrs[k], a)
	}
	for i := range s.GatewayPods {
		p := &s.GatewayPods[i]
		if gw := p.Annotations[AnnotationGatewayPod]; gw != "" && p.Labels[LabelGatewayPod] == "true" {
			ix.gatewayPods[gw] = append(ix.gatewayPods[gw], p)
		}
	}
	for i := range s.GatewayStatefulSets {
		sts := &s.GatewayStatefulSets[i]
		ix.statefulSets[types.NamespacedName{Namespace: sts.Namespace, Name: sts.Name}] = sts
	}
}

// indexSlicesAndRecords indexes the EndpointSlices by Service, and the records of both forms by
// the UID of the Service that owns them.
func (ix *Index) indexSlicesAndRecords(s *Snapshot) {
	for i := range s.EndpointSlices {
		es := &s.EndpointSlices[i]
		if name := es.Labels[discoveryv1.LabelServiceName]; name != "" {
			k := types.NamespacedName{Namespace: es.Namespace, Name: name}
			ix.slices[k] = append(ix.slices[k], es)
		}
	}
	for i := range s.Records {
		r := &s.Records[i]
		if IsRecord(r) {
			uid := types.UID(r.Labels[LabelRecordUID])
			ix.records[uid] = append(ix.records[uid], r)
		}
	}
	for i := range s.ServiceRecords {
		r := &s.ServiceRecords[i]
		if IsServiceRecord(r) {
			uid := types.UID(r.Labels[LabelRecordUID])
			ix.svcRecords[uid] = append(ix.svcRecords[uid], r)
		}
	}
}

func compareClaimants(a, b claimant) int {
	programmedFirst := 0
	switch {
	case a.programmed && !b.programmed:
		programmedFirst = -1
	case b.programmed && !a.programmed:
		programmedFirst = 1
	}
	return cmp.Or(programmedFirst, compareRanks(a.rank, b.rank), cmp.Compare(a.key.Namespace, b.key.Namespace), cmp.Compare(a.key.Name, b.key.Name))
}

// recordedIdentities are the identities the existing records of a Service say are programmed for
// it, in either ledger form. The records spell addresses as text: one that does not parse names
// no identity the Service could serve.
func (ix *Index) recordedIdentities(uid types.UID) map[gwstate.IdentityKey]bool {
	out := map[gwstate.IdentityKey]bool{}
	for _, r := range ix.svcRecords[uid] {
		for _, vip := range recordAddrs(r.Spec.EIPAddress, r.Spec.ClusterIP) {
			for _, p := range r.Spec.Ports {
				if proto, ok := protocolOfRecord(p.Protocol); ok {
					out[gwstate.IdentityKey{VIP: vip, Port: p.Port, Protocol: proto}] = true
				}
			}
		}
	}
	for _, r := range ix.records[uid] {
		port, err := strconv.Atoi(r.Spec.ExternalPort)
		proto, ok := protocolOfRecord(r.Spec.Protocol)
		if err != nil || !ok || !r.Status.Ready {
			continue
		}
		for _, vip := range recordAddrs(r.Labels[LabelEIPAddress], r.Spec.ClusterIP) {
			out[gwstate.IdentityKey{VIP: vip, Port: int32(port), Protocol: proto}] = true
		}
	}
	return out
}

// recordAddrs parses a record's addresses, leaving out the empty ones and those that do not parse.
func recordAddrs(texts ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(texts))
	for _, s := range texts {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// protocolOfRecord maps a record's lowercase protocol to a served one.
func protocolOfRecord(p string) (gwstate.Protocol, bool) {
	switch p {
	case "tcp":
		return gwstate.TCP, true
	case "udp":
		return gwstate.UDP, true
	}
	return "", false
}

// addClaims registers the identities svc would serve if nobody else held them.
func (ix *Index) addClaims(svc *corev1.Service) {
	b := ix.bind(svc)
	c := claimant{key: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, rank: rankOf(svc)}
	recorded := ix.recordedIdentities(svc.UID)
	seen := map[gwstate.IdentityKey]bool{}
	for _, vip := range []netip.Addr{b.eipAddr, b.clusterIP} {
		if !vip.IsValid() {
			continue
		}
		for _, p := range svc.Spec.Ports {
			proto, ok := ServedProtocol(p.Protocol)
			if !ok {
				continue
			}
			k := gwstate.IdentityKey{VIP: vip, Port: p.Port, Protocol: proto}
			if !seen[k] {
				seen[k] = true
				ck := c
				ck.programmed = recorded[k]
				ix.claims[k] = append(ix.claims[k], ck)
			}
		}
	}
}

// holder is the Service that holds an identity (SPEC I2, N3): the one whose records say it is
// programmed for it, else the first to claim it (claim.go), then by name.
func (ix *Index) holder(vip netip.Addr, p corev1.ServicePort, self types.NamespacedName) types.NamespacedName {
	proto, _ := ServedProtocol(p.Protocol) // only served ports are asked for
	if cs := ix.claims[gwstate.IdentityKey{VIP: vip, Port: p.Port, Protocol: proto}]; len(cs) > 0 {
		return cs[0].key
	}
	return self // a Service planned outside its snapshot claims for itself
}

// IsRecord tells a Service record from a hand-made rule or one of kube-ovn's own.
func IsRecord(r *kubeovnv1.IptablesDnatRule) bool { return HasRecordLabels(r.Labels) }

// HasRecordLabels reports whether an object's labels make it a Service record (SPEC R2), of either
// ledger form.
func HasRecordLabels(l map[string]string) bool {
	return l[LabelRecord] == "true" && l[LabelRecordUID] != ""
}

// IsServiceRecord tells a record of this controller (labels of SPEC R2) from any other object.
func IsServiceRecord(r *vpcgwv1alpha1.ServiceRecord) bool { return HasRecordLabels(r.Labels) }
