package bench

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/vishvananda/netns"

	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// inNetns runs f on a goroutine locked to a thread that entered namespace ns. The thread is never
// unlocked, so Go discards it when f returns. Netlink sockets opened in f stay in ns; the nft
// binary started from that thread runs in ns.
func inNetns(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = h.Close() }() // the handle of a namespace this thread entered; nothing to lose
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// withBackends returns id with new backends, normalized (sorted) as the agent requires.
func withBackends(id gwstate.Identity, ips []string) gwstate.Identity {
	st := gwstate.State{Identities: []gwstate.Identity{identity(id.VIP, id.Port, ips)}}
	st.Normalize()
	return st.Identities[0]
}

// runBaseline loads ids into an empty gateway namespace of its own, then applies the changes
// in seq (Service indexes, each moving that Service's endpoint window by one, as the churn did)
// the way upstream kube-ovn programs share rules: one `nft -f` transaction per changed identity,
// one after the other, nothing coalesced. The changes arrive at rate per second; a change's
// latency runs from its arrival to the end of its transaction, so a baseline slower than the
// rate queues.
func runBaseline(ctx context.Context, ids []gwstate.Identity, seq []int, rate float64) (*BaselineResult, error) {
	nl, err := netlab.New("bb")
	if err != nil {
		return nil, err
	}
	defer func() { _ = nl.Cleanup() }()
	ns, err := nl.AddNetns("gw")
	if err != nil {
		return nil, err
	}
	res := &BaselineResult{LoadAvg: loadAvg()}
	var applyT, latT []time.Duration
	err = inNetns(ns, func() error {
		// The agent's text path: knftables, one `nft -f -` per Apply; Apply diffs against the
		// committed state, so a one-identity change is a one-identity transaction.
		a, err := dataplane.NewKernelAgent(dataplane.Config{TextPath: true, NoLoopback: true, NoConntrack: true}, logr.Discard())
		if err != nil {
			return err
		}
		st := gwstate.State{Generation: 1, Identities: slices.Clone(ids)}
		st.Normalize()
		pos := make(map[gwstate.IdentityKey]int, len(st.Identities))
		for p, id := range st.Identities {
			pos[id.Key()] = p
		}
		t0 := time.Now()
		if err := a.Apply(ctx, st); err != nil {
			return fmt.Errorf("loading %d identities: %w", len(ids), err)
		}
		res.InitS = time.Since(t0).Seconds()
		offset := map[int]int{}
		start := time.Now()
		for k, i := range seq {
			at := start.Add(time.Duration(float64(k) / rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			offset[i]++
			p := pos[ids[i].Key()]
			next := st
			next.Generation++
			next.Identities = slices.Clone(st.Identities)
			next.Identities[p] = withBackends(ids[i], endpointIPs(i, offset[i], len(ids[i].Backends)))
			t := time.Now()
			if err := a.Apply(ctx, next); err != nil {
				return fmt.Errorf("change %d: %w", k, err)
			}
			done := time.Now()
			applyT = append(applyT, done.Sub(t))
			latT = append(latT, done.Sub(at))
			st = next
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Apply, res.Latency = percentiles(applyT), percentiles(latT)
	return res, nil
}

var kernelTimeRE = regexp.MustCompile(`"kernelTime"="([^"]+)"`)

// agentColdApply applies ids to an empty table of a fresh namespace with a new in-process agent
// on the default (netlink) path, as the gateway's agent does at a cold start, and returns the
// Apply time and the kernel transaction's time (from the agent's own log).
func agentColdApply(ctx context.Context, ids []gwstate.Identity) (apply, kernel time.Duration, err error) {
	nl, err := netlab.New("bc")
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = nl.Cleanup() }()
	ns, err := nl.AddNetns("gw")
	if err != nil {
		return 0, 0, err
	}
	var mu sync.Mutex
	log := funcr.New(func(_, args string) {
		if m := kernelTimeRE.FindStringSubmatch(args); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil {
				mu.Lock()
				kernel = d
				mu.Unlock()
			}
		}
	}, funcr.Options{Verbosity: 1})
	err = inNetns(ns, func() error {
		a, err := dataplane.NewKernelAgent(dataplane.Config{NoLoopback: true, NoConntrack: true}, log)
		if err != nil {
			return err
		}
		st := gwstate.State{Generation: 1, Identities: slices.Clone(ids)}
		st.Normalize()
		t0 := time.Now()
		err = a.Apply(ctx, st)
		apply = time.Since(t0)
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	return apply, kernel, err
}
