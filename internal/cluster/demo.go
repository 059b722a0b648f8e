package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/labout"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// PodRow is one line of `kubectl get pods -A -o wide`, computed as kubectl computes it.
type PodRow struct {
	Namespace, Name string
	Ready           string // "<ready containers>/<containers>"
	Status          string
	Restarts        int32
	Age             time.Duration
	IP, Node        string
}

// ListPods reads every Pod through the API and returns them as `kubectl get pods -A` shows them.
func ListPods(ctx context.Context, k client.Client) ([]PodRow, error) {
	var pods corev1.PodList
	if err := k.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	rows := make([]PodRow, 0, len(pods.Items))
	for i := range pods.Items {
		rows = append(rows, podRow(&pods.Items[i]))
	}
	slices.SortFunc(rows, func(a, b PodRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return rows, nil
}

func podRow(p *corev1.Pod) PodRow {
	r := PodRow{Namespace: p.Namespace, Name: p.Name, Status: string(p.Status.Phase), IP: p.Status.PodIP, Node: p.Spec.NodeName,
		Age: time.Since(p.CreationTimestamp.Time)}
	ready := 0
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		r.Restarts += cs.RestartCount
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			r.Status = cs.State.Waiting.Reason
		}
	}
	if p.Status.Reason != "" {
		r.Status = p.Status.Reason
	}
	if p.DeletionTimestamp != nil {
		r.Status = "Terminating"
	}
	r.Ready = fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers))
	return r
}

// WritePods prints rows as `kubectl get pods -A -o wide` does.
func WritePods(w io.Writer, rows []PodRow) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	t := labout.New(tw)
	t.Println("NAMESPACE\tNAME\tREADY\tSTATUS\tRESTARTS\tAGE\tIP\tNODE")
	for _, r := range rows {
		t.Printf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Ready, r.Status, r.Restarts, shortAge(r.Age), cmp.Or(r.IP, "<none>"), cmp.Or(r.Node, "<none>"))
	}
	return errors.Join(t.Err(), tw.Flush())
}

// shortAge is kubectl's AGE column (seconds below 2 minutes, then minutes and seconds).
func shortAge(d time.Duration) string {
	if d < 2*time.Minute {
		return strconv.Itoa(int(d.Seconds())) + "s"
	}
	return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
}

// WriteService prints a Service as `kubectl get service` does.
func WriteService(w io.Writer, svc *corev1.Service) error {
	var ext []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ext = append(ext, cmp.Or(ing.IP, ing.Hostname))
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	t := labout.New(tw)
	t.Println("NAMESPACE\tNAME\tTYPE\tCLUSTER-IP\tEXTERNAL-IP\tPORT(S)")
	t.Printf("%s\t%s\t%s\t%s\t%s\t%s\n", svc.Namespace, svc.Name, svc.Spec.Type, svc.Spec.ClusterIP,
		cmp.Or(strings.Join(ext, ","), "<pending>"), strings.Join(ports, ","))
	return errors.Join(t.Err(), tw.Flush())
}

// WriteEIP prints an IptablesEIP as `kubectl get iptables-eips` does.
func WriteEIP(w io.Writer, e *kubeovnv1.IptablesEIP) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	t := labout.New(tw)
	t.Println("NAME\tIP\tNAT\tREADY\tEXTERNALSUBNET\tNATGWDP")
	t.Printf("%s\t%s\t%s\t%t\t%s\t%s\n", e.Name, e.Status.IP, e.Status.Nat, e.Status.Ready, e.Spec.ExternalSubnet, e.Spec.NatGwDp)
	return errors.Join(t.Err(), tw.Flush())
}

