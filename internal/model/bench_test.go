package model

// covers: P2 (the planner at 10,000 Services; one Service replanned without O(cluster) work)

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
)

// largeSnapshot: n LoadBalancer Services on one gateway, each with its own port on one of 40
// EIPs, and m endpoints each targeting a Pod with kube-ovn annotations.
func largeSnapshot(n, m int) Snapshot {
	s := Snapshot{
		Gateways:            []kubeovnv1.VpcNatGateway{gateway("gw1", "vpc1")},
		GatewayPods:         []corev1.Pod{gatewayPod("gw1", "vpc-nat-gw-gw1-0", "10.0.1.254", true, true)},
		GatewayStatefulSets: []appsv1.StatefulSet{gatewayStatefulSet("gw1", 1)},
		Subnets:             []kubeovnv1.Subnet{subnet("vpc1-subnet", "vpc1")},
		Vpcs:                []kubeovnv1.Vpc{vpc("vpc1", "ns")},
	}
	for e := 0; e < 40; e++ {
		s.EIPs = append(s.EIPs, eip(fmt.Sprintf("eip%d", e), "gw1", fmt.Sprintf("172.18.0.%d", 10+e), true))
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%d", i)
		svc := service(name, t0.Add(time.Duration(i)*time.Second), func(s *corev1.Service) {
			s.UID = types.UID(fmt.Sprintf("uid-%d", i))
			s.Annotations[AnnotationEIP] = fmt.Sprintf("eip%d", i%40)
			s.Spec.Ports[0].Port = int32(1000 + i/40)
			cip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
			s.Spec.ClusterIP, s.Spec.ClusterIPs = cip, []string{cip}
		})
		s.Services = append(s.Services, svc)
		var eps []ep
		for j := 0; j < m; j++ {
			pod := fmt.Sprintf("%s-%d", name, j)
			ip := fmt.Sprintf("10.%d.%d.%d", 1+i/10000, (i/40)%250, (i%40)*6+j%6+1)
			eps = append(eps, ep{ip: ip, pod: pod})
			s.Pods = append(s.Pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "ns", Annotations: map[string]string{
				"ovn.kubernetes.io/ip_address": ip, "ovn.kubernetes.io/logical_switch": "vpc1-subnet"}}})
			s.PodAddresses = append(s.PodAddresses, allocation(s.Pods[len(s.Pods)-1], "ovn", ip, "vpc1-subnet"))
		}
		s.EndpointSlices = append(s.EndpointSlices, slice(name, name+"-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, eps...))
	}
	return s
}

// BenchmarkCompute plans the whole snapshot: 10,000 Services × 10 endpoints, both gates.
func BenchmarkCompute(b *testing.B) {
	for _, n := range []int{100, 10000} {
		s := largeSnapshot(n, 10)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Compute(s, bothGates)
			}
		})
	}
}

// BenchmarkPlanOneService replans one changed Service against a prepared index: its cost must
// not grow with the cluster (compare services=100 with services=10000).
func BenchmarkPlanOneService(b *testing.B) {
	for _, n := range []int{100, 10000} {
		s := largeSnapshot(n, 10)
		ix := NewIndex(s, bothGates)
		svc := &s.Services[n/2]
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = ix.PlanService(svc)
			}
		})
	}
}
