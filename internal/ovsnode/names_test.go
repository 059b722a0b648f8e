// covers: O1 (the lab node plugs Pods with kube-ovn-cni's names)
package ovsnode

import "testing"

// TestNicNames: the veth and logical switch port names are kube-ovn-cni v1.16.2's
// (generateNicName, PodNameToPortName).
func TestNicNames(t *testing.T) {
	id := "0123456789abcdef0123"
	for _, tc := range []struct {
		ifName, host, cont string
	}{
		{"eth0", "0123456789ab_h", "0123456789ab_c"},
		{"", "0123456789ab_h", "0123456789ab_c"},
		{"net1", "01234567_net1_h", "01234567_net1_c"},
		{"net12", "0123456_net12_h", "0123456_net12_c"},
		// KubeVirt's "pod" + 7 hex + 4 names keep their middle.
		{"pod16367aacb67", "01234_16367aa_h", "01234_16367aa_c"},
	} {
		host, cont, err := NicNames(id, tc.ifName)
		if err != nil || host != tc.host || cont != tc.cont {
			t.Errorf("NicNames(%q, %q) = %q, %q, %v; want %q, %q", id, tc.ifName, host, cont, err, tc.host, tc.cont)
		}
		if len(host) > 15 {
			t.Errorf("%q is longer than an interface name", host)
		}
	}
	if _, _, err := NicNames("short", "eth0"); err == nil {
		t.Error("a container ID shorter than 12 characters was accepted")
	}
	if _, _, err := NicNames(id, "averyveryverylongname"); err == nil {
		t.Error("an interface name longer than 12 characters was accepted")
	}
	for _, tc := range []struct{ pod, ns, provider, want string }{
		{"web-0", "demo", "", "web-0.demo"},
		{"web-0", "demo", "ovn", "web-0.demo"},
		{"vpc-nat-gw-lab-gw-0", "kube-system", "ovn-vpc-external-network.kube-system", "vpc-nat-gw-lab-gw-0.kube-system.ovn-vpc-external-network.kube-system"},
	} {
		if got := PortName(tc.pod, tc.ns, tc.provider); got != tc.want {
			t.Errorf("PortName(%q, %q, %q) = %q, want %q", tc.pod, tc.ns, tc.provider, got, tc.want)
		}
	}
}
