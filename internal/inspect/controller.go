package inspect

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
)

// Gates sources (ControllerInfo.GatesSource).
const (
	GatesFromController = "controller"     // a running controller published them
	GatesLastPublished  = "last-published" // a controller that is not running published them
	GatesUnknown        = "unknown"        // the status could not be read: the gates are not assumed
)

// StatusReaderRole is the chart's Role, in the controller's namespace, that reads its status
// ConfigMap (deploy/helm/vpcgw, with the default fullname vpcgw); controller.statusReaders binds
// groups to it.
const StatusReaderRole = "vpcgw-status-reader"

// ReadController reads what the controller publishes in ConfigMap namespace/vpcgw-controller.
// A missing, stale (heartbeat older than staleAfter), stopped or unreadable status is no error:
// the ControllerInfo says so and what is missing (Message), and its gates are marked assumed
// (the last published ones) or unknown (nothing could be read). It returns the published status
// (nil when there is none).
func ReadController(ctx context.Context, c client.Reader, namespace string, staleAfter time.Duration, now time.Time) (ControllerInfo, *status.Published, error) {
	where := namespace + "/" + status.ConfigMapName
	info := ControllerInfo{ConfigMap: where, GatesAssumed: true, GatesSource: GatesUnknown}
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: status.ConfigMapName}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		info.Message = fmt.Sprintf("the vpcgw controller's status is unknown: ConfigMap %s not found in namespace %s "+
			"(no controller runs there; if it runs in another namespace, pass --controller-namespace <its namespace>)", status.ConfigMapName, namespace)
		return info, nil, nil
	case apierrors.IsForbidden(err):
		info.Message = fmt.Sprintf("the vpcgw controller's status is unknown: get configmaps %s in namespace %s: forbidden "+
			"(the chart lets the groups of controller.statusReaders read it, by default none: ask a cluster administrator to bind Role %s there to you, "+
			"or to add your group to controller.statusReaders)", status.ConfigMapName, namespace, StatusReaderRole)
		return info, nil, nil
	case err != nil:
		return info, nil, fmt.Errorf("reading ConfigMap %s: %w", where, err)
	}
	pub, err := status.Decode(cm.Data)
	if err != nil {
		info.Message = fmt.Sprintf("the vpcgw controller's status is unknown: ConfigMap %s is not a vpcgw controller's status: %v", where, err)
		return info, nil, nil
	}
	info.Version, info.Holder, info.Heartbeat, info.Stopped = pub.Version, pub.Holder, pub.Heartbeat, pub.Stopped
	info.Gates, info.Flags = pub.Gates, &pub.Flags
	if c := pub.Condition(status.ConditionServing); c != nil && c.Status == metav1.ConditionFalse {
		info.StandingAside = c.Message
	}
	age := now.Sub(pub.Heartbeat)
	switch {
	case !pub.Stopped.IsZero():
		info.Message = fmt.Sprintf("no vpcgw controller is running (ConfigMap %s: controller %s stopped at %s)", where, pub.Holder, pub.Stopped.Format(time.RFC3339))
	case age > staleAfter:
		info.Message = fmt.Sprintf("no vpcgw controller is running (ConfigMap %s: its heartbeat is %s old, older than %s; last holder %s)",
			where, roundAge(age), staleAfter, pub.Holder)
	default:
		info.Running, info.GatesAssumed, info.GatesSource = true, false, GatesFromController
		return info, &pub, nil
	}
	info.GatesSource = GatesLastPublished
	return info, &pub, nil
}

// ModelGates are the gates the model applies for what the controller published. Unknown gates
// are both on: the plan then shows what the rules would give each Service, and whether it is
// served comes from elsewhere (evidence.go), never from this plan.
func ModelGates(info ControllerInfo) model.Gates {
	g := model.Gates{LoadBalancer: info.Gates.EnableGwNftableLbSvc, ClusterIP: info.Gates.EnableGwNftableSvcClusterIP}
	if info.GatesSource == GatesUnknown {
		g.LoadBalancer, g.ClusterIP = true, true
	}
	g.Ledger, _ = model.ParseLedgerForm(info.Gates.Ledger) // unknown: the default form
	if g.Ledger == "" {
		g.Ledger = model.LedgerServiceRecord
	}
	if f := info.Flags; f != nil {
		g.EndpointsWithoutPods = f.AllowEndpointsWithoutPods
		g.MaxPortsPerService, g.MaxBackendsPerIdentity, g.MaxIdentitiesPerGateway = f.MaxPortsPerService, f.MaxBackendsPerIdentity, f.MaxIdentitiesPerGateway
	}
	return g
}

// GatesText is the gates in a line: "EIP on, ClusterIP on, ledger service-record".
func GatesText(info ControllerInfo) string {
	onOff := map[bool]string{true: "on", false: "off"}
	s := fmt.Sprintf("--enable-gw-nftable-lb-svc %s, --enable-gw-nftable-svc-cluster-ip %s, --ledger %s",
		onOff[info.Gates.EnableGwNftableLbSvc], onOff[info.Gates.EnableGwNftableSvcClusterIP], info.Gates.Ledger)
	switch info.GatesSource {
	case GatesLastPublished:
		s += " (assumed: as the controller last published them)"
	case GatesUnknown:
		return "unknown (the controller's status cannot be read)"
	}
	return s
}

// roundAge is an age as a person reads it: seconds, or milliseconds below one.
func roundAge(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}
