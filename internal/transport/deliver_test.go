// covers: K5, O5 (the agent copied into a stock gateway container through the exec API)
package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/vpcgw/vpcgw/internal/dataplane"
)

// fakeContainer plays kube-ovn's gateway container behind the test kubelet: a filesystem of its
// own (lost on restart), busybox's few tools the delivery runs, each by its argv as a runtime
// would run it, and the agent once a file that is the agent build is executed.
type fakeContainer struct {
	mu      sync.Mutex
	machine string
	files   map[string][]byte
	modes   map[string]os.FileMode
	agents  map[string]bool // contents that are agent builds
	pods    *fakePods
	corrupt bool // dd writes one byte wrong
	argvs   [][]string
}

func newFakeContainer(machine string, pods *fakePods) *fakeContainer {
	return &fakeContainer{machine: machine, files: map[string][]byte{}, modes: map[string]os.FileMode{}, agents: map[string]bool{}, pods: pods}
}

func (c *fakeContainer) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.files, c.modes = map[string][]byte{}, map[string]os.FileMode{}
}

func (c *fakeContainer) ran(tool string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range c.argvs {
		if a[0] == tool {
			n++
		}
	}
	return n
}

func exit(code int, format string, args ...any) error {
	return utilexec.CodeExitError{Err: fmt.Errorf(format, args...), Code: code}
}

func (c *fakeContainer) run(ctx context.Context, pod string, argv []string, in io.Reader, out, errw io.Writer) error {
	c.mu.Lock()
	c.argvs = append(c.argvs, slices.Clone(argv))
	c.mu.Unlock()
	switch {
	case len(argv) == 0:
		return exit(127, "no command")
	case argv[0] == "dd":
		of, ok := strings.CutPrefix(argv[1], "of=")
		if !ok || in == nil {
			return exit(1, "dd: bad usage %q", argv)
		}
		b, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.corrupt && len(b) > 0 {
			b[len(b)/2] ^= 0xff
		}
		c.files[of] = b
		return nil
	case slices.Contains([]string{"uname", "sha256sum", "mkdir", "chmod", "mv", "ls", "rm"}, argv[0]):
		return c.tool(argv, out, errw)
	}
	c.mu.Lock()
	b, ok := c.files[argv[0]]
	isAgent := ok && c.modes[argv[0]]&0o111 != 0 && c.agents[string(b)]
	c.mu.Unlock()
	if !isAgent {
		return exit(127, "exec: %q: executable file not found in $PATH", argv[0])
	}
	return dataplane.RunAgent(ctx, in, out, c.pods.table(pod), dataplane.NewLogger(errw, 0))
}

// tool runs one of busybox's tools on the container's files.
func (c *fakeContainer) tool(argv []string, out, errw io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch argv[0] {
	case "uname":
		_, _ = fmt.Fprintln(out, c.machine)
	case "sha256sum":
		b, ok := c.files[argv[1]]
		if !ok {
			_, _ = fmt.Fprintf(errw, "sha256sum: %s: No such file or directory\n", argv[1])
			return exit(1, "sha256sum")
		}
		_, _ = fmt.Fprintf(out, "%s  %s\n", digestHex(b), argv[1])
	case "chmod":
		if _, ok := c.files[argv[2]]; !ok {
			return exit(1, "chmod: %s: No such file", argv[2])
		}
		c.modes[argv[2]] = 0o755
	case "mv":
		src, dst := argv[2], argv[3]
		c.files[dst], c.modes[dst] = c.files[src], c.modes[src]
		delete(c.files, src)
		delete(c.modes, src)
	case "ls":
		var names []string
		for p := range c.files {
			if path.Dir(p) == argv[2] {
				names = append(names, path.Base(p))
			}
		}
		sort.Strings(names)
		for _, n := range names {
			_, _ = fmt.Fprintln(out, n)
		}
	case "rm":
		for _, p := range argv[2:] {
			delete(c.files, p)
		}
	}
	return nil // mkdir: directories are implied
}

