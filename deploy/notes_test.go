package deploy

import (
	"bytes"
	"strings"
	"testing"
)

// notes is the NOTES section of `helm install --dry-run=client`'s output.
func notes(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := installDryRun(t, kubeconfig, args...)
	if err != nil {
		t.Fatalf("helm install --dry-run=client %v: %v", args, err)
	}
	_, n, ok := strings.Cut(out, "\nNOTES:\n")
	if !ok {
		t.Fatalf("helm install --dry-run=client %v printed no NOTES:\n%s", args, out)
	}
	return n
}

// covers: O4
// TestChartNotes: after install the chart says what is served and what is not with the values
// given (each gate, VIP routes, webhook, ledger) and the next commands: binding the namespace to
// the Vpc, `kubectl vpcgw explain`, and binding the plugin's viewer roles (viewRoles.create).
func TestChartNotes(t *testing.T) {
	helmBin(t)
	// helm template prints no NOTES, hence helm install --dry-run, which needs a cluster.
	out, err := renderErr(t)
	must(t, err)
	if bytes.Contains(out, []byte("kubectl vpcgw explain")) {
		t.Error("helm template printed the NOTES: test them with it instead")
	}
	needAPIServer(t)
	// An API server of its own: helm's dry run refuses objects another test applied without a
	// release's ownership.
	kubeconfig := startBareAPIServer(t).kubeconfig
	for _, tc := range []struct {
		name      string
		args      []string
		want, not []string
	}{{
		name: "defaults in kube-system: LoadBalancer Services served, no VIP routes",
		want: []string{
			"vpcgw " + chartAppVersion(t) + " runs in namespace kube-system.",
			"- LoadBalancer Services: served.", "ovn.kubernetes.io/vpc_nat_gw: <gateway>", "ovn.kubernetes.io/eip: <an IptablesEIP of that gateway>",
			"- ClusterIPs: NOT served by the gateway (opt-in: features.enableGwNftableServiceClusterIp=true",
			"kube-ovn-controller running with --enable-lb=false",
			"- VIP routes: NOT written (ovn.nbAddr is empty)", "the ClusterIP of Service ovn-nb in kube-system",
			"- Admission webhook: on", "- Ledger: ServiceRecords",
			"Vpc's spec.namespaces", "vpcgw.io/allowed-namespaces",
			// Not vpcgw's own namespace, where the plugin looks by default: it must be told.
			"kubectl vpcgw explain svc/<service> -n <namespace> --controller-namespace kube-system\n",
			"controller.statusReaders grants it",
			"3. Let users run kubectl vpcgw: bind ClusterRole vpcgw-view cluster-wide (operators), or\n   vpcgw-tenant-view in a tenant's namespace",
			"kubectl create rolebinding vpcgw-tenant-view -n <namespace> --clusterrole=vpcgw-tenant-view --group=<tenant group>",
		},
		not: []string{"Nothing is served"},
	}, {
		name: "both gates, VIP routes, no webhook, the seed's ledger, its own namespace",
		args: []string{"--namespace", "vpcgw-system", "--set", "features.enableGwNftableServiceClusterIp=true", "--set", "enableLb=false",
			"--set", "ovn.nbAddr=tcp:10.96.0.10:6641", "--set", "webhook.enabled=false", "--set", "ledger=iptables-dnat-rule",
			"--set", "controller.statusReaders={system:authenticated}", "--set", "viewRoles.create=false"},
		want: []string{
			"runs in namespace vpcgw-system.", "- LoadBalancer Services: served.",
			"- ClusterIPs: held and served by the gateway inside the VPC",
			"- VIP routes: written to the OVN NB at tcp:10.96.0.10:6641",
			"- Admission webhook: off (the controller still enforces every rule",
			"- Ledger: IptablesDnatRules labelled ovn.kubernetes.io/nftable-lb-svc-record=true",
			"kubectl vpcgw explain svc/<service> -n <namespace>\n",
		},
		not: []string{"NOT", "Nothing is served", "statusReaders", "--controller-namespace", "Let users run kubectl vpcgw"},
	}, {
		name: "LoadBalancer gate off",
		args: []string{"--set", "features.enableGwNftableLoadbalancerService=false", "--set", "ovn.nbAddr=tcp:10.96.0.10:6641"},
		want: []string{"- LoadBalancer Services: NOT served (the LoadBalancer gate is off;", "- ClusterIPs: NOT served",
			"- Nothing is served: both gates are off."},
		not: []string{"VIP routes"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := notes(t, kubeconfig, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(n, w) {
					t.Errorf("NOTES lack %q:\n%s", w, n)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(n, w) {
					t.Errorf("NOTES say %q:\n%s", w, n)
				}
			}
		})
	}
}
