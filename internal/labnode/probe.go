package labnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

// runReadiness probes the running container per its readinessProbe (exec, tcpSocket, httpGet;
// from inside the pod's network namespace, as the host cannot reach the lab's pod addresses)
// until ctx ends, and sets its readiness per the probe's thresholds, as the kubelet's prober does.
// Liveness and startup probes are not run.
func (c *containerRunner) runReadiness(ctx context.Context, p *corev1.Probe) {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	success, failure := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	t := time.NewTicker(period)
	defer t.Stop()
	var oks, fails int32
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.probeOnce(pctx, p)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			oks, fails = oks+1, 0
		} else {
			oks, fails = 0, fails+1
		}
		c.mu.Lock()
		was := c.ready
		switch {
		case oks >= success:
			c.ready = c.running
		case fails >= failure:
			c.ready = false
		}
		changed := was != c.ready
		c.mu.Unlock()
		if changed {
			c.w.log.Info("readiness changed", "container", c.spec.Name, "ready", !was, "probeError", err)
			c.notify()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *containerRunner) probeOnce(ctx context.Context, p *corev1.Probe) error {
	ips := c.w.podIPs()
	host := ""
	if len(ips) > 0 {
		host = ips[0]
	}
	switch {
	case p.Exec != nil:
		code, out, err := c.execCapture(ctx, p.Exec.Command)
		if err != nil {
			return err
		}
		if code != 0 {
			return fmt.Errorf("exit code %d: %s", code, out)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := c.port(p.TCPSocket.Port)
		if err != nil {
			return err
		}
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
		conn, err := c.dialInPod(ctx, net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case p.HTTPGet != nil:
		code, err := c.httpGet(ctx, p.HTTPGet, "probe")
		if err != nil {
			return err
		}
		if code < 200 || code >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", code)
		}
		return nil
	default:
		return fmt.Errorf("unsupported probe handler")
	}
}

// httpGet sends an httpGet action's request from inside the pod's network namespace, as the
// kubelet's prober and lifecycle handlers do (User-Agent kube-<purpose>/1.37, to the Pod's IP
// unless the action names a host), and returns the response's status code.
func (c *containerRunner) httpGet(ctx context.Context, g *corev1.HTTPGetAction, purpose string) (int, error) {
	port, err := c.port(g.Port)
	if err != nil {
		return 0, err
	}
	host := g.Host
	if host == "" {
		ips := c.w.podIPs()
		if len(ips) == 0 {
			return 0, errors.New("the pod has no IP")
		}
		host = ips[0]
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
	if err != nil {
		return 0, err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "kube-"+purpose+"/1.37")
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	}
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, _, addr string) (net.Conn, error) { return c.dialInPod(ctx, addr) },
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // as the kubelet's prober
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 0}).Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// port resolves a probe's port, by number or by the name of a container port.
func (c *containerRunner) port(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.spec.Name, p.StrVal)
}

// dialInPod opens a TCP connection from inside the pod's network namespace.
func (c *containerRunner) dialInPod(ctx context.Context, addr string) (net.Conn, error) {
	if c.pod.Spec.HostNetwork {
		// The pod's network is the node's: the kubelet's probe dials from where it runs.
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	netns, ok := c.w.netnsName()
	if !ok {
		return nil, errNotRunning
	}
	return netlab.DialInNetns(ctx, netns, "tcp", addr)
}
