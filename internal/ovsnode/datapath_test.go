// covers: V1, V3, O1
package ovsnode

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The topology of TestDataPath, the lab's own plan: a VPC router lr1 between the VPC subnet ls1
// (backend web-0, gateway vpc-nat-gw-lab-gw-0) and the clients' subnet ls2 (a client that is
// no Pod), the Vpc's static route 0.0.0.0/0 via the gateway, and a Service ClusterIP that only
// the gateway holds (on lo).
const (
	webIP     = "10.77.1.2"
	gwIP      = "10.77.1.254"
	clientIP  = "10.77.2.2"
	vip       = "10.96.0.10"
	port      = ":8080"
	policyPri = "29210"
)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// topology creates ls1 and ls2 behind lr1 with the static route, as kube-ovn-controller makes a
// Vpc with two Subnets (router ports "<vpc>-<subnet>", switch ports "<subnet>-<vpc>") and the
// logical switch ports kube-ovn-controller writes for the Pods ("<pod>.<ns>", addresses
// "MAC IP").
func topology(t *testing.T, e *env) {
	t.Helper()
	e.nbctl(t, "--wait=hv",
		"ls-add", "ls1", "--", "ls-add", "ls2", "--", "lr-add", "lr1",
		"--", "lrp-add", "lr1", "lr1-ls1", "02:00:00:77:01:01", "10.77.1.1/24",
		"--", "lrp-add", "lr1", "lr1-ls2", "02:00:00:77:02:01", "10.77.2.1/24",
		"--", "lsp-add", "ls1", "ls1-lr1", "--", "lsp-set-type", "ls1-lr1", "router",
		"--", "lsp-set-addresses", "ls1-lr1", "router", "--", "lsp-set-options", "ls1-lr1", "router-port=lr1-ls1",
		"--", "lsp-add", "ls2", "ls2-lr1", "--", "lsp-set-type", "ls2-lr1", "router",
		"--", "lsp-set-addresses", "ls2-lr1", "router", "--", "lsp-set-options", "ls2-lr1", "router-port=lr1-ls2",
		"--", "lsp-add", "ls1", "web-0.demo", "--", "lsp-set-addresses", "web-0.demo", "02:00:00:77:01:02 "+webIP,
		"--", "lsp-add", "ls1", "vpc-nat-gw-lab-gw-0.kube-system", "--", "lsp-set-addresses", "vpc-nat-gw-lab-gw-0.kube-system", "02:00:00:77:01:fe "+gwIP,
		"--", "lsp-add", "ls2", "lab-client", "--", "lsp-set-addresses", "lab-client", "02:00:00:77:02:02 "+clientIP,
		"--", "lr-route-add", "lr1", "0.0.0.0/0", gwIP)
}

func pod(name, ns, netns, macAddr, ip, gw string) Port {
	return Port{Pod: name, Namespace: ns, IfaceID: "", Iface: Iface{
		Netns: netns, MAC: mac(macAddr), IPs: []netip.Prefix{netip.MustParsePrefix(ip + "/24")},
		Gateways: []netip.Addr{netip.MustParseAddr(gw)}, DefaultRoute: true, WaitGateway: true,
	}}
}

