// covers: D7, L6 (helper: the test binary re-executed as the `vpcgw-agent` binary of a gateway image)
package transport

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
)

// execHelperEnv, set to "vpcgw-agent", turns the test binary into `vpcgw-agent [flags]`: the real
// agent on stdin/stdout, as the binary on a gateway image's PATH would.
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
	case DefaultAgentBinary:
		if err := dataplane.MainWithArgs(context.Background(), os.Args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", os.Getenv(execHelperEnv))
		os.Exit(2)
	}
}
