// Command kubectl-vpcgw is the kubectl plugin of vpcgw (`kubectl vpcgw ...`, SPEC O2): it shows
// what the controller serves and why, with the controller's own model and the gates the running
// controller publishes, and a gateway's nft table. It follows kubectl's conventions
// (k8s.io/cli-runtime): flags anywhere, -n from the kubeconfig context, -A, --context,
// --kubeconfig, cli-runtime's printers (-o json|yaml|name|jsonpath=...|jsonpath-file=...|
// go-template=...), -o custom-columns=...|wide, -l and --no-headers, shell completion. It links
// no lab code and runs nothing on the user's machine: a gateway's ruleset comes through the exec
// API (deps_test.go checks what it links).
//
//	kubectl vpcgw status [-A] [-l <sel>] [gw/<gw>]  the Services that name a gateway, or one gateway
//	kubectl vpcgw explain svc/<name>              why a Service is or is not served, and the fix
//	kubectl vpcgw ruleset <gateway>               the programmed table ip kube-ovn of each instance
//	kubectl vpcgw version                         the plugin's and the running controller's versions
package main

import (
	"context"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
