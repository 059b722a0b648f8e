// covers: K1, R6
//
// vpcgw's copies of kube-ovn's types exist only for what vpcgw reads. These tests install kube-ovn
// v1.16.2's own CRDs (from its module, as a cluster has them) and vpcgw's ServiceRecord CRD into a
// real kube-apiserver and check that every field vpcgw reads survives a write and a read, except
// the ones known to be missing from v1.16.2 (which the model does not depend on), and that the
// names vpcgw uses are kube-ovn's.
package v1_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/config/crd"
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

func apiClient(t *testing.T) client.Client {
	t.Helper()
	return apiEnv.Get(t, startEnv)
}

func startEnv() (client.Client, string, error) {
	assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd")
	if missing != "" {
		return nil, missing, nil
	}
	kubeOVN, missing := testutil.KubeOVNAssets(crd.KubeOVNFiles...)
	if missing != "" {
		return nil, missing, nil
	}
	crds, err := crd.WithKubeOVN(kubeOVN)
	if err != nil {
		return nil, "", err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{kubeovnv1.AddToScheme, vpcgwv1alpha1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, "", err
		}
	}
	env := &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds}, BinaryAssetsDirectory: assets, Scheme: scheme}
	cfg, err := env.Start()
	if err != nil {
		return nil, "", fmt.Errorf("envtest: %w", err)
	}
	testEnv = env
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	return c, "", err
}

// TestKubeOVNCRDsKeepWhatVpcgwReads writes every field the model reads through vpcgw's types into
// kube-ovn's own CRDs and reads it back. Only VpcNatGateway spec.namespace (kube-ovn master's) is
// missing in v1.16.2; the model treats it as optional (SPEC K5), so it is listed, and a new loss
// fails here.
func TestKubeOVNCRDsKeepWhatVpcgwReads(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()

	vpc := &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "crd-vpc"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{"tenant-a"}}}
	sub := &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "crd-subnet"}, Spec: kubeovnv1.SubnetSpec{
		Vpc: vpc.Name, Provider: "ovn", CIDRBlock: "10.0.1.0/24", Gateway: "10.0.1.1", Protocol: "IPv4"}}
	gw := &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: "crd-gw"}, Spec: kubeovnv1.VpcNatGatewaySpec{
		Vpc: vpc.Name, Subnet: sub.Name, LanIP: "10.0.1.254", ExternalSubnets: []string{"ovn-vpc-external-network"}, Namespace: "gw-ns"}}
	eip := &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: "crd-eip"}, Spec: kubeovnv1.IptablesEIPSpec{
		V4ip: "172.18.0.10", NatGwDp: gw.Name, ExternalSubnet: "ovn-vpc-external-network"}}
	for _, o := range []client.Object{vpc, sub, gw, eip} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T: %v", o, err)
		}
	}
	eip.Status = kubeovnv1.IptablesEIPStatus{Ready: true, IP: "172.18.0.10", Redo: "2026-12-01T09:00:00Z"}
	if err := c.Status().Update(ctx, eip); err != nil {
		t.Fatalf("EIP status: %v", err)
	}

	var gotVpc kubeovnv1.Vpc
	var gotSub kubeovnv1.Subnet
	var gotGw kubeovnv1.VpcNatGateway
	var gotEIP kubeovnv1.IptablesEIP
	for _, p := range []struct {
		name string
		into client.Object
	}{{vpc.Name, &gotVpc}, {sub.Name, &gotSub}, {gw.Name, &gotGw}, {eip.Name, &gotEIP}} {
		if err := c.Get(ctx, client.ObjectKey{Name: p.name}, p.into); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read back %v, wrote %v: kube-ovn's CRD drops a field vpcgw reads", what, got, want)
		}
	}
	check("Vpc spec.namespaces", gotVpc.Spec.Namespaces, vpc.Spec.Namespaces)
	check("Subnet spec.vpc/provider/cidrBlock", []string{gotSub.Spec.Vpc, gotSub.Spec.Provider, gotSub.Spec.CIDRBlock}, []string{sub.Spec.Vpc, sub.Spec.Provider, sub.Spec.CIDRBlock})
	check("VpcNatGateway spec.vpc/subnet/lanIp", []string{gotGw.Spec.Vpc, gotGw.Spec.Subnet, gotGw.Spec.LanIP}, []string{gw.Spec.Vpc, gw.Spec.Subnet, gw.Spec.LanIP})
	check("IptablesEIP spec", []string{gotEIP.Spec.V4ip, gotEIP.Spec.NatGwDp, gotEIP.Spec.ExternalSubnet}, []string{eip.Spec.V4ip, eip.Spec.NatGwDp, eip.Spec.ExternalSubnet})
	check("IptablesEIP status", []any{gotEIP.Status.Ready, gotEIP.Status.IP, gotEIP.Status.Redo}, []any{true, eip.Status.IP, eip.Status.Redo})
	// Known: v1.16.2 has no VpcNatGateway spec.namespace (master has); the model falls back to
	// kube-ovn's namespace (model.GatewayPlacement).
	if gotGw.Spec.Namespace != "" {
		t.Errorf("VpcNatGateway spec.namespace survived (%q): kube-ovn's CRD changed; revisit model.GatewayPlacement", gotGw.Spec.Namespace)
	}
}

