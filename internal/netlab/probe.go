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
	Proto   string        // "tcp" (HTTP GET /) or "udp"
	Count   int           // number of requests
	Timeout time.Duration // per request
}

// ProbeResult counts answers by body (trimmed), plus failed requests.
type ProbeResult struct {
	Answers   map[string]int `json:"answers"`
	Errors    int            `json:"errors"`
	LastError string         `json:"lastError,omitempty"`
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
func DoProbe(ctx context.Context, o ProbeOptions) ProbeResult {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	res := ProbeResult{Answers: map[string]int{}}
	client := &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
		Timeout:   o.Timeout,
	}
	for i := 0; i < o.Count; i++ {
		var body string
		var err error
		if o.Proto == "udp" {
			body, err = udpRequest(ctx, o.Target, o.Timeout)
		} else {
			body, err = httpRequest(ctx, client, o.Target)
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

func httpRequest(ctx context.Context, client *http.Client, target string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

func udpRequest(ctx context.Context, target string, timeout time.Duration) (string, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "udp", target)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// ProbeMain is `vpcgw probe --target host:port [--proto tcp|udp] [--count N] [--timeout 2s]`:
// it runs DoProbe and prints the ProbeResult as one JSON line on stdout.
func ProbeMain(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	var o ProbeOptions
	fs.StringVar(&o.Target, "target", "", "host:port to probe")
	fs.StringVar(&o.Proto, "proto", "tcp", "tcp (HTTP GET /) or udp")
	fs.IntVar(&o.Count, "count", 10, "number of requests")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "timeout per request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Target == "" {
		return errors.New("probe: --target is required")
	}
	if o.Proto != "tcp" && o.Proto != "udp" {
		return fmt.Errorf("probe: --proto %q is not tcp or udp", o.Proto)
	}
	return json.NewEncoder(os.Stdout).Encode(DoProbe(context.Background(), o))
}

// Probe runs `<cmd...> --target .. --proto .. --count .. --timeout ..` inside ns (cmd is the
// executable and its leading arguments, e.g. {"/usr/bin/vpcgw", "probe"}) and returns its result.
func (l *Lab) Probe(ns string, cmd []string, o ProbeOptions) (ProbeResult, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Proto == "" {
		o.Proto = "tcp"
	}
	argv := append([]string{"netns", "exec", ns}, cmd...)
	argv = append(argv, "--target", o.Target, "--proto", o.Proto, "--count", strconv.Itoa(o.Count), "--timeout", o.Timeout.String())
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
