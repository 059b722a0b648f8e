module github.com/vpcgw/vpcgw/hack/tools/release

go 1.26.0
