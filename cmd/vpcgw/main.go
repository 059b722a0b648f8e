// Command vpcgw serves Kubernetes Services from kube-ovn VPC NAT gateways.
//
//	vpcgw controller  watch the cluster and program the gateways
//	vpcgw release     release everything vpcgw wrote (the uninstall)
//	vpcgw webhook     serve the admission webhook
//	vpcgw version     print the version
//
// The gateway agent is a binary of its own (cmd/vpcgw-agent), and the lab, the bench and their
// helpers are in cmd/vpcgw-lab: none of them is linked in here (SPEC O5).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vpcgw/vpcgw/internal/version"
	"github.com/vpcgw/vpcgw/internal/webhook"
)

type command struct {
	name, help string
	run        func(ctx context.Context, args []string) error
}

var commands = []command{
	{"controller", "watch the cluster and program the VPC NAT gateways", runController},
	{"release", "release everything vpcgw wrote (uninstall, SPEC O4); takes the controller's flags", runRelease},
	{"webhook", "serve the admission webhook (SPEC W1-W7)", webhook.Main},
	{"version", "print the version", runVersion},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "--version" || name == "-version" {
		name = "version"
	}
	for _, c := range commands {
		if c.name == name {
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
	fmt.Fprintln(os.Stderr, "\nThe gateway agent is the vpcgw-agent binary; the lab and the bench are in vpcgw-lab.")
}

func runVersion(_ context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q", args)
	}
	fmt.Println("vpcgw", version.Version)
	return nil
}
