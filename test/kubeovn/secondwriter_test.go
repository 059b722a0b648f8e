package kubeovn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
)

// setKubeOVNArgs sets the arguments of kube-ovn-controller's Deployment's container (the running
// kube-ovn-controller v1.16.2 keeps its own: only what the cluster's API says of it changes, as
// when an operator edits the Deployment) and returns the previous ones; nil args changes nothing.
func setKubeOVNArgs(t *testing.T, c *cluster.Cluster, args []string) []string {
	t.Helper()
	ctx := context.Background()
	var d appsv1.Deployment
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: kubeovnrun.ControllerDeployment}, &d); err != nil {
		t.Fatalf("kube-ovn-controller's Deployment: %v", err)
	}
	was := slices.Clone(d.Spec.Template.Spec.Containers[0].Args)
	if args == nil {
		return was
	}
	d.Spec.Template.Spec.Containers[0].Args = args
	if err := c.Client.Update(ctx, &d); err != nil {
		t.Fatal(err)
	}
	return was
}

// servingCondition is the controller's published Serving condition (nil: none yet).
func servingCondition(ctx context.Context, c *cluster.Cluster) (*metav1.Condition, error) {
	var cm corev1.ConfigMap
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: status.DefaultNamespace, Name: status.ConfigMapName}, &cm); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	p, err := status.Decode(cm.Data)
	if err != nil {
		return nil, err
	}
	return p.Condition(status.ConditionServing), nil
}

// metricValue reads an unlabelled gauge from the controller's /metrics.
func metricValue(ctx context.Context, c *cluster.Cluster, name string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.MetricsURL(), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }() // a response read: nothing to lose on close
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in /metrics", name)
}

func hasEvent(ctx context.Context, c *cluster.Cluster, svc *corev1.Service, reason string) (bool, error) {
	var evs corev1.EventList
	if err := c.Client.List(ctx, &evs, client.InNamespace(svc.Namespace)); err != nil {
		return false, err
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == svc.Name && e.InvolvedObject.UID == svc.UID && e.Reason == reason {
			return true, nil
		}
	}
	return false, nil
}

func k10Service(name string, port int32) *corev1.Service {
	svc := cluster.DemoServiceObject()
	svc.Name = name
	svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(cluster.BackendPort)}}
	return svc
}

// kube-ovn-controller's Deployment is set as kube-ovn's newer releases would run it, with its own
// Service controller on (#7451's --enable-gw-nftable-lb-svc): vpcgw then serves and releases
// nothing, and says why in an event on each bound Service, its Serving condition and a metric,
// while what it served before keeps its traffic. Turned off again, vpcgw resumes: what waited is
// served, what was deleted meanwhile is released.
// covers: K10, O3
func TestNeverASecondWriterBesideKubeOVN(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	old := k10Service("k10-old", 8090)
	if err := c.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), old) })
	if _, err := c.WaitIngress(ctx, old.Namespace, old.Name, time.Minute); err != nil {
		t.Fatalf("%s before: %v", old.Name, err)
	}

	was := setKubeOVNArgs(t, c, nil)
	setKubeOVNArgs(t, c, append(slices.Clone(was), "--enable-gw-nftable-lb-svc=true", "--enable-gw-nftable-svc-cluster-ip=false"))
	restored := false
	t.Cleanup(func() {
		if !restored {
			setKubeOVNArgs(t, c, was)
		}
	})

	old = service(t, c, old.Namespace, old.Name)
	eventually(t, time.Minute, "vpcgw says it stands aside, on the Service, in its condition and its metric", func(ctx context.Context) (bool, error) {
		ev, err := hasEvent(ctx, c, old, model.ReasonKubeOVNServesEvent)
		if err != nil || !ev {
			return false, err
		}
		cond, err := servingCondition(ctx, c)
		if err != nil || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != model.ReasonKubeOVNServes ||
			!strings.Contains(cond.Message, "--enable-gw-nftable-lb-svc is on") {
			return false, err
		}
		v, err := metricValue(ctx, c, "vpcgw_kube_ovn_serves_services")
		return v == "1", err
	})

	// Releases nothing: the old Service, deleted now, keeps its finalizer, record and traffic.
	if err := c.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	// Serves nothing: a new Service gets no finalizer, ingress or record. Its event, given by a
	// sync that saw the old Service's deletion too (one informer, in order), is the proof that
	// vpcgw looked at both.
	fresh := k10Service("k10-new", 8091)
	if err := c.Client.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), fresh) })
	eventually(t, time.Minute, "the new Service is told why it is not served", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, c, fresh, model.ReasonKubeOVNServesEvent)
	})
	got := service(t, c, fresh.Namespace, fresh.Name)
	if len(got.Status.LoadBalancer.Ingress) != 0 || slices.Contains(got.Finalizers, model.Finalizer) {
		t.Errorf("vpcgw served a new Service beside kube-ovn's own controller: ingress %v, finalizers %v", got.Status.LoadBalancer.Ingress, got.Finalizers)
	}
	if n := records(t, c, got.UID); n != 0 {
		t.Errorf("vpcgw recorded a new Service beside kube-ovn's own controller: %d records", n)
	}
	gone := service(t, c, old.Namespace, old.Name)
	if gone.DeletionTimestamp == nil || !slices.Contains(gone.Finalizers, model.Finalizer) {
		t.Errorf("the deleted Service was released beside kube-ovn's own controller: finalizers %v", gone.Finalizers)
	}
	if n := records(t, c, old.UID); n == 0 {
		t.Errorf("the deleted Service's records were released beside kube-ovn's own controller")
	}
	if r, err := c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":8090", 10); err != nil || r.Total() != 10 {
		t.Errorf("traffic of what vpcgw served before, while it stands aside: %+v %v", r, err)
	}

	// Turned off again: vpcgw serves the new one and releases the old one.
	setKubeOVNArgs(t, c, was)
	restored = true
	if _, err := c.WaitIngress(ctx, fresh.Namespace, fresh.Name, time.Minute); err != nil {
		t.Fatalf("%s after kube-ovn's controller is off: %v", fresh.Name, err)
	}
	eventually(t, time.Minute, "the deleted Service released, and vpcgw serving again", func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(old), &s); !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		cond, err := servingCondition(ctx, c)
		if err != nil || cond == nil || cond.Status != metav1.ConditionTrue {
			return false, err
		}
		v, err := metricValue(ctx, c, "vpcgw_kube_ovn_serves_services")
		return v == "0", err
	})
	if n := records(t, c, old.UID); n != 0 {
		t.Errorf("the deleted Service kept %d records after vpcgw resumed", n)
	}
}

// records counts the ServiceRecords of a Service.
func records(t *testing.T, c *cluster.Cluster, uid types.UID) int {
	t.Helper()
	var rs vpcgwv1alpha1.ServiceRecordList
	if err := c.Client.List(context.Background(), &rs, client.MatchingLabels{model.LabelRecordUID: string(uid)}); err != nil {
		t.Fatal(err)
	}
	return len(rs.Items)
}
