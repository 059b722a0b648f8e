package model

// covers: R1, T2 (fixtures: snapshots, and applying a plan as the controller would)

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
)

var (
	// The seed-form gates (most older tests) also allow endpoints without a Pod target, as the
	// fixtures use them; the N2 tests use gates without.
	lbGates   = Gates{LoadBalancer: true, Ledger: LedgerDnatRule, EndpointsWithoutPods: true}
	bothGates = Gates{LoadBalancer: true, ClusterIP: true, Ledger: LedgerDnatRule, EndpointsWithoutPods: true}
	// srGates run the default ledger form, vpcgw.io ServiceRecords.
	srGates = Gates{LoadBalancer: true, ClusterIP: true, EndpointsWithoutPods: true}
	// strictGates are the controller's defaults: endpoints without a Pod target are not used.
	strictGates = Gates{LoadBalancer: true, ClusterIP: true}
	t0          = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func gateway(name, vpc string) kubeovnv1.VpcNatGateway {
	return kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: vpc, Subnet: vpc + "-subnet", LanIP: "10.0.1.254"}}
}

// vpc is a Vpc with namespaces bound to it (SPEC N1).
func vpc(name string, namespaces ...string) kubeovnv1.Vpc {
	return kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kubeovnv1.VpcSpec{Namespaces: namespaces}}
}

// subnetCIDRs are the fixtures' Subnet CIDRs.
var subnetCIDRs = map[string]string{"vpc1-subnet": "10.0.1.0/24", "other-subnet": "10.0.2.0/24", "ovn-default": "10.16.0.0/16", "vpc1-extra": "10.0.3.0/24"}

func subnet(name, vpc string) kubeovnv1.Subnet {
	return kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kubeovnv1.SubnetSpec{Vpc: vpc, Provider: "ovn", CIDRBlock: subnetCIDRs[name]}}
}

func gatewayPod(gw, name, ip string, running, initialized bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultGatewayNamespace, UID: types.UID("uid-" + name),
		Labels:      map[string]string{"app": GatewayAppPrefix + gw, LabelGatewayPod: "true"},
		Annotations: map[string]string{AnnotationGatewayPod: gw, "ovn.kubernetes.io/ip_address": ip}}}
	// As kube-ovn's StatefulSet makes it, with the address the kubelet reports.
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: GatewayAppPrefix + gw, UID: "uid-sts-" + types.UID(gw), Controller: ptr.To(true)}}
	p.Status.PodIP = ip
	if running {
		p.Status.Phase = corev1.PodRunning
	}
	if initialized {
		p.Annotations[AnnotationGwInit] = "true"
	}
	return p
}

// gatewayStatefulSet is kube-ovn's StatefulSet of gateway gw in kube-ovn's namespace, as
// kube-ovn makes it (its labels) with the UID gatewayPod's owner reference names.
func gatewayStatefulSet(gw string, replicas int32) appsv1.StatefulSet {
	return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: GatewayAppPrefix + gw, Namespace: DefaultGatewayNamespace,
		UID: "uid-sts-" + types.UID(gw), ResourceVersion: "1", Labels: map[string]string{"app": GatewayAppPrefix + gw, LabelGatewayPod: "true"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)}}
}

func eip(name, gw, ip string, ready bool) kubeovnv1.IptablesEIP {
	e := kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: gw, V4ip: ip}}
	if ready {
		e.Status.Ready, e.Status.IP = true, ip
	}
	return e
}

// service is a LoadBalancer Service of gw1/eip1; its ClusterIP is derived from its name.
func service(name string, created time.Time, mutate ...func(*corev1.Service)) corev1.Service {
	cip := "10.96.0.10"
	if name != "web" {
		h := fnv.New32a()
		h.Write([]byte(name))
		sum := h.Sum32()
		cip = fmt.Sprintf("10.96.%d.%d", 1+sum%250, 1+(sum>>8)%250)
	}
	s := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created),
			Annotations:       map[string]string{AnnotationGateway: "gw1", AnnotationEIP: "eip1"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: cip, ClusterIPs: []string{cip},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, m := range mutate {
		if m != nil {
			m(&s)
		}
	}
	return s
}

