package netlab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ProbeOptions describes a probe: Count requests to Target over Proto, each with its own
// connection (TCP) or socket (UDP), so that each is a new conntrack flow.
type ProbeOptions struct {
	Target  string        // host:port
	Proto   string        // "tcp" (HTTP GET Path), "udp", or "connect" (TCP connect and close)
	Count   int           // number of requests
	Timeout time.Duration // per request
	// Path is the HTTP path (default "/"); for UDP, "/whoami" sends the datagram "whoami".
	Path string
	// Source is the local address ("ip" or "ip:port") to send from; empty: the kernel picks.
	// With a port, UDP requests reuse that source port, so they belong to one conntrack flow.
	Source string
	// Body keeps the whole body as the answer (default: the last line).
	Body bool
	// Interval paces the requests: request i starts Interval*i after the first (0: each as soon
	// as the one before ended). A steady rate, as a client under test sends it.
	Interval time.Duration
}

// ProbeResult counts answers by body (trimmed), plus failed requests.
type ProbeResult struct {
	Answers   map[string]int `json:"answers"`
	Errors    int            `json:"errors"`
	LastError string         `json:"lastError,omitempty"`
	// Seconds is the wall time of all requests (for rates).
	Seconds float64 `json:"seconds"`
}

// Total is the number of answered requests.
func (r ProbeResult) Total() int {
	n := 0
	for _, c := range r.Answers {
		n += c
	}
	return n
}

// DoProbe runs the probe from the current network namespace.
func DoProbe(ctx context.Context, o ProbeOptions) (res ProbeResult) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	res = ProbeResult{Answers: map[string]int{}}
	if o.Path == "" {
		o.Path = "/"
	}
	var local net.Addr
	if o.Source != "" {
		src := o.Source
		if _, _, err := net.SplitHostPort(src); err != nil {
			src = net.JoinHostPort(src, "0")
		}
		ap, err := netip.ParseAddrPort(src)
		if err != nil {
			res.Errors = o.Count
			res.LastError = fmt.Sprintf("bad source %q: %v", o.Source, err)
			return res
		}
		if o.Proto == "udp" {
			local = net.UDPAddrFromAddrPort(ap)
		} else {
			local = net.TCPAddrFromAddrPort(ap)
		}
	}
	dialer := &net.Dialer{Timeout: o.Timeout, LocalAddr: local}
	client := &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: dialer.DialContext},
		Timeout:   o.Timeout,
	}
	start := time.Now()
	defer func() { res.Seconds = time.Since(start).Seconds() }()
	for i := 0; i < o.Count; i++ {
		if o.Interval > 0 {
			select {
			case <-ctx.Done():
				res.Errors += o.Count - i
				res.LastError = ctx.Err().Error()
				return res
			case <-time.After(time.Until(start.Add(time.Duration(i) * o.Interval))):
			}
		}
		var body string
		var err error
		switch o.Proto {
		case "udp":
			body, err = udpRequest(ctx, dialer, o.Target, o.Path, o.Timeout)
		case "connect":
			var c net.Conn
			if c, err = dialer.DialContext(ctx, "tcp", o.Target); err == nil {
				_ = c.(*net.TCPConn).SetLinger(0) // close with RST: no TIME_WAIT, no port exhaustion
				_ = c.Close()
				body = "connected"
			}
		default:
			body, err = httpRequest(ctx, client, o.Target, o.Path, o.Body)
		}
		if err != nil {
			res.Errors++
			res.LastError = err.Error()
			continue
		}
		res.Answers[body]++
	}
	return res
}

func httpRequest(ctx context.Context, client *http.Client, target, path string, whole bool) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }() // a response read: nothing to lose on close
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	text := strings.TrimSpace(string(b))
	if !whole {
		text = text[strings.LastIndexByte(text, '\n')+1:]
	}
	return text, nil
}

func udpRequest(ctx context.Context, d *net.Dialer, target, path string, timeout time.Duration) (string, error) {
	c, err := d.DialContext(ctx, "udp", target)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }() // the reply, read in full, is the answer
	_ = c.SetDeadline(time.Now().Add(timeout))
	msg := "ping\n"
	if path == "/whoami" {
		msg = "whoami\n"
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// ProbeMain is `vpcgw-lab probe --target host:port [--proto tcp|udp] [--count N] [--timeout 2s]`:
// it runs DoProbe and prints the ProbeResult as one JSON line on stdout.
func ProbeMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	var o ProbeOptions
	fs.StringVar(&o.Target, "target", "", "host:port to probe")
	fs.StringVar(&o.Proto, "proto", "tcp", "tcp (HTTP GET), udp, or connect (TCP connect and close)")
	fs.StringVar(&o.Path, "path", "/", "HTTP path; /whoami also selects the UDP whoami request")
	fs.StringVar(&o.Source, "source", "", "local ip or ip:port to send from")
	fs.BoolVar(&o.Body, "body", false, "keep the whole body as the answer (default: its last line)")
	fs.IntVar(&o.Count, "count", 10, "number of requests")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "timeout per request")
	fs.DurationVar(&o.Interval, "interval", 0, "time between the starts of two requests (0: back to back)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Target == "" {
		return errors.New("probe: --target is required")
	}
	if o.Proto != "tcp" && o.Proto != "udp" && o.Proto != "connect" {
		return fmt.Errorf("probe: --proto %q is not tcp, udp or connect", o.Proto)
	}
	return json.NewEncoder(os.Stdout).Encode(DoProbe(ctx, o))
}

// Probe runs `<cmd...> --target .. --proto .. --count .. --timeout ..` inside ns (cmd is the
// executable and its leading arguments, e.g. {"/usr/bin/vpcgw-lab", "probe"}) and returns its result.
func (l *Lab) Probe(ns string, cmd []string, o ProbeOptions) (ProbeResult, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Proto == "" {
		o.Proto = "tcp"
	}
	argv := append([]string{"netns", "exec", ns}, cmd...)
	argv = append(argv, "--target", o.Target, "--proto", o.Proto, "--count", strconv.Itoa(o.Count), "--timeout", o.Timeout.String())
	if o.Path != "" {
		argv = append(argv, "--path", o.Path)
	}
	if o.Source != "" {
		argv = append(argv, "--source", o.Source)
	}
	if o.Body {
		argv = append(argv, "--body")
	}
	if o.Interval > 0 {
		argv = append(argv, "--interval", o.Interval.String())
	}
	c := exec.Command("ip", argv...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	var res ProbeResult
	if err := c.Run(); err != nil {
		return res, fmt.Errorf("probe in %s: %w: %s", ns, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); err != nil {
		return res, fmt.Errorf("probe in %s: bad output %q: %w", ns, stdout.String(), err)
	}
	return res, nil
}
