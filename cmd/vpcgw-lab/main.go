// Command vpcgw-lab is vpcgw's development binary: the labs, the bench and their helpers. It is
// not shipped; the product is cmd/vpcgw (controller, webhook) and cmd/vpcgw-agent (the gateway
// agent), which the labs run as their own processes, found beside this binary (make build puts
// all three in bin/) or named by --vpcgw and --agent.
//
//	vpcgw-lab lab      run the local lab beside the real kube-ovn-controller (API server, lab node, traffic)
//	vpcgw-lab soak     run the soak with faults beside kube-ovn-controller (traffic, churn, faults, leaks)
//	vpcgw-lab bench    measure end-to-end programming latency and cold start in the lab beside kube-ovn-controller
//	vpcgw-lab echo     a backend that answers with its name (lab helper)
//	vpcgw-lab probe    send requests and count answers per backend (lab helper)
//	vpcgw-lab version  print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vpcgw/vpcgw/internal/bench"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/soak"
	"github.com/vpcgw/vpcgw/internal/version"
)

type command struct {
	name, help string
	run        func(ctx context.Context, args []string) error
}

var commands = []command{
	{"lab", "run the local lab beside the real kube-ovn-controller: a Service served through kube-ovn's EIP", cluster.Main},
	{"soak", "run the soak with faults beside kube-ovn-controller: steady traffic, churn and faults, then a leak check", soak.Main},
	{"bench", "measure end-to-end programming latency and cold start in the lab (SPEC P2, P3)", bench.Main},
	{"echo", "serve HTTP and UDP answering with a name (lab backend)", netlab.EchoMain},
	{"probe", "send requests from this network namespace and count answers", netlab.ProbeMain},
	{"version", "print the version", runVersion},
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
			err := c.run(ctx, os.Args[2:])
			if errors.Is(err, flag.ErrHelp) {
				return // the flag set has printed the subcommand's usage
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "vpcgw-lab %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vpcgw-lab <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.help)
	}
}

func runVersion(_ context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q", args)
	}
	fmt.Println("vpcgw-lab", version.Version)
	return nil
}