type ep struct {
	ip          string
	ready       *bool
	terminating bool
	serving     *bool
	pod         string // target Pod name in namespace "ns"; "" for none
}

func slice(svc, name string, addrType discoveryv1.AddressType, port int32, portName string, proto corev1.Protocol, eps ...ep) discoveryv1.EndpointSlice {
	es := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: addrType,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
	}
	for _, e := range eps {
		end := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.terminating {
			end.Conditions.Terminating = ptr.To(true)
		}
		end.Conditions.Serving = e.serving
		if e.pod != "" {
			end.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: e.pod}
		}
		es.Endpoints = append(es.Endpoints, end)
	}
	return es
}

// backendPod is a Pod with kube-ovn's NIC annotations, provider -> {ip, logicalSwitch}. They
// decide nothing (SPEC N2): addressesOf gives the IP objects kube-ovn would have made for them.
func backendPod(name string, nics map[string][2]string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{}}}
	for provider, n := range nics {
		p.Annotations[provider+ipAddressSuffix] = n[0]
		p.Annotations[provider+logicalSwitchSuffix] = n[1]
	}
	return p
}

// addressesOf plays kube-ovn's IPAM for pods: an IP object ("<pod>.<ns>[.<provider>]") for every
// NIC their annotations name, as kube-ovn writes both when it allocates.
func addressesOf(pods ...corev1.Pod) []kubeovnv1.IP {
	var out []kubeovnv1.IP
	for _, p := range pods {
		for k, v := range p.Annotations {
			provider, ok := strings.CutSuffix(k, ipAddressSuffix)
			if !ok {
				continue
			}
			out = append(out, allocation(p, provider, v, p.Annotations[provider+logicalSwitchSuffix]))
		}
	}
	return out
}

// allocation is the IP object kube-ovn makes when it allocates addr in subnet to pod's NIC of
// provider.
func allocation(pod corev1.Pod, provider, addr, subnet string) kubeovnv1.IP {
	return *kubeovnv1.NewIP(pod.Name, pod.Namespace, provider, subnet, addr)
}

// baseSnapshot: gateway gw1 in VPC vpc1 with one initialized instance, a Ready EIP, Service
// endpoints 10.0.1.11 (ready), 10.0.1.12 (ready unknown), 10.0.1.13 (not ready).
func baseSnapshot(svcs ...corev1.Service) Snapshot {
	return Snapshot{
		Gateways:            []kubeovnv1.VpcNatGateway{gateway("gw1", "vpc1")},
		Vpcs:                []kubeovnv1.Vpc{vpc("vpc1", "ns", "tenant-b"), vpc("vpc2", "ns")},
		GatewayPods:         []corev1.Pod{gatewayPod("gw1", "vpc-nat-gw-gw1-0", "10.0.1.254", true, true)},
		GatewayStatefulSets: []appsv1.StatefulSet{gatewayStatefulSet("gw1", 1)},
		Subnets:             []kubeovnv1.Subnet{subnet("vpc1-subnet", "vpc1"), subnet("other-subnet", "vpc2"), subnet("ovn-default", "")},
		EIPs:                []kubeovnv1.IptablesEIP{eip("eip1", "gw1", "172.18.0.10", true)},
		Services:            svcs,
		EndpointSlices: []discoveryv1.EndpointSlice{
			slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP,
				ep{ip: "10.0.1.12"}, ep{ip: "10.0.1.11", ready: ptr.To(true)}, ep{ip: "10.0.1.13", ready: ptr.To(false)}),
		},
	}
}

// soleTenant makes ns the only namespace gw1's Vpc admits: the gateway's bounds are then all of
// its share (SPEC N4), for the tests of the bounds themselves.
func soleTenant(s Snapshot) Snapshot {
	s.Vpcs[0].Spec.Namespaces = []string{"ns"}
	return s
}

func servicePlan(p Plan, name string) ServicePlan {
	for _, sp := range p.Services {
		if sp.Key.Name == name {
			return sp
		}
	}
	panic(fmt.Sprintf("no plan for Service %s", name))
}

