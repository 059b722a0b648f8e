// Package v1 holds the subset of kube-ovn's kubeovn.io/v1 API that vpcgw reads and writes:
// VpcNatGateway, IptablesEIP, IptablesDnatRule, Vpc and Subnet. Kinds, resource names, JSON
// field names and printer columns follow kube-ovn exactly, so the types work against the CRDs a
// kube-ovn cluster already has; the CRD YAML generated from them (config/crd) is used wherever
// kube-ovn is absent (envtest, the local lab).
//
// +kubebuilder:object:generate=true
// +groupName=kubeovn.io
package v1
