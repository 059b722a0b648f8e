// covers: K4, K9, S6
package model

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
)

// kube-ovn-controller annotates every LoadBalancer Service whose ingress lies in one of its
// Subnets with service_external_ip_from_subnet=<that Subnet> (its checkServiceLBIPBelongToSubnet).
// Naming the EIP's own Subnet changes nothing that is served; naming another is S6's second address.
func TestKubeOVNSubnetAnnotation(t *testing.T) {
	external := kubeovnv1.Subnet{Spec: kubeovnv1.SubnetSpec{CIDRBlock: "172.18.0.0/24", Provider: "ovn-vpc-external-network.kube-system"}}
	external.Name = "ovn-vpc-external-network"
	other := kubeovnv1.Subnet{Spec: kubeovnv1.SubnetSpec{CIDRBlock: "192.168.5.0/24"}}
	other.Name = "elsewhere"
	snap := func(value string, mutate func(*corev1.Service)) Snapshot {
		s := baseSnapshot(service("web", t0, func(s *corev1.Service) {
			if value != "" {
				s.Annotations[AnnotationExternalIPFromSubnet] = value
			}
			if mutate != nil {
				mutate(s)
			}
		}))
		s.Subnets = append(s.Subnets, external, other)
		return s
	}
	plain := Compute(snap("", nil), srGates)
	annotated := Compute(snap("ovn-vpc-external-network", nil), srGates)
	if !reflect.DeepEqual(plain.Gateways, annotated.Gateways) || !reflect.DeepEqual(servicePlan(plain, "web").Record, servicePlan(annotated, "web").Record) {
		t.Fatal("kube-ovn's annotation naming the EIP's Subnet changed what is served")
	}
	if sp := servicePlan(annotated, "web"); !sp.EIPServed || len(sp.Events) != 0 {
		t.Fatalf("annotated Service: served %v, events %v", sp.EIPServed, sp.Events)
	}
	for name, s := range map[string]Snapshot{
		"another Subnet":    snap("elsewhere", nil),
		"a missing Subnet":  snap("nope", nil),
		"a ClusterIP type":  snap("ovn-vpc-external-network", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }),
		"an EIP not served": snap("ovn-vpc-external-network", func(s *corev1.Service) { s.Annotations[AnnotationEIP] = "missing" }),
	} {
		sp := servicePlan(Compute(s, srGates), "web")
		if sp.Served() || len(sp.Events) != 1 || !strings.Contains(sp.Events[0].Message, "mutually exclusive") {
			t.Errorf("%s: served %v, events %v; want nothing served and the S6 event", name, sp.Served(), sp.Events)
		}
	}
}

// A LoadBalancer Service of another implementation's class is left alone (SPEC K9); vpcgw's own
// class and no class are served.
func TestLoadBalancerClass(t *testing.T) {
	for class, served := range map[string]bool{"": true, LoadBalancerClass: true, "metallb.io/metallb": false} {
		s := service("web", t0, func(s *corev1.Service) {
			if class != "" {
				s.Spec.LoadBalancerClass = ptr.To(class)
			}
		})
		sp := servicePlan(Compute(baseSnapshot(s), srGates), "web")
		if sp.Served() != served || sp.IngressWrite != served {
			t.Errorf("class %q: served %v ingress %v, want %v", class, sp.Served(), sp.IngressWrite, served)
		}
		if !served && (len(sp.Events) != 1 || !strings.Contains(sp.Events[0].Message, class)) {
			t.Errorf("class %q: events %v", class, sp.Events)
		}
	}
}

// covers: K6
// kube-ovn's redo after a gateway restart marks the EIP ready=false with a redo time and keeps its
// address: nothing is withdrawn for that. An EIP never bound (no redo) or whose address changed
// is not served.
func TestEIPRedoKeepsServing(t *testing.T) {
	base := converge(t, baseSnapshot(service("web", t0)), srGates)
	for name, c := range map[string]struct {
		mutate func(*kubeovnv1.IptablesEIP)
		served bool
	}{
		"redo in progress":   {func(e *kubeovnv1.IptablesEIP) { e.Status.Ready, e.Status.Redo = false, "2026-12-01T09:00:00Z" }, true},
		"not ready, no redo": {func(e *kubeovnv1.IptablesEIP) { e.Status.Ready = false }, false},
		"redo, address moved": {func(e *kubeovnv1.IptablesEIP) {
			e.Status.Ready, e.Status.Redo, e.Spec.V4ip = false, "2026-12-01T09:00:00Z", "172.18.0.99"
		}, false},
	} {
		s := base
		s.EIPs = []kubeovnv1.IptablesEIP{*base.EIPs[0].DeepCopy()}
		c.mutate(&s.EIPs[0])
		p := Compute(s, srGates)
		sp := servicePlan(p, "web")
		if c.served {
			if w := writes(p); len(w) != 0 || !sp.EIPServed {
				t.Errorf("%s: served %v, writes %v; want nothing withdrawn", name, sp.EIPServed, w)
			}
		} else if sp.EIPServed || !sp.IngressWrite {
			t.Errorf("%s: EIP part still served", name)
		}
	}
}