// applyPlan does to the snapshot what the controller does with the plan, assuming every write
// and the gateway sync succeed.
func applyPlan(s Snapshot, p Plan) Snapshot {
	out := s
	out.Services = append([]corev1.Service(nil), s.Services...)
	recs := map[string]kubeovnv1.IptablesDnatRule{}
	for _, r := range s.Records {
		recs[r.Name] = r
	}
	for _, n := range p.OrphanRecords {
		delete(recs, n)
	}
	srs := map[string]vpcgwv1alpha1.ServiceRecord{}
	for _, r := range s.ServiceRecords {
		srs[r.Name] = r
	}
	for _, n := range p.OrphanServiceRecords {
		delete(srs, n)
	}
	for _, sp := range p.Services {
		if sp.WriteRecord {
			srs[sp.Record.Name] = *sp.Record
		}
		for _, n := range sp.DeleteServiceRecords {
			delete(srs, n)
		}
		for i := range out.Services {
			svc := &out.Services[i]
			if svc.UID != sp.UID {
				continue
			}
			if sp.AddFinalizer {
				svc.Finalizers = append(append([]string(nil), svc.Finalizers...), Finalizer)
			}
			if sp.ReleaseFinalizer {
				var keep []string
				for _, f := range svc.Finalizers {
					if f != Finalizer {
						keep = append(keep, f)
					}
				}
				svc.Finalizers = keep
			}
			if sp.IngressWrite {
				svc.Status.LoadBalancer.Ingress = sp.Ingress
			}
			applyClaim(svc, &sp)
		}
		for _, r := range sp.CreateRecords {
			recs[r.Name] = *r
		}
		for _, r := range sp.UpdateRecords {
			recs[r.Name] = *r
		}
		for _, r := range sp.StatusRecords {
			cur := recs[r.Name]
			cur.Status = r.Status
			recs[r.Name] = cur
		}
		for _, n := range sp.DeleteRecords {
			delete(recs, n)
		}
	}
	out.Records = nil
	for _, r := range recs {
		out.Records = append(out.Records, r)
	}
	out.ServiceRecords = nil
	for _, r := range srs {
		out.ServiceRecords = append(out.ServiceRecords, r)
	}
	return out
}

// writes lists the API writes a plan asks for (empty when the cluster already matches).
func writes(p Plan) []string {
	var out []string
	for _, n := range p.OrphanRecords {
		out = append(out, "delete orphan "+n)
	}
	for _, n := range p.OrphanServiceRecords {
		out = append(out, "delete orphan service record "+n)
	}
	for _, sp := range p.Services {
		if sp.WriteRecord {
			out = append(out, sp.Key.String()+": write service record "+sp.Record.Name)
		}
		for _, n := range sp.DeleteServiceRecords {
			out = append(out, sp.Key.String()+": delete service record "+n)
		}
		for _, r := range sp.CreateRecords {
			out = append(out, sp.Key.String()+": create "+r.Name)
		}
		for _, r := range sp.UpdateRecords {
			out = append(out, sp.Key.String()+": update "+r.Name)
		}
		for _, r := range sp.StatusRecords {
			out = append(out, sp.Key.String()+": status "+r.Name)
		}
		for _, n := range sp.DeleteRecords {
			out = append(out, sp.Key.String()+": delete "+n)
		}
		if sp.AddFinalizer {
			out = append(out, sp.Key.String()+": add finalizer")
		}
		if sp.ReleaseFinalizer {
			out = append(out, sp.Key.String()+": release finalizer")
		}
		if sp.IngressWrite {
			out = append(out, fmt.Sprintf("%s: ingress %v", sp.Key, sp.Ingress))
		}
		switch sp.Claim {
		case ClaimStamp:
			out = append(out, sp.Key.String()+": stamp claim of "+sp.ClaimedEIP)
		case ClaimClear:
			out = append(out, sp.Key.String()+": clear claim stamp")
		}
	}
	return out
}

// stampClock dates the claim stamps applyPlan writes: a second apart, later than every
// creation time the tests use, as the controller's clock is later than the Services it sees.
var stampClock = t0.Add(time.Hour)

// applyClaim writes the plan's claim stamp on svc as the controller does (writeClaim).
func applyClaim(svc *corev1.Service, sp *ServicePlan) {
	if sp.Claim == ClaimStamp {
		stampClock = stampClock.Add(time.Second)
	}
	sp.ApplyClaim(svc, stampClock)
}
