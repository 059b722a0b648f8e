package model

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwinstance"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// world is a cluster for the planner: the gateway-wide objects of baseSnapshot plus a second
// gateway and EIPs, and Services, EndpointSlices and records that change. It is the planner's
// Reader, as the controller's cache is.
type world struct {
	s Snapshot
}

func (w *world) GatewayServices(gw string) ([]corev1.Service, error) {
	var out []corev1.Service
	for _, svc := range w.s.Services {
		if slices.Contains(ServiceGatewayKeys(&svc), gw) {
			out = append(out, svc)
		}
	}
	return out, nil
}

func (w *world) Service(k types.NamespacedName) (*corev1.Service, error) {
	for i := range w.s.Services {
		if svc := &w.s.Services[i]; svc.Namespace == k.Namespace && svc.Name == k.Name {
			return svc, nil
		}
	}
	return nil, nil
}

func (w *world) ClaimingServices(claim string) ([]corev1.Service, error) {
	var out []corev1.Service
	for _, svc := range w.s.Services {
		if slices.Contains(ClaimKeys(&svc), claim) {
			out = append(out, svc)
		}
	}
	return out, nil
}

func (w *world) records(match func(map[string]string) bool) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	var srs []vpcgwv1alpha1.ServiceRecord
	for _, r := range w.s.ServiceRecords {
		if match(r.Labels) {
			srs = append(srs, r)
		}
	}
	var drs []kubeovnv1.IptablesDnatRule
	for _, r := range w.s.Records {
		if match(r.Labels) {
			drs = append(drs, r)
		}
	}
	return srs, drs, nil
}

func (w *world) GatewayRecords(gw string) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	return w.records(func(l map[string]string) bool { return l[LabelRecord] == "true" && l[LabelGateway] == gw })
}

func (w *world) OwnerRecords(uid types.UID) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	return w.records(func(l map[string]string) bool { return l[LabelRecord] == "true" && l[LabelRecordUID] == string(uid) })
}

func (w *world) ServiceSlices(ns, name string) ([]discoveryv1.EndpointSlice, error) {
	var out []discoveryv1.EndpointSlice
	for _, es := range w.s.EndpointSlices {
		if es.Namespace == ns && es.Labels[discoveryv1.LabelServiceName] == name {
			out = append(out, es)
		}
	}
	return out, nil
}

func (w *world) Pod(types.NamespacedName) (*corev1.Pod, error) { return nil, nil }

func (w *world) PodAddresses(types.NamespacedName) ([]kubeovnv1.IP, error) { return nil, nil }

// base is the world's gateway-wide objects, as the controller lists them for gw.
func (w *world) base(gw string) Snapshot {
	b := w.s
	b.Services, b.EndpointSlices, b.Pods, b.PodAddresses, b.Records, b.ServiceRecords, b.GatewayLoad = nil, nil, nil, nil, nil, nil, nil
	b.GatewayPods = nil
	for _, p := range w.s.GatewayPods {
		if p.Annotations[AnnotationGatewayPod] == gw {
			b.GatewayPods = append(b.GatewayPods, p)
		}
	}
	return b
}

