// Package soak runs vpcgw's soak with faults in the lab beside the real kube-ovn-controller (SPEC
// L6, L8, L10): steady TCP and UDP traffic through the demo Service's EIP and ClusterIP, endpoint
// churn (the Deployment scaled), and faults injected on a schedule, each followed by a wait until
// everything converged again. It reports, per step, the requests that failed while it lasted and
// after it converged, and how long convergence took; at the end it checks that nothing leaked:
// records, the gateway's nft objects, lo VIPs, VIP routes, conntrack entries of removed backends,
// and the controller's goroutines and memory.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// Config is one soak run.
type Config struct {
	// Duration is how long steps are run; the schedule repeats until it is over, and runs every
	// fault at least once.
	Duration time.Duration
	// Gap is how long traffic flows after a step converged before the next step.
	Gap time.Duration
	// Batch is the number of requests in each probe of a traffic stream.
	Batch int
	// ConvergeTimeout bounds each step's wait for convergence.
	ConvergeTimeout time.Duration
	// Steps, when set, runs only the steps of the schedule whose names it matches.
	Steps *regexp.Regexp
	// Out receives the progress and the report.
	Out io.Writer
}

func (c *Config) defaults() {
	if c.Gap == 0 {
		c.Gap = 5 * time.Second
	}
	if c.Batch == 0 {
		c.Batch = 10
	}
	if c.ConvergeTimeout == 0 {
		c.ConvergeTimeout = 3 * time.Minute
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Validate reports a Config that cannot run.
func (c Config) Validate() error {
	var errs []error
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration %s: must not be negative", c.Duration))
	}
	if c.Gap < 0 {
		errs = append(errs, fmt.Errorf("gap %s: must not be negative", c.Gap))
	}
	if c.Batch < 0 || c.Batch > 1000 {
		errs = append(errs, fmt.Errorf("batch %d: must be between 1 and 1000", c.Batch))
	}
	return errors.Join(errs...)
}

// Kind says what a step may cost in failed requests.
type Kind string

const (
	// Harmless steps leave the data path alone: no request may fail.
	Harmless Kind = "harmless"
	// RemovesDataPath steps take the data path itself away (the gateway's Pod or its table):
	// requests fail until it is back and programmed again.
	RemovesDataPath Kind = "removes the data path"
)

// Step is one fault or one churn of the schedule.
type Step struct {
	Name string
	Kind Kind
	// Flows says whether long-lived flows of every D9 kind run across the step (started
	// before it, finished after it converged) and which must end intact.
	Flows FlowMode
	// Inject causes the fault or the churn and returns at once; convergence is waited for after.
	Inject func(ctx context.Context, s *Soak) error
}

// StepResult is what one step cost.
type StepResult struct {
	Name string
	Kind Kind
	// Converged is the time from the injection until everything converged.
	Converged time.Duration
	// Window counts the requests sent from the injection until convergence; After those sent
	// after convergence until the next step.
	Window, After Count
	// Flows are the long-lived flows that ran across the step (Step.Flows).
	Flows FlowCount
	Err   error
}

// FlowCount is long-lived flows run and broken. Gap counts the broken flows that a step of
// FlowsNewGateway allows (not in Broken).
type FlowCount struct {
	Run, Broken, Gap int
	// LastBroken says how the last broken flow broke.
	LastBroken string
}

func (c *FlowCount) add(o FlowCount) {
	c.Run += o.Run
	c.Broken += o.Broken
	c.Gap += o.Gap
	if o.LastBroken != "" {
		c.LastBroken = o.LastBroken
	}
}

// FlowMode says which long-lived flows run across a step and which of them must end intact.
type FlowMode int

const (
	// NoFlows runs no long-lived flow across the step.
	NoFlows FlowMode = iota
	// FlowsSurvive runs them, and every one must end intact (SPEC D9).
	FlowsSurvive
	// FlowsNewGateway runs them across a step that replaces the gateway Pod. A hairpin TCP flow
	// whose backend sends data can be reset by the new Pod's own stack before its agent
	// programs it (the gap of D9 that docs/connections.md describes): such a broken flow is
	// counted as Gap, not Broken. Every other flow must end intact.
	FlowsNewGateway
)

// Count is requests sent and failed.
type Count struct {
	Sent, Failed int
	LastError    string
}

func (c *Count) add(b batch) {
	c.Sent += b.sent
	c.Failed += b.sent - b.answered
	if b.lastErr != "" {
		c.LastError = b.lastErr
	}
}

// Report is a soak run's result.
type Report struct {
	Started  time.Time
	Duration time.Duration
	Steps    []StepResult
	Baseline Snapshot
	End      Snapshot
	// Leaks are what the end state kept beyond the baseline; LeaksChecked says whether the check
	// ran (a soak stopped by a step that did not converge ends without it).
	Leaks        []string
	LeaksChecked bool
	// Lifetimes are the controller's goroutines and memory, per process lifetime.
	Lifetimes []Lifetime
	// Flows are the long-lived flows of every step that ran them, with the broken ones.
	Flows FlowCount
}

// Soak is a running soak: the lab, its traffic and the state the steps share.
type Soak struct {
	C    *cluster.Cluster
	cfg  Config
	svc  *corev1.Service
	demo *cluster.Demo
	// replicas is the demo Deployment's scale the steps last set.
	replicas int32
	// vpcRouteOn is whether the Vpc edit step last added its policy route.
	vpcRouteOn bool

	traffic *traffic
	life    *lifetimes
}

// Run runs the soak on c, a started lab with the demo, and returns its report. The error is
// non-nil when the soak could not run, or when a step did not converge or left something behind.
func Run(ctx context.Context, c *cluster.Cluster, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Soak{C: c, cfg: cfg, demo: &cluster.Demo{C: c, Out: io.Discard, Requests: cfg.Batch, Timeout: cfg.ConvergeTimeout}, life: &lifetimes{}}
	rep := &Report{Started: time.Now()}

	svc, err := s.demo.Served(ctx)
	if err != nil {
		return nil, err
	}
	s.svc = svc
	if s.replicas, err = s.deploymentReplicas(ctx); err != nil {
		return nil, err
	}
	baseReplicas := s.replicas
	s.progressf("== soak: %s of faults and churn beside kube-ovn-controller; traffic through %s and %s\n",
		cfg.Duration, svc.Status.LoadBalancer.Ingress[0].IP, svc.Spec.ClusterIP)
	if err := s.converge(ctx, nil); err != nil {
		return nil, fmt.Errorf("the lab did not settle before the soak: %w", err)
	}
	if rep.Baseline, err = s.snapshot(ctx); err != nil {
		return nil, err
	}
	s.sampleLifetime(ctx)
	s.progressf("   baseline: %s\n", rep.Baseline)

	s.traffic = startTraffic(ctx, s.streams())
	defer s.traffic.stop()

	schedule := Schedule()
	if cfg.Steps != nil {
		schedule = slices.DeleteFunc(schedule, func(st Step) bool { return !cfg.Steps.MatchString(st.Name) })
		if len(schedule) == 0 {
			return nil, fmt.Errorf("no step of the schedule matches %q", cfg.Steps)
		}
	}
	deadline := time.Now().Add(cfg.Duration)
	var failed []error
	diagnosed := false
	for i := 0; i == 0 || time.Now().Before(deadline) || i%len(schedule) != 0; i++ {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		step := schedule[i%len(schedule)]
		res := s.runStep(ctx, step, &rep.Baseline)
		rep.Steps = append(rep.Steps, res)
		rep.Flows.add(res.Flows)
		if res.Err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", step.Name, res.Err))
			if !diagnosed {
				diagnosed = true
				if path, err := s.diagnose(); err != nil {
					s.progressf("!! %v\n", err)
				} else {
					s.progressf("!! the lab's state and logs at this failure: %s\n", path)
				}
			}
		}
		flows := ""
		if step.Flows != NoFlows {
			flows = fmt.Sprintf("; long-lived flows broken %d/%d (gap %d)", res.Flows.Broken, res.Flows.Run, res.Flows.Gap)
		}
		s.progressf("   %-34s converged in %6s; failed %d/%d in the window, %d/%d after%s%s\n",
			step.Name, res.Converged.Round(10*time.Millisecond), res.Window.Failed, res.Window.Sent, res.After.Failed, res.After.Sent, flows, errSuffix(res.Err))
		if res.Err != nil && (errors.Is(res.Err, errNotConverged) || errors.Is(res.Err, errInject)) {
			// The lab is not in a state the next step may start from, nor one to compare with
			// the baseline.
			s.traffic.stop()
			rep.Duration = time.Since(rep.Started)
			return rep, errors.Join(failed...)
		}
	}
	s.traffic.stop()
	rep.Duration = time.Since(rep.Started)
	if s.replicas != baseReplicas {
		// A schedule cut by --steps may end at another scale: back to the baseline's.
		s.replicas = baseReplicas
		if err := s.C.ScaleDeployment(ctx, cluster.DemoNamespace, cluster.DemoDeployment, baseReplicas); err != nil {
			return rep, err
		}
		if err := s.converge(ctx, &rep.Baseline); err != nil {
			return rep, fmt.Errorf("back to %d replicas for the leak check: %w", baseReplicas, err)
		}
	}

	if rep.End, err = s.snapshot(ctx); err != nil {
		return rep, err
	}
	rep.Leaks = rep.Baseline.Leaks(rep.End)
	stale, err := s.drainedConntrack(ctx)
	if err != nil {
		return rep, err
	}
	rep.Leaks = append(rep.Leaks, stale...)
	rep.Lifetimes = s.life.all()
	rep.Leaks = append(rep.Leaks, growth(rep.Lifetimes)...)
	rep.LeaksChecked = true
	s.progressf("   end:      %s\n", rep.End)
	for _, l := range rep.Leaks {
		s.progressf("!! leak: %s\n", l)
		failed = append(failed, errors.New("leak: "+l))
	}
	return rep, errors.Join(failed...)
}

