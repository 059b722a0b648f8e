package netlab

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// EchoMain is a backend for tests and the lab (`vpcgw-lab echo --name be1 --listen 10.0.1.11:8080`):
// on the TCP port it serves HTTP, answering every request with "<name>\n"; on the UDP port of
// the same number it answers every datagram with "<name>\n". Once both listeners are bound it
// prints "listening <addr>" on stdout. It serves until ctx ends (the command's SIGTERM or SIGINT), then shuts down cleanly.
//
// With --drain D it drains as Kubernetes asks applications to: at SIGTERM, GET /healthz turns
// from 200 to 503 (a readiness probe on it marks the endpoint not serving, so the proxies stop
// sending it new flows and forget the kept ones), and it answers on, TCP and UDP, for D before
// it shuts down: what is still on its way to it when it is told to stop is answered.
//
// Two more answers help tests: GET /whoami (or a datagram "whoami") is answered with
// "<name> <client ip>", the source address the backend sees (hairpin SNAT); GET /stream?ms=N
// streams "<name>\n" every 10 ms for N milliseconds (a long transfer), then "<name> done\n".
//
// With --flows ADDR it also serves netlab's flow protocol (flows.go: long-lived request/response,
// upload, download and UDP sessions, each answer naming the backend) on ADDR, TCP and UDP.
func EchoMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	name := fs.String("name", "", "name to answer with")
	listen := fs.String("listen", "", "host:port to listen on (TCP and UDP)")
	drain := fs.Duration("drain", 0, "after SIGTERM, fail GET /healthz and answer on for this long before shutting down")
	flows := fs.String("flows", "", "host:port to serve the flow protocol on (TCP and UDP: rr, up, down, who; datagrams)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *listen == "" {
		return errors.New("echo: --name and --listen are required")
	}
	if *drain < 0 {
		return fmt.Errorf("echo: --drain %s is negative", *drain)
	}
	tl, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	ul, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if *flows != "" {
		fl, err := net.Listen("tcp", *flows)
		if err != nil {
			return fmt.Errorf("echo: flows: %w", err)
		}
		fp, err := net.ListenPacket("udp", *flows)
		if err != nil {
			_ = fl.Close() // the server does not start
			return fmt.Errorf("echo: flows: %w", err)
		}
		flowSrv := NewFlowServer(*name)
		flowSrv.Serve(fl, fp)
		defer flowSrv.Close() // with the server: its flows end with it
	}
	body := []byte(*name + "\n")
	var draining atomic.Bool
	errc := make(chan error, 2)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, addr, err := ul.ReadFrom(buf)
			if err != nil {
				errc <- fmt.Errorf("echo udp: %w", err)
				return
			}
			if strings.TrimSpace(string(buf[:n])) == "whoami" {
				_, _ = ul.WriteTo([]byte(*name+" "+hostOf(addr.String())+"\n"), addr)
				continue
			}
			_, _ = ul.WriteTo(body, addr)
		}
	}()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			switch r.URL.Path {
			case "/healthz":
				if draining.Load() {
					http.Error(w, "draining", http.StatusServiceUnavailable)
					return
				}
				_, _ = w.Write([]byte("ok\n"))
			case "/whoami":
				_, _ = fmt.Fprintf(w, "%s %s\n", *name, hostOf(r.RemoteAddr))
			case "/stream":
				ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
				end := time.Now().Add(time.Duration(ms) * time.Millisecond)
				flusher, _ := w.(http.Flusher)
				for time.Now().Before(end) {
					if _, err := w.Write(body); err != nil {
						return
					}
					if flusher != nil {
						flusher.Flush()
					}
					time.Sleep(10 * time.Millisecond)
				}
				_, _ = fmt.Fprintf(w, "%s done\n", *name)
			default:
				_, _ = w.Write(body)
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { errc <- fmt.Errorf("echo http: %w", srv.Serve(tl)) }()
	if _, err := fmt.Fprintf(os.Stdout, "listening %s\n", *listen); err != nil {
		return fmt.Errorf("echo: announce the listener: %w", err)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if *drain > 0 {
		draining.Store(true)
		select {
		case err := <-errc:
			return err
		case <-time.After(*drain):
		}
	}
	// SIGTERM or SIGINT: requests in flight get a moment to finish, as a Pod's grace period.
	_ = ul.Close()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("echo: shutting down: %w", err)
	}
	return nil
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// StartEcho starts an echo server in ns as `<cmd...> --name <name> --listen <listen>` (cmd is the
// executable and its leading arguments, e.g. {"/usr/bin/vpcgw-lab", "echo"}) and returns once it
// listens.
func (l *Lab) StartEcho(ns string, cmd []string, name, listen string) (*Proc, error) {
	argv := append(append([]string(nil), cmd...), "--name", name, "--listen", listen)
	var stdout io.ReadCloser
	p, err := l.start(ns, argv, func(c *exec.Cmd, closers *[]io.Closer) error {
		var err error
		stdout, err = stdoutPipe(c, closers)
		return err
	})
	if err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			select {
			case lines <- s.Text():
			default:
			}
		}
		close(lines)
		_ = stdout.Close()
	}()
	line, ok := waitLine(lines, 10*time.Second)
	if !ok || !strings.HasPrefix(line, "listening ") {
		p.Stop()
		return nil, fmt.Errorf("echo %s in %s did not start (stdout %q): %s", name, ns, line, p.Stderr())
	}
	return p, nil
}
