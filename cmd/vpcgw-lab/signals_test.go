package main

import (
	"bufio"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// covers: O1
// The lab's long-running helpers end cleanly on SIGTERM and SIGINT, as a container's first
// process must when its Pod is deleted: the echo backend shuts its listeners down and exits 0,
// a probe stops sending and prints what it counted. Before, main caught the signals for a
// context that these commands never read, so they ran on until SIGKILL.
func TestLongRunningHelpersEndOnSignals(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "vpcgw-lab")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/vpcgw/vpcgw/cmd/vpcgw-lab").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	freeAddr := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		return l.Addr().String()
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run("echo/"+sig.String(), func(t *testing.T) {
			addr := freeAddr()
			cmd := exec.Command(exe, "echo", "--name", "be1", "--listen", addr)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "listening ") {
				t.Fatalf("echo did not start: %q, %v", line, err)
			}
			endsCleanly(t, cmd, sig)
			if c, err := net.Dial("tcp", addr); err == nil {
				_ = c.Close()
				t.Fatalf("echo still accepts on %s after %s", addr, sig)
			}
		})
		t.Run("probe/"+sig.String(), func(t *testing.T) {
			// A UDP target that reads and never answers: each of the many requests waits its
			// whole timeout, and the first datagram says the probe runs (past its start).
			target, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = target.Close() }()
			cmd := exec.Command(exe, "probe", "--target", target.LocalAddr().String(), "--proto", "udp", "--count", "100000", "--timeout", "1s")
			var out strings.Builder
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			if err := target.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := target.ReadFrom(make([]byte, 512)); err != nil {
				t.Fatalf("no request from the probe: %v", err)
			}
			endsCleanly(t, cmd, sig)
			if !strings.Contains(out.String(), `"errors"`) {
				t.Fatalf("the probe printed no result after %s: %q", sig, out.String())
			}
		})
	}
}

// endsCleanly sends sig to cmd and requires it to exit 0 (within a bound far above any clean
// shutdown, so that only a process that ignores the signal fails).
func endsCleanly(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after %s: %v, want exit 0", sig, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after %s", sig)
	}
}
