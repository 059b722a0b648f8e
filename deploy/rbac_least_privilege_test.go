// covers: N5, N6, O2 (the rendered RBAC grants nothing beyond an explicit, justified allow-list, and
// what RBAC cannot limit the controller's admission policy does)
package deploy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// grant is one permission of one role: "<group>/<resource> <verb>" or "url:<path> <verb>".
type grant = string

// leastPrivilege is every permission the chart may grant, by role (name without the release's
// prefix), each with the code that needs it. A rendering that grants anything else fails.
var leastPrivilege = map[string]map[grant]string{
	"ClusterRole controller": {
		"/services list":                                     "gateway.go:SetupWithManager watches Services; snapshot.go lists them by gateway",
		"/services watch":                                    "gateway.go:SetupWithManager watches Services",
		"/services patch":                                    "kubewrite.go:PatchFinalizer (finalizer only, SPEC T2)",
		"/services/status patch":                             "kubewrite.go:PublishIngress (status.loadBalancer.ingress, SPEC T1)",
		"/pods list":                                         "snapshot.go lists gateway and backend Pods",
		"/pods watch":                                        "gateway.go:SetupWithManager watches Pods",
		"apps/statefulsets list":                             "snapshot.go:gatewayWorkload lists kube-ovn's gateway StatefulSets (instances, SPEC N5)",
		"apps/statefulsets watch":                            "gateway.go:SetupWithManager watches kube-ovn's gateway StatefulSets (SPEC N5)",
		"discovery.k8s.io/endpointslices list":               "snapshot.go lists a Service's EndpointSlices (SPEC B1)",
		"discovery.k8s.io/endpointslices watch":              "gateway.go:SetupWithManager watches EndpointSlices",
		"kubeovn.io/vpc-nat-gateways list":                   "snapshot.go lists gateways",
		"kubeovn.io/vpc-nat-gateways watch":                  "gateway.go:SetupWithManager (For VpcNatGateway)",
		"kubeovn.io/iptables-eips list":                      "snapshot.go lists EIPs (SPEC S3)",
		"kubeovn.io/iptables-eips watch":                     "gateway.go:SetupWithManager watches IptablesEIP",
		"kubeovn.io/subnets list":                            "snapshot.go lists Subnets (a NIC's VPC, SPEC B2)",
		"kubeovn.io/subnets watch":                           "informer on Subnet",
		"kubeovn.io/ips list":                                "snapshot.go:PodAddresses (a backend's address, SPEC N2)",
		"kubeovn.io/ips watch":                               "gateway.go:SetupWithManager watches IP",
		"kubeovn.io/iptables-fip-rules list":                 "snapshot.go:kubeOVNNat (floating IPs hold their EIP, SPEC N3)",
		"kubeovn.io/iptables-fip-rules watch":                "gateway.go:SetupWithManager watches IptablesFIPRule",
		"kubeovn.io/vpcs get":                                "a gateway's Vpc (SPEC K3)",
		"kubeovn.io/vpcs list":                               "informer on Vpc",
		"kubeovn.io/vpcs watch":                              "informer on Vpc",
		"kubeovn.io/iptables-dnat-rules list":                "snapshot.go lists records (ledger iptables-dnat-rule)",
		"kubeovn.io/iptables-dnat-rules watch":               "gateway.go:SetupWithManager watches IptablesDnatRule",
		"kubeovn.io/iptables-dnat-rules create":              "kubewrite.go:WriteRecords (SPEC R1)",
		"kubeovn.io/iptables-dnat-rules update":              "kubewrite.go:WriteRecords",
		"kubeovn.io/iptables-dnat-rules delete":              "kubewrite.go:DeleteRecords (SPEC R4)",
		"kubeovn.io/iptables-dnat-rules/status update":       "reconcile.go:writeRecordStatus (SPEC R3)",
		"vpcgw.io/servicerecords get":                        "ServiceRecord ledger: direct Get on a conflict (SPEC R6)",
		"vpcgw.io/servicerecords list":                       "ServiceRecord ledger informer",
		"vpcgw.io/servicerecords watch":                      "ServiceRecord ledger informer",
		"vpcgw.io/servicerecords create":                     "ServiceRecord ledger writes (SPEC R1)",
		"vpcgw.io/servicerecords update":                     "ServiceRecord ledger writes (SPEC R3)",
		"vpcgw.io/servicerecords patch":                      "ServiceRecord ledger writes",
		"vpcgw.io/servicerecords delete":                     "released and orphan records (SPEC R4)",
		"events.k8s.io/events create":                        "serviceevents.go:Once.Emit (SPEC T3)",
		"events.k8s.io/events patch":                         "serviceevents.go:Once.Emit (event series)",
		"apiextensions.k8s.io/customresourcedefinitions get": "ledger.go:CheckLedgerForm, iptables-dnat-rules.kubeovn.io only",
	},
	"Role controller-exec": {
		"/pods/exec create":     "transport/exec.go:Exec.Dial (the agent's stream)",
		"/pods/exec get":        "transport/exec.go:Exec.executor (WebSocket GET before Kubernetes 1.35)",
		"/pods get":             "transport/verify.go:OwnerChainVerifier (the Pod, read directly before any exec)",
		"apps/statefulsets get": "transport/verify.go:OwnerChainVerifier (kube-ovn's StatefulSet)",
		"apps/replicasets get":  "transport/verify.go:OwnerChainVerifier (kube-ovn master's Deployment Pods)",
		"apps/deployments get":  "transport/verify.go:OwnerChainVerifier (kube-ovn master's Deployment)",
	},
	"Role controller-kube-ovn-config": {
		"/configmaps get":        "gateway.go:placement reads ovn-vpc-nat-config (SPEC K5), by name",
		"/configmaps list":       "informer on ovn-vpc-nat-config (field selector metadata.name), by name",
		"/configmaps watch":      "informer on ovn-vpc-nat-config (field selector metadata.name), by name",
		"apps/deployments get":   "secondwriter.go:secondWriter reads kube-ovn-controller's flags (SPEC K10), by name",
		"apps/deployments list":  "informer on kube-ovn-controller's Deployment (field selector metadata.name), by name",
		"apps/deployments watch": "informer on kube-ovn-controller's Deployment (field selector metadata.name), by name",
	},
	"Role controller-status": {
		"/configmaps get":    "status/publisher.go:Publisher.write reads ConfigMap vpcgw-controller past the cache (SPEC O2), by name",
		"/configmaps update": "status/publisher.go:Publisher.write updates ConfigMap vpcgw-controller, rate-limited (SPEC O2, P6), by name",
		"/configmaps create": "status/publisher.go:Publisher.write creates it the first time (RBAC cannot restrict create by name)",
	},
	"Role status-reader": {
		"/configmaps get": "kubectl vpcgw (inspect/controller.go:ReadController) reads ConfigMap vpcgw-controller, by name (SPEC O2)",
	},
	"Role controller-leader-election": {
		"coordination.k8s.io/leases get":    "LeaseLock.Get, vpcgw-controller only",
		"coordination.k8s.io/leases update": "LeaseLock.Update, vpcgw-controller only",
		"coordination.k8s.io/leases create": "LeaseLock.Create (RBAC cannot restrict create by name)",
		"/events create":                    "the leader election event",
		"/events patch":                     "the leader election event series",
	},
	// The roles of kubectl vpcgw's users (rbac-view.yaml): reads only (TestViewRolesReadOnly).
	"ClusterRole view": {
		"/services get":                        "explain's get of the Service (cmd/kubectl-vpcgw)",
		"/services list":                       "inspect.go:listWorkloads",
		"/pods get":                            "read access as kubectl's to the backends the plugin names",
		"/pods list":                           "inspect.go:listWorkloads (backends), listGatewayPods",
		"/events get":                          "read access as kubectl's to the events the plugin names",
		"/events list":                         "inspect.go:listEvents (the controller's events on Services, SPEC T3)",
		"/namespaces list":                     "completion.go:completeNamespaces (-n)",
		"discovery.k8s.io/endpointslices get":  "read access as kubectl's to the slices the plugin reads",
		"discovery.k8s.io/endpointslices list": "inspect.go:listWorkloads",
		"apps/statefulsets get":                "read access as kubectl's to the gateways' StatefulSets",
		"apps/statefulsets list":               "inspect.go:listGatewayStatefulSets (SPEC N5)",
		"kubeovn.io/vpc-nat-gateways get":      "read access as kubectl's (kubectl get vpc-nat-gateways)",
		"kubeovn.io/vpc-nat-gateways list":     "inspect.go:listKubeOVN, completion of gw/",
		"kubeovn.io/iptables-eips get":         "read access as kubectl's",
		"kubeovn.io/iptables-eips list":        "inspect.go:listKubeOVN",
		"kubeovn.io/subnets get":               "read access as kubectl's",
		"kubeovn.io/subnets list":              "inspect.go:listKubeOVN",
		"kubeovn.io/vpcs get":                  "read access as kubectl's",
		"kubeovn.io/vpcs list":                 "inspect.go:listKubeOVN",
		"kubeovn.io/ips get":                   "read access as kubectl's",
		"kubeovn.io/ips list":                  "inspect.go:listAddresses (SPEC N2)",
		"kubeovn.io/iptables-dnat-rules get":   "read access as kubectl's",
		"kubeovn.io/iptables-dnat-rules list":  "inspect.go:listRecords (ledger iptables-dnat-rule)",
		"vpcgw.io/servicerecords get":          "read access as kubectl's (kubectl get servicerecords)",
		"vpcgw.io/servicerecords list":         "inspect.go:listRecords (SPEC R6)",
		"/configmaps get":                      "controller.go:ReadController (vpcgw-controller) and inspect.go:placement (ovn-vpc-nat-config), by name",
	},
	"ClusterRole tenant-view": {
		"/services get":                        "explain's get of the Service",
		"/services list":                       "inspect.go:listWorkloads in the tenant's namespace",
		"/pods get":                            "read access as kubectl's to the backends the plugin names",
		"/pods list":                           "inspect.go:listWorkloads (backends)",
		"/events get":                          "read access as kubectl's to the events the plugin names",
		"/events list":                         "inspect.go:listEvents: the controller's events, a tenant's basis (SPEC T3)",
		"discovery.k8s.io/endpointslices get":  "read access as kubectl's",
		"discovery.k8s.io/endpointslices list": "inspect.go:listWorkloads",
	},
	"ClusterRole controller-metrics-auth": {
		"authentication.k8s.io/tokenreviews create":        "metrics filters: TokenReview of a scrape (SPEC N6)",
		"authorization.k8s.io/subjectaccessreviews create": "metrics filters: SubjectAccessReview of a scrape (SPEC N6)",
	},
	"ClusterRole webhook-metrics-auth": {
		"authentication.k8s.io/tokenreviews create":        "webhook metrics filters: TokenReview of a scrape (SPEC N6)",
		"authorization.k8s.io/subjectaccessreviews create": "webhook metrics filters: SubjectAccessReview of a scrape (SPEC N6)",
	},
	"ClusterRole metrics-reader": {
		"url:/metrics get": "what a scraper needs, nothing more",
	},
	"ClusterRole webhook": {
		"/services list":                       "webhook informer and Lists by EIP/gateway (W3, W6)",
		"/services watch":                      "webhook informer",
		"kubeovn.io/iptables-eips list":        "webhook informer (W3)",
		"kubeovn.io/iptables-eips watch":       "webhook informer",
		"kubeovn.io/iptables-dnat-rules list":  "webhook informer: records (W5, W6) and kube-ovn's own rules by EIP (N3)",
		"kubeovn.io/iptables-dnat-rules watch": "webhook informer",
		"kubeovn.io/iptables-fip-rules list":   "webhook informer: kube-ovn's floating IPs by EIP (handlers.go:kubeOVNNat, SPEC N3)",
		"kubeovn.io/iptables-fip-rules watch":  "webhook informer",
		"kubeovn.io/subnets list":              "webhook informer (K4)",
		"kubeovn.io/subnets watch":             "webhook informer",
		"kubeovn.io/vpc-nat-gateways list":     "webhook informer: the gateway a Service names (SPEC N1)",
		"kubeovn.io/vpc-nat-gateways watch":    "webhook informer",
		"kubeovn.io/vpcs list":                 "webhook informer: the gateway's Vpc admits the namespace (SPEC N1)",
		"kubeovn.io/vpcs watch":                "webhook informer",
		"vpcgw.io/servicerecords list":         "webhook informer (W5, W6)",
		"vpcgw.io/servicerecords watch":        "webhook informer",
	},
}

