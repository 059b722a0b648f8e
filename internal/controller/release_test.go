package controller_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
)

// vpcgw release, against the API server with agents in memory: beside kube-ovn's own Service
// controller it releases nothing and says so (K10); otherwise it programs every instance with the
// release state, and clears ingress, claim stamp, records and finalizer, and Remains finds nothing. It releases
// the whole cluster: Services earlier tests of this package left served are released too.
// covers: O4, K10, T1, T2
func TestRelease(t *testing.T) {
	deployment := "kovn-release"
	f := newFixtureWith(t, inMemory, "gw-rel", 1, func(o *controller.Options) { o.Flags.KubeOVNControllerDeployment = deployment })
	ctx := context.Background()
	f.eip("eip-rel", "172.18.9.30", true)
	f.service("web", "eip-rel", 80, "10.0.1.31")
	f.eventually("served", func() bool {
		return ingressIs(f.get("web"), "172.18.9.30") && len(f.records("web")) > 0 && model.HasClaimStamp(f.get("web"))
	})
	f.stopController() // as the chart's hook runs after the controller stood by
	log := zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true))
	opts := controller.Options{Flags: controller.Flags{EnableGwNftableLbSvc: true, EnableGwNftableSvcClusterIP: true, KubeOVNControllerDeployment: deployment},
		Dialer: f.dialer}

	d := kubeOVNDeployment(deployment, "--enable-lb=false", "--enable-gw-nftable-lb-svc=true")
	must(t, k8s.Create(ctx, d))
	res, err := controller.Release(ctx, cfg, opts, controller.ReleaseOptions{Timeout: time.Minute}, log)
	if err != nil || res.Released || res.Message == "" {
		t.Fatalf("release beside kube-ovn's own controller = %+v, %v; want nothing released, and why", res, err)
	}
	if s := f.get("web"); !hasFinalizer(s) || !ingressIs(s, "172.18.9.30") || len(f.records("web")) == 0 {
		t.Fatalf("release beside kube-ovn's own controller touched the Service: %v, %d records", s, len(f.records("web")))
	}
	must(t, k8s.Delete(ctx, d))

	res, err = controller.Release(ctx, cfg, opts, controller.ReleaseOptions{Timeout: 2 * time.Minute}, log)
	if err != nil || !res.Released {
		t.Fatalf("release = %+v, %v", res, err)
	}
	if s := f.get("web"); hasFinalizer(s) || !ingressIs(s, "") || len(f.records("web")) != 0 || model.HasClaimStamp(s) {
		t.Errorf("after release: finalizers %v, ingress %v, %d records, conditions %v", s.Finalizers, s.Status.LoadBalancer.Ingress, len(f.records("web")), s.Status.Conditions)
	}
	st, ok := f.agents.state(f.pods[0])
	if !ok || !st.Release || len(st.Identities) != 0 {
		t.Errorf("the instance's last state = %+v (%v), want the release state", st, ok)
	}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	must(t, err)
	left, err := controller.Remains(ctx, c, nil, nil)
	if err != nil || len(left) != 0 {
		t.Errorf("Remains after release = %v, %v", left, err)
	}
}
