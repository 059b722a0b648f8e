// Command vpcgw-agent is the gateway agent: it runs in the vpc-nat-gw container of a kube-ovn VPC
// NAT gateway (the controller starts it through the exec API) and applies the desired states it
// reads on stdin, one JSON line each, with nftables, answering each on stdout.
//
//	vpcgw-agent [--vpc-interface eth0] [--verify-interval 10s] [--watch-kernel=true] [--retry-max 30s] [--text-path] [--v 0]
//	vpcgw-agent --version
//
// It is small and static (CGO_ENABLED=0) and links no Kubernetes client, lab, bench or test code
// (SPEC O5; deps_test.go checks it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vpcgw/vpcgw/internal/dataplane"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := dataplane.MainWithArgs(ctx, os.Args[1:], os.Stdin, os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return // the flag package printed the usage
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vpcgw-agent: %v\n", err)
		os.Exit(1)
	}
}
