package inspect

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// covers: O2, R4, T2
// The plugin reads what the controller's plans read, through the model's Reader: the Services
// of every gateway (also one that does not exist), finalizer holders bound to none, owners of
// records, the explained Service whatever it names, their slices, and no Service vpcgw has
// nothing to do with.
func TestReadGatewaysReadsWhatThePlansRead(t *testing.T) {
	svc := func(name, uid string, annotations map[string]string, finalizers ...string) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: name, UID: types.UID(uid), Annotations: annotations, Finalizers: finalizers}}
	}
	l := &listReader{
		services: []corev1.Service{
			svc("served", "u1", map[string]string{model.AnnotationGateway: "gw1"}),
			svc("ghost", "u2", map[string]string{model.AnnotationGateway: "no-such-gw"}),
			svc("leaving", "u3", nil, model.Finalizer),
			svc("owner", "u4", nil),
			svc("unrelated", "u5", nil),
			svc("explained", "u6", nil),
		},
		slices: []discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "served-1", UID: "es1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "served"}}}},
		serviceRecords: []vpcgwv1alpha1.ServiceRecord{{ObjectMeta: metav1.ObjectMeta{Name: "sr-owner", Labels: map[string]string{
			model.LabelRecord: "true", model.LabelGateway: "gw1", model.LabelRecordUID: "u4", model.LabelRecordNamespace: "t1", model.LabelRecordName: "owner"}}}},
	}
	base := model.Snapshot{Gateways: []kubeovnv1.VpcNatGateway{{ObjectMeta: metav1.ObjectMeta{Name: "gw1"}}}}
	include := l.services[5]
	got, err := readGateways(l, base, &include)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got.Services {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if want := []string{"explained", "ghost", "leaving", "owner", "served"}; !slices.Equal(names, want) {
		t.Errorf("read Services %v, want %v", names, want)
	}
	if len(got.EndpointSlices) != 1 || len(got.ServiceRecords) != 1 || len(got.Gateways) != 1 {
		t.Errorf("read %d slices, %d records, %d gateways; want each once", len(got.EndpointSlices), len(got.ServiceRecords), len(got.Gateways))
	}
}