// TestDataPath: Pods plugged as kube-ovn-cni plugs them reach each other through OVN's real
// data path (ovn-controller's flows in ovs-vswitchd): on one switch and across the router; a
// 29210 reroute policy delivers a VIP to the gateway that holds it (V1); OVN looks up routes
// before policies, so without a route covering the VIP, or with a discard route covering it,
// nothing is delivered (V3); an ovn-controller restart loses nothing; after an ovs-vswitchd
// restart traffic comes back.
func TestDataPath(t *testing.T) {
	e := startEnv(t, "lab-node", true)
	ctx := t.Context()

	// The pre-made chassis (kubeovnrun.AddNode's) gave its encap up; ovn-controller registered
	// the chassis under the system-id, with the node's name as host name.
	if got := e.sbctl(t, "--bare", "--columns=name", "find", "Chassis", "hostname=lab-node"); got != e.ch.SystemID() {
		t.Fatalf("SB chassis of host lab-node: %q, want only %q (the pre-made chassis-lab-node deleted)", got, e.ch.SystemID())
	}
	t.Logf("chassis %s started in %s", e.ch.SystemID(), e.ch.Startup().Round(time.Millisecond))

	topology(t, e)
	webNS, gwNS, cliNS := e.netns(t, "web"), e.netns(t, "gw"), e.netns(t, "cli")
	web := pod("web-0", "demo", webNS, "02:00:00:77:01:02", webIP, "10.77.1.1")
	web.ContainerID = containerID(t)
	gw := pod("vpc-nat-gw-lab-gw-0", "kube-system", gwNS, "02:00:00:77:01:fe", gwIP, "10.77.1.1")
	gw.ContainerID = containerID(t)
	cli := HostPort{IfaceID: "lab-client", HostIf: "cli0", Iface: Iface{
		Netns: cliNS, MAC: mac("02:00:00:77:02:02"), IPs: []netip.Prefix{netip.MustParsePrefix(clientIP + "/24")},
		Gateways: []netip.Addr{netip.MustParseAddr("10.77.2.1")}, DefaultRoute: true, WaitGateway: true,
	}}
	for _, p := range []Port{web, gw} {
		begin := time.Now()
		if err := e.ch.Plug(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Logf("plugged %s.%s in %s (gateway answering)", p.Pod, p.Namespace, time.Since(begin).Round(time.Millisecond))
	}
	if err := e.ch.PlugHost(ctx, cli); err != nil {
		t.Fatal(err)
	}

	t.Run("kube-ovn-cni's port", func(t *testing.T) {
		host, _, _ := NicNames(web.ContainerID, "eth0")
		out, err := e.ch.VSCtl(ctx, "get", "Interface", host, "external_ids")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`iface-id=web-0.demo`, `vendor=kube-ovn`, `pod_name=web-0`, `pod_namespace=demo`,
			`ip="` + webIP + `"`, `pod_netns="/var/run/netns/` + webNS + `"`, `ovn-installed="true"`} {
			if !strings.Contains(out, want) {
				t.Errorf("interface %s external_ids %s: no %s", host, strings.TrimSpace(out), want)
			}
		}
		if _, err := e.ch.VSCtl(ctx, "get", "Interface", host, "ofport"); err != nil {
			t.Error(err)
		}
		// OVN bound the logical switch port to this chassis.
		chassis := e.sbctl(t, "--bare", "--columns=_uuid", "find", "Chassis", "name="+e.ch.SystemID())
		if got := e.sbctl(t, "--bare", "--columns=chassis", "find", "Port_Binding", "logical_port=web-0.demo"); got != chassis {
			t.Errorf("Port_Binding web-0.demo chassis %q, want %q", got, chassis)
		}
		// The Pod's end: eth0 with the port's MAC and address, tx checksum offload off.
		out2, err := e.lab.Exec(webNS, "ip", "-br", "link", "show", "eth0")
		if err != nil || !strings.Contains(string(out2), "02:00:00:77:01:02") {
			t.Errorf("web-0's eth0: %s %v", out2, err)
		}
		off, err := e.lab.Exec(webNS, "ethtool", "-k", "eth0")
		if err != nil || !strings.Contains(string(off), "tx-checksumming: off") {
			t.Errorf("web-0's eth0 offloads: %v\n%s", err, off)
		}
	})

	serve(t, webNS, webIP+port, "web-0")
	serve(t, gwNS, gwIP+port, "gw")
	if _, err := e.lab.Exec(gwNS, "ip", "addr", "add", vip+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	vipSrv := serve(t, gwNS, vip+port, "gw-vip")

	t.Run("same switch", func(t *testing.T) {
		expectAnswer(t, webNS, gwIP+port, "gw")
		expectAnswer(t, gwNS, webIP+port, "web-0")
	})
	t.Run("across the router", func(t *testing.T) {
		expectAnswer(t, cliNS, webIP+port, "web-0")
		expectAnswer(t, cliNS, gwIP+port, "gw")
	})
	// The static route sends the VIP to the gateway anyway: prove the policy on its own by
	// giving it a next hop that is not the route's. Here the route goes nowhere (a discard
	// route for the VIP's /12 would drop it first, V3), so take the route to web-0 and let the
	// policy reroute to the gateway.
	e.nbctl(t, "lr-route-del", "lr1", "0.0.0.0/0")
	e.nbctl(t, "--wait=hv", "lr-route-add", "lr1", "0.0.0.0/0", webIP)
	t.Run("29210 policy delivers the VIP to the gateway", func(t *testing.T) {
		// Without the policy the route leads to web-0, which does not hold the VIP.
		expectNothing(t, cliNS, vip+port, vipSrv, 2)
		e.nbctl(t, "--wait=hv", "lr-policy-add", "lr1", policyPri, "ip4.dst == "+vip, "reroute", gwIP)
		expectAnswer(t, cliNS, vip+port, "gw-vip")
		expectAnswer(t, webNS, vip+port, "gw-vip")
	})
	t.Run("no route covering the VIP: the policy delivers nothing", func(t *testing.T) {
		e.nbctl(t, "--wait=hv", "lr-route-del", "lr1", "0.0.0.0/0")
		expectNothing(t, cliNS, vip+port, vipSrv, 3)
		expectAnswer(t, cliNS, webIP+port, "web-0") // the connected subnets still route
		e.nbctl(t, "--wait=hv", "lr-route-add", "lr1", "0.0.0.0/0", gwIP)
		expectAnswer(t, cliNS, vip+port, "gw-vip")
	})
	t.Run("a discard route covering the VIP: nothing delivered", func(t *testing.T) {
		e.nbctl(t, "--wait=hv", "lr-route-add", "lr1", "10.96.0.0/12", "discard")
		expectNothing(t, cliNS, vip+port, vipSrv, 3)
		e.nbctl(t, "--wait=hv", "lr-route-del", "lr1", "10.96.0.0/12")
		expectAnswer(t, cliNS, vip+port, "gw-vip")
	})

	t.Run("ovn-controller restart loses nothing", func(t *testing.T) {
		p := startProber(cliNS, vip+port, "gw-vip")
		p.waitOK(t, 20)
		for i := 0; i < 3; i++ {
			begin := time.Now()
			if err := e.ch.RestartOVNController(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("ovn-controller restarted in %s", time.Since(begin).Round(time.Millisecond))
			p.waitOK(t, 20)
		}
		ok, failed, last := p.stop()
		t.Logf("%d requests through the policy across 3 restarts, %d failed", ok+failed, failed)
		if failed != 0 {
			t.Errorf("%d of %d requests failed across the ovn-controller restarts (last: %v)", failed, ok+failed, last)
		}
	})

	t.Run("ovs-vswitchd restart: traffic comes back", func(t *testing.T) {
		expectAnswer(t, cliNS, vip+port, "gw-vip")
		begin := time.Now()
		if err := e.ch.RestartVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		returned := time.Since(begin)
		back := eventually(t, 30*time.Second, "traffic through the policy after the ovs-vswitchd restart", func() error {
			got, err := request(cliNS, vip+port, 100*time.Millisecond)
			if err == nil && got != "gw-vip" {
				t.Fatalf("answered by %q", got)
			}
			return err
		})
		t.Logf("ovs-vswitchd restart: RestartVswitchd returned after %s; traffic back %s after that (%s after the stop)",
			returned.Round(time.Millisecond), back.Round(time.Millisecond), (returned + back).Round(time.Millisecond))
		expectAnswer(t, webNS, gwIP+port, "gw")
		expectAnswer(t, cliNS, webIP+port, "web-0")
	})

	t.Run("a port without a logical switch port is named in the error", func(t *testing.T) {
		ns := e.netns(t, "lost")
		p := pod("lost", "demo", ns, "02:00:00:77:01:33", "10.77.1.33", "10.77.1.1")
		p.ContainerID = containerID(t)
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := e.ch.Plug(short, p)
		if err == nil || !strings.Contains(err.Error(), `"lost.demo"`) {
			t.Fatalf("Plug of a Pod without a logical switch port: %v; want an error naming lost.demo", err)
		}
		t.Logf("as expected: %v", err)
		host, _, _ := NicNames(p.ContainerID, "eth0")
		if out, _ := e.ch.VSCtl(ctx, "list-ports", e.ch.Bridge()); strings.Contains(out, host) {
			t.Errorf("the failed plug left port %s on the bridge", host)
		}
	})

	t.Run("unplug", func(t *testing.T) {
		if err := e.ch.Unplug(ctx, web); err != nil {
			t.Fatal(err)
		}
		host, _, _ := NicNames(web.ContainerID, "eth0")
		out, err := e.ch.VSCtl(ctx, "list-ports", e.ch.Bridge())
		if err != nil || strings.Contains(out, host) {
			t.Errorf("ports after Unplug: %q %v; want no %s", out, err, host)
		}
		if out, err := e.lab.Exec(webNS, "ip", "-br", "link"); err != nil || strings.Contains(string(out), "eth0") {
			t.Errorf("web-0's links after Unplug: %s %v", out, err)
		}
		if _, err := request(cliNS, webIP+port, 300*time.Millisecond); err == nil {
			t.Error("web-0 still answers after Unplug")
		}
		if err := e.ch.UnplugHost(ctx, cli); err != nil {
			t.Fatal(err)
		}
	})

	if err := e.ch.Check(); err != nil {
		t.Errorf("after the test: %v", err)
	}
	use, err := e.ch.Usage()
	if err != nil {
		t.Error(err)
	}
	for _, u := range use {
		t.Logf("%-14s pid %-7d up %-6s CPU %-7s (%.1f%%) RSS %.1f MiB (peak %.1f) threads %d", u.Name, u.PID,
			u.Started.Round(100*time.Millisecond), u.CPU, 100*u.CPU.Seconds()/u.Started.Seconds(),
			float64(u.RSS)/(1<<20), float64(u.PeakRSS)/(1<<20), u.Threads)
	}
}

// prober sends one request after another (10 ms apart) until stopped, counting answers and
// failures.
type prober struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	last       error
	quit       chan struct{}
	done       chan struct{}
}

func startProber(ns, addr, want string) *prober {
	p := &prober{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			got, err := request(ns, addr, 500*time.Millisecond)
			if err == nil && got != want {
				err = &net.AddrError{Err: "answered by " + got, Addr: addr}
			}
			if err != nil {
				p.failed.Add(1)
				p.mu.Lock()
				p.last = err
				p.mu.Unlock()
				continue
			}
			p.ok.Add(1)
		}
	}()
	return p
}

// waitOK waits until n more requests were answered.
func (p *prober) waitOK(t *testing.T, n int64) {
	t.Helper()
	target := p.ok.Load() + n
	eventually(t, 30*time.Second, "answers to the prober", func() error {
		if p.ok.Load() >= target {
			return nil
		}
		return context.DeadlineExceeded
	})
}

func (p *prober) stop() (ok, failed int64, last error) {
	close(p.quit)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok.Load(), p.failed.Load(), p.last
}
