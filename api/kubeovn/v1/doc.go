// Package v1 holds the subset of kube-ovn's kubeovn.io/v1 API that vpcgw reads (and, in the seed's
// ledger form, writes): VpcNatGateway, IptablesEIP, IptablesDnatRule, Vpc and Subnet. Kinds,
// resource names and JSON field names follow kube-ovn exactly, so the types work against the CRDs
// a kube-ovn cluster has. No CRD is generated from them: the lab and the tests install kube-ovn's
// own CRDs from its module (SPEC K1), and crd_test.go checks that they keep every field vpcgw reads.
//
// +kubebuilder:object:generate=true
// +groupName=kubeovn.io
package v1
