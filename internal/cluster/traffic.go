package cluster

import (
	"context"
	"maps"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

// TrafficStream is one client's steady requests: from the network namespace Netns to Target
// ("tcp" is an HTTP GET on a new connection, "udp" a datagram from a new socket).
type TrafficStream struct {
	Name, Netns, Proto, Target string
}

// DemoStreams are the four ways a user reaches a served Service: TCP and UDP from the external
// client through the EIP (its first ingress) and from the VPC client to the ClusterIP, for each
// of svc's TCP and UDP ports but the flow protocol's (DemoFlowsPortName, DemoFlowsUDPPortName),
// which speaks no HTTP.
func (c *Cluster) DemoStreams(svc *corev1.Service) []TrafficStream {
	var out []TrafficStream
	for _, p := range svc.Spec.Ports {
		proto := map[corev1.Protocol]string{corev1.ProtocolTCP: "tcp", corev1.ProtocolUDP: "udp"}[p.Protocol]
		if proto == "" || p.Name == DemoFlowsPortName || p.Name == DemoFlowsUDPPortName {
			continue
		}
		port := strconv.Itoa(int(p.Port))
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 && ing[0].IP != "" {
			out = append(out, TrafficStream{Name: "external " + proto + " " + ing[0].IP, Netns: c.ExternalClient(), Proto: proto,
				Target: net.JoinHostPort(ing[0].IP, port)})
		}
		if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			out = append(out, TrafficStream{Name: "vpc " + proto + " " + svc.Spec.ClusterIP, Netns: c.VPCClient(), Proto: proto,
				Target: net.JoinHostPort(svc.Spec.ClusterIP, port)})
		}
	}
	return out
}

// TrafficCount is what one stream sent and got back.
type TrafficCount struct {
	Stream         string
	Sent, Answered int
	// Answers counts answers by backend (the echo server answers with its Pod's name).
	Answers   map[string]int
	LastError string
}

// Traffic is steady load at a fixed rate per stream, each stream a loop of probe processes of
// one second's requests each, until Stop.
type Traffic struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	counts []TrafficCount
	errs   []error
}

// StartTraffic sends rate requests per second on every stream until Stop. A request that gets
// no answer within the probe's timeout (2 s) is counted as lost.
func (c *Cluster) StartTraffic(ctx context.Context, streams []TrafficStream, rate int) *Traffic {
	ctx, cancel := context.WithCancel(ctx)
	t := &Traffic{cancel: cancel, counts: make([]TrafficCount, len(streams))}
	interval := time.Second / time.Duration(max(rate, 1))
	for i, st := range streams {
		t.counts[i] = TrafficCount{Stream: st.Name, Answers: map[string]int{}}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for ctx.Err() == nil {
				r, err := c.net.Probe(st.Netns, []string{c.opts.Bins.Lab, "probe"},
					netlab.ProbeOptions{Proto: st.Proto, Target: st.Target, Count: rate, Interval: interval})
				t.mu.Lock()
				if err != nil {
					t.errs = append(t.errs, err)
				} else {
					t.add(i, r)
				}
				t.mu.Unlock()
			}
		}()
	}
	return t
}

func (t *Traffic) add(i int, r netlab.ProbeResult) {
	tc := &t.counts[i]
	tc.Sent += r.Total() + r.Errors
	tc.Answered += r.Total()
	for who, n := range r.Answers {
		tc.Answers[who] += n
	}
	if r.LastError != "" {
		tc.LastError = r.LastError
	}
}

// Stop ends the traffic once every stream's current second of requests is done (no request is
// cut short) and returns the counts, with the errors of probes that could not run at all.
func (t *Traffic) Stop() ([]TrafficCount, []error) {
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts, t.errs
}

// Snapshot is the counts so far (the probes under way not yet in them).
func (t *Traffic) Snapshot() []TrafficCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]TrafficCount, len(t.counts))
	for i, tc := range t.counts {
		out[i] = tc
		out[i].Answers = maps.Clone(tc.Answers)
	}
	return out
}

// DemoFlows are long-lived flows of every kind (netlab's flow protocol: request/response,
// upload, download, UDP session) on the demo Service's flows port: from the external client to
// its EIP (its first ingress) and from the VPC client to its ClusterIP and to its EIP (hairpin,
// SPEC D4). Transfers move bytes at rate; deadline bounds each connection. The flows are not
// started.
func (c *Cluster) DemoFlows(svc *corev1.Service, bytes, rate int64, deadline time.Duration) []*netlab.Flow {
	port := strconv.Itoa(FlowsPort)
	type client struct {
		name, ns, via, target string
		hairpin               bool
	}
	var clients []client
	eip := ""
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 && ing[0].IP != "" {
		eip = net.JoinHostPort(ing[0].IP, port)
		clients = append(clients, client{"ext", c.ExternalClient(), "EIP", eip, false})
	}
	if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		clients = append(clients, client{"vcli", c.VPCClient(), "ClusterIP", net.JoinHostPort(svc.Spec.ClusterIP, port), true})
	}
	if eip != "" {
		clients = append(clients, client{"vcli", c.VPCClient(), "EIP", eip, true})
	}
	var flows []*netlab.Flow
	for _, cl := range clients {
		for _, kind := range netlab.FlowKinds {
			flows = append(flows, &netlab.Flow{Kind: kind, Client: cl.name, Via: cl.via, Netns: cl.ns, Target: cl.target,
				Hairpin: cl.hairpin, Seed: uint64(len(flows) + 1), Bytes: bytes, Rate: rate, Deadline: deadline})
		}
	}
	return flows
}