// covers: I2, N3, N4, R5, S4, D2, V1, V3, P1, P3
// The planner's partial plans equal full plans: a random sequence of what happens in a cluster
// (Services created, deleted, re-annotated and re-ported so that they conflict and take over,
// endpoints changing, EIPs turning ready and back, the gateway's pod changing, gateway bounds
// of identities and of backends that fill up so that Services wait for room, namespaces' shares
// of them reached, and, on a gateway open to every namespace, shares that change as a namespace
// starts or stops asking; in both ledger forms), with the controller's writes applied after
// every sync and marked as its handlers mark them. After every sync the gateway's state, routes
// and Services from the planner's partial plan are those of a full plan of the same cluster,
// and so are every replanned Service's plan and the count of Services waiting.
func TestPartialPlansEqualFullPlans(t *testing.T) {
	limitedSyncs, conflicts, partialWhileWaiting, deltas, newSharers := 0, 0, 0, 0, 0
	waitingSyncs, admittedPartially, ownersWhileWaiting := 0, 0, 0
	for seed := range uint64(24) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 29))
			gates := srGates
			// Some sequences fill the gateway, some often; some fill its backends too (the
			// draining flows give way first); some keep the seed's ledger form, where a Service
			// without backends has no record and so is never programmed.
			gates.MaxIdentitiesPerGateway = 6 + r.IntN(44)
			if seed%4 < 2 {
				gates.MaxBackendsPerGateway = 8 + r.IntN(60)
			}
			if seed%3 == 0 {
				gates.Ledger = LedgerDnatRule
			}
			w := &world{s: baseSnapshot()}
			w.s.EndpointSlices = nil
			w.s.Gateways = append(w.s.Gateways, gateway("gw2", "vpc1"))
			w.s.EIPs = append(w.s.EIPs, eip("eip2", "gw1", "172.18.0.11", true), eip("eip3", "gw2", "172.18.0.12", true))
			for i := range w.s.Gateways {
				w.s.Gateways[i].ResourceVersion = "1"
			}
			if seed%2 == 1 { // open to all: tenant-c shares it too, when it asks
				w.s.Gateways[0].Annotations = map[string]string{AnnotationAllowedNamespaces: "*"}
			}
			sharers := 0
			var p Planner
			changes := Changes{Services: map[types.NamespacedName]bool{}, Owners: map[types.UID]bool{}}
			mark := func(svc *corev1.Service) {
				if svc != nil && slices.Contains(ServiceGatewayKeys(svc), "gw1") {
					changes.Services[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
				}
			}
			rv := 10
			bump := func(m *metav1.ObjectMeta) { rv++; m.ResourceVersion = strconv.Itoa(rv) }
			partials := 0
			var prev *gwstate.Update // the planner's last update
			for step := range 200 {
				what := mutate(r, w, step, mark, bump)

				waiting := maps.Clone(p.room.waiting)
				owners := len(changes.Owners) > 0
				plan, gp, _, full, err := p.Sync(w, w.base("gw1"), "gw1", changes, gates)
				changes = Changes{Services: map[types.NamespacedName]bool{}, Owners: map[types.UID]bool{}}
				if err != nil {
					t.Fatal(err)
				}
				if len(waiting) > 0 {
					waitingSyncs++
				}
				if !full {
					partials++
					if len(waiting) > 0 {
						partialWhileWaiting++
						if owners {
							ownersWhileWaiting++
						}
						if slices.ContainsFunc(plan.Services, func(sp ServicePlan) bool { return waiting[sp.Key] && sp.Served() }) {
							admittedPartially++
						}
					}
				}
				whole, _, _ := ReadScope(w, w.base("gw1"), "gw1", Scope{Full: true})
				fplan := Compute(whole, gates)
				fgp := fplan.Gateway("gw1")
				if fgp != nil {
					if sharers != 0 && fgp.Sharers != sharers {
						newSharers++
					}
					sharers = fgp.Sharers
				}
				if d := gatewayPlanDiff(gp, fgp); d == "" && gp != nil {
					// The update's change is what the transport sends to an instance that acknowledged
					// the planner's previous state: exactly the diff of the two whole states.
					u := gp.Update()
					if prev != nil {
						if want := gwstate.Delta(prev.Whole(), u.Whole()); u.Base != prev.Version || !reflect.DeepEqual(u.Delta, want) {
							t.Fatalf("step %d (%s, full %v): update of version %d against %d (previous %d) carries\n%+v\nwant\n%+v", step, what, full, u.Version, u.Base, prev.Version, u.Delta, want)
						}
						if u.SameClusterIPs && !slices.Equal(u.ClusterIPs, prev.ClusterIPs) {
							t.Fatalf("step %d (%s): the update keeps its base's ClusterIPs %v, but has %v", step, what, prev.ClusterIPs, u.ClusterIPs)
						}
						deltas++
					}
					if w := u.Whole(); u.Identities != len(w.Identities) || u.Backends != countBackends(w) || !slices.Equal(u.ClusterIPs, w.ClusterIPs) {
						t.Fatalf("step %d (%s): update counts %d identities, %d backends, ClusterIPs %v; the whole state has %d, %d, %v", step, what, u.Identities, u.Backends, u.ClusterIPs, len(w.Identities), countBackends(w), w.ClusterIPs)
					}
					prev = &u
				} else if gp == nil {
					prev = nil
				}
				if d := gatewayPlanDiff(gp, fgp); d != "" {
					for _, svc := range w.s.Services {
						fsp, _ := planOf(fplan, types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name})
						t.Logf("%s/%s group %s gw %s eip %q ports %v created %v fin %v del %v: eipServed %v %q", svc.Namespace, svc.Name, IdentityGroup(svc.UID), svc.Annotations[AnnotationGateway], svc.Annotations[AnnotationEIP], svc.Spec.Ports, svc.CreationTimestamp.Unix()%1000, svc.Finalizers, svc.DeletionTimestamp != nil, fsp.EIPServed, fsp.EIPReason)
					}
					t.Fatalf("step %d (%s, full %v): %s", step, what, full, d)
				}
				if countLimited(fplan) > 0 {
					limitedSyncs++
				}
				if p.Limited() != countLimited(fplan) {
					t.Fatalf("step %d (%s, full %v): the planner counts %d Services waiting, the full plan %d", step, what, full, p.Limited(), countLimited(fplan))
				}
				for _, sp := range fplan.Services {
					if strings.Contains(sp.EIPReason, "is held by") {
						conflicts++
						break
					}
				}
				// The VIPs the planner remembers per Service are the full plan's (the controller
				// tells those Services when a VIP is not routed, SPEC V3).
				wantVIPs := map[types.NamespacedName]ServiceVIPs{}
				for _, sp := range fplan.Services {
					if sp.Gateway == "gw1" && sp.Served() && (sp.EIP.IsValid() || sp.ClusterIP.IsValid()) {
						wantVIPs[sp.Key] = ServiceVIPs{UID: sp.UID, EIP: sp.EIP, ClusterIP: sp.ClusterIP}
					}
				}
				if got := p.ServiceVIPs(); !maps.Equal(got, wantVIPs) {
					t.Fatalf("step %d (%s): the planner's Service VIPs %v, the full plan's %v", step, what, got, wantVIPs)
				}
				for _, sp := range plan.Services {
					if sp.Gateway != "gw1" {
						continue // read as a changed Service, but not this gateway's to write
					}
					fsp, ok := planOf(fplan, sp.Key)
					if !ok || !reflect.DeepEqual(sp, fsp) {
						t.Fatalf("step %d (%s): partial plan of %s differs from the full one:\n%+v\nwant\n%+v", step, what, sp.Key, sp, fsp)
					}
				}
				for _, n := range plan.OrphanServiceRecords {
					if !slices.Contains(fplan.OrphanServiceRecords, n) {
						t.Fatalf("step %d (%s): the partial plan deletes record %s, which the full plan keeps", step, what, n)
					}
				}
				// The controller writes the plan; its own writes to a Service (finalizer, ingress)
				// come back as events that mark the Service, and its record writes mark their owner.
				before := w.s
				w.s = applyPlan(w.s, plan)
				w.s.Services = slices.DeleteFunc(w.s.Services, func(svc corev1.Service) bool {
					return svc.DeletionTimestamp != nil && !slices.Contains(svc.Finalizers, Finalizer)
				})
				markWrites(before, w.s, "gw1", func(k types.NamespacedName, uid types.UID) {
					changes.Services[k] = true
					if uid != "" {
						changes.Owners[uid] = true
					}
				})
			}
			if partials < 30 {
				t.Fatalf("only %d of 200 syncs were partial: the sequence does not exercise the planner", partials)
			}
		})
	}
	if limitedSyncs == 0 || conflicts == 0 {
		t.Fatalf("no sync had a full gateway (%d) or a conflict (%d): the sequences do not exercise N4 and I2", limitedSyncs, conflicts)
	}
	// While a Service waits for room, the other Services' syncs stay partial (issues 20, 34):
	// those that follow record writes too, and those that let a waiting Service in.
	if partialWhileWaiting == 0 || ownersWhileWaiting == 0 || admittedPartially == 0 {
		t.Fatalf("partial syncs while a Service waited for room: %d, after record writes %d, letting a waiting Service in %d: the sequences do not exercise partial plans on a full gateway",
			partialWhileWaiting, ownersWhileWaiting, admittedPartially)
	}
	if deltas == 0 {
		t.Fatal("no plan carried a delta against the one before")
	}
	if newSharers == 0 {
		t.Fatal("the namespaces sharing a gateway never changed after the first plan")
	}
	t.Logf("%d syncs with a full gateway or share; of %d while a Service waited, %d partial (%d after record writes, %d letting a waiting Service in); %d deltas checked, %d changes of sharers",
		limitedSyncs, waitingSyncs, partialWhileWaiting, ownersWhileWaiting, admittedPartially, deltas, newSharers)
}