// TestInstalledCRDNames: the resources, kinds and scope vpcgw's types use are the ones kube-ovn's
// CRDs define, and vpcgw's own CRD is cluster-scoped in group vpcgw.io.
func TestInstalledCRDNames(t *testing.T) {
	c := apiClient(t)
	for _, want := range []struct{ name, kind string }{
		{"vpc-nat-gateways.kubeovn.io", "VpcNatGateway"}, {"iptables-eips.kubeovn.io", "IptablesEIP"},
		{"iptables-dnat-rules.kubeovn.io", "IptablesDnatRule"}, {"vpcs.kubeovn.io", "Vpc"}, {"subnets.kubeovn.io", "Subnet"},
		{"servicerecords.vpcgw.io", "ServiceRecord"},
	} {
		var got apiextensionsv1.CustomResourceDefinition
		if err := c.Get(context.Background(), client.ObjectKey{Name: want.name}, &got); err != nil {
			t.Errorf("CRD %s not installed: %v", want.name, err)
			continue
		}
		if got.Spec.Names.Kind != want.kind || got.Spec.Scope != apiextensionsv1.ClusterScoped {
			t.Errorf("CRD %s: kind %s scope %s, want %s Cluster", want.name, got.Spec.Names.Kind, got.Spec.Scope, want.kind)
		}
	}
}

// TestServiceRecordCRD: the ledger kind takes a record as the controller writes it, spec and status
// in one request (no status subresource: one write per change, SPEC R6), rejects a bad protocol,
// is listed by the record labels, and shows the columns an operator needs.
func TestServiceRecordCRD(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()
	rec := &vpcgwv1alpha1.ServiceRecord{
		ObjectMeta: metav1.ObjectMeta{Name: "lb-web-0123456789ab", Labels: map[string]string{"ovn.kubernetes.io/nftable-lb-svc-name": "web"}},
		Spec: vpcgwv1alpha1.ServiceRecordSpec{
			Service: vpcgwv1alpha1.ServiceReference{Namespace: "demo", Name: "web", UID: "uid-web"}, Gateway: "gw1",
			EIP: "eip1", EIPUID: "uid-eip1", EIPAddress: "172.18.0.10", ClusterIP: "10.96.0.10", SessionAffinityTimeoutSeconds: 10800,
			Ports: []vpcgwv1alpha1.RecordPort{{Port: 80, Protocol: "tcp", Backends: []string{"10.0.1.11:8080", "10.0.1.12:8080"}}},
		},
		Status: vpcgwv1alpha1.ServiceRecordStatus{Ready: true, Ports: "80/tcp", Backends: 2},
	}
	want := rec.DeepCopy()
	if err := c.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	var got vpcgwv1alpha1.ServiceRecordList
	if err := c.List(ctx, &got, client.MatchingLabels{"ovn.kubernetes.io/nftable-lb-svc-name": "web"}); err != nil || len(got.Items) != 1 {
		t.Fatalf("listing by label: %v, %d items", err, len(got.Items))
	}
	if !reflect.DeepEqual(got.Items[0].Spec, want.Spec) || got.Items[0].Status != want.Status {
		t.Fatalf("read back %+v / %+v", got.Items[0].Spec, got.Items[0].Status)
	}
	bad := want.DeepCopy()
	bad.Name, bad.Spec.Ports[0].Protocol = "lb-bad-0123456789ab", "sctp"
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.ports[0].protocol") {
		t.Fatalf("sctp accepted: %v", err)
	}
	var def apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: "servicerecords.vpcgw.io"}, &def); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, col := range def.Spec.Versions[0].AdditionalPrinterColumns {
		cols = append(cols, col.Name)
	}
	if !slices.Equal(cols, []string{"Namespace", "Service", "Gateway", "EIP", "ClusterIP", "Ports", "Backends", "Ready", "Age"}) {
		t.Fatalf("printer columns %v", cols)
	}
	if def.Spec.Versions[0].Subresources != nil && def.Spec.Versions[0].Subresources.Status != nil {
		t.Fatal("a status subresource would make every change two writes")
	}
}
