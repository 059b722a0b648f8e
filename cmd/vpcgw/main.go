// Command vpcgw serves Kubernetes Services from kube-ovn VPC NAT gateways.
//
//	vpcgw controller  watch the cluster and program the gateways
//	vpcgw agent       apply desired gateway states (JSON lines on stdin) with nftables
//	vpcgw webhook     serve the admission webhook
//	vpcgw lab         run the local lab beside the real kube-ovn-controller (API server, lab node, traffic)
//	vpcgw echo        a backend that answers with its name (lab helper)
//	vpcgw probe       send requests and count answers per backend (lab helper)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/webhook"
)

type command struct {
	name, help string
	run        func(ctx context.Context, args []string) error
}

var commands = []command{
	{"controller", "watch the cluster and program the VPC NAT gateways", runController},
	{"agent", "apply desired gateway states read from stdin (runs inside a gateway)", runAgent},
	{"webhook", "serve the admission webhook (SPEC W1-W7)", webhook.Main},
	{"lab", "run the local lab beside the real kube-ovn-controller: a Service served through kube-ovn's EIP", runLab},
	{"echo", "serve HTTP and UDP answering with a name (lab backend)", runEcho},
	{"probe", "send requests from this network namespace and count answers", runProbe},
	{"bench", "measure end-to-end programming latency and cold start in the lab (SPEC P2, P3)", runBench},
}

func main() {
	// The lab re-executes this binary as the helpers of its stand-ins: kube-ovn-controller's
	// private mount namespace, and the lab node's container execs. Neither returns when it is one.
	if kubeovnrun.MaybeRunMountHelper() || labnode.MaybeRunExecHelper() {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			if err := c.run(ctx, os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "vpcgw %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vpcgw <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-11s %s\n", c.name, c.help)
	}
}
