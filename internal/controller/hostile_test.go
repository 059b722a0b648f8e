package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/model"
)

// covers: N6, T3
// Hostile tenant, against the real API server without the webhook: a 200 KiB EIP annotation
// (not an object name) still gets its event, bounded to the API's 1 KiB note, so the user learns
// why nothing is served. Unbounded, the API server refused the event and the user got no reason.
func TestHostileTenantHugeAnnotationGetsABoundedEvent(t *testing.T) {
	f := newFixture(t, "gw-hostile-ann", 1)
	huge := strings.Repeat("e", 200<<10)
	svc := f.service("huge", "", 80, "10.0.1.11")
	must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(svc), svc))
	svc.Annotations[model.AnnotationEIP] = huge
	must(t, k8s.Update(context.Background(), svc))
	var msg string
	f.eventually("the invalid-annotation event", func() bool {
		var evs corev1.EventList
		must(t, k8s.List(context.Background(), &evs, client.InNamespace(f.ns)))
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == "huge" && ev.Reason == model.ReasonInvalidAnnotation {
				msg = ev.Message
				return true
			}
		}
		return false
	})
	if len(msg) > model.MaxEventMessage || !strings.HasPrefix(msg, `annotation `+model.AnnotationEIP+`="eee`) || !strings.HasSuffix(msg, "…") {
		t.Fatalf("event message of %d bytes (%.40q…), want at most %d, cut with an ellipsis", len(msg), msg, model.MaxEventMessage)
	}
}

// covers: N2, B2, T3
// Hostile tenant, against the real API server: a tenant whose Service is admitted to the gateway
// rewrites its own backend Pod's kube-ovn annotations (the primary NIC's and an attachment's) to
// the address of another tenant's Pod in the same VPC. The gateway keeps forwarding to the
// address kube-ovn allocated to the tenant's Pod (its IP object), never to the claimed one, and
// the Service gets an event saying the claim is not kube-ovn's. Before, the annotations decided
// the address, and the other tenant's Pod was published through this tenant's EIP.
func TestHostileTenantRewrittenPodAddressIsNotPublished(t *testing.T) {
	f := newFixture(t, "gw-hostile-addr", 1)
	f.eip("eip-steal", "172.18.30.10", true)
	ctx := context.Background()
	// The victim: another tenant's Pod in the same VPC, at 10.0.1.40.
	victimNS := "victim-" + f.gw
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: victimNS}}))
	victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: victimNS,
		Annotations: map[string]string{"ovn.kubernetes.io/ip_address": "10.0.1.40", "ovn.kubernetes.io/logical_switch": f.gw + "-subnet"}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "db", Image: "x"}}}}
	must(t, k8s.Create(ctx, victim))
	allocate(t, kubeovnv1.NewIP(victim.Name, victimNS, kubeovnv1.DefaultProvider, f.gw+"-subnet", "10.0.1.40"))
	must(t, kcm.SetPodRunning(ctx, k8s, victim, "10.0.1.40", true))

	f.service("steal", f.eipName("eip-steal"), 80, "10.0.1.41")
	const key = "172.18.30.10:80:tcp"
	backends := func() []string {
		st, ok := f.agents.state(f.pods[0])
		if !ok {
			return nil
		}
		for _, id := range st.Identities {
			if id.Key().String() == key {
				var out []string
				for _, b := range id.Backends {
					out = append(out, fmt.Sprint(b.IP))
				}
				return out
			}
		}
		return nil
	}
	f.eventually("the tenant's own Pod served", func() bool { return slices.Equal(backends(), []string{"10.0.1.41"}) })

	// The rewrite, by anyone who may edit Pods in the tenant's namespace.
	var pod corev1.Pod
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "steal-0"}, &pod))
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Annotations["ovn.kubernetes.io/ip_address"] = "10.0.1.40"
	pod.Annotations["net1.ns.ovn.kubernetes.io/ip_address"] = "10.0.1.40"
	pod.Annotations["net1.ns.ovn.kubernetes.io/logical_switch"] = f.gw + "-subnet"
	pod.Annotations["net1.ns.ovn.kubernetes.io/allocated"] = "true"
	pod.Annotations["k8s.v1.cni.cncf.io/network-status"] = `[{"name":"ns/net1","interface":"net1","ips":["10.0.1.40"]}]`
	must(t, k8s.Patch(ctx, &pod, patch))
	f.eventually("the claim reported", func() bool {
		return f.hasEvent("steal", model.ReasonBackendSkipped, "address 10.0.1.40 (annotation ovn.kubernetes.io/ip_address) is not allocated to it by kube-ovn")
	})
	if got := backends(); !slices.Equal(got, []string{"10.0.1.41"}) {
		t.Fatalf("after the rewrite the gateway forwards %s to %v, want only the Pod's own 10.0.1.41", key, got)
	}
	for _, r := range f.records("steal") {
		for _, p := range r.Spec.Ports {
			if slices.Contains(p.Backends, "10.0.1.40") {
				t.Fatalf("the record lists the other tenant's address: %+v", r.Spec.Ports)
			}
		}
	}
	var evs corev1.EventList
	must(t, k8s.List(ctx, &evs, client.InNamespace(f.ns)))
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, victimNS) || strings.Contains(ev.Message, "db-0") {
			t.Fatalf("an event of the tenant names the other tenant's Pod: %q", ev.Message)
		}
	}
}

