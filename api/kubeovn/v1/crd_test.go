// covers: R1, W4, S7
//
// These tests install config/crd into a real kube-apiserver (controller-runtime envtest) and
// check the schema the controller and the webhook rely on: enums, port and timeout ranges, the
// immutable spec.type (R1/W4 records are share rules), the affinity timeout range (S7), the
// status subresource, and the names and columns an operator types and reads.
package v1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// The API server is started once, on first use, and stopped in TestMain.
var (
	apiEnv  testutil.Lazy[client.Client]
	testEnv *envtest.Environment
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testEnv != nil {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}
	os.Exit(code)
}

// apiClient returns a client of a kube-apiserver with the kube-ovn CRDs installed, or skips the
// test when KUBEBUILDER_ASSETS does not provide the control plane binaries.
func apiClient(t *testing.T) client.Client {
	t.Helper()
	return apiEnv.Get(t, startEnv)
}

func startEnv() (client.Client, string, error) {
	assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd")
	if missing != "" {
		return nil, missing, nil
	}

	scheme := runtime.NewScheme()
	if err := kubeovnv1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, "", fmt.Errorf("envtest: %w", err)
	}
	testEnv = env
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	return c, "", err
}

var nameSeq atomic.Int64

// uniqueName gives every object its own name: all kinds are cluster-scoped and tests share one server.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

func validDnat(name string) *kubeovnv1.IptablesDnatRule {
	return &kubeovnv1.IptablesDnatRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kubeovnv1.IptablesDnatRuleSpec{
			EIP:          "eip-a",
			ExternalPort: "80",
			Protocol:     "tcp",
			InternalIP:   "10.0.1.10",
			InternalPort: "8080",
		},
	}
}

func validShareDnat(name string) *kubeovnv1.IptablesDnatRule {
	d := validDnat(name)
	d.Spec.Type = kubeovnv1.DnatRuleTypeShare
	d.Spec.SessionAffinity = kubeovnv1.DnatSessionAffinityClientIP
	d.Spec.SessionAffinityTimeoutSeconds = 600
	d.Spec.ClusterIP = "10.96.0.20"
	return d
}

// expectInvalid requires err to be a 422 Invalid whose text contains every fragment.
func expectInvalid(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected the API server to reject the object, it was accepted")
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("expected an Invalid error, got %v", err)
	}
	t.Logf("rejected as expected: %v", err)
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err, f)
		}
	}
}

