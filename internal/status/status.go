// Package status is what the running vpcgw controller publishes about itself (SPEC O2): its
// version, the gates and flags it runs with, and what it knows of each gateway's programming, in
// one ConfigMap of its own namespace. The kubectl plugin reads it, so that it explains Services by
// the rules the controller really runs, and says so when no controller is running.
//
// The ConfigMap is written by the leader only, from memory, when something changed and at most
// once per MinInterval, plus a heartbeat (Publisher): never once per sync, so that the controller's
// API writes stay at most one per changed Service (SPEC P6).
package status

import (
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// ConfigMapName is the name of the published ConfigMap, in the controller's namespace.
	ConfigMapName = "vpcgw-controller"
	// DefaultNamespace is where the controller publishes when neither --status-namespace nor
	// POD_NAMESPACE says otherwise, and where the plugin looks by default: vpcgw's own namespace,
	// where the chart's documented install, the manifests and install.sh put it (SPEC N5).
	DefaultNamespace = "vpcgw-system"
	// DefaultMinInterval is the least time between two writes of the ConfigMap.
	DefaultMinInterval = 10 * time.Second
	// DefaultHeartbeat is the longest time between two writes: a reader knows the controller is
	// alive when the heartbeat is younger than a few of these.
	DefaultHeartbeat = 30 * time.Second
	// DefaultStaleAfter is the age of the heartbeat past which the plugin says no controller runs.
	DefaultStaleAfter = 2 * time.Minute
	// MaxGateways bounds the gateways published (a ConfigMap is at most 1 MiB); the rest are
	// counted in GatewaysOmitted.
	MaxGateways = 1000
)

// Data keys of the ConfigMap. version, heartbeat, holder and stopped are plain strings; gates,
// flags and gateways are JSON.
const (
	KeyVersion   = "version"
	KeyGates     = "gates"
	KeyFlags     = "flags"
	KeyHeartbeat = "heartbeat"
	KeyHolder    = "holder"
	KeyGateways  = "gateways"
	KeyStopped   = "stopped"
	// KeyConditions is JSON: the controller's conditions as a whole (ConditionServing).
	KeyConditions = "conditions"
)

// ConditionServing is True while the controller serves, and False while it stands aside because
// kube-ovn-controller serves Services through the gateways itself (SPEC K10); its reason is one of
// model.SecondWriter's.
const ConditionServing = "Serving"

// Gates are the controller's mode switches (SPEC F1, F2, R6), as it runs.
type Gates struct {
	EnableGwNftableLbSvc        bool   `json:"enableGwNftableLbSvc"`
	EnableGwNftableSvcClusterIP bool   `json:"enableGwNftableSvcClusterIp"`
	EnableLb                    bool   `json:"enableLb"`
	EnableLbSvc                 bool   `json:"enableLbSvc"`
	Ledger                      string `json:"ledger"`
}

// Flags are the controller's other settings a reader needs to explain a Service (SPEC N2, N4,
// K5, V1), with the defaults filled in.
type Flags struct {
	KubeOVNNamespace          string `json:"kubeOvnNamespace"`
	AllowEndpointsWithoutPods bool   `json:"allowEndpointsWithoutPods"`
	MaxPortsPerService        int    `json:"maxPortsPerService"`
	MaxBackendsPerIdentity    int    `json:"maxBackendsPerIdentity"`
	MaxIdentitiesPerGateway   int    `json:"maxIdentitiesPerGateway"`
	// AgentKeepalive is --agent-keepalive ("0s": off).
	AgentKeepalive string `json:"agentKeepalive"`
	// MinSyncInterval is --min-sync-interval.
	MinSyncInterval string `json:"minSyncInterval"`
	// VIPRoutes: the controller writes VIP routes (--ovn-nb-addr is set, SPEC V1).
	VIPRoutes      bool `json:"vipRoutes"`
	LeaderElection bool `json:"leaderElection"`
	// BackendPick is --backend-pick: how the gateways pick a backend (SPEC D2); controllers
	// older than the field leave it out.
	BackendPick string `json:"backendPick,omitempty"`
}

// Gateway is what the controller knows of one gateway's programming.
type Gateway struct {
	// Instances are the gateway's running instances at the last sync, by pod.
	Instances []Instance `json:"instances"`
	// Generation is the last state every instance acknowledged (0: none yet), Identities the
	// number of identities in it, LastSyncTime when that was.
	Generation   int64     `json:"generation,omitempty"`
	Identities   int       `json:"identities"`
	LastSyncTime time.Time `json:"lastSyncTime,omitzero"`
	// LastError is the text of the last failed sync (bounded and sanitized as the Service events
	// are, SPEC N6, N8), cleared by the next successful one.
	LastError     string    `json:"lastError,omitempty"`
	LastErrorTime time.Time `json:"lastErrorTime,omitzero"`
	// Routes is the gateway's VIP route state (absent when the controller writes no routes).
	Routes *Routes `json:"routes,omitempty"`
}

// Instance is one gateway instance (pod) and its agent.
type Instance struct {
	Pod string `json:"pod"` // namespace/name
	UID string `json:"uid"`
	// AckedGeneration is the last state generation the instance's agent acknowledged.
	AckedGeneration int64     `json:"ackedGeneration"`
	LastAckTime     time.Time `json:"lastAckTime,omitzero"`
	// AgentVersion is what the agent reported in its first acknowledgement.
	AgentVersion  string    `json:"agentVersion,omitempty"`
	LastError     string    `json:"lastError,omitempty"`
	LastErrorTime time.Time `json:"lastErrorTime,omitzero"`
}

