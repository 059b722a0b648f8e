// Package v1alpha1 is vpcgw's own API (group vpcgw.io): the ServiceRecord ledger (SPEC R6).
// vpcgw keeps its records in a kind of its own because kube-ovn-controller acts on every
// IptablesDnatRule it sees (v1.16.x programs each one as an iptables DNAT, master as its own share
// DNAT) and kube-ovn's CRDs prune the fields a ledger needs (SPEC K2).
//
// +kubebuilder:object:generate=true
// +groupName=vpcgw.io
package v1alpha1
