// Package objcache says what the controller's cache keeps of each object: only the objects and
// fields the model reads, and one copy of the strings records repeat (SPEC P2).
package objcache

import (
	"maps"
	"slices"
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller/latency"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Options keeps the caches small: no object keeps its managedFields (at 100,000 records they
// were most of the controller's memory), and Pods keep only what the model reads (vpcgw caches
// every Pod: backends can be anywhere).
func Options(kubeOVNNamespace, kubeOVNControllerDeployment string) cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			// Only kube-ovn's gateway configuration is read, not every ConfigMap of the cluster.
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{kubeOVNNamespace: {}},
				Field: fields.OneTermEqualSelector("metadata.name", model.GatewayConfigMap)},
			// Only kube-ovn-controller's own Deployment, for its flags (SPEC K10).
			&appsv1.Deployment{}: {Namespaces: map[string]cache.Config{kubeOVNNamespace: {}},
				Field: fields.OneTermEqualSelector("metadata.name", kubeOVNControllerDeployment), Transform: trimDeployment},
			&corev1.Pod{}:                {Transform: trimPod},
			&discoveryv1.EndpointSlice{}: {Transform: trimSlice},
			&corev1.Service{}:            {Transform: trimService},
			// Only kube-ovn's gateway StatefulSets (its label), and of them what tells a gateway's
			// instances from look-alikes (SPEC N5): their UID, labels, owners and replicas.
			&appsv1.StatefulSet{}:          {Label: labels.SelectorFromSet(labels.Set{model.LabelGatewayPod: "true"}), Transform: trimStatefulSet},
			&kubeovnv1.IP{}:                {Transform: trimAddress},
			&kubeovnv1.IptablesDnatRule{}:  {Transform: trimRecord},
			&vpcgwv1alpha1.ServiceRecord{}: {Transform: trimServiceRecord},
		},
	}
}

// trimRecord keeps one copy of the strings records repeat: a Service has a record per backend,
// and every record carries the same label keys, gateway, EIP, Service name, ports and condition
// text. Decoding gives each record its own copies; at 100,000 records those were tens of MB.
func trimRecord(obj any) (any, error) {
	r, ok := obj.(*kubeovnv1.IptablesDnatRule)
	if !ok {
		return obj, nil
	}
	r.ManagedFields = nil
	r.Labels = internMap(r.Labels)
	r.Annotations = internMap(r.Annotations)
	r.Namespace = intern(r.Namespace)
	sp := &r.Spec
	sp.EIP, sp.ExternalPort, sp.Protocol, sp.InternalPort = intern(sp.EIP), intern(sp.ExternalPort), intern(sp.Protocol), intern(sp.InternalPort)
	sp.InternalIP = intern(sp.InternalIP) // also in the status, and shared by the backend's records
	sp.Type, sp.SessionAffinity, sp.ClusterIP = kubeovnv1.DnatRuleType(intern(string(sp.Type))), kubeovnv1.DnatSessionAffinity(intern(string(sp.SessionAffinity))), intern(sp.ClusterIP)
	st := &r.Status
	st.V4IP, st.NatGwDp, st.Protocol, st.InternalPort, st.ExternalPort = intern(st.V4IP), intern(st.NatGwDp), intern(st.Protocol), intern(st.InternalPort), intern(st.ExternalPort)
	st.InternalIP = intern(st.InternalIP)
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type, c.Status = kubeovnv1.ConditionType(intern(string(c.Type))), corev1.ConditionStatus(intern(string(c.Status)))
		c.Reason, c.Message = intern(c.Reason), intern(c.Message)
	}
	return r, nil
}

// trimServiceRecord interns what ServiceRecords repeat: label keys, gateway, EIP and backend
// addresses shared by the records of one gateway.
func trimServiceRecord(obj any) (any, error) {
	r, ok := obj.(*vpcgwv1alpha1.ServiceRecord)
	if !ok {
		return obj, nil
	}
	r.ManagedFields = nil
	// One ServiceRecord per Service: its name and UID labels are its own, not shared.
	r.Labels = internMap(r.Labels, model.LabelRecordName, model.LabelRecordUID)
	r.Annotations = internMap(r.Annotations)
	sp := &r.Spec
	sp.Service.Namespace, sp.Gateway, sp.EIP, sp.EIPAddress = intern(sp.Service.Namespace), intern(sp.Gateway), intern(sp.EIP), intern(sp.EIPAddress)
	for i := range sp.Ports {
		p := &sp.Ports[i]
		p.Protocol = intern(p.Protocol)
		for j := range p.Backends {
			p.Backends[j] = intern(p.Backends[j])
		}
	}
	return r, nil
}

