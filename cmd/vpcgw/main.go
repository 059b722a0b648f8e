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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/vpcgw/vpcgw/internal/cli"
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
	os.Exit(run(ctx, os.Args[1:]))
}

// run is the command line args[0] with its flags; it returns the exit code: 0, 1 for a failure,
// 2 for a command line that cannot be parsed.
func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "--version", "-version":
		name = "version"
	case "--help", "-help", "-h", "help":
		usage(os.Stdout)
		return 0
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		var usageErr *cli.UsageError
		switch err := c.run(ctx, args[1:]); {
		case err == nil, errors.Is(err, cli.ErrHelp):
			return 0
		case errors.As(err, &usageErr):
			fmt.Fprintf(os.Stderr, "vpcgw %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(os.Stderr, "vpcgw %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(os.Stderr, "vpcgw: unknown command %q\n\n", name)
	usage(os.Stderr)
	return 2
}

// usage writes the summary of the commands to stdout or stderr: a failed write there has no one
// left to tell, so its errors are dropped.
func usage(w io.Writer) {
	_, _ = fmt.Fprintln(w, "Usage: vpcgw <command> [flags]\n\nServes Kubernetes Services from kube-ovn VPC NAT gateways.\n\nCommands:")
	for _, c := range commands {
		_, _ = fmt.Fprintf(w, "  %-11s %s\n", c.name, c.help)
	}
	_, _ = fmt.Fprintln(w, "\nRun 'vpcgw <command> --help' for its flags.\nThe gateway agent is the vpcgw-agent binary; the lab and the bench are in vpcgw-lab.")
}

func runVersion(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cli.Parse(fs, args, "vpcgw version", "Prints the version of this build.", os.Stdout); err != nil {
		return err
	}
	fmt.Println("vpcgw", version.Version)
	return nil
}