func TestCRDsAcceptValidObjects(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()

	vpc := &kubeovnv1.Vpc{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("vpc")},
		Spec: kubeovnv1.VpcSpec{
			Namespaces:   []string{"default"},
			StaticRoutes: []*kubeovnv1.StaticRoute{{Policy: kubeovnv1.PolicyDst, CIDR: "0.0.0.0/0", NextHopIP: "10.0.1.254"}},
			PolicyRoutes: []*kubeovnv1.PolicyRoute{{Priority: 29210, Match: "ip4.dst == 1.2.3.4", Action: kubeovnv1.PolicyRouteActionReroute, NextHopIP: "10.0.1.254"}},
			EnableBfd:    true,
			BFDPort:      &kubeovnv1.BFDPort{Enabled: true, IP: "10.255.255.255"},
		},
	}
	subnet := &kubeovnv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("subnet")},
		Spec: kubeovnv1.SubnetSpec{
			Vpc: vpc.Name, Provider: "ovn", CIDRBlock: "10.0.1.0/24", Gateway: "10.0.1.1",
			Protocol: kubeovnv1.ProtocolIPv4, ExcludeIps: []string{"10.0.1.1"}, U2OInterconnection: true,
		},
	}
	gw := &kubeovnv1.VpcNatGateway{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("gw")},
		Spec: kubeovnv1.VpcNatGatewaySpec{
			Vpc: vpc.Name, Subnet: subnet.Name, LanIP: "10.0.1.254",
			ExternalSubnets: []string{"ovn-vpc-external-network"},
			Selector:        []string{"kubernetes.io/os: linux"},
			BgpSpeaker:      kubeovnv1.VpcBgpSpeaker{Enabled: true, ASN: 65001, RemoteASN: 65000, Neighbors: []string{"172.18.0.1"}},
			Routes:          []kubeovnv1.Route{{CIDR: "192.168.0.0/16", NextHopIP: "gateway"}},
			Tolerations:     []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Affinity: corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}},
				}}},
			}},
		},
	}
	eip := &kubeovnv1.IptablesEIP{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("eip")},
		Spec:       kubeovnv1.IptablesEIPSpec{V4ip: "172.18.0.10", NatGwDp: gw.Name, ExternalSubnet: "ovn-vpc-external-network"},
	}
	exclusive := validDnat(uniqueName("dnat"))
	share := validShareDnat(uniqueName("dnat"))
	clusterIPOnly := validShareDnat(uniqueName("dnat"))
	clusterIPOnly.Spec.EIP = ""
	clusterIPOnly.Spec.Protocol = "udp"

	for _, obj := range []client.Object{vpc, subnet, gw, eip, exclusive, share, clusterIPOnly} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}

	// Schema defaults the controller relies on.
	if exclusive.Spec.Type != kubeovnv1.DnatRuleTypeExclusive {
		t.Errorf("dnat spec.type defaulted to %q, want %q", exclusive.Spec.Type, kubeovnv1.DnatRuleTypeExclusive)
	}
	if share.Spec.Type != kubeovnv1.DnatRuleTypeShare || share.Spec.SessionAffinity != kubeovnv1.DnatSessionAffinityClientIP ||
		share.Spec.SessionAffinityTimeoutSeconds != 600 || share.Spec.ClusterIP != "10.96.0.20" {
		t.Errorf("share dnat spec did not round-trip: %+v", share.Spec)
	}
	if gw.Spec.Replicas != 1 {
		t.Errorf("gateway spec.replicas defaulted to %d, want 1", gw.Spec.Replicas)
	}
	if b := gw.Spec.BFD; b.Enabled || b.MinRX != 1000 || b.MinTX != 1000 || b.Multiplier != 3 {
		t.Errorf("gateway spec.bfd defaults = %+v, want disabled 1000/1000/3", b)
	}

	// affinity is schemaless in the CRD; it must still survive a round trip unpruned.
	var gotGw kubeovnv1.VpcNatGateway
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &gotGw); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(gotGw.Spec.Affinity, gw.Spec.Affinity) || len(gotGw.Spec.Tolerations) != 1 {
		t.Errorf("gateway affinity/tolerations did not round-trip: %+v %+v", gotGw.Spec.Affinity, gotGw.Spec.Tolerations)
	}

	var got kubeovnv1.IptablesDnatRule
	if err := c.Get(ctx, client.ObjectKeyFromObject(share), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec != share.Spec {
		t.Errorf("read back %+v, want %+v", got.Spec, share.Spec)
	}
}

func TestDnatRuleEnumsRejected(t *testing.T) {
	c := apiClient(t)
	cases := []struct {
		name   string
		mutate func(*kubeovnv1.IptablesDnatRuleSpec)
		field  string
	}{
		{"type", func(s *kubeovnv1.IptablesDnatRuleSpec) { s.Type = "shared" }, "spec.type"},
		{"sessionAffinity", func(s *kubeovnv1.IptablesDnatRuleSpec) { s.SessionAffinity = "None" }, "spec.sessionAffinity"},
		{"protocol uppercase", func(s *kubeovnv1.IptablesDnatRuleSpec) { s.Protocol = "TCP" }, "spec.protocol"},
		{"protocol sctp", func(s *kubeovnv1.IptablesDnatRuleSpec) { s.Protocol = "sctp" }, "spec.protocol"},
		{"protocol empty", func(s *kubeovnv1.IptablesDnatRuleSpec) { s.Protocol = "" }, "spec.protocol"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := validShareDnat(uniqueName("dnat-enum"))
			tc.mutate(&d.Spec)
			expectInvalid(t, c.Create(context.Background(), d), tc.field)
		})
	}
}