// ScaleDeployment sets a Deployment's replicas exactly as `kubectl scale` does: a merge patch
// of the scale subresource (k8s.io/kubectl/pkg/scale ScaleSimple without preconditions).
func (c *Cluster) ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":`+strconv.Itoa(int(replicas))+`}}`))
	var scale autoscalingv1.Scale
	if err := c.Client.SubResource("scale").Patch(ctx, d, patch, client.WithSubResourceBody(&scale)); err != nil {
		return fmt.Errorf("scaling deployment %s/%s to %d: %w", namespace, name, replicas, err)
	}
	if scale.Spec.Replicas != replicas {
		return fmt.Errorf("scaling deployment %s/%s: the scale subresource says %d replicas, want %d", namespace, name, scale.Spec.Replicas, replicas)
	}
	return nil
}

// ReadyBackends are the names of the Deployment's Pods that are Ready and not being deleted:
// those a Service's EndpointSlices list as ready.
func (c *Cluster) ReadyBackends(ctx context.Context, namespace, app string) ([]string, error) {
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app": app}); err != nil {
		return nil, fmt.Errorf("listing the pods of %s/%s: %w", namespace, app, err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Demo runs the lab's demo against a started Cluster (with the demo objects), printing what it
// sees to Out. `vpcgw-lab lab` runs its steps in order; the tests run the same steps.
type Demo struct {
	C   *Cluster
	Out io.Writer
	// Requests is how many requests each probe sends.
	Requests int
	// Timeout bounds each wait of the demo.
	Timeout time.Duration
}

func (d *Demo) timeout() time.Duration { return cmp.Or(d.Timeout, 90*time.Second) }

// printf narrates a step to Out. The narration is best effort: a step's verdict is its error,
// never whether its text was written (`vpcgw-lab lab` passes a labout.Writer and checks its
// error once, at the end).
func (d *Demo) printf(format string, args ...any) { _, _ = fmt.Fprintf(d.Out, format, args...) }

// Served waits until kube-ovn made the EIP Ready, the demo Service has its EXTERNAL-IP and the
// Deployment's replicas are Ready, and returns the Service.
func (d *Demo) Served(ctx context.Context) (*corev1.Service, error) {
	started := time.Now()
	if err := d.C.EIPReady(ctx, EIPName, d.timeout()); err != nil {
		return nil, fmt.Errorf("kube-ovn did not make IptablesEIP %s Ready: %w", EIPName, err)
	}
	d.printf("   IptablesEIP %s Ready (kube-ovn-controller) after %s\n", EIPName, since(started))
	ip, err := d.C.WaitIngress(ctx, DemoNamespace, DemoService, d.timeout())
	if err != nil {
		return nil, err
	}
	d.printf("   Service %s/%s EXTERNAL-IP %s (vpcgw controller) after %s\n", DemoNamespace, DemoService, ip, since(started))
	var dep appsv1.Deployment
	if err := d.C.Client.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: DemoDeployment}, &dep); err != nil {
		return nil, fmt.Errorf("reading deployment %s/%s: %w", DemoNamespace, DemoDeployment, err)
	}
	want := int(*dep.Spec.Replicas)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, d.timeout(), true, func(ctx context.Context) (bool, error) {
		names, err := d.C.ReadyBackends(ctx, DemoNamespace, DemoDeployment)
		return err == nil && len(names) == want, err
	})
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s: %d replicas not Ready: %w", DemoNamespace, DemoDeployment, want, err)
	}
	d.printf("   Deployment %s/%s %d/%d Ready after %s\n", DemoNamespace, DemoDeployment, want, want, since(started))
	var svc corev1.Service
	if err := d.C.Client.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: DemoService}, &svc); err != nil {
		return nil, fmt.Errorf("reading service %s/%s: %w", DemoNamespace, DemoService, err)
	}
	return &svc, nil
}

// ProbeRun is one probe of the demo and what answered it.
type ProbeRun struct {
	From, FromName, Proto, Target string
	Result                        netlab.ProbeResult
}

// Err says whether the probe lost requests.
func (p ProbeRun) Err(requests int) error {
	if p.Result.Errors > 0 || p.Result.Total() != requests {
		return fmt.Errorf("%s to %s %s: %d of %d requests answered (%s)", p.FromName, p.Proto, p.Target, p.Result.Total(), requests, p.Result.LastError)
	}
	return nil
}