// agentDir writes agent builds (made-up contents) for archs into a directory.
func agentDir(t *testing.T, c *fakeContainer, archs ...string) (string, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	builds := map[string][]byte{}
	for _, a := range archs {
		b := bytes.Repeat([]byte("vpcgw-agent for linux/"+a+"\n"), 50_000) // about 1 MB
		builds[a] = b
		c.agents[string(b)] = true
		if err := os.WriteFile(filepath.Join(dir, "vpcgw-agent-linux-"+a), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, builds
}

func digestHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// covers: K5, O5
// The container has no agent: Dial copies the build for the container's architecture (arm64
// here, on a controller with both), verified by digest, and runs it from there with the agent
// command's flags; a second stream to the same container copies nothing; a restarted container
// (its filesystem fresh) gets it again; an older copy left by an earlier version is removed.
func TestAgentDelivery(t *testing.T) {
	for _, mode := range execModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			ctr := newFakeContainer("aarch64", nil)
			dir, builds := agentDir(t, ctr, "amd64", "arm64")
			bins, err := LoadAgentBinaries(dir)
			if err != nil {
				t.Fatal(err)
			}
			e := newExecEnv(t, mode.translate, WithExecProtocol(mode.proto), WithAgentDelivery(bins), WithExecCommand("vpcgw-agent", "--v", "1"))
			ctr.pods = e.pods
			e.kubelet.setAgent(ctr.run)
			stale := path.Join(AgentInstallDir, "vpcgw-agent-0123456789abcdef")
			ctr.files[stale] = []byte("an agent of an earlier vpcgw")

			installed := path.Join(AgentInstallDir, "vpcgw-agent-"+digestHex(builds["arm64"])[:16])
			st := testState(1, 3, 2, 80)
			c := e.dial(t)
			mustApplyConn(t, c, st)
			e.wantTable(t, st)
			if got := ctr.files[installed]; !bytes.Equal(got, builds["arm64"]) {
				t.Fatalf("%s holds %d bytes, not the arm64 build", installed, len(got))
			}
			if _, ok := ctr.files[stale]; ok {
				t.Error("the earlier version's copy was not removed")
			}
			calls := e.kubelet.execCalls()
			if last := calls[len(calls)-1].Cmd; !slices.Equal(last, []string{installed, "--v", "1"}) {
				t.Fatalf("the agent ran as %q, want the copy with the command's flags", last)
			}
			for _, call := range calls {
				if slices.Contains([]string{"sh", "bash", "ash"}, call.Cmd[0]) {
					t.Fatalf("a shell was run: %q", call.Cmd)
				}
			}

			// A new stream to the same container: verified, not copied again.
			_ = c.Close()
			c = e.dial(t)
			mustApplyConn(t, c, testState(2, 3, 2, 80))
			if n := ctr.ran("dd"); n != 1 {
				t.Fatalf("%d copies for two streams into one container, want 1", n)
			}

			// The container restarts: its filesystem is fresh, the next stream copies again.
			_ = c.Close()
			ctr.restart()
			e.pods.restart(testNS + "/" + testPod)
			c = e.dial(t)
			mustApplyConn(t, c, st)
			e.wantTable(t, st)
			if n := ctr.ran("dd"); n != 2 {
				t.Fatalf("%d copies after a container restart, want 2", n)
			}
		})
	}
}

// covers: K5, O5
// What cannot work is refused with a message that says why, and no agent is started: a
// directory without builds, a container architecture vpcgw has no build for or does not know,
// and a copy whose digest does not verify (it is removed).
func TestAgentDeliveryErrors(t *testing.T) {
	if _, err := LoadAgentBinaries(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "agent binaries") {
		t.Errorf("a missing directory: %v", err)
	}
	if _, err := LoadAgentBinaries(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no vpcgw-agent-linux-<GOARCH> file") {
		t.Errorf("a directory without builds: %v", err)
	}
	for _, tc := range []struct {
		name, machine string
		archs         []string
		corrupt       bool
		want          string
	}{
		{"no build for the architecture", "aarch64", []string{"amd64"}, false, "no agent build for arm64"},
		{"an architecture vpcgw does not build for", "mips", []string{"amd64"}, false, `architecture "mips"`},
		{"a copy that does not verify", "x86_64", []string{"amd64"}, true, "does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := newFakePods()
			ctr := newFakeContainer(tc.machine, pods)
			ctr.corrupt = tc.corrupt
			dir, _ := agentDir(t, ctr, tc.archs...)
			bins, err := LoadAgentBinaries(dir)
			if err != nil {
				t.Fatal(err)
			}
			e := newExecEnv(t, true, WithAgentDelivery(bins))
			e.kubelet.setAgent(ctr.run)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := e.exec.Dial(ctx, testInst)
			if err == nil {
				_ = c.Close()
				t.Fatal("Dial succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			for _, call := range e.kubelet.execCalls() {
				if strings.HasPrefix(call.Cmd[0], AgentInstallDir) {
					t.Fatalf("an agent was started: %q", call.Cmd)
				}
			}
			for p := range ctr.files {
				if strings.Contains(p, ".part-") {
					t.Fatalf("the unfinished copy %s was left", p)
				}
			}
		})
	}
}