// trimSlice keeps of an EndpointSlice what the model and the latency tracker read (SPEC B1, O3):
// its name, the Service label, the trigger time, its address type and ports, and of each
// endpoint its addresses, conditions and Pod target. Addresses, namespaces and condition values
// are shared: at 10,000 Services × 10 endpoints the slices were the cache's largest holder. The
// controller never writes an EndpointSlice, so nothing dropped here can be written back.
func trimSlice(obj any) (any, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	es.ObjectMeta = metav1.ObjectMeta{Name: es.Name, Namespace: intern(es.Namespace), UID: es.UID, ResourceVersion: es.ResourceVersion,
		Generation: es.Generation, DeletionTimestamp: es.DeletionTimestamp,
		Labels:      keep(es.Labels, discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy),
		Annotations: keep(es.Annotations, latency.TriggerAnnotation)}
	if v, ok := es.Labels[discoveryv1.LabelManagedBy]; ok {
		es.Labels[discoveryv1.LabelManagedBy] = intern(v) // the same for every slice
	}
	for i := range es.Endpoints {
		ep := &es.Endpoints[i]
		for j := range ep.Addresses {
			ep.Addresses[j] = intern(ep.Addresses[j])
		}
		c := &ep.Conditions
		c.Ready, c.Serving, c.Terminating = sharedBool(c.Ready), sharedBool(c.Serving), sharedBool(c.Terminating)
		if ref := ep.TargetRef; ref != nil {
			ep.TargetRef = &corev1.ObjectReference{Kind: intern(ref.Kind), Namespace: intern(ref.Namespace), Name: ref.Name, UID: ref.UID}
		}
		ep.Hostname, ep.NodeName, ep.Zone, ep.Hints, ep.DeprecatedTopology = nil, nil, nil, nil, nil
	}
	for i := range es.Ports {
		es.Ports[i].AppProtocol = nil
	}
	return es, nil
}

// trimService drops what no vpcgw code reads and can be large: managedFields and kubectl's
// last-applied copy of the whole object. The controller writes Services only with patches
// computed against the cached copy, so an annotation missing from it is never removed.
func trimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	svc.ManagedFields = nil
	if _, ok := svc.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		a := maps.Clone(svc.Annotations)
		delete(a, corev1.LastAppliedConfigAnnotation)
		svc.Annotations = a
	}
	return svc, nil
}

var sharedTrue, sharedFalse = ptr.To(true), ptr.To(false)

// sharedBool points at one of two shared values: the cache hands out its objects read-only.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return sharedTrue
	}
	return sharedFalse
}

// keep is m with only the keys asked, the keys interned (nil when none is there). The values
// stay as decoded: a Service's name or a trigger time is the slice's own.
func keep(m map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[intern(k)] = v
		}
	}
	return out
}

func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internMap is m with its keys and the values of every key but own interned: a value of its
// own (a name, a UID) would only add an entry to the intern table.
func internMap(m map[string]string, own ...string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !slices.Contains(own, k) {
			v = intern(v)
		}
		out[intern(k)] = v
	}
	return out
}

// trimAddress keeps of kube-ovn's IP objects (one per NIC of every Pod in the cluster) only what
// the model reads.
func trimAddress(obj any) (any, error) {
	a, ok := obj.(*kubeovnv1.IP)
	if !ok {
		return obj, nil
	}
	a.ObjectMeta = metav1.ObjectMeta{Name: a.Name, ResourceVersion: a.ResourceVersion, UID: a.UID, DeletionTimestamp: a.DeletionTimestamp}
	a.Spec = kubeovnv1.IPSpec{PodName: a.Spec.PodName, Namespace: intern(a.Spec.Namespace), Subnet: intern(a.Spec.Subnet),
		IPAddress: a.Spec.IPAddress, V4IPAddress: a.Spec.V4IPAddress}
	return a, nil
}

func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName}
	p.Status = corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs}
	return p, nil
}

// trimStatefulSet keeps of a gateway StatefulSet what the model reads (its metadata but
// annotations, spec.replicas) and the gateway its Pod template names, which wakes that gateway.
func trimStatefulSet(obj any) (any, error) {
	s, ok := obj.(*appsv1.StatefulSet)
	if !ok {
		return obj, nil
	}
	s.ManagedFields, s.Annotations = nil, nil
	var tmpl corev1.PodTemplateSpec
	if gw := s.Spec.Template.Annotations[model.AnnotationGatewayPod]; gw != "" {
		tmpl.Annotations = map[string]string{model.AnnotationGatewayPod: gw}
	}
	s.Spec = appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas, Ordinals: s.Spec.Ordinals, Template: tmpl}
	s.Status = appsv1.StatefulSetStatus{}
	return s, nil
}

// trimDeployment keeps of kube-ovn-controller's Deployment what tells its flags (SPEC K10).
func trimDeployment(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	d.ManagedFields, d.Annotations = nil, nil
	cs := make([]corev1.Container, 0, len(d.Spec.Template.Spec.Containers))
	for _, c := range d.Spec.Template.Spec.Containers {
		cs = append(cs, corev1.Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args, Env: c.Env})
	}
	d.Spec = appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: cs}}}
	d.Status = appsv1.DeploymentStatus{}
	return d, nil
}
