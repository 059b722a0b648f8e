package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/version"
)

// sessions keeps one open stream per gateway instance, keyed by pod UID: a replaced instance (new
// UID) gets a new stream and with it the full state (SPEC L6).
type sessions struct {
	dialer       transport.Dialer
	applyTimeout time.Duration
	keepalive    time.Duration // 0: none
	log          logr.Logger
	// onEnded is called with the gateway of a stream that ended by itself (an agent exited, a pod
	// restarted its container): the gateway must be resynced even if nothing else changes.
	onEnded func(gateway string)

	mu    sync.Mutex
	byGw  map[string]map[types.UID]*session
	nextG int64 // generations are unique across all streams, which keeps logs unambiguous
	// status, when set, learns each instance's acknowledgements and agent version (SPEC O2).
	status StatusRecorder
}

type session struct {
	inst transport.Instance
	conn *transport.Conn
}

func newSessions(d transport.Dialer, applyTimeout time.Duration, log logr.Logger, onEnded func(string)) *sessions {
	return &sessions{dialer: d, applyTimeout: applyTimeout, log: log, onEnded: onEnded, byGw: map[string]map[types.UID]*session{}}
}

// applied is what the instances of a gateway acknowledged for one state.
type applied struct {
	// Generation is the state's generation.
	Generation int64
	// Refused are the identities some instance did not program, with the first instance's
	// reason (SPEC D8): their Services are quarantined (model.Planner.Quarantined).
	Refused map[gwstate.IdentityKey]string
}

// apply sends the state u to every instance of gateway gw, each its delta or the whole state
// (transport.Conn.Send), and waits for all acknowledgements (SPEC D7). The error is nil when
// every instance programmed the state, its refused identities aside. Streams of instances that
// are gone are closed.
func (s *sessions) apply(ctx context.Context, gw string, instances []transport.Instance, u gwstate.Update) (applied, error) {
	s.mu.Lock()
	live := s.byGw[gw]
	if live == nil {
		live = map[types.UID]*session{}
		s.byGw[gw] = live
	}
	want := map[types.UID]bool{}
	for _, inst := range instances {
		want[inst.UID] = true
	}
	var stale []*transport.Conn
	for uid, sess := range live {
		if !want[uid] {
			stale = append(stale, sess.conn)
			delete(live, uid)
		}
	}
	s.publishLocked(gw)
	s.nextG++
	u.Generation = s.nextG
	s.mu.Unlock()
	// Closing a stream can take seconds (the agent's grace period): never under the lock.
	for _, c := range stale {
		go func() { _ = c.Close() }()
	}

	errs := make([]error, len(instances))
	var wg sync.WaitGroup
	for i, inst := range instances {
		wg.Go(func() { errs[i] = s.applyOne(ctx, gw, inst, u) })
	}
	wg.Wait()
	out := applied{Generation: u.Generation}
	for i, err := range errs {
		var re *transport.RefusedError
		if !errors.As(err, &re) {
			continue
		}
		errs[i] = nil
		if out.Refused == nil {
			out.Refused = map[gwstate.IdentityKey]string{}
		}
		for _, r := range re.Refused {
			if _, seen := out.Refused[r.IdentityKey]; !seen {
				out.Refused[r.IdentityKey] = r.Reason
			}
		}
	}
	return out, errors.Join(errs...)
}

func (s *sessions) applyOne(ctx context.Context, gw string, inst transport.Instance, u gwstate.Update) error {
	conn, err := s.conn(ctx, gw, inst)
	if err != nil {
		s.noteFailed(gw, inst, err)
		return err
	}
	actx, cancel := context.WithTimeout(ctx, s.applyTimeout)
	defer cancel()
	err = conn.Send(actx, u)
	var refused *transport.RefusedError
	if err != nil && !errors.As(err, &refused) {
		if conn.Broken() {
			s.drop(gw, inst.UID, conn)
		}
		s.noteFailed(gw, inst, err)
		return fmt.Errorf("instance %s: %w", inst, err)
	}
	if s.status != nil {
		s.status.InstanceAcked(gw, instanceRef(inst), u.Generation, conn.AgentVersion())
	}
	if refused != nil {
		return refused
	}
	return nil
}

// noteFailed tells the status recorder that an instance did not take a state (the end of the
// controller's own context is no failure of the instance).
func (s *sessions) noteFailed(gw string, inst transport.Instance, err error) {
	if s.status != nil && !errors.Is(err, context.Canceled) {
		s.status.InstanceFailed(gw, instanceRef(inst), transport.StatusText(err))
	}
}

