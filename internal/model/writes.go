package model

// The writes of one sync, in the order SPEC T2 and R3 ask for (the controller walks them):
//
//  1. before programming: the finalizer (AddFinalizer), then the seed ledger's record claims
//     (CreateRecords, UpdateRecords); a Service whose finalizer write failed gets no claims;
//  2. programming: the gateway's instances, then its VIP routes;
//  3. after programming, as After decides from how programming ended: what programming confirmed
//     (record status, the ServiceRecord), the ingress, and the releases (record deletions, then
//     the finalizer once they succeeded).

// Outcome is how programming a Service's gateway ended in one sync.
type Outcome int

const (
	// Programmed: every instance of the gateway acknowledged the state, with the Service's
	// identities in it.
	Programmed Outcome = iota
	// NoInstance: the gateway exists but runs no instance; nothing is confirmed, and releases go
	// on (an instance that starts gets the whole state).
	NoInstance
	// GatewayGone: the gateway does not exist, or is being deleted; releases go on (SPEC L5).
	GatewayGone
	// Held: an agent refused one of the Service's identities (SPEC D8, N4): nothing of its new
	// plan is confirmed or released; its records and ingress stay what the gateway serves for it.
	Held
	// Failed: programming failed; everything after it waits for the next sync.
	Failed
)

// After is what a sync writes for a Service after its gateway's programming ended.
type After struct {
	// RecordStatus and ServiceRecord confirm what the gateway now serves (SPEC R3).
	RecordStatus, ServiceRecord bool
	// Ingress writes status.loadBalancer.ingress (SPEC T1): publishing needs the EIP part
	// programmed; withdrawing it does not.
	Ingress bool
	// Release deletes the records the plan lets go of; ReleaseFinalizer then removes the
	// finalizer, if the deletions succeeded (SPEC T2).
	Release, ReleaseFinalizer bool
}

// After says what to write for the Service once programming ended as o.
func (sp *ServicePlan) After(o Outcome) After {
	if o == Held || o == Failed {
		return After{}
	}
	confirmed := o == Programmed
	a := After{
		RecordStatus:  confirmed && len(sp.StatusRecords) > 0,
		ServiceRecord: confirmed && sp.WriteRecord,
		Ingress:       sp.IngressWrite && (confirmed || !sp.EIPServed),
		Release:       true,
	}
	// The finalizer goes last, and not while ingress this sync still publishes.
	a.ReleaseFinalizer = sp.ReleaseFinalizer && (!sp.IngressWrite || len(sp.Ingress) == 0)
	return a
}

// ReleaseOrphans says whether a sync that ended as o deletes the plan's orphaned records: only
// once the gateway no longer serves them (not after a failure), and never from the unbound key's
// sync, which sees no gateway's records.
func ReleaseOrphans(o Outcome, gateway string) bool {
	return o != Failed && o != Held && gateway != UnboundGateway
}