func countBackends(st gwstate.State) int {
	n := 0
	for _, id := range st.Identities {
		n += len(id.Backends)
	}
	return n
}

func planOf(p Plan, k types.NamespacedName) (ServicePlan, bool) {
	for _, sp := range p.Services {
		if sp.Key == k {
			return sp, true
		}
	}
	return ServicePlan{}, false
}

// gatewayPlanDiff says how two plans of one gateway differ in what is programmed ("" if not).
func gatewayPlanDiff(a, b *GatewayPlan) string {
	switch {
	case a == nil && b == nil:
		return ""
	case a == nil || b == nil:
		return fmt.Sprintf("one plan is missing (partial %v, full %v)", a != nil, b != nil)
	case !reflect.DeepEqual(a.Update().Whole(), b.State):
		only := func(x, y []gwstate.Identity) []string {
			var out []string
			for _, id := range x {
				if !slices.ContainsFunc(y, func(o gwstate.Identity) bool { return reflect.DeepEqual(o, id) }) {
					out = append(out, fmt.Sprintf("%s%v(%s)", id.Key(), id.Backends, id.Group))
				}
			}
			return out
		}
		return fmt.Sprintf("state: partial only %v; full only %v; ClusterIPs partial %v, full %v",
			only(a.Update().Whole().Identities, b.State.Identities), only(b.State.Identities, a.Update().Whole().Identities), a.Update().ClusterIPs, b.State.ClusterIPs)
	case !reflect.DeepEqual(a.Routes, b.Routes):
		return fmt.Sprintf("routes: partial %+v, full %+v", a.Routes, b.Routes)
	case !reflect.DeepEqual(a.Services, b.Services):
		return fmt.Sprintf("services: partial %v, full %v", a.Services, b.Services)
	case !reflect.DeepEqual(instanceNames(a), instanceNames(b)) || !reflect.DeepEqual(a.Refused, b.Refused):
		return fmt.Sprintf("instances: partial %v refused %v, full %v refused %v", instanceNames(a), a.Refused, instanceNames(b), b.Refused)
	}
	return ""
}

