package model

// The writes of one sync, in the order SPEC T2 and R3 ask for (the controller walks them):
//
//  1. before programming, as Before decides: the claim stamp, the finalizer (AddFinalizer), then
//     the seed ledger's record claims (CreateRecords, UpdateRecords); a Service whose finalizer
//     write failed claims nothing (FinalizerFailed);
//  2. programming: the gateway's instances, then its VIP routes;
//  3. after programming, as After decides from how programming ended: what programming confirmed
//     (record status, the ServiceRecord), the ingress, and the releases (record deletions, then
//     the finalizer once they succeeded).

// Outcome is how programming a Service's gateway ended in one sync.
type Outcome int

const (
	// Programmed means every instance of the gateway acknowledged the state, with the Service's
	// identities in it.
	Programmed Outcome = iota
	// NoInstance means the gateway exists but runs no instance; nothing is confirmed, and releases go
	// on (an instance that starts gets the whole state).
	NoInstance
	// GatewayGone means the gateway does not exist, or is being deleted; releases go on (SPEC L5).
	GatewayGone
	// Held means an agent refused one of the Service's identities (SPEC D8, N4): nothing of its new
	// plan is confirmed or released; its records and ingress stay what the gateway serves for it.
	Held
	// Failed means programming failed; everything after it waits for the next sync.
	Failed
)

// Before is what a sync writes for a Service before programming, in this order.
type Before struct {
	// Claim writes the claim stamp now. With an ingress to write, the stamp goes in the same
	// status write after programming (After.Claim, or the ingress write itself): one write of
	// the Service, so that kube-ovn-controller's own full Update of the Service does not meet a
	// second one of ours (a conflict it logs as a failure).
	Claim bool
	// AddFinalizer puts the finalizer on before any record claims an identity (SPEC T2).
	AddFinalizer bool
	// Records creates and updates the seed ledger's records: the claims (SPEC R3).
	Records bool
}

// Before says what to write for the Service before programming.
func (sp *ServicePlan) Before() Before {
	return Before{
		Claim:        sp.Claim != ClaimKept && !sp.IngressWrite,
		AddFinalizer: sp.AddFinalizer,
		Records:      len(sp.CreateRecords)+len(sp.UpdateRecords) > 0,
	}
}

// FinalizerFailed is the plan once writing the finalizer failed: without it, nothing may claim
// an identity (SPEC T2), so the record claims and the status that would confirm them wait for
// the next sync, which the failure brings.
func (sp *ServicePlan) FinalizerFailed() {
	sp.CreateRecords, sp.UpdateRecords, sp.StatusRecords = nil, nil, nil
}

// After is what a sync writes for a Service after its gateway's programming ended.
type After struct {
	// RecordStatus and ServiceRecord confirm what the gateway now serves (SPEC R3).
	RecordStatus, ServiceRecord bool
	// Ingress writes status.loadBalancer.ingress (SPEC T1): publishing needs the EIP part
	// programmed; withdrawing it does not.
	Ingress bool
	// Claim writes the claim stamp on its own: it waited for the ingress write (Before.Claim),
	// which does not come. Written however programming ended, a failure aside.
	Claim bool
	// Release deletes the records the plan lets go of; ReleaseFinalizer then removes the
	// finalizer, if the deletions succeeded (SPEC T2).
	Release, ReleaseFinalizer bool
}

// After says what to write for the Service once programming ended as o.
func (sp *ServicePlan) After(o Outcome) After {
	stampLater := sp.Claim != ClaimKept && sp.IngressWrite
	switch o {
	case Failed:
		return After{}
	case Held:
		return After{Claim: stampLater}
	}
	confirmed := o == Programmed
	a := After{
		RecordStatus:  confirmed && len(sp.StatusRecords) > 0,
		ServiceRecord: confirmed && sp.WriteRecord,
		Ingress:       sp.IngressWrite && (confirmed || !sp.EIPServed),
		Release:       true,
	}
	a.Claim = stampLater && !a.Ingress // the ingress write carries the stamp
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
