package model

// covers: P1, P3 (a partial plan costs what the Services it replans changed, not what the
// gateway holds)

import (
	"fmt"
	"testing"

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
	return nil, nil, nil
}
func (r *indexedReader) OwnerRecords(types.UID) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	return nil, nil, nil
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
// endpoint leaves, then comes back). What the controller sends is read from the plan as the
// controller reads it: the counts always, the change when the plan has one. Its ns/op and
// allocs/op must not grow with n.
func BenchmarkPartialPlanOneService(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		s := largeSnapshot(n, 10)
		r := newIndexedReader(s)
		base := s
		base.Services, base.EndpointSlices, base.Pods, base.PodAddresses = nil, nil, nil, nil
		changed := &s.Services[n/2]
		key := types.NamespacedName{Namespace: changed.Namespace, Name: changed.Name}
		full := r.slices[key]
		fewer := []discoveryv1.EndpointSlice{*full[0].DeepCopy()}
		fewer[0].Endpoints = fewer[0].Endpoints[1:]
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			var p Planner
			if _, gp, _, _, err := p.Sync(r, base, "gw1", Changes{}, bothGates); err != nil || gp == nil {
				b.Fatalf("full plan: %v", err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i++; i%2 == 0 {
					r.slices[key] = full
				} else {
					r.slices[key] = fewer
				}
				_, gp, _, isFull, err := p.Sync(r, base, "gw1", Changes{Services: map[types.NamespacedName]bool{key: true}}, bothGates)
				if err != nil || gp == nil || isFull {
					b.Fatalf("partial plan: full %v, %v", isFull, err)
				}
				if len(gp.State.Identities) == 0 && len(gp.Routes.VIPs) == 0 {
					b.Fatal("the plan serves nothing")
				}
			}
			r.slices[key] = full
		})
	}
}
