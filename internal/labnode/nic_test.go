// covers: O1 (unit: kube-ovn's IPAM annotations read as its CNI reads them; Kubernetes' $(VAR) rules)
package labnode

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod(ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1", Annotations: ann}}
}

// The annotations kube-ovn v1.16.2 writes for a VPC NAT gateway pod (GenNatGwPodAnnotations plus
// the allocation): eth0 from provider ovn, net1 from the external network's IPAM provider.
func TestGatewayPodNICs(t *testing.T) {
	p := testPod(map[string]string{
		"k8s.v1.cni.cncf.io/networks":                                   "kube-system/ovn-vpc-external-network",
		"ovn.kubernetes.io/allocated":                                   "true",
		"ovn.kubernetes.io/routed":                                      "true",
		"ovn.kubernetes.io/ip_address":                                  "10.0.1.254",
		"ovn.kubernetes.io/mac_address":                                 "00:00:00:11:22:33",
		"ovn.kubernetes.io/cidr":                                        "10.0.1.0/24",
		"ovn.kubernetes.io/gateway":                                     "10.0.1.1",
		"ovn.kubernetes.io/logical_switch":                              "vpc1-subnet1",
		"ovn.kubernetes.io/routes":                                      `[{"dst":"10.96.0.0/12","gw":"10.0.1.1"}]`,
		"ovn-vpc-external-network.kube-system.kubernetes.io/allocated":  "true",
		"ovn-vpc-external-network.kube-system.kubernetes.io/ip_address": "172.18.0.10",
		"ovn-vpc-external-network.kube-system.kubernetes.io/cidr":       "172.18.0.0/16",
		"ovn-vpc-external-network.kube-system.kubernetes.io/gateway":    "172.18.0.1",
		"ovn-vpc-external-network.kube-system.kubernetes.io/routes":     `[{"dst":"0.0.0.0/0","gw":"172.18.0.1"}]`,
	})
	nics, waiting, err := podNICs(p)
	if err != nil || waiting != "" {
		t.Fatalf("podNICs: %v, waiting %q", err, waiting)
	}
	if len(nics) != 2 {
		t.Fatalf("%d NICs: %+v", len(nics), nics)
	}
	eth0, net1 := nics[0], nics[1]
	if eth0.Name != "eth0" || eth0.Provider != "ovn" || eth0.LogicalSwitch != "vpc1-subnet1" || eth0.Attachment != "" ||
		!reflect.DeepEqual(eth0.IPs, []netip.Prefix{netip.MustParsePrefix("10.0.1.254/24")}) || eth0.MAC.String() != "00:00:00:11:22:33" ||
		!eth0.DefaultRoute || !reflect.DeepEqual(eth0.Routes, []Route{{Dst: netip.MustParsePrefix("10.96.0.0/12"), Via: netip.MustParseAddr("10.0.1.1")}}) {
		t.Errorf("eth0 %+v", eth0)
	}
	if net1.Name != "net1" || net1.Provider != "ovn-vpc-external-network.kube-system" || net1.LogicalSwitch != "" ||
		net1.Attachment != "kube-system/ovn-vpc-external-network" ||
		!reflect.DeepEqual(net1.IPs, []netip.Prefix{netip.MustParsePrefix("172.18.0.10/16")}) || net1.DefaultRoute ||
		!reflect.DeepEqual(net1.Routes, []Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("172.18.0.1")}}) {
		t.Errorf("net1 %+v", net1)
	}
}

func TestPodNICsWaitForKubeOVN(t *testing.T) {
	base := map[string]string{
		"ovn.kubernetes.io/ip_address": "10.0.1.5", "ovn.kubernetes.io/cidr": "10.0.1.0/24", "ovn.kubernetes.io/gateway": "10.0.1.1",
	}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for name, tc := range map[string]struct {
		ann     map[string]string
		waiting string
	}{
		"not allocated":     {base, "ovn.kubernetes.io/allocated"},
		"not routed":        {with(map[string]string{"ovn.kubernetes.io/allocated": "true"}), "ovn.kubernetes.io/routed"},
		"attachment absent": {with(map[string]string{"ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/routed": "true", "k8s.v1.cni.cncf.io/networks": "ext"}), "ext.ns1.ovn.kubernetes.io/allocated of net1"},
		"all allocated":     {with(map[string]string{"ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/routed": "true"}), ""},
	} {
		t.Run(name, func(t *testing.T) {
			nics, waiting, err := podNICs(testPod(tc.ann))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(waiting, tc.waiting) || (tc.waiting == "" && len(nics) != 1) {
				t.Errorf("waiting %q (want %q), nics %+v", waiting, tc.waiting, nics)
			}
		})
	}
}