func (s *sessions) conn(ctx context.Context, gw string, inst transport.Instance) (*transport.Conn, error) {
	s.mu.Lock()
	sess := s.byGw[gw][inst.UID]
	s.mu.Unlock()
	if sess != nil && !sess.conn.Broken() {
		return sess.conn, nil
	}
	conn, err := s.dialer.Dial(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("instance %s: connecting to its agent: %w", inst, err)
	}
	s.mu.Lock()
	if s.byGw[gw] == nil {
		s.byGw[gw] = map[types.UID]*session{}
	}
	old := s.byGw[gw][inst.UID]
	lastWarning := "" // the acks of one stream come one at a time
	conn.OnAck(func(a gwstate.Ack) {
		conntrackDeleted.Add(float64(a.ConntrackDeleted))
		if a.Warning != "" {
			agentWarnings.WithLabelValues(gw).Inc()
		}
		if a.Warning != lastWarning {
			if a.Warning != "" {
				s.log.Info("the gateway's agent warns", "gateway", gw, "instance", inst.String(), "warning", a.Warning)
			}
			lastWarning = a.Warning
		}
		if a.ApplyMicros > 0 {
			agentApply.WithLabelValues("apply").Observe(float64(a.ApplyMicros) / 1e6)
			agentApply.WithLabelValues("kernel").Observe(float64(a.KernelMicros) / 1e6)
		}
		if a.AgentVersion != "" { // the first ack of a stream
			log := s.log.WithValues("instance", inst.String(), "agentVersion", a.AgentVersion, "controllerVersion", version.Version)
			if a.AgentVersion != version.Version {
				log.Info("the gateway's agent is another build than the controller (an agent the gateway image has, or an upgrade in progress)")
			} else {
				log.V(1).Info("agent running")
			}
		}
	})
	conn.StartKeepalive(s.keepalive, s.keepalive)
	sess = &session{inst: inst, conn: conn}
	s.byGw[gw][inst.UID] = sess
	s.publishLocked(gw)
	s.mu.Unlock()
	if old != nil {
		go func() { _ = old.conn.Close() }()
	}
	go s.watch(gw, sess)
	return conn, nil
}

// watch waits for the stream to end; one that ends while still registered ended by itself.
func (s *sessions) watch(gw string, sess *session) {
	<-sess.conn.Ended()
	s.mu.Lock()
	current := s.byGw[gw][sess.inst.UID] == sess
	if current {
		delete(s.byGw[gw], sess.inst.UID)
		s.publishLocked(gw)
	}
	s.mu.Unlock()
	_ = sess.conn.Close()
	if current && s.onEnded != nil {
		s.log.Info("agent stream ended; resyncing the gateway", "instance", sess.inst.String(), "reason", fmt.Sprint(sess.conn.Err()))
		s.onEnded(gw)
	}
}

func (s *sessions) drop(gw string, uid types.UID, conn *transport.Conn) {
	s.mu.Lock()
	if sess := s.byGw[gw][uid]; sess != nil && sess.conn == conn {
		delete(s.byGw[gw], uid)
		s.publishLocked(gw)
	}
	s.mu.Unlock()
	_ = conn.Close()
}

// closeGateway ends the streams of gateway gw's instances, as apply ends those of instances that
// are gone; the agents keep what the kernel has. A gateway that is gone (gone) takes its agent
// count with it (SPEC N4), and its streams close in the background; one that vpcgw stands aside
// from (SPEC K10) shows none, and its streams are closed when it returns.
func (s *sessions) closeGateway(gw string, gone bool) {
	s.mu.Lock()
	live := s.byGw[gw]
	delete(s.byGw, gw)
	if gone {
		agentsConnected.DeleteLabelValues(gw)
	} else {
		s.publishLocked(gw)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, sess := range live {
		wg.Go(func() { _ = sess.conn.Close() })
	}
	if !gone {
		wg.Wait()
	}
}

// publishLocked shows how many instances of gw have their agent stream up (s.mu held).
func (s *sessions) publishLocked(gw string) {
	n := 0
	for _, sess := range s.byGw[gw] {
		if !sess.conn.Broken() {
			n++
		}
	}
	agentsConnected.WithLabelValues(gw).Set(float64(n))
}

// publish makes sure gw's agent count is shown, also before any stream was opened (the
// disconnected alert compares it with the gateway's instances).
func (s *sessions) publish(gw string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked(gw)
}

// closeAll ends every stream (controller shutdown).
func (s *sessions) closeAll() {
	s.mu.Lock()
	var all []*transport.Conn
	for gw, live := range s.byGw {
		for _, sess := range live {
			all = append(all, sess.conn)
		}
		delete(s.byGw, gw)
		agentsConnected.DeleteLabelValues(gw) // a stopped controller has no agent streams
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() { _ = c.Close() })
	}
	wg.Wait()
}
