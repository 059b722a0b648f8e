// covers: L11 (the demo backend drains as Kubernetes asks: not ready at SIGTERM, answering on)
package netlab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startEcho runs EchoMain on a free loopback port; it returns the address and the server's end.
func startEcho(ctx context.Context, t *testing.T, args ...string) (string, <-chan error) {
	t.Helper()
	var last error
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		done := make(chan error, 1)
		go func() { done <- EchoMain(ctx, append([]string{"--name", "be1", "--listen", addr}, args...)) }()
		last = waitServing(addr, done)
		if last == nil {
			return addr, done
		}
	}
	t.Fatalf("echo: no free loopback port after 20 tries: %v", last)
	return "", nil
}

// waitServing waits until the echo server answers /healthz, or says how it ended.
func waitServing(addr string, done <-chan error) error {
	for {
		if code, _ := get(addr, "/healthz"); code == http.StatusOK {
			return nil
		}
		select {
		case err := <-done:
			// It ended before it served (its port was taken meanwhile): the caller tries another.
			return fmt.Errorf("echo on %s ended before it served: %v", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func get(addr, path string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// udpAsk is one UDP request to addr, as the probe sends it.
func udpAsk(addr string) (string, error) {
	return udpRequest(context.Background(), &net.Dialer{}, addr, "/", time.Second)
}

func TestEchoDrainsAfterSIGTERM(t *testing.T) {
	ctx, sigterm := context.WithCancel(context.Background())
	addr, done := startEcho(ctx, t, "--drain", "2s")
	if got, err := udpAsk(addr); err != nil || got != "be1" {
		t.Fatalf("UDP before SIGTERM: %q, %v", got, err)
	}
	sigterm()
	// Not ready from SIGTERM on, so that the proxies stop using it ...
	deadline := time.After(5 * time.Second)
	for code, body := get(addr, "/healthz"); code != http.StatusServiceUnavailable; code, body = get(addr, "/healthz") {
		select {
		case <-deadline:
			t.Fatalf("/healthz after SIGTERM: %d %q, want 503", code, body)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// ... yet still answering what reaches it, TCP and UDP.
	if code, body := get(addr, "/"); code != http.StatusOK || body != "be1\n" {
		t.Errorf("GET / while draining: %d %q, want 200 \"be1\\n\"", code, body)
	}
	if got, err := udpAsk(addr); err != nil || got != "be1" {
		t.Errorf("UDP while draining: %q, %v", got, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("echo ended with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("echo still running 15 s after SIGTERM with --drain 2s")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Error("echo still accepts TCP after it ended")
	}
}

func TestEchoWithoutDrainStopsAtSIGTERM(t *testing.T) {
	ctx, sigterm := context.WithCancel(context.Background())
	addr, done := startEcho(ctx, t)
	sigterm()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("echo ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("echo still running 10 s after SIGTERM")
	}
	if code, _ := get(addr, "/healthz"); code != 0 {
		t.Errorf("GET /healthz after the end: %d, want no answer", code)
	}
}

func TestEchoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--name", "be1", "--listen", "127.0.0.1:1", "--drain", "-1s"},
		{"--name", "be1", "--listen", "127.0.0.1:1", "--drain", "soon"},
		{"--listen", "127.0.0.1:1"},
	} {
		err := EchoMain(context.Background(), args)
		if err == nil {
			t.Errorf("EchoMain(%q) = nil, want an error", args)
			continue
		}
		if !strings.Contains(err.Error(), "drain") && !strings.Contains(err.Error(), "required") {
			t.Errorf("EchoMain(%q) = %v, want it to name the bad flag", args, err)
		}
	}
}