func instanceNames(gp *GatewayPlan) []string {
	var out []string
	for _, inst := range gp.Instances {
		out = append(out, inst.Pod.Namespace+"/"+inst.Pod.Name)
	}
	return out
}

// mutate changes the world as a cluster changes and marks what the controller's event handlers
// would mark; it says what it did.
func mutate(r *rand.Rand, w *world, step int, mark func(*corev1.Service), bump func(*metav1.ObjectMeta)) string {
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	nss := []string{"ns", "tenant-b", "tenant-c"}
	key := types.NamespacedName{Namespace: nss[r.IntN(len(nss))], Name: names[r.IntN(len(names))]}
	cur, _ := w.Service(key)
	ports := func() []corev1.ServicePort {
		var out []corev1.ServicePort
		for _, port := range []int32{80, 81, 82} {
			if r.IntN(2) == 0 {
				proto := corev1.ProtocolTCP
				if r.IntN(4) == 0 {
					proto = corev1.ProtocolUDP
				}
				out = append(out, corev1.ServicePort{Name: fmt.Sprint("p", port), Port: port, Protocol: proto})
			}
		}
		if len(out) == 0 {
			out = append(out, corev1.ServicePort{Name: "p80", Port: 80, Protocol: corev1.ProtocolTCP})
		}
		return out
	}
	endpoints := func(svc *corev1.Service) {
		w.s.EndpointSlices = slices.DeleteFunc(w.s.EndpointSlices, func(es discoveryv1.EndpointSlice) bool {
			return es.Namespace == svc.Namespace && es.Labels[discoveryv1.LabelServiceName] == svc.Name
		})
		for _, port := range svc.Spec.Ports {
			es := slice(svc.Name, svc.Name+"-"+port.Name, discoveryv1.AddressTypeIPv4, 8000+port.Port, port.Name, port.Protocol)
			es.Namespace = svc.Namespace
			for i := range 1 + r.IntN(3) {
				cond := discoveryv1.EndpointConditions{Ready: ptr.To(r.IntN(5) > 0)}
				if !*cond.Ready { // not ready, or terminating (draining while it serves)
					cond.Terminating, cond.Serving = ptr.To(r.IntN(2) == 0), ptr.To(r.IntN(2) == 0)
				}
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.1.%d", 11+r.IntN(6)+i)},
					Conditions: cond})
			}
			w.s.EndpointSlices = append(w.s.EndpointSlices, es)
		}
	}
	eips := []string{"eip1", "eip1", "eip2", "eip3", ""}
	switch op := r.IntN(10); {
	case cur == nil || op < 2: // create (or recreate) the Service
		if cur != nil {
			return "keep " + key.String()
		}
		gw := []string{"gw1", "gw1", "gw1", "gw2", ""}[r.IntN(5)]
		svc := corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
			UID: types.UID(fmt.Sprintf("uid-%s-%d", key, step)), CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(r.IntN(50)) * time.Second)),
			Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports(),
				ClusterIP: fmt.Sprintf("10.96.%d.%d", 1+step/200, 1+step%200)}} // the API server's are unique
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		if gw != "" {
			svc.Annotations[AnnotationGateway] = gw
		}
		if e := eips[r.IntN(len(eips))]; e != "" {
			svc.Annotations[AnnotationEIP] = e
		}
		if r.IntN(4) == 0 {
			svc.Spec.Type = corev1.ServiceTypeClusterIP
			delete(svc.Annotations, AnnotationEIP)
		}
		bump(&svc.ObjectMeta)
		w.s.Services = append(w.s.Services, svc)
		endpoints(&w.s.Services[len(w.s.Services)-1])
		mark(&svc)
		return "create " + key.String()
	case op < 3: // delete
		mark(cur)
		if slices.Contains(cur.Finalizers, Finalizer) {
			cur.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			bump(&cur.ObjectMeta)
		} else {
			w.s.Services = slices.DeleteFunc(w.s.Services, func(svc corev1.Service) bool { return svc.UID == cur.UID })
		}
		return "delete " + key.String()
	case op < 4: // new ports
		mark(cur)
		cur.Spec.Ports = ports()
		bump(&cur.ObjectMeta)
		endpoints(cur)
		return "ports " + key.String()
	case op < 5: // the EIP annotation cleared or set
		mark(cur)
		if e := eips[r.IntN(len(eips))]; e == "" || cur.Spec.Type != corev1.ServiceTypeLoadBalancer {
			delete(cur.Annotations, AnnotationEIP)
		} else {
			cur.Annotations[AnnotationEIP] = e
		}
		bump(&cur.ObjectMeta)
		mark(cur)
		return "eip " + key.String()
	case op < 8: // endpoints change
		endpoints(cur)
		mark(cur)
		return "endpoints " + key.String()
	case op < 9: // an EIP turns ready or not
		e := &w.s.EIPs[r.IntN(len(w.s.EIPs))]
		e.Status.Ready = !e.Status.Ready
		e.Status.IP = ""
		if e.Status.Ready {
			e.Status.IP = e.Spec.V4ip
		}
		bump(&e.ObjectMeta)
		for i := range w.s.Services {
			if w.s.Services[i].Annotations[AnnotationEIP] == e.Name {
				mark(&w.s.Services[i])
			}
		}
		return "eip status " + e.Name
	case r.IntN(4) == 0: // the gateway's StatefulSet scales to none or back: its Pod is no instance then (SPEC N5)
		sts := &w.s.GatewayStatefulSets[0]
		replicas := int32(1 - gwinstance.Replicas(sts))
		sts.Spec.Replicas = &replicas
		bump(&sts.ObjectMeta)
		return fmt.Sprint("gateway StatefulSet replicas ", replicas)
	default: // the gateway's pod changes (kube-ovn rewrites it)
		gp := &w.s.GatewayPods[0]
		bump(&gp.ObjectMeta)
		return "gateway pod"
	}
}