func TestDnatRulePorts(t *testing.T) {
	c := apiClient(t)
	for _, field := range []string{"externalPort", "internalPort"} {
		set := func(s *kubeovnv1.IptablesDnatRuleSpec, v string) {
			if field == "externalPort" {
				s.ExternalPort = v
			} else {
				s.InternalPort = v
			}
		}
		for _, bad := range []string{"0", "65536", "abc", "", "-1", "08", "99999"} {
			t.Run(fmt.Sprintf("%s=%q rejected", field, bad), func(t *testing.T) {
				d := validDnat(uniqueName("dnat-port"))
				set(&d.Spec, bad)
				expectInvalid(t, c.Create(context.Background(), d), "spec."+field)
			})
		}
		for _, good := range []string{"1", "65535", "8080"} {
			t.Run(fmt.Sprintf("%s=%q accepted", field, good), func(t *testing.T) {
				d := validDnat(uniqueName("dnat-port"))
				set(&d.Spec, good)
				if err := c.Create(context.Background(), d); err != nil {
					t.Fatalf("valid port %q rejected: %v", good, err)
				}
			})
		}
	}
	// The CEL rule carries the range message, so a client sees why 65536 fails, not only a regex.
	d := validDnat(uniqueName("dnat-port"))
	d.Spec.ExternalPort = "65536"
	expectInvalid(t, c.Create(context.Background(), d), "between 1 and 65535")
}

func TestDnatRuleAffinityTimeoutRange(t *testing.T) {
	c := apiClient(t)
	for _, tc := range []struct {
		timeout int32
		ok      bool
	}{{-1, false}, {86401, false}, {0, true}, {1, true}, {kubeovnv1.DefaultDnatSessionAffinityTimeoutSeconds, true}, {86400, true}} {
		t.Run(fmt.Sprint(tc.timeout), func(t *testing.T) {
			d := validShareDnat(uniqueName("dnat-timeout"))
			d.Spec.SessionAffinityTimeoutSeconds = tc.timeout
			err := c.Create(context.Background(), d)
			if tc.ok {
				if err != nil {
					t.Fatalf("timeout %d rejected: %v", tc.timeout, err)
				}
				return
			}
			expectInvalid(t, err, "spec.sessionAffinityTimeoutSeconds")
		})
	}

	// The Go type omits zero values, so also send 0 and "" explicitly: both mean "default".
	d := validShareDnat(uniqueName("dnat-timeout"))
	if err := c.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sessionAffinityTimeoutSeconds":0,"sessionAffinity":""}}`))
	if err := c.Patch(context.Background(), d, patch); err != nil {
		t.Fatalf("explicit timeout 0 and sessionAffinity \"\" rejected: %v", err)
	}
	if d.Spec.EffectiveSessionAffinityTimeoutSeconds() != kubeovnv1.DefaultDnatSessionAffinityTimeoutSeconds {
		t.Errorf("timeout 0 resolves to %d, want %d", d.Spec.EffectiveSessionAffinityTimeoutSeconds(),
			kubeovnv1.DefaultDnatSessionAffinityTimeoutSeconds)
	}
}

func TestDnatRuleTypeImmutable(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()

	share := validShareDnat(uniqueName("dnat-immutable"))
	if err := c.Create(ctx, share); err != nil {
		t.Fatal(err)
	}

	changed := share.DeepCopy()
	changed.Spec.Type = kubeovnv1.DnatRuleTypeExclusive
	expectInvalid(t, c.Update(ctx, changed), "spec.type is immutable")

	// Dropping the field is no way around it: the default (exclusive) applies and is rejected too.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"type":null}}`))
	expectInvalid(t, c.Patch(ctx, share.DeepCopy(), patch), "spec.type is immutable")

	// Everything else stays editable (the controller rewrites records in place).
	other := share.DeepCopy()
	other.Spec.InternalIP = "10.0.1.11"
	other.Spec.SessionAffinityTimeoutSeconds = 0
	other.Labels = map[string]string{"ovn.kubernetes.io/nftable-lb-svc-record": "true"}
	if err := c.Update(ctx, other); err != nil {
		t.Fatalf("update of mutable fields rejected: %v", err)
	}

	exclusive := validDnat(uniqueName("dnat-immutable"))
	if err := c.Create(ctx, exclusive); err != nil {
		t.Fatal(err)
	}
	toShare := exclusive.DeepCopy()
	toShare.Spec.Type = kubeovnv1.DnatRuleTypeShare
	expectInvalid(t, c.Update(ctx, toShare), "spec.type is immutable")
}

