package inspect

import (
	"time"

	"github.com/vpcgw/vpcgw/internal/status"
)

// APIVersion versions the machine output of `kubectl vpcgw ... -o json|yaml` (SPEC O2). Every
// document has apiVersion and kind; fields are only ever added to this schema, never renamed or
// removed, within APIVersion. Times are RFC 3339; absent fields are unknown or do not apply.
const APIVersion = "vpcgw.io/v1alpha1"

// Kinds of the documents.
const (
	KindServiceStatusList  = "ServiceStatusList"
	KindServiceExplanation = "ServiceExplanation"
	KindGatewayStatus      = "GatewayStatus"
	KindVersion            = "Version"
)

// Service states (ServiceStatus.State).
const (
	// StateServed: every part the Service asks for (its EIP, for a LoadBalancer; its ClusterIP)
	// and the controller's gates allow is served, and the controller has confirmed it (record
	// Ready, ingress published).
	StateServed = "Served"
	// StatePending: the controller's rules serve it, but the controller has not confirmed it yet.
	StatePending = "Pending"
	// StatePartiallyServed: some part is served, another is not (see the parts' reasons).
	StatePartiallyServed = "PartiallyServed"
	// StateNotServed: nothing of it is served.
	StateNotServed = "NotServed"
	// StateUnknown: the plugin cannot tell. The controller's rules cannot be applied (its status
	// or what they read is out of the user's reach, Unknown says what) and nothing the user may
	// read (the Service's ingress, the controller's events on it) shows it served or not.
	StateUnknown = "Unknown"
)

// ReadyStatus values (ServiceStatus.ReadyStatus), as a Kubernetes condition's status.
const (
	ReadyTrue    = "True"
	ReadyFalse   = "False"
	ReadyUnknown = "Unknown"
)

// BasisRules is ServiceStatus.Basis when the answer is the controller's rules applied to what the
// plugin read, with the gates a running controller publishes.
const BasisRules = "the controller's rules"

// Part states (Part.State).
const (
	PartServed        = "Served"
	PartNotServed     = "NotServed"
	PartOff           = "Off"           // the controller's gate for this part is off
	PartNotApplicable = "NotApplicable" // an EIP part for a Service that is not a LoadBalancer
	PartUnknown       = "Unknown"       // the plugin cannot tell (see ServiceStatus.Basis)
)

// Reason codes of parts that no Service event names (Part.EventReason); otherwise the event
// reason the controller gives (NftableLbSvc...).
const (
	ReasonNotOptedIn = "NotOptedIn" // no ovn.kubernetes.io/vpc_nat_gw annotation
	ReasonDeleting   = "Deleting"   // the Service is being deleted
	ReasonGateOff    = "GateOff"    // the controller's gate for the part is off
)

// TypeMeta is in every document.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ControllerInfo is what the plugin knows of the running controller, from the ConfigMap it
// publishes (internal/status).
type ControllerInfo struct {
	// Running: the ConfigMap exists, its heartbeat is fresh and it does not say it stopped.
	Running bool `json:"running"`
	// ConfigMap is where the plugin looked (namespace/name).
	ConfigMap string    `json:"configMap"`
	Version   string    `json:"version,omitempty"`
	Holder    string    `json:"holder,omitempty"`
	Heartbeat time.Time `json:"heartbeat,omitzero"`
	Stopped   time.Time `json:"stopped,omitzero"`
	// Message says why the controller is not taken as running (empty while it runs), and, when
	// its status cannot be read, which permission or flag is missing.
	Message string `json:"message,omitempty"`
	// GatesAssumed: the gates are not what a running controller published: the last published
	// ones of a controller that is not running, or unknown when nothing could be read (Gates is
	// then empty, not the defaults). GatesSource says which.
	GatesAssumed bool         `json:"gatesAssumed"`
	GatesSource  string       `json:"gatesSource"`
	Gates        status.Gates `json:"gates"`
	// Flags are the controller's other published settings (absent when nothing was published).
	Flags *status.Flags `json:"flags,omitempty"`
	// StandingAside says why a running controller serves and releases nothing: kube-ovn's own
	// Service controller is on (its Serving condition is False, SPEC K10). Empty: it serves.
	StandingAside string `json:"standingAside,omitempty"`
}

