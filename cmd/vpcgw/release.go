package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/vpcgw/vpcgw/internal/release"
)

// runRelease is `vpcgw release`: the uninstall of SPEC O4. It takes the controller's flags (the
// chart's pre-delete hook and install.sh uninstall pass the same ones) and releases everything
// vpcgw wrote (internal/release); it exits 0 when nothing is left, or when kube-ovn's own
// Service controller serves (K10: nothing released, it says so), and non-zero naming what is left.
func runRelease(ctx context.Context, args []string) error {
	var ro release.Options
	cfg, opts, log, err := controllerSetup("release", args, func(fs *flag.FlagSet) {
		fs.DurationVar(&ro.Timeout, "release-timeout", 5*time.Minute, "how long the release may take, the wait for the leader's lease included; past it, it fails naming what is left")
		fs.DurationVar(&ro.LeaseHold, "lease-hold", 10*time.Minute,
			"with --leader-elect: how long the controller's Lease stays held after the release, so that a controller still running stands by until it is deleted")
	})
	if err != nil {
		return err
	}
	res, err := release.Run(ctx, cfg, opts, ro, log.WithName("release"))
	if err != nil {
		return err
	}
	fmt.Println(res.Message)
	return nil
}