// roleGrants returns the grants of a Role or ClusterRole, with each rule's resourceNames.
func roleGrants(t *testing.T, o *unstructured.Unstructured) map[grant][]string {
	t.Helper()
	out := map[grant][]string{}
	rs, _, _ := unstructured.NestedSlice(o.Object, "rules")
	for _, r := range rs {
		m := r.(map[string]any)
		var names []string
		for _, n := range asList(m["resourceNames"]) {
			names = append(names, n.(string))
		}
		var keys []string
		for _, u := range asList(m["nonResourceURLs"]) {
			keys = append(keys, "url:"+u.(string))
		}
		for _, g := range asList(m["apiGroups"]) {
			for _, res := range asList(m["resources"]) {
				keys = append(keys, g.(string)+"/"+res.(string))
			}
		}
		for _, k := range keys {
			for _, v := range asList(m["verbs"]) {
				g := k + " " + v.(string)
				if _, seen := out[g]; seen && (len(out[g]) == 0 || len(names) == 0) {
					out[g] = nil // unrestricted somewhere: unrestricted
				} else {
					out[g] = append(out[g], names...)
				}
			}
		}
	}
	return out
}

// covers: N5, N6
func TestRBACLeastPrivilege(t *testing.T) {
	helmBin(t)
	for _, tc := range []struct {
		name       string
		args       []string
		execIn     []string // the only namespaces with pods/exec
		namespaces []string // where vpcgw's service accounts live
	}{
		{"defaults", nil, []string{"kube-system"}, []string{"kube-system"}},
		{"leader election, a kube-ovn master gateway namespace", []string{"--set", "controller.replicas=2", "--set", "extraGatewayNamespaces={gw-a,kube-system}"}, []string{"kube-system", "gw-a"}, []string{"kube-system"}},
		{"kube-ovn in its own namespace, the seed's ledger", []string{"--set", "kubeOvn.namespace=kube-ovn", "--set", "ledger=iptables-dnat-rule", "--set", "controller.leaderElect=true"}, []string{"kube-ovn"}, []string{"kube-system"}},
		{"metrics on loopback, cert-manager", []string{"--set", "controller.metricsSecure=false", "--set", "webhook.metricsSecure=false", "--set", "webhook.certManager.enabled=true"}, []string{"kube-system"}, []string{"kube-system"}},
		{"metrics readers", []string{"--set", "controller.metricsReaders[0].name=prom", "--set", "controller.metricsReaders[0].namespace=monitoring"}, []string{"kube-system"}, []string{"kube-system", "monitoring"}},
		{"local transport", []string{"--set", "transport=local"}, nil, []string{"kube-system"}},
		{"status readers: everyone authenticated", []string{"--set", "controller.statusReaders={system:authenticated}"}, []string{"kube-system"}, []string{"kube-system"}},
		{"status readers: a group", []string{"--set", "controller.statusReaders={vpcgw-users}"}, []string{"kube-system"}, []string{"kube-system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manifest(render(t, tc.args...))
			var execNS, statusReaders []string
			for _, o := range m {
				kind := o.GetKind()
				switch kind {
				case "Role", "ClusterRole":
				case "RoleBinding", "ClusterRoleBinding":
					subs, _, _ := unstructured.NestedSlice(o.Object, "subjects")
					for _, s := range subs {
						sm := s.(map[string]any)
						// The status reader binding alone binds groups (controller.statusReaders):
						// to a Role that reads one ConfigMap (checked below).
						if kind == "RoleBinding" && o.GetName() == "vpcgw-status-reader" && sm["kind"] == "Group" {
							statusReaders = append(statusReaders, fmt.Sprint(sm["name"]))
							continue
						}
						if sm["kind"] != "ServiceAccount" || !slices.Contains(tc.namespaces, fmt.Sprint(sm["namespace"])) {
							t.Errorf("%s %s binds %v", kind, o.GetName(), sm)
						}
					}
					continue
				default:
					continue
				}
				role := kind + " " + strings.TrimPrefix(o.GetName(), "vpcgw-")
				allowed, known := leastPrivilege[role]
				if !known {
					t.Errorf("%s/%s: a role the allow-list does not know", o.GetNamespace(), role)
					continue
				}
				grants := roleGrants(t, o)
				keys := make([]string, 0, len(grants))
				for g := range grants {
					keys = append(keys, g)
				}
				sort.Strings(keys)
				for _, g := range keys {
					names := grants[g]
					if strings.Contains(g, "*") {
						t.Errorf("%s grants a wildcard: %s", role, g)
					}
					if _, ok := allowed[g]; !ok {
						t.Errorf("%s grants %q, which is not in the allow-list (add it there with the code that needs it, or drop it)", role, g)
					}
					resource, verb, _ := strings.Cut(g, " ")
					if resource == "coordination.k8s.io/leases" {
						if kind == "ClusterRole" {
							t.Errorf("%s grants %s cluster-wide", role, g)
						}
						if verb != "create" && !slices.Equal(names, []string{"vpcgw-controller"}) {
							t.Errorf("%s grants %s on leases %v; want resourceNames [vpcgw-controller] (SPEC N5)", role, verb, names)
						}
					}
					// kube-ovn's ConfigMap ovn-vpc-nat-config only, never the rest of its namespace
					// (SPEC N5): the informer lists and watches it by name (field selector). The
					// controller's own status ConfigMap vpcgw-controller only, in its namespace, and
					// create (which RBAC cannot restrict by name) only there.
					switch {
					case resource != "/configmaps":
					case role == "ClusterRole view":
						if !slices.Equal(names, []string{"vpcgw-controller", "ovn-vpc-nat-config"}) {
							t.Errorf("%s grants %s on ConfigMaps %v; want resourceNames [vpcgw-controller ovn-vpc-nat-config]", role, verb, names)
						}
					case role == "Role controller-status" || role == "Role status-reader":
						if o.GetNamespace() != "kube-system" {
							t.Errorf("%s is in namespace %s, want the controller's", role, o.GetNamespace())
						}
						if verb != "create" && !slices.Equal(names, []string{"vpcgw-controller"}) {
							t.Errorf("%s grants %s on ConfigMaps %v; want resourceNames [vpcgw-controller] (SPEC N5)", role, verb, names)
						}
					case !slices.Equal(names, []string{"ovn-vpc-nat-config"}):
						t.Errorf("%s grants %s on ConfigMaps %v; want resourceNames [ovn-vpc-nat-config] (SPEC N5)", role, verb, names)
					}
					if resource == "apiextensions.k8s.io/customresourcedefinitions" && !slices.Equal(names, []string{"iptables-dnat-rules.kubeovn.io"}) {
						t.Errorf("%s grants %s on CRDs %v", role, verb, names)
					}
					if resource == "/pods/exec" {
						if kind == "ClusterRole" {
							t.Errorf("%s grants pods/exec cluster-wide", role)
						}
						execNS = append(execNS, o.GetNamespace())
					}
					if resource == "/secrets" {
						t.Errorf("%s reads Secrets", role)
					}
				}
			}
			// RBAC cannot limit the controller's patch of Services to its finalizer, nor its record
			// writes to records: its admission policy does, in every rendering (SPEC N5).
			checkControllerPolicy(t, m, controllerUser)
			var wantReaders []string // the chart's default: nobody (SPEC N8)
			switch tc.name {
			case "status readers: everyone authenticated":
				wantReaders = []string{"system:authenticated"}
			case "status readers: a group":
				wantReaders = []string{"vpcgw-users"}
			}
			if !slices.Equal(statusReaders, wantReaders) {
				t.Errorf("the status reader binding binds groups %v, want %v (controller.statusReaders)", statusReaders, wantReaders)
			}
			execNS = slices.Compact(slices.Sorted(slices.Values(execNS)))
			want := slices.Sorted(slices.Values(tc.execIn))
			if !slices.Equal(execNS, want) {
				t.Errorf("pods/exec in namespaces %v, want exactly %v", execNS, want)
			}
		})
	}
}