// Traffic sends Requests TCP and UDP requests from the external client through the EIP, and
// TCP requests from the VPC client to the ClusterIP and to the EIP, printing the answers per
// backend. It returns every run; the error names each probe that lost requests.
func (d *Demo) Traffic(ctx context.Context, svc *corev1.Service) ([]ProbeRun, error) {
	if len(svc.Status.LoadBalancer.Ingress) == 0 {
		return nil, fmt.Errorf("service %s/%s has no EXTERNAL-IP", svc.Namespace, svc.Name)
	}
	eip := svc.Status.LoadBalancer.Ingress[0].IP
	tcpPort, udpPort := servicePort(svc, corev1.ProtocolTCP), servicePort(svc, corev1.ProtocolUDP)
	ext, vpc := "the external client ("+ExternalIP+")", "the VPC client ("+VPCClientIP+")"
	runs := []ProbeRun{
		{From: d.C.ExternalClient(), FromName: ext, Proto: "tcp", Target: net.JoinHostPort(eip, tcpPort)},
		{From: d.C.ExternalClient(), FromName: ext, Proto: "udp", Target: net.JoinHostPort(eip, udpPort)},
		{From: d.C.VPCClient(), FromName: vpc, Proto: "tcp", Target: net.JoinHostPort(svc.Spec.ClusterIP, tcpPort)},
		{From: d.C.VPCClient(), FromName: vpc, Proto: "udp", Target: net.JoinHostPort(svc.Spec.ClusterIP, udpPort)},
		{From: d.C.VPCClient(), FromName: vpc, Proto: "tcp", Target: net.JoinHostPort(eip, tcpPort)},
	}
	var errs []error
	for i := range runs {
		r := &runs[i]
		started := time.Now()
		if err := d.C.WaitReachable(ctx, r.From, r.Proto, r.Target, d.timeout()); err != nil {
			errs = append(errs, err)
			d.printf("== %s cannot reach %s %s: %v\n", r.FromName, r.Proto, r.Target, err)
			continue
		}
		reachable := since(started)
		res, err := d.C.Probe(r.From, r.Proto, r.Target, d.Requests)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.Result = res
		d.printf("== %d %s requests from %s to %s (reachable after %s, %d sent in %.2fs):\n", d.Requests, strings.ToUpper(r.Proto), r.FromName, r.Target, reachable, d.Requests, res.Seconds)
		d.writeCounts(res)
		if err := r.Err(d.Requests); err != nil {
			errs = append(errs, err)
		}
	}
	return runs, errors.Join(errs...)
}

func servicePort(svc *corev1.Service, proto corev1.Protocol) string {
	for _, p := range svc.Spec.Ports {
		if p.Protocol == proto {
			return strconv.Itoa(int(p.Port))
		}
	}
	return "0"
}

func (d *Demo) writeCounts(res netlab.ProbeResult) {
	for _, name := range slices.Sorted(maps.Keys(res.Answers)) {
		d.printf("   %-24s %d\n", name, res.Answers[name])
	}
	if res.Errors > 0 {
		d.printf("   %-24s %d (%s)\n", "failed", res.Errors, res.LastError)
	}
}

// Scale scales the demo Deployment through the scale subresource and waits until the answers
// through the EIP, TCP and UDP, come from exactly its new set of Ready Pods. It returns that set.
func (d *Demo) Scale(ctx context.Context, svc *corev1.Service, replicas int32) ([]string, error) {
	started := time.Now()
	if err := d.C.ScaleDeployment(ctx, DemoNamespace, DemoDeployment, replicas); err != nil {
		return nil, err
	}
	d.printf("== kubectl scale deployment/%s -n %s --replicas=%d (the scale subresource)\n", DemoDeployment, DemoNamespace, replicas)
	pods, runs, err := d.WaitBackends(ctx, svc, int(replicas))
	if err != nil {
		return nil, err
	}
	d.printf("   answers from exactly the %d Ready pods after %s:\n", len(pods), since(started))
	for _, r := range runs {
		d.printf("   %d %s requests from %s to %s:\n", r.Result.Total(), strings.ToUpper(r.Proto), r.FromName, r.Target)
		d.writeCounts(r.Result)
	}
	return pods, nil
}

