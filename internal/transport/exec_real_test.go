// covers: D7, L6, L7 (real agent, real nftables, through the exec protocols)
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// netnsRuntime is the container runtime of the test kubelet for a gateway whose container is the
// network namespace ns: the exec's argv runs there, with `vpcgw-agent` resolved to this test
// binary.
func netnsRuntime(t *testing.T, ns string) agentFunc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, _ string, cmd []string, in io.Reader, out, errw io.Writer) error {
		if len(cmd) == 0 || cmd[0] != DefaultAgentBinary {
			return utilexec.CodeExitError{Err: fmt.Errorf("exec: %q: executable file not found in $PATH", cmd), Code: 127}
		}
		argv := append([]string{"netns", "exec", ns, "env", execHelperEnv + "=" + DefaultAgentBinary, exe}, cmd[1:]...)
		c := exec.CommandContext(ctx, "ip", argv...) // `ip netns exec` execs the agent: one pid
		// Stdin through our own pipe: exec.Cmd would wait for its copy from the stream, which
		// stays blocked in Read after the agent is gone. This copy ends with the stream.
		stdinR, stdinW, err := os.Pipe()
		if err != nil {
			return err
		}
		go func() {
			_, _ = io.Copy(stdinW, in)
			_ = stdinW.Close()
		}()
		c.Stdin, c.Stdout, c.Stderr = stdinR, out, errw
		c.WaitDelay = 2 * time.Second
		err = c.Run()
		_ = stdinR.Close()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return utilexec.CodeExitError{Err: err, Code: ee.ExitCode()}
		}
		return err
	}
}

func nftChains(t *testing.T, l *netlab.Lab, ns string) string {
	t.Helper()
	out, err := l.Exec(ns, "nft", "list", "chains", "ip") // nft 1.0.6: a family, not a table
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func identityChains(st gwstate.State) []string {
	var names []string
	for _, id := range st.Identities {
		names = append(names, "chain "+dataplane.IdentityChain(id.Key())+" ")
	}
	return names
}

// covers: D7, L6, L7
func TestExecProgramsRealNftablesInANetns(t *testing.T) {
	if err := netlab.Available(); err != nil {
		testutil.Skip(t, fmt.Sprintf("skipping real-kernel test: %v", err))
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Skip(t, "skipping real-kernel test: the nft command is missing (apt-get install -y nftables)")
	}
	l, err := netlab.New("tx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Cleanup(); err != nil {
			t.Errorf("lab cleanup: %v", err)
		}
	})
	ns, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}

	logs := &logSink{}
	kubelet := newTestKubelet(t, netnsRuntime(t, ns))
	api := newTestAPIServer(t, kubelet, true, testNS+"/"+testPod)
	ex, err := NewExec(api.restConfig(), logs.logger(), WithExecCloseGrace(10*time.Second), WithExecPodVerifier(acceptPods{}))
	if err != nil {
		t.Fatal(err)
	}
	e := &execEnv{kubelet: kubelet, api: api, logs: logs, exec: ex}

	// States through WebSocket v5 -> API server -> SPDY -> kubelet -> `vpcgw-agent` in the netns.
	c := e.dial(t)
	st1 := testState(1, 3, 2, 80)
	mustApplyConn(t, c, st1)
	chains := nftChains(t, l, ns)
	for _, want := range identityChains(st1) {
		if !strings.Contains(chains, want) {
			t.Errorf("nft chains lack %q:\n%s", want, chains)
		}
	}
	if out, err := l.Exec(ns, "ip", "-4", "addr", "show", "dev", "lo"); err != nil || !strings.Contains(string(out), "10.96.255.1/32") {
		t.Errorf("lo lacks the ClusterIP 10.96.255.1/32 (%v):\n%s", err, out)
	}
	logs.waitFor(t, "agent: ", 5*time.Second) // the agent's stderr reaches the controller's log

	bad := testState(2, 1, 1, 80)
	bad.Identities[0].Port = 0
	var refused *RefusedError
	if err := c.Apply(context.Background(), bad); !errors.As(err, &refused) || len(refused.Refused) != 1 || c.Broken() {
		t.Fatalf("invalid identity: %v (broken %v), want a RefusedError naming it on a usable stream", err, c.Broken())
	}
	dup := testState(3, 1, 1, 80)
	dup.Identities = append(dup.Identities, dup.Identities[0])
	var agentErr *AgentError
	if err := c.Apply(context.Background(), dup); !errors.As(err, &agentErr) || c.Broken() {
		t.Fatalf("malformed state: %v (broken %v), want an AgentError on a usable stream", err, c.Broken())
	}

	// A large gateway through the stream into the kernel. (2,000 identities: the first apply of
	// 10,000 takes the agent ~25 s here, which is the data plane's cost, not the stream's; the
	// 10,000-identity line itself is TestExecLargeState's.)
	const bigN = 2000
	big := testState(3, bigN, 2, 1)
	start := time.Now()
	mustApplyConn(t, c, big)
	t.Logf("%d identities (%.1f MB) programmed through the exec stream in %s",
		bigN, float64(len(mustJSON(t, big)))/(1<<20), time.Since(start))
	chains = nftChains(t, l, ns)
	if n := strings.Count(chains, "chain dnat-"); n != bigN {
		t.Errorf("%d identity chains in the kernel, want %d", n, bigN)
	}

	// The container restarts (same pod, same netns): the stream breaks, a new exec gets a fresh
	// agent, the full state converges the table it finds.
	if n := kubelet.killAgents(); n != 1 {
		t.Fatalf("%d agents were running, want 1", n)
	}
	kubelet.waitIdle(t, 10*time.Second)
	st4 := testState(4, 2, 1, 9000)
	if err := c.Apply(context.Background(), st4); err == nil || !c.Broken() {
		t.Fatalf("apply after the agent was killed: %v (broken %v)", err, c.Broken())
	}
	c2 := e.dial(t)
	mustApplyConn(t, c2, st4)
	chains = nftChains(t, l, ns)
	if n := strings.Count(chains, "chain dnat-"); n != len(st4.Identities) {
		t.Errorf("%d identity chains after the full resync, want %d:\n%s", n, len(st4.Identities), chains)
	}
	for _, want := range identityChains(st4) {
		if !strings.Contains(chains, want) {
			t.Errorf("nft chains lack %q:\n%s", want, chains)
		}
	}

	// Close: the agent exits at EOF.
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	kubelet.waitIdle(t, 10*time.Second)
	res := kubelet.agentResults()
	if len(res) != 2 || res[1] != nil {
		t.Errorf("agent results = %v, want the second agent to exit cleanly at EOF", res)
	}
}