// An OVN attachment ("<nad>.<ns>.ovn"), a requested interface name, the JSON form, and a
// default-network annotation moving eth0 to an attachment's provider.
func TestPodNICsAttachmentForms(t *testing.T) {
	ann := map[string]string{
		"v1.multus-cni.io/default-network": "ns1/vpc-net",
		"k8s.v1.cni.cncf.io/networks":      `[{"name":"attach","namespace":"other","interface":"data0"}]`,
	}
	for prov, ip := range map[string]string{"vpc-net.ns1.ovn": "10.5.0.2", "attach.other.ovn": "10.6.0.2"} {
		ann[prov+".kubernetes.io/allocated"] = "true"
		ann[prov+".kubernetes.io/routed"] = "true"
		ann[prov+".kubernetes.io/ip_address"] = ip
		ann[prov+".kubernetes.io/cidr"] = ip[:len(ip)-1] + "0/24"
	}
	nics, waiting, err := podNICs(testPod(ann))
	if err != nil || waiting != "" || len(nics) != 2 {
		t.Fatalf("%+v %q %v", nics, waiting, err)
	}
	if nics[0].Name != "eth0" || nics[0].Provider != "vpc-net.ns1.ovn" || nics[0].Attachment != "ns1/vpc-net" {
		t.Errorf("eth0 %+v", nics[0])
	}
	if nics[1].Name != "data0" || nics[1].Provider != "attach.other.ovn" || nics[1].IPs[0].String() != "10.6.0.2/24" {
		t.Errorf("data0 %+v", nics[1])
	}
}

func TestPodNICsBadAnnotations(t *testing.T) {
	for name, ann := range map[string]map[string]string{
		"address outside the cidr": {"ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/ip_address": "10.0.2.5", "ovn.kubernetes.io/cidr": "10.0.1.0/24"},
		"bad mac":                  {"ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/ip_address": "10.0.1.5", "ovn.kubernetes.io/cidr": "10.0.1.0/24", "ovn.kubernetes.io/mac_address": "zz"},
		"bad networks json":        {"k8s.v1.cni.cncf.io/networks": "[{"},
	} {
		if _, _, err := podNICs(testPod(ann)); err == nil || !strings.Contains(err.Error(), "annotation") && !strings.Contains(err.Error(), "networks") {
			t.Errorf("%s: err %v, want one naming the annotation", name, err)
		}
	}
	hn := testPod(nil)
	hn.Spec.HostNetwork = true
	if _, _, err := podNICs(hn); err == nil {
		t.Error("a hostNetwork pod was accepted")
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "POD_IP": "10.0.0.1"}
	for in, want := range map[string]string{
		"$(POD_IP):8080":  "10.0.0.1:8080",
		"$(MISSING)":      "$(MISSING)",
		"$$(A)":           "$(A)",
		"$$$(A)":          "$x",
		"a$b":             "a$b",
		"$(A":             "$(A",
		"$(A)$(A)":        "xx",
		"plain":           "plain",
		"trailing $":      "trailing $",
		"--name=$(A)-end": "--name=x-end",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsKubeOVNGatewayImage(t *testing.T) {
	for img, want := range map[string]bool{
		"docker.io/kubeovn/vpc-nat-gateway:v1.16.2":  true,
		"registry:5000/kubeovn/vpc-nat-gateway":      true,
		"kubeovn/vpc-nat-gateway@sha256:0123abcd":    true,
		"docker.io/kubeovn/kube-ovn:v1.16.2":         false,
		"docker.io/kubeovn/vpc-nat-gateway-x:v1.0.0": false,
	} {
		if got := IsKubeOVNGatewayImage(img); got != want {
			t.Errorf("%s: %v", img, got)
		}
	}
}