func TestIptablesEIPStatusSubresource(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()

	eip := &kubeovnv1.IptablesEIP{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("eip-status")},
		Spec:       kubeovnv1.IptablesEIPSpec{NatGwDp: "gw1"},
	}
	if err := c.Create(ctx, eip); err != nil {
		t.Fatal(err)
	}

	// A main-resource update must not touch status (it is a subresource).
	eip.Status.Ready = true
	eip.Status.IP = "10.0.0.99"
	if err := c.Update(ctx, eip); err != nil {
		t.Fatal(err)
	}
	if eip.Status.Ready || eip.Status.IP != "" {
		t.Fatalf("status changed through the main resource: %+v", eip.Status)
	}

	eip.Status.Ready = true
	eip.Status.IP = "10.0.0.5"
	eip.Status.Nat = "dnat"
	eip.Status.Conditions.Set(kubeovnv1.Ready, "True", "Bound", "", eip.Generation)
	if err := c.Status().Update(ctx, eip); err != nil {
		t.Fatalf("status update: %v", err)
	}
	var got kubeovnv1.IptablesEIP
	if err := c.Get(ctx, client.ObjectKeyFromObject(eip), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Status.Ready || got.Status.IP != "10.0.0.5" || got.Status.Nat != "dnat" {
		t.Errorf("status = %+v, want ready 10.0.0.5 dnat", got.Status)
	}
	if !got.Status.Conditions.IsTrue(kubeovnv1.Ready) {
		t.Errorf("Ready condition lost: %+v", got.Status.Conditions)
	}
	if got.Spec.NatGwDp != "gw1" {
		t.Errorf("status update changed spec: %+v", got.Spec)
	}

	// The DNAT record status the controller writes after programming (R3) goes through too.
	d := validShareDnat(uniqueName("dnat-status"))
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.Status = kubeovnv1.IptablesDnatRuleStatus{
		Ready: true, V4IP: "10.0.0.5", NatGwDp: "gw1", Protocol: "tcp",
		InternalIP: "10.0.1.10", InternalPort: "8080", ExternalPort: "80",
	}
	if err := c.Status().Update(ctx, d); err != nil {
		t.Fatalf("dnat status update: %v", err)
	}
}

func TestVpcNatGatewayReplicas(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()

	gw := &kubeovnv1.VpcNatGateway{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("gw-replicas")},
		Spec:       kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc1", Subnet: "subnet1", Replicas: 3},
	}
	if err := c.Create(ctx, gw); err != nil {
		t.Fatalf("replicas 3 rejected: %v", err)
	}
	bad := gw.DeepCopy()
	bad.Spec.Replicas = -1
	expectInvalid(t, c.Update(ctx, bad), "spec.replicas")

	// 0 is omitted by the Go type, so send it explicitly.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
	expectInvalid(t, c.Patch(ctx, gw.DeepCopy(), patch), "spec.replicas")
}