// covers: I2, K5, N1, S4
// Fingerprint covers every gateway-wide input of a Snapshot, whatever field it is in: a new
// version of any object there (a new generation, for the kinds whose status kube-ovn rewrites
// often), or a new placement, makes the next plan full; what is read per Service does not.
func TestFingerprintCoversEveryGatewayInput(t *testing.T) {
	base := baseSnapshot(service("web", t0))
	base.Records = nil
	base.KubeOVNDnatRules = []kubeovnv1.IptablesDnatRule{{ObjectMeta: metav1.ObjectMeta{Name: "ssh", ResourceVersion: "1"}, Spec: kubeovnv1.IptablesDnatRuleSpec{EIP: "eip2", ExternalPort: "22", Protocol: "tcp"}}}
	base.KubeOVNFIPRules = []kubeovnv1.IptablesFIPRule{{ObjectMeta: metav1.ObjectMeta{Name: "fip", ResourceVersion: "1"}, Spec: kubeovnv1.IptablesFIPRuleSpec{EIP: "eip3"}}}
	fp := Fingerprint(base)
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		field := v.Field(i)
		perService := f.Tag.Get("plan") == "service"
		switch {
		case field.Kind() == reflect.Slice && field.Len() > 0:
			obj := field.Index(0).Addr().Interface().(metav1.Object)
			rv, gen := obj.GetResourceVersion(), obj.GetGeneration()
			obj.SetResourceVersion(rv + "1")
			if byGeneration[field.Type().Elem()] {
				if Fingerprint(base) != fp {
					t.Errorf("%s: a new resourceVersion alone (a status write) changed the fingerprint", f.Name)
				}
				obj.SetGeneration(gen + 1)
			}
			if changed := Fingerprint(base) != fp; changed == perService {
				t.Errorf("%s (per Service %v): a new version changed the fingerprint: %v", f.Name, perService, changed)
			}
			obj.SetResourceVersion(rv)
			obj.SetGeneration(gen)
		case field.Kind() == reflect.Struct:
			old := reflect.ValueOf(field.Interface())
			field.FieldByName("NamePrefix").SetString("other-prefix")
			if Fingerprint(base) == fp {
				t.Errorf("%s: a change did not change the fingerprint", f.Name)
			}
			field.Set(old)
		case perService:
			continue
		default:
			t.Errorf("field %s of Snapshot is neither per Service nor covered by this test: give it a case", f.Name)
		}
		if Fingerprint(base) != fp {
			t.Fatalf("%s: restoring the field did not restore the fingerprint", f.Name)
		}
	}
}

// covers: D8, N4
// The Services quarantined after a refusal are exactly those whose last plan has a refused
// identity, each with its reason.
func TestQuarantinedServices(t *testing.T) {
	w := &world{s: baseSnapshot(service("web", t0), service("other", t0, func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }))}
	var p Planner
	sc := p.Scope(w.base("gw1"), "gw1", Changes{})
	snap, replanned, _ := ReadScope(w, w.base("gw1"), "gw1", sc)
	if _, _, ok := p.Plan(sc, snap, replanned, srGates, "gw1"); !ok {
		t.Fatal("full plan not made")
	}
	if q, _ := p.Quarantined(nil); len(q) != 0 {
		t.Fatalf("quarantined %v with nothing refused", q)
	}
	refused := map[gwstate.IdentityKey]string{{VIP: netip.MustParseAddr("172.18.0.10"), Port: 81, Protocol: gwstate.TCP}: "the kernel refused it"}
	q, uids := p.Quarantined(refused)
	other := types.NamespacedName{Namespace: "ns", Name: "other"}
	if len(q) != 1 || q[other] != "the kernel refused it" || uids[other] != "uid-other" {
		t.Fatalf("quarantined %v (%v), want ns/other alone", q, uids)
	}
}
