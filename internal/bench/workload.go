package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/model"
)

const (
	// benchNamespace is the lab's namespace bound to its Vpc (SPEC N1 admits its Services).
	benchNamespace    = cluster.DemoNamespace
	triggerAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"
	managedBy         = "bench.vpcgw.io"
	// Endpoint addresses are 10.77.1.20 .. 10.77.1.249 (the lab's VPC subnet; they need not answer).
	firstEndpoint  = 20
	maxEndpoints   = 230
	firstPort      = 1000
	maxPortsPerEIP = 60000
	targetPort     = 8080
	// EIP k is 172.31.100.(firstEIP+k), in the lab's external Subnet.
	firstEIP = 20
	maxEIPs  = 80
)

// workload owns the bench's Services and EndpointSlices.
type workload struct {
	c         *cluster.Cluster
	api       client.Client
	cfg       Config
	pprofAddr string       // the controller's pprof endpoint
	eips      []string     // addresses; EIP k is "bench-eip-<k>"
	kp        *kubeProxies // kube-proxy beside vpcgw (nil: none)

	mu     []sync.Mutex // per Service, serializes its slice writes
	slices []*discoveryv1.EndpointSlice
	offset []int
}

func eipName(k int) string { return fmt.Sprintf("bench-eip-%02d", k) }

// newWorkload creates the bench's EIPs as a kube-ovn user does (IptablesEIPs of the lab's
// gateway) and waits until kube-ovn made each Ready (its eip-add in the gateway Pod).
func newWorkload(ctx context.Context, c *cluster.Cluster, cfg Config, pprofAddr string) (*workload, error) {
	w := &workload{c: c, api: c.Client, cfg: cfg, pprofAddr: pprofAddr}
	for k := range cfg.EIPs {
		ip := fmt.Sprintf("172.31.100.%d", firstEIP+k)
		if err := w.api.Create(ctx, cluster.EIP(eipName(k), ip)); err != nil {
			return nil, fmt.Errorf("creating IptablesEIP %s: %w", eipName(k), err)
		}
		w.eips = append(w.eips, ip)
	}
	for k := range cfg.EIPs {
		if err := c.EIPReady(ctx, eipName(k), 2*time.Minute); err != nil {
			var e kubeovnv1.IptablesEIP
			_ = w.api.Get(ctx, client.ObjectKey{Name: eipName(k)}, &e)
			return nil, fmt.Errorf("kube-ovn did not make IptablesEIP %s Ready (status %+v): %w", eipName(k), e.Status, err)
		}
	}
	return w, nil
}

func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// placement: Service i is served on EIP i%E, port firstPort + i/E.
func (w *workload) placement(i int) (eip int, port int32) {
	return i % len(w.eips), int32(firstPort + i/len(w.eips))
}

// endpointIPs of Service i after `offset` changes: a window of M consecutive addresses that
// moves by one per change (one backend leaves, one arrives).
func endpointIPs(i, offset, m int) []string {
	out := make([]string, m)
	for j := range m {
		out[j] = fmt.Sprintf("10.77.1.%d", firstEndpoint+(i*7+offset+j)%maxEndpoints)
	}
	return out
}

func (w *workload) service(i int) *corev1.Service {
	eip, port := w.placement(i)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName(i), Namespace: benchNamespace, Annotations: map[string]string{
			model.AnnotationGateway: cluster.GatewayName,
			model.AnnotationEIP:     eipName(eip),
		}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Name: "tcp", Port: port, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(targetPort)}},
		},
	}
}

func endpoints(ips []string) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, len(ips))
	for j, ip := range ips {
		out[j] = discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	return out
}

func (w *workload) slice(i int) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName(i) + "-bench", Namespace: benchNamespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: serviceName(i),
				discoveryv1.LabelManagedBy:   managedBy,
			},
			Annotations: map[string]string{triggerAnnotation: time.Now().Format(time.RFC3339Nano)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(targetPort))}},
		Endpoints:   endpoints(endpointIPs(i, 0, w.cfg.Endpoints)),
	}
}