// WaitBackends polls until the demo Deployment has exactly want Ready Pods and requests through
// the EIP (TCP and UDP, from the external client) are all answered, by exactly those Pods.
func (d *Demo) WaitBackends(ctx context.Context, svc *corev1.Service, want int) ([]string, []ProbeRun, error) {
	eip := svc.Status.LoadBalancer.Ingress[0].IP
	// Enough requests that every backend answers some (the gateway picks backends at random).
	n := max(d.Requests, 10*want)
	var (
		pods []string
		runs []ProbeRun
		last string
	)
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, d.timeout(), true, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = d.C.ReadyBackends(ctx, DemoNamespace, DemoDeployment); err != nil {
			return false, err
		}
		if len(pods) != want {
			last = fmt.Sprintf("%d Ready pods %v", len(pods), pods)
			return false, nil
		}
		runs = runs[:0]
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
			r := ProbeRun{From: d.C.ExternalClient(), FromName: "the external client", Proto: strings.ToLower(string(proto)),
				Target: net.JoinHostPort(eip, servicePort(svc, proto))}
			if r.Result, err = d.C.Probe(r.From, r.Proto, r.Target, n); err != nil {
				last = err.Error()
				return false, nil
			}
			answered := slices.Sorted(maps.Keys(r.Result.Answers))
			if r.Result.Errors > 0 || !slices.Equal(answered, pods) {
				last = fmt.Sprintf("%s answers from %v (%d failed: %s), Ready pods %v", r.Proto, answered, r.Result.Errors, r.Result.LastError, pods)
				return false, nil
			}
			runs = append(runs, r)
		}
		return true, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("waiting for exactly %d backends answering through %s: %s: %w", want, eip, last, err)
	}
	return pods, runs, nil
}

// DataPlane is what vpcgw wrote: the Vpc's policy routes in the NB DB and the gateway's table.
type DataPlane struct {
	Policies, Table string
}

// ShowDataPlane prints `ovn-nbctl lr-policy-list lab-vpc` and `nft list table ip kube-ovn`
// inside kube-ovn's gateway Pod.
func (d *Demo) ShowDataPlane() (DataPlane, error) {
	var dp DataPlane
	var err error
	if dp.Policies, err = d.C.OVN.NBCtl("lr-policy-list", VpcName); err != nil {
		return dp, err
	}
	d.printf("== ovn-nbctl --db=%s lr-policy-list %s (the VIP routes vpcgw wrote; OVN's router applies them in the chassis)\n%s\n", d.C.OVN.NBAddr(), VpcName, dp.Policies)
	gw, ok := d.C.GatewayNetns()
	if !ok {
		return dp, fmt.Errorf("kube-ovn's gateway pod %s/%s has no network namespace on the lab node", kubeovnrun.Namespace, d.C.GatewayPodName())
	}
	out, err := netlab.Run("ip", "netns", "exec", gw, "nft", "list", "table", "ip", "kube-ovn")
	if err != nil {
		return dp, fmt.Errorf("listing the gateway's table: %w", err)
	}
	dp.Table = string(out)
	d.printf("== ip netns exec %s nft list table ip kube-ovn (kube-ovn's gateway pod %s/%s)\n%s\n", gw, kubeovnrun.Namespace, d.C.GatewayPodName(), dp.Table)
	return dp, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }

// eip reads the demo's IptablesEIP.
func (c *Cluster) eip(ctx context.Context) (*kubeovnv1.IptablesEIP, error) {
	var e kubeovnv1.IptablesEIP
	if err := c.Client.Get(ctx, client.ObjectKey{Name: EIPName}, &e); err != nil {
		return nil, fmt.Errorf("reading IptablesEIP %s: %w", EIPName, err)
	}
	return &e, nil
}
