package model

// covers: P1, P3 (a partial plan costs what the Services it replans changed, not what the
// gateway holds)

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
)

// indexedReader reads a snapshot through maps, as the controller reads its cache through
// indexes: a benchmark of the planner must not pay a test Reader's linear scans.
type indexedReader struct {
	all      []corev1.Service
	records  map[types.UID][]vpcgwv1alpha1.ServiceRecord // by owner
	services map[types.NamespacedName]*corev1.Service
	claims   map[string][]corev1.Service
	slices   map[types.NamespacedName][]discoveryv1.EndpointSlice
	pods     map[types.NamespacedName]*corev1.Pod
	addrs    map[types.NamespacedName][]kubeovnv1.IP
}

func newIndexedReader(s Snapshot) *indexedReader {
	r := &indexedReader{all: s.Services, services: map[types.NamespacedName]*corev1.Service{}, claims: map[string][]corev1.Service{},
		slices: map[types.NamespacedName][]discoveryv1.EndpointSlice{}, pods: map[types.NamespacedName]*corev1.Pod{}, addrs: map[types.NamespacedName][]kubeovnv1.IP{}}
	for i := range s.Services {
		svc := &s.Services[i]
		r.services[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = svc
		for _, c := range ClaimKeys(svc) {
			r.claims[c] = append(r.claims[c], *svc)
		}
	}
	for _, es := range s.EndpointSlices {
		k := types.NamespacedName{Namespace: es.Namespace, Name: es.Labels[discoveryv1.LabelServiceName]}
		r.slices[k] = append(r.slices[k], es)
	}
	for i := range s.Pods {
		r.pods[types.NamespacedName{Namespace: s.Pods[i].Namespace, Name: s.Pods[i].Name}] = &s.Pods[i]
	}
	for _, ip := range s.PodAddresses {
		k := types.NamespacedName{Namespace: ip.Spec.Namespace, Name: ip.Spec.PodName}
		r.addrs[k] = append(r.addrs[k], ip)
	}
	return r
}

func (r *indexedReader) GatewayServices(string) ([]corev1.Service, error) { return r.all, nil }
func (r *indexedReader) Service(k types.NamespacedName) (*corev1.Service, error) {
	return r.services[k], nil
}
func (r *indexedReader) ClaimingServices(c string) ([]corev1.Service, error) { return r.claims[c], nil }
func (r *indexedReader) GatewayRecords(string) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	var out []vpcgwv1alpha1.ServiceRecord
	for _, rs := range r.records {
		out = append(out, rs...)
	}
	return out, nil, nil
}
func (r *indexedReader) OwnerRecords(uid types.UID) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	return r.records[uid], nil, nil
}
func (r *indexedReader) ServiceSlices(ns, name string) ([]discoveryv1.EndpointSlice, error) {
	return r.slices[types.NamespacedName{Namespace: ns, Name: name}], nil
}
func (r *indexedReader) Pod(k types.NamespacedName) (*corev1.Pod, error) { return r.pods[k], nil }
func (r *indexedReader) PodAddresses(k types.NamespacedName) ([]kubeovnv1.IP, error) {
	return r.addrs[k], nil
}

// BenchmarkPartialPlanOneService: n Services × 10 endpoints on one gateway, planned in full
// once; one op is one partial plan (Planner.Sync) of one Service whose endpoints changed (one
// endpoint leaves, then comes back) and whose record was rewritten. What the controller sends
// is read from the plan as the controller reads it: the counts always, the change when the plan
// has one. Its ns/op and allocs/op must not grow with n. In the waiting case the n Services
// were served, and their ServiceRecords written, while their namespace was the VPC's only one;
// another namespace admitted since has a Service waiting for room (SPEC N4, issue 34).
func BenchmarkPartialPlanOneService(b *testing.B) {
	for _, waiting := range []bool{false, true} {
		for _, n := range []int{1000, 10000} {
			s, gates := largeSnapshot(n, 10), bothGates
			var records map[types.UID][]vpcgwv1alpha1.ServiceRecord
			if waiting {
				gates = srGates
				gates.MaxIdentitiesPerGateway = 2 * n // an EIP and a ClusterIP identity each
				records = servedRecords(s, gates)
				s = withNewcomer(s)
			}
			r := newIndexedReader(s)
			r.records = records
			b.Run(fmt.Sprintf("waiting=%v/services=%d", waiting, n), func(b *testing.B) {
				benchmarkPartialPlan(b, s, r, gates, waiting)
			})
		}
	}
}

// withNewcomer is s with namespace tenant-b admitted to the VPC, and a Service of it.
func withNewcomer(s Snapshot) Snapshot {
	s.Vpcs = []kubeovnv1.Vpc{vpc("vpc1", "ns", "tenant-b")}
	newcomer := service("newcomer", t0.Add(time.Hour), func(svc *corev1.Service) {
		svc.Namespace, svc.UID = "tenant-b", "uid-newcomer"
		svc.Annotations[AnnotationEIP] = "eip0"
		svc.Spec.Ports[0].Port = 80
	})
	s.Services = append(slices.Clone(s.Services), newcomer)
	return s
}

// servedRecords are the ServiceRecords of the Services a full plan of s serves, by owner.
func servedRecords(s Snapshot, gates Gates) map[types.UID][]vpcgwv1alpha1.ServiceRecord {
	out := map[types.UID][]vpcgwv1alpha1.ServiceRecord{}
	for _, sp := range Compute(s, gates).Services {
		if sp.Record != nil {
			out[sp.UID] = []vpcgwv1alpha1.ServiceRecord{*sp.Record}
		}
	}
	return out
}

func benchmarkPartialPlan(b *testing.B, s Snapshot, r *indexedReader, gates Gates, waiting bool) {
	base := s
	base.Services, base.EndpointSlices, base.Pods, base.PodAddresses = nil, nil, nil, nil
	changed := &s.Services[len(s.Services)/2]
	key := types.NamespacedName{Namespace: changed.Namespace, Name: changed.Name}
	full := r.slices[key]
	fewer := []discoveryv1.EndpointSlice{*full[0].DeepCopy()}
	fewer[0].Endpoints = fewer[0].Endpoints[1:]
	defer func() { r.slices[key] = full }()
	var p Planner
	if _, gp, _, _, err := p.Sync(r, base, "gw1", Changes{}, gates); err != nil || gp == nil {
		b.Fatalf("full plan: %v", err)
	}
	if waiting != (p.Limited() == 1) {
		b.Fatalf("%d Services wait", p.Limited())
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i++; i%2 == 0 {
			r.slices[key] = full
		} else {
			r.slices[key] = fewer
		}
		// The Service's record is rewritten after such a change: its owner is marked too.
		ch := Changes{Services: map[types.NamespacedName]bool{key: true}, Owners: map[types.UID]bool{changed.UID: true}}
		_, gp, _, isFull, err := p.Sync(r, base, "gw1", ch, gates)
		if err != nil || gp == nil || isFull {
			b.Fatalf("partial plan: full %v, %v", isFull, err)
		}
		if len(gp.State.Identities) == 0 && len(gp.Routes.VIPs) == 0 {
			b.Fatal("the plan serves nothing")
		}
	}
}