// Part is one part of a Service: its EIP or its ClusterIP.
type Part struct {
	State string `json:"state"`
	// VIP is the address served (Served only).
	VIP string `json:"vip,omitempty"`
	// Reason is the controller's own text (its event message) when the part is not served;
	// EventReason its event reason (NftableLbSvc...) or one of the Reason* codes.
	Reason      string `json:"reason,omitempty"`
	EventReason string `json:"eventReason,omitempty"`
	// Fix says what to do about it.
	Fix string `json:"fix,omitempty"`
}

// Identity is one (VIP, port, protocol) the Service gets on its gateway (SPEC I1).
type Identity struct {
	Part     string `json:"part"` // EIP or ClusterIP
	VIP      string `json:"vip"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"`
	// Backends are "ip:port", sorted; empty: the identity answers nobody.
	Backends               []string `json:"backends"`
	AffinityTimeoutSeconds int32    `json:"affinityTimeoutSeconds,omitempty"`
	SourceRanges           []string `json:"sourceRanges,omitempty"`
}

// Record is the Service's ledger entry (SPEC R6).
type Record struct {
	Kind  string   `json:"kind"` // ServiceRecord or IptablesDnatRule
	Names []string `json:"names"`
	// Ready: the records exist, are Ready and hold what the controller would write.
	Ready   bool   `json:"ready"`
	Message string `json:"message,omitempty"`
}

// Event is one event the controller's rules give the Service or, when the rules cannot be
// applied, one the controller gave it (with its time).
type Event struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Time    time.Time `json:"time,omitzero"`
}

// ServiceStatus is one Service as the controller's rules see it.
type ServiceStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	// Gateway and EIP are the Service's annotations (or the gateway its records name).
	Gateway   string   `json:"gateway,omitempty"`
	EIP       string   `json:"eip,omitempty"`
	ClusterIP string   `json:"clusterIP,omitempty"`
	Ingress   []string `json:"ingress"`
	State     string   `json:"state"`
	// Ready: something is served and the controller has written all it would for it.
	Ready bool `json:"ready"`
	// ReadyStatus is Ready as True or False, or Unknown when the plugin cannot tell (Ready is
	// false then).
	ReadyStatus string `json:"readyStatus"`
	// Basis says what the state is based on: BasisRules, or what the user may read of the
	// Service (its ingress, the controller's latest event on it, its claim stamp) when the rules
	// cannot be applied.
	Basis         string     `json:"basis"`
	EIPPart       Part       `json:"eipPart"`
	ClusterIPPart Part       `json:"clusterIPPart"`
	Identities    []Identity `json:"identities"`
	// Affinity is "None" or "ClientIP(<timeout>s)".
	Affinity string  `json:"affinity"`
	Record   *Record `json:"record,omitempty"`
	Events   []Event `json:"events,omitempty"`
}

// ServiceStatusList is `kubectl vpcgw status -o json`.
type ServiceStatusList struct {
	TypeMeta   `json:",inline"`
	Controller ControllerInfo `json:"controller"`
	Warnings   []string       `json:"warnings,omitempty"`
	// Unknown is what the plugin could not read, each with the permission or flag it lacks: the
	// controller's rules are applied only when it is empty.
	Unknown []string        `json:"unknown,omitempty"`
	Items   []ServiceStatus `json:"items"`
}

// Instance is one gateway instance: what the plugin reads of its pod, and what the controller
// published of its agent.
type Instance struct {
	Pod         string `json:"pod"` // namespace/name
	LanIP       string `json:"lanIP,omitempty"`
	Initialized bool   `json:"initialized"`
	// Reported: the controller's status names the instance; the fields below come from it.
	Reported        bool  `json:"reported"`
	AckedGeneration int64 `json:"ackedGeneration,omitempty"`
	// Current: the instance acknowledged the gateway's last programmed generation.
	Current      bool      `json:"current"`
	AgentVersion string    `json:"agentVersion,omitempty"`
	LastAckTime  time.Time `json:"lastAckTime,omitzero"`
	LastError    string    `json:"lastError,omitempty"`
}