// drainedConntrack is staleConntrack once the demo's removed Pods have drained: a Pod in its
// preStop sleep still serves, and the agent keeps its UDP flows until it is gone (SPEC L11). It
// waits until no demo Pod is terminating and then, up to ConvergeTimeout, for the agent to have
// deleted their flows; what is left then is a leak.
func (s *Soak) drainedConntrack(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConvergeTimeout)
	defer cancel()
	var stale []string
	for {
		var pods corev1.PodList
		err := s.C.Client.List(ctx, &pods, client.InNamespace(cluster.DemoNamespace), client.MatchingLabels{"app": cluster.DemoDeployment})
		terminating := err != nil || slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		if !terminating {
			if stale, err = s.staleConntrack(ctx); err != nil || len(stale) == 0 {
				return stale, err
			}
		}
		select {
		case <-ctx.Done():
			// What is still there is reported as leaked, a Pod stuck terminating or not.
			return s.staleConntrack(context.WithoutCancel(ctx))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// progressf prints a line of the soak's progress to Config.Out. Best effort: the report and the
// returned error carry the outcome, and a soak of half an hour is not stopped for a lost line.
func (s *Soak) progressf(format string, args ...any) {
	_, _ = fmt.Fprintf(s.cfg.Out, format, args...)
}

var (
	errNotConverged = errors.New("did not converge")
	errInject       = errors.New("injecting")
)

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " !! " + err.Error()
}

// runStep injects a step, waits until everything converged, and lets traffic flow for the gap.
// A step with Flows runs long-lived flows across it: started and under way before the step is
// injected, finished after it converged.
func (s *Soak) runStep(ctx context.Context, step Step, baseline *Snapshot) (res StepResult) {
	res = StepResult{Name: step.Name, Kind: step.Kind}
	var lf *longFlows
	if step.Flows != NoFlows {
		lf = s.startFlows()
		defer func() {
			res.Flows = lf.end(step.Flows == FlowsNewGateway)
			if res.Err == nil && res.Flows.Broken > 0 {
				res.Err = fmt.Errorf("%d of %d long-lived flows broke (%s)", res.Flows.Broken, res.Flows.Run, res.Flows.LastBroken)
			}
		}()
		if err := lf.waitUnderWay(ctx); err != nil {
			res.Err = fmt.Errorf("%w: %w", errInject, err)
			return res
		}
	}
	start := time.Now()
	if err := step.Inject(ctx, s); err != nil {
		res.Err = fmt.Errorf("%w: %w", errInject, err)
		return res
	}
	if err := s.converge(ctx, baseline); err != nil {
		res.Err = fmt.Errorf("%w: %w", errNotConverged, err)
		return res
	}
	converged := time.Now()
	res.Converged = converged.Sub(start)
	s.sampleLifetime(ctx)
	if lf != nil {
		lf.finish()
	}
	select {
	case <-ctx.Done():
	case <-time.After(s.cfg.Gap):
	}
	end := time.Now()
	// The batches of the gap's last moments end after it: wait for every stream to pass end.
	s.traffic.waitPast(ctx, end)
	for _, b := range s.traffic.between(start, end) {
		if b.start.Before(converged) {
			res.Window.add(b)
		} else {
			res.After.add(b)
		}
	}
	switch {
	case res.After.Failed > 0:
		res.Err = fmt.Errorf("%d requests failed after convergence (%s)", res.After.Failed, res.After.LastError)
	case step.Kind == Harmless && res.Window.Failed > 0:
		res.Err = fmt.Errorf("%d requests failed while it lasted, which should cost none (%s)", res.Window.Failed, res.Window.LastError)
	}
	return res
}

func (s *Soak) deploymentReplicas(ctx context.Context) (int32, error) {
	backends, err := s.C.ReadyBackends(ctx, cluster.DemoNamespace, cluster.DemoDeployment)
	return int32(len(backends)), err
}

// streams are the soak's steady traffic: TCP and UDP from the external client through the EIP,
// and from the VPC client to the ClusterIP (cluster.DemoStreams).
func (s *Soak) streams() []stream {
	var out []stream
	for _, st := range s.C.DemoStreams(s.svc) {
		out = append(out, stream{name: st.Name, ns: st.Netns, proto: st.Proto, target: st.Target, batch: s.cfg.Batch, probe: s.C.Probe})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// converge waits until the lab is settled (cluster.WaitSettled), exactly the Deployment's Ready
// Pods answer through the EIP, and, with a baseline, vpcgw's objects are those of the baseline.
func (s *Soak) converge(ctx context.Context, baseline *Snapshot) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConvergeTimeout)
	defer cancel()
	if err := s.C.WaitSettled(ctx, s.cfg.ConvergeTimeout); err != nil {
		return err
	}
	var svc corev1.Service
	if err := s.C.Client.Get(ctx, client.ObjectKeyFromObject(s.svc), &svc); err != nil {
		return err
	}
	if _, _, err := s.demo.WaitBackends(ctx, &svc, int(s.replicas)); err != nil {
		return fmt.Errorf("%w\n%s", err, s.podListing())
	}
	if baseline == nil {
		return nil
	}
	var last Snapshot
	for {
		var err error
		if last, err = s.snapshot(ctx); err == nil && last.sameObjects(*baseline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vpcgw's objects are %s, not those of the baseline %s: %w", last, *baseline, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// traffic is the soak's steady load: one goroutine per stream, each sending batch after batch.
type traffic struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	// batches are every batch sent; latest is, per stream, when its last batch ended.
	batches []batch
	latest  []time.Time
	once    sync.Once
}

type stream struct {
	name, ns, proto, target string
	batch                   int
	probe                   func(ns, proto, target string, n int) (netlab.ProbeResult, error)
}

type batch struct {
	stream         string
	start, end     time.Time
	sent, answered int
	lastErr        string
}

func startTraffic(ctx context.Context, streams []stream) *traffic {
	ctx, cancel := context.WithCancel(ctx)
	t := &traffic{cancel: cancel, latest: make([]time.Time, len(streams))}
	for i, st := range streams {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for ctx.Err() == nil {
				b := batch{stream: st.name, start: time.Now(), sent: st.batch}
				r, err := st.probe(st.ns, st.proto, st.target, st.batch)
				b.end = time.Now()
				if err != nil {
					b.lastErr = err.Error()
				} else {
					b.answered = r.Total()
					b.lastErr = r.LastError
				}
				t.mu.Lock()
				t.batches = append(t.batches, b)
				t.latest[i] = b.end
				t.mu.Unlock()
			}
		}()
	}
	return t
}

func (t *traffic) stop() {
	t.once.Do(func() {
		t.cancel()
		t.wg.Wait()
	})
}

// waitPast waits until every stream has a batch that ended after at (or the traffic stopped).
func (t *traffic) waitPast(ctx context.Context, at time.Time) {
	for ctx.Err() == nil {
		t.mu.Lock()
		done := true
		for _, l := range t.latest {
			if !l.After(at) {
				done = false
			}
		}
		t.mu.Unlock()
		if done {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// between are the batches that started in [from, to).
func (t *traffic) between(from, to time.Time) []batch {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []batch
	for _, b := range t.batches {
		if !b.start.Before(from) && b.start.Before(to) {
			out = append(out, b)
		}
	}
	return out
}

// podListing is `kubectl get pods -A -o wide` with the Deployment's scale, for the error of a step
// that did not converge.
func (s *Soak) podListing() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	var dep appsv1.Deployment
	if err := s.C.Client.Get(ctx, client.ObjectKey{Namespace: cluster.DemoNamespace, Name: cluster.DemoDeployment}, &dep); err == nil {
		fmt.Fprintf(&b, "deployment %s/%s: spec %d, status %+v\n", dep.Namespace, dep.Name, *dep.Spec.Replicas, dep.Status)
	}
	rows, err := cluster.ListPods(ctx, s.C.Client)
	if err != nil {
		return err.Error()
	}
	_ = cluster.WritePods(&b, rows)
	return b.String()
}
