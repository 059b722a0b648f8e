module github.com/vpcgw/vpcgw/hack/tools/figures

go 1.26.0