// Programmed is the controller's last word on programming a gateway.
type Programmed struct {
	Generation   int64     `json:"generation"`
	Identities   int       `json:"identities"`
	LastSyncTime time.Time `json:"lastSyncTime,omitzero"`
	LastError    string    `json:"lastError,omitempty"`
}

// Routes is the VIP route state of a gateway (SPEC V1), or of a Service's VIPs on it.
type Routes struct {
	// Written: the controller writes VIP routes (--ovn-nb-addr); otherwise they are routed by hand.
	Written bool   `json:"written"`
	Router  string `json:"router,omitempty"`
	// VIPs and NextHops are what the controller's rules route (for a Service: its VIPs).
	VIPs     []string `json:"vips"`
	NextHops []string `json:"nextHops"`
	// Synced is the outcome of the controller's last write (absent: unknown).
	Synced       *bool     `json:"synced,omitempty"`
	LastError    string    `json:"lastError,omitempty"`
	LastSyncTime time.Time `json:"lastSyncTime,omitzero"`
	// UnroutedVIPs is how many of the gateway's VIPs (for a Service too: the gateway's, the
	// controller does not publish whose) OVN drops before their route applies, because the Vpc
	// has no route for them or one that discards them (SPEC V3); Unrouted is the controller's
	// text about it. The Services' NftableLbSvcVIPNotRouted events name the VIPs.
	UnroutedVIPs int    `json:"unroutedVIPs,omitempty"`
	Unrouted     string `json:"unrouted,omitempty"`
}

// GatewayState is a gateway and its instances, routes and programming.
type GatewayState struct {
	Name   string `json:"name"`
	Exists bool   `json:"exists"`
	// ExistsUnknown: the user may not list VpcNatGateways, so whether it exists is unknown
	// (Exists is false then).
	ExistsUnknown bool   `json:"existsUnknown,omitempty"`
	Vpc           string `json:"vpc,omitempty"`
	LanIP         string `json:"lanIP,omitempty"`
	// Identities is how many identities the controller's rules give it.
	Identities int        `json:"identities"`
	Instances  []Instance `json:"instances"`
	// Programmed is absent when the controller published nothing about the gateway.
	Programmed *Programmed `json:"programmed,omitempty"`
	Routes     Routes      `json:"routes"`
}

// GatewayStatus is `kubectl vpcgw status gw/<name> -o json`.
type GatewayStatus struct {
	TypeMeta     `json:",inline"`
	Controller   ControllerInfo `json:"controller"`
	Warnings     []string       `json:"warnings,omitempty"`
	Unknown      []string       `json:"unknown,omitempty"`
	GatewayState `json:",inline"`
	Services     []ServiceStatus `json:"services"`
}

// ServiceExplanation is `kubectl vpcgw explain svc/<name> -o json`.
type ServiceExplanation struct {
	TypeMeta   `json:",inline"`
	Controller ControllerInfo `json:"controller"`
	Warnings   []string       `json:"warnings,omitempty"`
	Unknown    []string       `json:"unknown,omitempty"`
	// Served is State == Served (the exit code is 0 then, 4 when the state is Unknown, 3
	// otherwise).
	Served  bool          `json:"served"`
	Summary string        `json:"summary"`
	Service ServiceStatus `json:"service"`
	// Gateway is the Service's gateway (absent when it names none).
	Gateway *GatewayState `json:"gateway,omitempty"`
	// Routes are the routes of the Service's VIPs (absent when nothing is served).
	Routes *Routes `json:"routes,omitempty"`
}

// VersionInfo is `kubectl vpcgw version -o json`.
type VersionInfo struct {
	TypeMeta `json:",inline"`
	Plugin   string `json:"plugin"`
	// Controller is absent with --client.
	Controller *ControllerInfo `json:"controller,omitempty"`
}