// grow creates Services (and their slices) from the current count up to n.
func (w *workload) grow(ctx context.Context, n int) error {
	from := len(w.slices)
	w.slices = append(w.slices, make([]*discoveryv1.EndpointSlice, n-from)...)
	w.offset = append(w.offset, make([]int, n-from)...)
	mus := make([]sync.Mutex, n)
	w.mu = mus // no writes are in flight between sizes
	next := atomic.Int64{}
	next.Store(int64(from))
	errs := make(chan error, w.cfg.Workers)
	var wg sync.WaitGroup
	for range w.cfg.Workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := w.api.Create(ctx, w.service(i)); err != nil {
					errs <- fmt.Errorf("creating Service %s: %w", serviceName(i), err)
					return
				}
				es := w.slice(i)
				if err := w.api.Create(ctx, es); err != nil {
					errs <- fmt.Errorf("creating EndpointSlice %s: %w", es.Name, err)
					return
				}
				w.slices[i] = es
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitProgrammed waits until every bench Service publishes its ingress (written by the
// controller only after the gateway acknowledged its identity, SPEC T1).
func (w *workload) waitProgrammed(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	lastReport := time.Now()
	interval := 100 * time.Millisecond
	if n > 1000 {
		interval = time.Second
	}
	for {
		var list corev1.ServiceList
		if err := w.api.List(ctx, &list, client.InNamespace(benchNamespace)); err != nil {
			return err
		}
		done := 0
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 {
				done++
			}
		}
		if done >= n {
			return nil
		}
		if err := w.c.ControllerEnded(); err != nil {
			return fmt.Errorf("%d of %d Services programmed: %w", done, n, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d Services programmed after %s", done, n, timeout)
		}
		if time.Since(lastReport) > 30*time.Second {
			w.cfg.report.Printf("   ... %d of %d Services programmed (load %s)\n", done, n, loadAvg())
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// change moves Service i's endpoint window by one and writes its slice, stamped with the time
// of the change.
func (w *workload) change(ctx context.Context, i int) error {
	w.mu[i].Lock()
	defer w.mu[i].Unlock()
	es := w.slices[i]
	w.offset[i]++
	es.Endpoints = endpoints(endpointIPs(i, w.offset[i], w.cfg.Endpoints))
	es.Annotations[triggerAnnotation] = time.Now().Format(time.RFC3339Nano)
	err := w.api.Update(ctx, es)
	if apierrors.IsConflict(err) {
		var cur discoveryv1.EndpointSlice
		if err := w.api.Get(ctx, client.ObjectKeyFromObject(es), &cur); err != nil {
			return err
		}
		cur.Endpoints, cur.Annotations = es.Endpoints, es.Annotations
		*es = cur
		es.Annotations[triggerAnnotation] = time.Now().Format(time.RFC3339Nano)
		err = w.api.Update(ctx, es)
	}
	return err
}

// order is the sequence in which the churn at size n visits Services (a fixed permutation,
// repeated).
func order(n int) []int { return rand.New(rand.NewPCG(uint64(n), 9)).Perm(n) }

// changes lists the Services changed by the first count changes at size n.
func (w *workload) changes(n, count int) []int {
	p := order(n)
	out := make([]int, count)
	for k := range out {
		out[k] = p[k%n]
	}
	return out
}

// identities is the gateway state of the first n Services before any change.
func (w *workload) identities(n int) []gwstate.Identity {
	out := make([]gwstate.Identity, n)
	for i := range n {
		eip, port := w.placement(i)
		out[i] = identity(netip.MustParseAddr(w.eips[eip]), port, endpointIPs(i, 0, w.cfg.Endpoints))
	}
	return out
}

// identity is the gateway state of one Service; ips are the workload's own endpoint addresses
// (text, as the EndpointSlices carry them), so they parse.
func identity(vip netip.Addr, port int32, ips []string) gwstate.Identity {
	id := gwstate.Identity{VIP: vip, Port: port, Protocol: gwstate.TCP}
	for _, ip := range ips {
		id.Backends = append(id.Backends, gwstate.Backend{IP: netip.MustParseAddr(ip), Port: targetPort})
	}
	return id
}

// churn changes endpoints at cfg.Rate for cfg.Duration (4 writers, paced by the clock). It
// returns the number of slice writes.
func (w *workload) churn(ctx context.Context, n int) (written int, elapsed time.Duration, err error) {
	total := max(1, int(w.cfg.Rate*w.cfg.Duration.Seconds()))
	seq := w.changes(n, total)
	jobs := make(chan int, total)
	var ok atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range jobs {
				if err := w.change(ctx, i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	start := time.Now()
	for k, i := range seq {
		at := start.Add(time.Duration(float64(k) / w.cfg.Rate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed = time.Since(start)
	if e, _ := firstErr.Load().(error); e != nil {
		return int(ok.Load()), elapsed, fmt.Errorf("writing EndpointSlices: %w", e)
	}
	return int(ok.Load()), elapsed, ctx.Err()
}
