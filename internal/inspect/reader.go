package inspect

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// listReader is the model's Reader (model.ReadScope reads through it) over the lists the plugin
// read once: which Services, slices, Pods and records a gateway's plan reads is the model's
// choice, as in the controller, whose Reader is its cache.
type listReader struct {
	services       []corev1.Service
	slices         []discoveryv1.EndpointSlice
	pods           []corev1.Pod
	addresses      []kubeovnv1.IP
	records        []kubeovnv1.IptablesDnatRule
	serviceRecords []vpcgwv1alpha1.ServiceRecord
}

var _ model.Reader = (*listReader)(nil)

func (l *listReader) GatewayServices(gw string) ([]corev1.Service, error) {
	var out []corev1.Service
	for i := range l.services {
		if slices.Contains(model.ServiceGatewayKeys(&l.services[i]), gw) {
			out = append(out, l.services[i])
		}
	}
	return out, nil
}

func (l *listReader) Service(k types.NamespacedName) (*corev1.Service, error) {
	for i := range l.services {
		if l.services[i].Namespace == k.Namespace && l.services[i].Name == k.Name {
			return &l.services[i], nil
		}
	}
	return nil, nil
}

func (l *listReader) ClaimingServices(claim string) ([]corev1.Service, error) {
	var out []corev1.Service
	for i := range l.services {
		if slices.Contains(model.ClaimKeys(&l.services[i]), claim) {
			out = append(out, l.services[i])
		}
	}
	return out, nil
}

// recordsBy are the records of both forms whose label is value.
func (l *listReader) recordsBy(label, value string) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule) {
	var srs []vpcgwv1alpha1.ServiceRecord
	for _, r := range l.serviceRecords {
		if r.Labels[label] == value {
			srs = append(srs, r)
		}
	}
	var drs []kubeovnv1.IptablesDnatRule
	for _, r := range l.records {
		if r.Labels[label] == value {
			drs = append(drs, r)
		}
	}
	return srs, drs
}

func (l *listReader) GatewayRecords(gw string) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	srs, drs := l.recordsBy(model.LabelGateway, gw)
	return srs, drs, nil
}

func (l *listReader) OwnerRecords(uid types.UID) ([]vpcgwv1alpha1.ServiceRecord, []kubeovnv1.IptablesDnatRule, error) {
	srs, drs := l.recordsBy(model.LabelRecordUID, string(uid))
	return srs, drs, nil
}

func (l *listReader) ServiceSlices(namespace, name string) ([]discoveryv1.EndpointSlice, error) {
	var out []discoveryv1.EndpointSlice
	for _, es := range l.slices {
		if es.Namespace == namespace && es.Labels[discoveryv1.LabelServiceName] == name {
			out = append(out, es)
		}
	}
	return out, nil
}

func (l *listReader) Pod(k types.NamespacedName) (*corev1.Pod, error) {
	for i := range l.pods {
		if l.pods[i].Namespace == k.Namespace && l.pods[i].Name == k.Name {
			return &l.pods[i], nil
		}
	}
	return nil, nil
}

func (l *listReader) PodAddresses(k types.NamespacedName) ([]kubeovnv1.IP, error) {
	var out []kubeovnv1.IP
	for _, a := range l.addresses {
		if a.Spec.Namespace == k.Namespace && a.Spec.PodName == k.Name {
			out = append(out, a)
		}
	}
	return out, nil
}

// readGateways reads through l, as the controller's full plans do, the Services of every gateway
// named by a gateway, a Service or a record (and of none: finalizer holders), with what their
// plans read, added to base; include, when set, is read too whatever it names.
func readGateways(l *listReader, base model.Snapshot, include *corev1.Service) (model.Snapshot, error) {
	keys := []string{model.UnboundGateway}
	for _, g := range base.Gateways {
		keys = append(keys, g.Name)
	}
	for i := range l.services {
		keys = append(keys, model.ServiceGatewayKeys(&l.services[i])...)
	}
	for _, r := range l.serviceRecords {
		keys = append(keys, r.Labels[model.LabelGateway])
	}
	for _, r := range l.records {
		keys = append(keys, r.Labels[model.LabelGateway])
	}
	slices.Sort(keys)
	out := base
	m := newMerge(&out)
	for _, gw := range slices.Compact(keys) {
		s, _, err := model.ReadScope(l, base, gw, model.Scope{Full: true})
		if err != nil {
			return out, err
		}
		m.add(s)
	}
	if include != nil {
		s, _, err := model.ReadScope(l, base, model.UnboundGateway, model.Scope{Services: []types.NamespacedName{{Namespace: include.Namespace, Name: include.Name}}})
		if err != nil {
			return out, err
		}
		m.add(s)
	}
	return out, nil
}

// merge adds the objects of scoped snapshots to one, each object once.
type merge struct {
	s    *model.Snapshot
	seen map[string]bool
}

func newMerge(s *model.Snapshot) *merge {
	s.Services, s.EndpointSlices, s.Pods, s.PodAddresses, s.Records, s.ServiceRecords = nil, nil, nil, nil, nil, nil
	return &merge{s: s, seen: map[string]bool{}}
}

func (m *merge) first(kind, id string) bool {
	if m.seen[kind+"/"+id] {
		return false
	}
	m.seen[kind+"/"+id] = true
	return true
}

func (m *merge) add(s model.Snapshot) {
	for _, o := range s.Services {
		if m.first("svc", string(o.UID)) {
			m.s.Services = append(m.s.Services, o)
		}
	}
	for _, o := range s.EndpointSlices {
		if m.first("es", string(o.UID)) {
			m.s.EndpointSlices = append(m.s.EndpointSlices, o)
		}
	}
	for _, o := range s.Pods {
		if m.first("pod", string(o.UID)) {
			m.s.Pods = append(m.s.Pods, o)
		}
	}
	for _, o := range s.PodAddresses {
		if m.first("ip", o.Name) {
			m.s.PodAddresses = append(m.s.PodAddresses, o)
		}
	}
	for _, o := range s.Records {
		if m.first("dr", o.Name) {
			m.s.Records = append(m.s.Records, o)
		}
	}
	for _, o := range s.ServiceRecords {
		if m.first("sr", o.Name) {
			m.s.ServiceRecords = append(m.s.ServiceRecords, o)
		}
	}
}
