module github.com/vpcgw/vpcgw/hack/tools/modelgen

go 1.26.0

tool github.com/ovn-kubernetes/libovsdb/cmd/modelgen

require (
	github.com/ovn-kubernetes/libovsdb v0.8.1 // indirect
	golang.org/x/text v0.22.0 // indirect
)