// TestInstalledCRDNames reads the CRDs back from the apiextensions API: the names, short names
// and columns are what `kubectl get dnat` / `kubectl get iptables-dnat-rules -l ...` rely on.
func TestInstalledCRDNames(t *testing.T) {
	c := apiClient(t)
	type column struct{ name, typ, path string }
	cases := []struct {
		kind, plural, singular, short string
		columns                       []column
	}{
		{"VpcNatGateway", "vpc-nat-gateways", "vpc-nat-gateway", "vpc-nat-gw", []column{
			{"Namespace", "string", ".spec.namespace"}, {"Vpc", "string", ".spec.vpc"},
			{"Subnet", "string", ".spec.subnet"}, {"IPs", "string", ".status.lanIp"},
			{"Replicas", "integer", ".spec.replicas"}, {"Ready", "boolean", ".status.ready"},
			{"BFD", "boolean", ".spec.bfd.enabled"}, {"Age", "date", ".metadata.creationTimestamp"},
		}},
		{"IptablesEIP", "iptables-eips", "iptables-eip", "eip", []column{
			{"Namespace", "string", ".spec.namespace"}, {"ExternalSubnet", "string", ".spec.externalSubnet"},
			{"IP", "string", ".status.ip"}, {"Mac", "string", ".spec.macAddress"},
			{"Nat", "string", ".status.nat"}, {"NatGwDp", "string", ".spec.natGwDp"},
			{"Ready", "boolean", ".status.ready"},
		}},
		{"IptablesDnatRule", "iptables-dnat-rules", "iptables-dnat-rule", "dnat", []column{
			{"Eip", "string", ".spec.eip"}, {"Protocol", "string", ".spec.protocol"},
			{"V4ip", "string", ".status.v4ip"}, {"V6ip", "string", ".status.v6ip"},
			{"InternalIp", "string", ".spec.internalIp"}, {"ExternalPort", "string", ".spec.externalPort"},
			{"InternalPort", "string", ".spec.internalPort"}, {"Type", "string", ".spec.type"},
			{"NatGwDp", "string", ".status.natGwDp"}, {"Ready", "boolean", ".status.ready"},
		}},
		{"Vpc", "vpcs", "vpc", "vpc", []column{
			{"EnableExternal", "boolean", ".status.enableExternal"}, {"EnableBfd", "boolean", ".status.enableBfd"},
			{"Standby", "boolean", ".status.standby"}, {"Subnets", "string", ".status.subnets"},
			{"ExtraExternalSubnets", "string", ".status.extraExternalSubnets"},
			{"Namespaces", "string", ".spec.namespaces"}, {"DefaultSubnet", "string", ".status.defaultLogicalSwitch"},
			{"Age", "date", ".metadata.creationTimestamp"},
		}},
		{"Subnet", "subnets", "subnet", "subnet", []column{
			{"Provider", "string", ".spec.provider"}, {"Vpc", "string", ".spec.vpc"},
			{"Vlan", "string", ".spec.vlan"}, {"Protocol", "string", ".spec.protocol"},
			{"CIDR", "string", ".spec.cidrBlock"}, {"Private", "boolean", ".spec.private"},
			{"NAT", "boolean", ".spec.natOutgoing"}, {"Default", "boolean", ".spec.default"},
			{"GatewayType", "string", ".spec.gatewayType"}, {"V4Used", "number", ".status.v4usingIPs"},
			{"V4Available", "number", ".status.v4availableIPs"}, {"V6Used", "number", ".status.v6usingIPs"},
			{"V6Available", "number", ".status.v6availableIPs"}, {"ExcludeIPs", "string", ".spec.excludeIps"},
			{"U2OInterconnectionIP", "string", ".status.u2oInterconnectionIP"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Get(context.Background(), client.ObjectKey{Name: tc.plural + ".kubeovn.io"}, &crd); err != nil {
				t.Fatalf("CRD %s.kubeovn.io not installed: %v", tc.plural, err)
			}
			n := crd.Spec.Names
			if crd.Spec.Group != "kubeovn.io" || crd.Spec.Scope != apiextensionsv1.ClusterScoped ||
				n.Kind != tc.kind || n.ListKind != tc.kind+"List" || n.Plural != tc.plural || n.Singular != tc.singular ||
				len(n.ShortNames) != 1 || n.ShortNames[0] != tc.short {
				t.Errorf("group/scope/names = %s/%s/%+v, want kubeovn.io/Cluster kind %s plural %s singular %s shortNames [%s]",
					crd.Spec.Group, crd.Spec.Scope, n, tc.kind, tc.plural, tc.singular, tc.short)
			}
			if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1" {
				t.Fatalf("versions = %+v, want exactly v1", crd.Spec.Versions)
			}
			v := crd.Spec.Versions[0]
			if !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
				t.Errorf("v1 served=%v storage=%v subresources=%+v, want served, storage, status", v.Served, v.Storage, v.Subresources)
			}
			var got []column
			for _, col := range v.AdditionalPrinterColumns {
				got = append(got, column{col.Name, col.Type, col.JSONPath})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.columns) {
				t.Errorf("printer columns:\n got %v\nwant %v", got, tc.columns)
			}
		})
	}
}