// covers: N3, T3
// Hostile tenant, against the real API server: a Service on a port that kube-ovn's own DNAT rule
// forwards on the EIP gets a conflict event and nothing on the EIP; when the administrator
// deletes the rule, the rule's delete event wakes the gateway and the Service is served. A
// floating IP created later on the EIP takes it back.
func TestHostileTenantCannotShadowKubeOVNsDNAT(t *testing.T) {
	f := newFixture(t, "gw-hostile-nat", 1)
	f.eip("eip-nat", "172.18.31.10", true)
	ctx := context.Background()
	ssh := &kubeovnv1.IptablesDnatRule{ObjectMeta: metav1.ObjectMeta{Name: "ssh-" + f.gw},
		Spec: kubeovnv1.IptablesDnatRuleSpec{EIP: f.eipName("eip-nat"), ExternalPort: "22", Protocol: "tcp", InternalIP: "10.0.1.9", InternalPort: "22"}}
	must(t, k8s.Create(ctx, ssh))
	f.service("ssh", f.eipName("eip-nat"), 22, "10.0.1.41")
	const key = "172.18.31.10:22:tcp"
	f.eventually("the conflict event", func() bool {
		return f.hasEvent("ssh", model.ReasonConflict, "port 22/TCP is forwarded by kube-ovn's own NAT")
	})
	if f.data.serves(f.pods[0], key) || !ingressIs(f.get("ssh"), "") {
		t.Fatalf("the gateway serves %s over kube-ovn's own DNAT rule (ingress %v)", key, f.get("ssh").Status.LoadBalancer.Ingress)
	}
	must(t, k8s.Delete(ctx, ssh))
	f.eventually("served once kube-ovn's rule is gone", func() bool { return f.data.serves(f.pods[0], key) && ingressIs(f.get("ssh"), "172.18.31.10") })
	fip := &kubeovnv1.IptablesFIPRule{ObjectMeta: metav1.ObjectMeta{Name: "fip-" + f.gw}, Spec: kubeovnv1.IptablesFIPRuleSpec{EIP: f.eipName("eip-nat"), InternalIP: "10.0.1.9"}}
	must(t, k8s.Create(ctx, fip))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), fip) })
	f.eventually("the floating IP takes the EIP back", func() bool {
		return !f.data.serves(f.pods[0], key) && ingressIs(f.get("ssh"), "") &&
			f.hasEvent("ssh", model.ReasonConflict, "is a floating IP of kube-ovn") // a new cause of the same reason is shown (T3)
	})
	// A new Service on the EIP gets the floating IP's reason at once.
	f.service("web", f.eipName("eip-nat"), 80, "10.0.1.42")
	f.eventually("the floating-IP event", func() bool {
		return f.hasEvent("web", model.ReasonConflict, "IptablesEIP "+f.eipName("eip-nat")+" is a floating IP of kube-ovn")
	})
	if f.data.serves(f.pods[0], "172.18.31.10:80:tcp") {
		t.Fatal("the gateway serves a port of kube-ovn's floating IP")
	}
}