// Routes is the state of a gateway's VIP router policies (SPEC V1).
type Routes struct {
	NextHops []string `json:"nextHops"`
	VIPs     int      `json:"vips"`
	// Synced: the last write of the policies succeeded.
	Synced       bool      `json:"synced"`
	LastError    string    `json:"lastError,omitempty"`
	LastSyncTime time.Time `json:"lastSyncTime,omitzero"`
	// UnroutedVIPs counts the VIPs that OVN drops before their policy applies, because the Vpc's
	// router has no route for them or one that discards them (SPEC V3); Unrouted says so and what
	// to do, in fixed text: the Services' events name the VIPs (SPEC N8). Absent: none, or a
	// controller from before the check.
	UnroutedVIPs int    `json:"unroutedVIPs,omitempty"`
	Unrouted     string `json:"unrouted,omitempty"`
}

// Published is the whole content of the ConfigMap.
type Published struct {
	Version   string
	Holder    string
	Heartbeat time.Time
	// Stopped is set by a controller that stopped cleanly (zero while it runs).
	Stopped  time.Time
	Gates    Gates
	Flags    Flags
	Gateways map[string]Gateway
	// GatewaysOmitted counts gateways left out past MaxGateways.
	GatewaysOmitted int
	// Conditions of the controller as a whole (ConditionServing).
	Conditions []metav1.Condition
}

// Condition returns the condition of type t, or nil.
func (p Published) Condition(t string) *metav1.Condition {
	for i := range p.Conditions {
		if p.Conditions[i].Type == t {
			return &p.Conditions[i]
		}
	}
	return nil
}

type gatewaysDoc struct {
	Gateways map[string]Gateway `json:"gateways"`
	Omitted  int                `json:"omitted,omitempty"`
}

// Encode renders p as the ConfigMap's data.
func Encode(p Published) (map[string]string, error) {
	gates, err := json.Marshal(p.Gates)
	if err != nil {
		return nil, err
	}
	flags, err := json.Marshal(p.Flags)
	if err != nil {
		return nil, err
	}
	gws := p.Gateways
	if gws == nil {
		gws = map[string]Gateway{}
	}
	gateways, err := json.Marshal(gatewaysDoc{Gateways: gws, Omitted: p.GatewaysOmitted})
	if err != nil {
		return nil, err
	}
	data := map[string]string{
		KeyVersion:   p.Version,
		KeyHolder:    p.Holder,
		KeyHeartbeat: p.Heartbeat.UTC().Format(time.RFC3339),
		KeyGates:     string(gates),
		KeyFlags:     string(flags),
		KeyGateways:  string(gateways),
	}
	if !p.Stopped.IsZero() {
		data[KeyStopped] = p.Stopped.UTC().Format(time.RFC3339)
	}
	if len(p.Conditions) > 0 {
		conds, err := json.Marshal(p.Conditions)
		if err != nil {
			return nil, err
		}
		data[KeyConditions] = string(conds)
	}
	return data, nil
}

// Decode reads the ConfigMap's data. A key that is missing or malformed is an error naming it.
func Decode(data map[string]string) (Published, error) {
	var p Published
	p.Version, p.Holder = data[KeyVersion], data[KeyHolder]
	hb, ok := data[KeyHeartbeat]
	if !ok {
		return p, fmt.Errorf("no %q key", KeyHeartbeat)
	}
	var err error
	if p.Heartbeat, err = time.Parse(time.RFC3339, hb); err != nil {
		return p, fmt.Errorf("%s: %w", KeyHeartbeat, err)
	}
	if s, ok := data[KeyStopped]; ok {
		if p.Stopped, err = time.Parse(time.RFC3339, s); err != nil {
			return p, fmt.Errorf("%s: %w", KeyStopped, err)
		}
	}
	if err := json.Unmarshal([]byte(data[KeyGates]), &p.Gates); err != nil {
		return p, fmt.Errorf("%s: %w", KeyGates, err)
	}
	if err := json.Unmarshal([]byte(data[KeyFlags]), &p.Flags); err != nil {
		return p, fmt.Errorf("%s: %w", KeyFlags, err)
	}
	if s, ok := data[KeyConditions]; ok {
		if err := json.Unmarshal([]byte(s), &p.Conditions); err != nil {
			return p, fmt.Errorf("%s: %w", KeyConditions, err)
		}
		for i := range p.Conditions { // metav1.Time decodes to local time; the rest here is UTC
			p.Conditions[i].LastTransitionTime = metav1.NewTime(p.Conditions[i].LastTransitionTime.UTC())
		}
	}
	var doc gatewaysDoc
	if s := data[KeyGateways]; s != "" {
		if err := json.Unmarshal([]byte(s), &doc); err != nil {
			return p, fmt.Errorf("%s: %w", KeyGateways, err)
		}
	}
	p.Gateways, p.GatewaysOmitted = doc.Gateways, doc.Omitted
	if p.Gateways == nil {
		p.Gateways = map[string]Gateway{}
	}
	return p, nil
}
