// covers: D1, D2, D8 (helpers: the test binary re-executed as agent, echo backend and probe)
package dataplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

const helperEnv = "DATAPLANE_TEST_HELPER"

// TestMain turns the test binary into the agent, an echo backend or a probe when re-executed
// under `ip netns exec` with DATAPLANE_TEST_HELPER set.
func TestMain(m *testing.M) {
	var err error
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "agent":
		err = MainWithArgs(context.Background(), os.Args[1:], os.Stdin, os.Stdout)
	case "echo":
		err = netlab.EchoMain(context.Background(), os.Args[1:])
	case "probe":
		err = netlab.ProbeMain(context.Background(), os.Args[1:])
	default:
		err = fmt.Errorf("unknown helper %q", os.Getenv(helperEnv))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helperCmd(t testing.TB, mode string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"env", helperEnv + "=" + mode, exe}
}

// newLab skips (saying why) unless namespaces and nft are usable, and returns a lab cleaned up
// with the test.
func newLab(t *testing.T) *netlab.Lab {
	t.Helper()
	if err := netlab.Available(); err != nil {
		testutil.Skip(t, fmt.Sprintf("skipping real-kernel test: %v", err))
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Skip(t, "skipping real-kernel test: the nft command is missing (apt-get install -y nftables)")
	}
	l, err := netlab.New("dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Cleanup(); err != nil {
			t.Errorf("lab cleanup: %v", err)
		}
	})
	return l
}