// covers: I2, N3, T3
// Hostile tenant, against the real API server without the webhook: a tenant's Service, created
// before anyone else's, leaves the queue for a port by clearing its EIP annotation, then re-sets
// it once another tenant waits for the port. When the holder goes, the one that waited takes
// over, not the oldest Service: the controller stamps each claim when it first sees it (status
// condition vpcgw.io/EIPClaimed) and removes the stamp when the claim goes. Before, ties went by
// creation time, so re-setting an annotation jumped the queue.
func TestHostileTenantCannotJumpTheQueueByReclaiming(t *testing.T) {
	f := newFixture(t, "gw-hostile-queue", 1)
	f.eip("eip-queue", "172.18.32.10", true)
	ctx := context.Background()
	// The squatter's namespace sorts first, so that it wins a tie of creation times too.
	squat := f.tenant("a-squat-" + f.gw)
	squat.service("old", "eip-queue", 80, "10.0.1.61")
	f.service("holder", "eip-queue", 80, "10.0.1.62")
	f.eventually("the oldest Service served", func() bool { return ingressIs(squat.get("old"), "172.18.32.10") })
	f.eventually("the holder waits, stamped", func() bool {
		_, ok := model.ClaimedSince(f.get("holder"))
		return ok && f.hasEvent("holder", model.ReasonConflict, "is held by a Service of another namespace")
	})
	// The squatter lets go of the port: the holder takes it.
	setEIP := func(svc *corev1.Service, eip string) {
		t.Helper()
		patch := client.MergeFrom(svc.DeepCopy())
		svc.Annotations[model.AnnotationEIP] = eip
		must(t, k8s.Patch(ctx, svc, patch))
	}
	setEIP(squat.get("old"), "")
	f.eventually("the holder serves, the squatter's stamp gone", func() bool {
		return ingressIs(f.get("holder"), "172.18.32.10") && !model.HasClaimStamp(squat.get("old"))
	})
	// Another Service waits for the port.
	f.service("waiting", "eip-queue", 80, "10.0.1.63")
	var waitingSince time.Time
	f.eventually("the waiting claim stamped", func() bool {
		since, ok := model.ClaimedSince(f.get("waiting"))
		waitingSince = since
		return ok && f.hasEvent("waiting", model.ReasonConflict, f.ns+"/holder")
	})
	// Stamps are dated to the second: the squatter re-claims in a later second than the waiting
	// Service's stamp, as any re-claim after it would be.
	f.eventually("the clock past the waiting claim's second", func() bool { return time.Now().Truncate(time.Second).After(waitingSince) })
	setEIP(squat.get("old"), f.eipName("eip-queue"))
	f.eventually("the squatter's new claim stamped", func() bool {
		since, ok := model.ClaimedSince(squat.get("old"))
		return ok && since.After(waitingSince)
	})
	must(t, k8s.Delete(ctx, f.get("holder")))
	f.eventually("the first claimant takes over", func() bool {
		return ingressIs(f.get("waiting"), "172.18.32.10") && allReady(f.records("waiting"), "172.18.32.10")
	})
	st, _ := f.agents.state(f.pods[0])
	for _, id := range st.Identities {
		if id.Key().String() == "172.18.32.10:80:tcp" && (len(id.Backends) != 1 || id.Backends[0].IP.String() != "10.0.1.63") {
			t.Fatalf("the EIP port forwards to %v, want only the waiting Service's 10.0.1.63", id.Backends)
		}
	}
	if old := squat.get("old"); !ingressIs(old, "") {
		t.Fatalf("the re-claiming squatter jumped the queue: ingress %v", old.Status.LoadBalancer.Ingress)
	}
	squat.eventually("the squatter told it waits", func() bool {
		return squat.hasEvent("old", model.ReasonConflict, "is held by a Service of another namespace")
	})
}

// covers: N5, N8, D7
// Hostile tenant, against the real API server: whoever may create Pods in the gateway's namespace
// copies kube-ovn's instance (labels, annotations, container, the controller reference to the
// gateway's StatefulSet with its UID) under the name vpc-nat-gw-<gw>-7 and reports it Running.
// The StatefulSet has one replica, so the Pod is no instance: no agent is dialled in it, it gets
// no state, and it gets a Warning saying why that names nothing of the Services' namespace; the
// gateway's own instance keeps getting every change. Before, the model took it as an instance.
func TestHostileTenantLookAlikeGatewayPodGetsNothing(t *testing.T) {
	f := newFixture(t, "gw-hostile-inst", 1)
	f.eip("eip-inst", "172.18.31.10", true)
	f.service("web", f.eipName("eip-inst"), 80, "10.0.1.11")
	f.eventually("served", func() bool { return f.data.serves(f.pods[0], "172.18.31.10:80:tcp") })

	ctx := context.Background()
	var kubeOVNs corev1.Pod
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: model.DefaultGatewayNamespace, Name: "vpc-nat-gw-" + f.gw + "-0"}, &kubeOVNs))
	evil := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-" + f.gw + "-7", Namespace: kubeOVNs.Namespace,
		Labels: kubeOVNs.Labels, Annotations: kubeOVNs.Annotations, OwnerReferences: kubeOVNs.OwnerReferences}, Spec: kubeOVNs.Spec}
	must(t, k8s.Create(ctx, evil))
	evil.Status.Phase, evil.Status.PodIP = corev1.PodRunning, "10.0.1.66"
	must(t, k8s.Status().Update(ctx, evil))

	var warning string
	f.eventually("the look-alike told why", func() bool {
		var evs corev1.EventList
		must(t, k8s.List(ctx, &evs, client.InNamespace(evil.Namespace)))
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "Pod" && ev.InvolvedObject.UID == evil.UID && ev.Reason == model.ReasonNotAGatewayInstance && ev.Type == corev1.EventTypeWarning {
				warning = ev.Message
				return true
			}
		}
		return false
	})
	if !strings.Contains(warning, "ordinal 7 is not below the 1 replicas") {
		t.Errorf("the Warning %q does not say why", warning)
	}
	for _, secret := range []string{f.ns, "web", "172.18.31.10"} {
		if strings.Contains(warning, secret) {
			t.Errorf("the Warning %q names %q", warning, secret)
		}
	}
	// A change after the look-alike appeared reaches kube-ovn's instance, and only it.
	f.service("api", f.eipName("eip-inst"), 81, "10.0.1.12")
	f.eventually("the next change served", func() bool { return f.data.serves(f.pods[0], "172.18.31.10:81:tcp") })
	if n := f.agents.dialsOf(evil.UID); n != 0 {
		t.Fatalf("the look-alike was dialled %d times", n)
	}
	if _, ok := f.agents.state(evil.UID); ok {
		t.Fatal("the look-alike got state")
	}
}