// covers: K5
// Gateway pods are found where kube-ovn puts them and by the name it gives them: its namespace
// (v1.16.x: always; master: unless spec.namespace is set) and its natGwNamePrefix.
func TestGatewayPlacement(t *testing.T) {
	pod := func(ns, app string) corev1.Pod {
		p := gatewayPod("gw1", app+"-0", "10.0.1.254", true, true)
		p.Namespace, p.Labels["app"] = ns, app
		p.OwnerReferences[0].Name = app // kube-ovn's StatefulSet is named like the label
		return p
	}
	// kube-ovn's StatefulSet, where it made it and named as it named it.
	sts := func(p corev1.Pod) appsv1.StatefulSet {
		st := gatewayStatefulSet("gw1", 1)
		st.Namespace, st.Name, st.Labels["app"] = p.Namespace, p.Labels["app"], p.Labels["app"]
		return st
	}
	for name, c := range map[string]struct {
		placement GatewayPlacement
		specNS    string
		pod       corev1.Pod
		found     bool
	}{
		"default install":               {GatewayPlacement{}, "", pod("kube-system", "vpc-nat-gw-gw1"), true},
		"kube-ovn in its own namespace": {GatewayPlacement{KubeOVNNamespace: "kube-ovn"}, "", pod("kube-ovn", "vpc-nat-gw-gw1"), true},
		"not in kube-system then":       {GatewayPlacement{KubeOVNNamespace: "kube-ovn"}, "", pod("kube-system", "vpc-nat-gw-gw1"), false},
		"custom prefix":                 {GatewayPlacement{NamePrefix: "natgw"}, "", pod("kube-system", "natgw-gw1"), true},
		"default prefix not taken then": {GatewayPlacement{NamePrefix: "natgw"}, "", pod("kube-system", "vpc-nat-gw-gw1"), false},
		"master's spec.namespace":       {GatewayPlacement{}, "tenant-gw", pod("tenant-gw", "vpc-nat-gw-gw1"), true},
	} {
		s := baseSnapshot(service("web", t0))
		s.Placement = c.placement
		s.Gateways = []kubeovnv1.VpcNatGateway{gateway("gw1", "vpc1")}
		s.Gateways[0].Spec.Namespace = c.specNS
		s.GatewayPods = []corev1.Pod{c.pod}
		s.GatewayStatefulSets = []appsv1.StatefulSet{sts(c.pod)}
		gp := Compute(s, srGates).Gateway("gw1")
		if got := len(gp.Instances) == 1; got != c.found {
			t.Errorf("%s: instance found %v, want %v", name, got, c.found)
		}
	}
}

// covers: N5, V1
// A Pod that merely carries a gateway's labels (in kube-ovn's namespace, say by an operator's
// mistake) is not an instance, and a route's next hop is the address the kubelet reports, not an
// annotation.
func TestGatewayInstancesAreKubeOVNs(t *testing.T) {
	forged := gatewayPod("gw1", "vpc-nat-gw-gw1-x", "10.0.1.99", true, true)
	forged.OwnerReferences = nil
	other := gatewayPod("gw1", "vpc-nat-gw-gw1-y", "10.0.1.98", true, true)
	other.OwnerReferences[0].Name = "something-else"
	annotated := gatewayPod("gw1", "vpc-nat-gw-gw1-0", "10.0.1.254", true, true)
	annotated.Annotations["ovn.kubernetes.io/ip_address"] = "10.0.1.77" // not what the kubelet reports
	s := baseSnapshot(service("web", t0))
	s.GatewayPods = []corev1.Pod{forged, other, annotated}
	gp := Compute(s, srGates).Gateway("gw1")
	if len(gp.Instances) != 1 || gp.Instances[0].Pod.Name != "vpc-nat-gw-gw1-0" {
		t.Fatalf("instances %v", gp.Instances)
	}
	if !slices.Equal(gp.Routes.NextHops, []string{"10.0.1.254"}) {
		t.Fatalf("next hops %v, want the Pod's status address", gp.Routes.NextHops)
	}
}
