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
	GatesDefaults       = "defaults"       // nothing published: the controller's defaults (SPEC F1)
)

// ReadController reads what the controller publishes in ConfigMap namespace/vpcgw-controller.
// A missing, stale (heartbeat older than staleAfter), stopped or unreadable status is no error:
// the ControllerInfo says so, and its gates are marked assumed. It returns the published status
// (nil when there is none).
func ReadController(ctx context.Context, c client.Reader, namespace string, staleAfter time.Duration, now time.Time) (ControllerInfo, *status.Published, error) {
	where := namespace + "/" + status.ConfigMapName
	info := ControllerInfo{ConfigMap: where, GatesAssumed: true, GatesSource: GatesDefaults, Gates: status.Gates{Ledger: string(model.LedgerServiceRecord)}}
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: status.ConfigMapName}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		info.Message = fmt.Sprintf("no vpcgw controller is running (ConfigMap %s does not exist: a running controller publishes it; "+
			"if it runs in another namespace, pass --controller-namespace)", where)
		return info, nil, nil
	case apierrors.IsForbidden(err):
		info.Message = fmt.Sprintf("whether a vpcgw controller is running is unknown (ConfigMap %s: you may not read it; "+
			"the chart grants get on it to controller.statusReaders, by default every authenticated user)", where)
		return info, nil, nil
	case err != nil:
		return info, nil, fmt.Errorf("reading ConfigMap %s: %w", where, err)
	}
	pub, err := status.Decode(cm.Data)
	if err != nil {
		info.Message = fmt.Sprintf("no vpcgw controller is running (ConfigMap %s is not a vpcgw controller's status: %v)", where, err)
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

// ModelGates are the gates the model applies for what the controller published.
func ModelGates(info ControllerInfo) model.Gates {
	g := model.Gates{LoadBalancer: info.Gates.EnableGwNftableLbSvc, ClusterIP: info.Gates.EnableGwNftableSvcClusterIP}
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
	case GatesDefaults:
		s += " (assumed: the controller's defaults)"
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