// readVerbs are the verbs of a role that writes nothing.
var readVerbs = []string{"get", "list", "watch"}

// The roles of kubectl vpcgw's users render by default, grant reads only, and vpcgw-tenant-view
// only namespaced resources (so that aggregating it into the built-in view role, or binding it in
// a namespace, grants nothing outside that namespace); viewRoles.create=false renders none.
// covers: O2, O4, N5, N8
func TestViewRolesReadOnly(t *testing.T) {
	helmBin(t)
	namespaced := []string{"/services", "/pods", "/events", "discovery.k8s.io/endpointslices"}
	m := manifest(render(t))
	for _, name := range []string{"vpcgw-view", "vpcgw-tenant-view"} {
		o := m.must(t, "ClusterRole", "", name)
		for g := range roleGrants(t, o) {
			resource, verb, _ := strings.Cut(g, " ")
			if !slices.Contains(readVerbs, verb) {
				t.Errorf("%s grants %q: a write", name, g)
			}
			if name == "vpcgw-tenant-view" && !slices.Contains(namespaced, resource) {
				t.Errorf("%s grants %q: not one of the namespaced resources %v", name, g, namespaced)
			}
		}
	}
	reader := m.must(t, "Role", "kube-system", "vpcgw-status-reader")
	for g, names := range roleGrants(t, reader) {
		if g != "/configmaps get" || !slices.Equal(names, []string{"vpcgw-controller"}) {
			t.Errorf("vpcgw-status-reader grants %q on %v", g, names)
		}
	}
	if rb := m.find("RoleBinding", "kube-system", "vpcgw-status-reader"); rb != nil {
		t.Errorf("by default someone is bound to the status reader Role: %v", rb.Object["subjects"])
	}
	if l := m.must(t, "ClusterRole", "", "vpcgw-tenant-view").GetLabels(); l["rbac.authorization.k8s.io/aggregate-to-view"] != "true" {
		t.Errorf("vpcgw-tenant-view labels %v: want it aggregated into view", l)
	}
	if l := manifest(render(t, "--set", "viewRoles.aggregateToView=false")).must(t, "ClusterRole", "", "vpcgw-tenant-view").GetLabels(); l["rbac.authorization.k8s.io/aggregate-to-view"] != "" {
		t.Errorf("viewRoles.aggregateToView=false: labels %v", l)
	}
	off := manifest(render(t, "--set", "viewRoles.create=false"))
	for _, o := range []struct{ kind, ns, name string }{{"ClusterRole", "", "vpcgw-view"}, {"ClusterRole", "", "vpcgw-tenant-view"}, {"Role", "kube-system", "vpcgw-status-reader"}} {
		if off.find(o.kind, o.ns, o.name) != nil {
			t.Errorf("viewRoles.create=false renders %s %s", o.kind, o.name)
		}
	}
	// controller.statusReaders alone still makes the Role it binds.
	if readers := manifest(render(t, "--set", "viewRoles.create=false", "--set", "controller.statusReaders={g}")); readers.find("Role", "kube-system", "vpcgw-status-reader") == nil ||
		readers.find("RoleBinding", "kube-system", "vpcgw-status-reader") == nil {
		t.Errorf("controller.statusReaders without viewRoles: the status reader Role or its binding is missing")
	}
}
