// covers: D7, L6 (helper: the test binary re-executed as the `vpcgw` binary of a gateway image)
package transport

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
)

// execHelperEnv, set to "vpcgw", turns the test binary into `vpcgw`: `vpcgw agent [flags]` runs
// the real agent on stdin/stdout, as the binary on a gateway image's PATH would.
const execHelperEnv = "TRANSPORT_TEST_HELPER"

func TestMain(m *testing.M) {
	// kube-ovn-controller is started through this binary, re-executed as the mount helper.
	if kubeovnrun.MaybeRunMountHelper() {
		return
	}
	switch os.Getenv(execHelperEnv) {
	case "":
		code := m.Run()
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		os.Exit(code)
	case "vpcgw":
		args := os.Args[1:]
		if len(args) == 0 || args[0] != "agent" {
			fmt.Fprintf(os.Stderr, "vpcgw: unknown command %q\n", args)
			os.Exit(2)
		}
		if err := dataplane.MainWithArgs(context.Background(), args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", os.Getenv(execHelperEnv))
		os.Exit(2)
	}
}
