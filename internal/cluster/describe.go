package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
)

// Description is lab.json (SPEC O1): everything a user needs to drive the running lab, with
// kubectl for what kubectl can do and a command for the rest.
type Description struct {
	Kubeconfig string `json:"kubeconfig"`
	// Kubectl is the kubectl of the API server's version, when it is there.
	Kubectl string  `json:"kubectl,omitempty"`
	OVN     OVNDesc `json:"ovn"`
	KubeOVN struct {
		Version string `json:"version"`
		PID     int    `json:"pid"`
	} `json:"kubeOVNController"`
	// Logs is a file with the output of the vpcgw controller and webhook and of
	// kube-ovn-controller (which logs to stderr only), rewritten with lab.json.
	Logs       string  `json:"logs"`
	Namespaces []Netns `json:"namespaces"`
	// Created are the kube-ovn objects the lab created as a kube-ovn user would; MadeByKubeOVN what
	// kube-ovn-controller made from them.
	Created       []ObjectRef `json:"created"`
	MadeByKubeOVN []ObjectRef `json:"madeByKubeOVN"`
	Demo          DemoDesc    `json:"demo"`
	// Commands are argv lists (no shell) for what kubectl cannot do.
	Commands []Command `json:"commands"`
}

// OVNDesc are the OVN databases' addresses (ovn-nbctl --db=...).
type OVNDesc struct {
	NB       string `json:"nb"`
	SB       string `json:"sb"`
	NBSocket string `json:"nbSocket"`
	SBSocket string `json:"sbSocket"`
}

// ObjectRef names an API object.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// DemoDesc is the demo Service and what serves it.
type DemoDesc struct {
	Service    string   `json:"service"`
	Deployment string   `json:"deployment"`
	ClusterIP  string   `json:"clusterIP"`
	ExternalIP string   `json:"externalIP"`
	Ports      []string `json:"ports"`
	Gateway    string   `json:"gateway"`
	GatewayPod string   `json:"gatewayPod"`
	EIP        string   `json:"eip"`
}

// Command is something to run on the host.
type Command struct {
	What string   `json:"what"`
	Argv []string `json:"argv"`
}

// Describe reads the running lab and returns its Description.
func (c *Cluster) Describe(ctx context.Context) (*Description, error) {
	d := &Description{Kubeconfig: c.Kubeconfig}
	if kubectl := filepath.Join(c.opts.AssetsDir, "kubectl"); fileExists(kubectl) {
		d.Kubectl = kubectl
	}
	d.OVN = OVNDesc{NB: c.OVN.NBAddr(), SB: c.OVN.SBAddr(), NBSocket: c.OVN.NBSocket(), SBSocket: c.OVN.SBSocket()}
	if v, err := os.ReadFile(filepath.Join(c.opts.KubeOVNDir, "VERSION")); err == nil {
		d.KubeOVN.Version = strings.TrimSpace(string(v))
	}
	d.KubeOVN.PID = c.KubeOVN.PID()
	d.Logs = c.logsPath()
	var err error
	if d.Namespaces, err = c.Namespaces(ctx); err != nil {
		return nil, fmt.Errorf("describing the lab's namespaces: %w", err)
	}

	objs := userObjects()
	objs = append(objs, EIP(EIPName, EIPAddress))
	for _, o := range objs {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return nil, fmt.Errorf("reading %T %s: %w", o, o.GetName(), err)
		}
		ref, err := c.ref(o)
		if err != nil {
			return nil, err
		}
		d.Created = append(d.Created, ref)
	}
	d.Created = append(d.Created, ObjectRef{APIVersion: "k8s.cni.cncf.io/v1", Kind: "NetworkAttachmentDefinition", Namespace: kubeovnrun.Namespace, Name: kubeovnrun.ExternalNetwork})
	d.MadeByKubeOVN = []ObjectRef{
		{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: kubeovnrun.Namespace, Name: strings.TrimSuffix(c.GatewayPodName(), "-0")},
		{APIVersion: "v1", Kind: "Pod", Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()},
	}

	var svc corev1.Service
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: DemoService}, &svc); err != nil {
		return nil, fmt.Errorf("reading service %s/%s: %w", DemoNamespace, DemoService, err)
	}
	d.Demo = DemoDesc{Service: DemoNamespace + "/" + DemoService, Deployment: DemoNamespace + "/" + DemoDeployment,
		ClusterIP: svc.Spec.ClusterIP, Gateway: GatewayName, GatewayPod: kubeovnrun.Namespace + "/" + c.GatewayPodName(), EIP: EIPName}
	if len(svc.Status.LoadBalancer.Ingress) > 0 {
		d.Demo.ExternalIP = svc.Status.LoadBalancer.Ingress[0].IP
	}
	for _, p := range svc.Spec.Ports {
		d.Demo.Ports = append(d.Demo.Ports, strconv.Itoa(int(p.Port))+"/"+string(p.Protocol))
	}
	d.Commands = c.commands(d.Demo, servicePort(&svc, corev1.ProtocolTCP), servicePort(&svc, corev1.ProtocolUDP))
	return d, nil
}

func (c *Cluster) ref(o client.Object) (ObjectRef, error) {
	gvk, err := c.Client.GroupVersionKindFor(o)
	if err != nil {
		return ObjectRef{}, err
	}
	return ObjectRef{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}, nil
}

func (c *Cluster) commands(demo DemoDesc, tcpPort, udpPort string) []Command {
	probe := func(ns, proto, target string) []string {
		return []string{"ip", "netns", "exec", ns, c.opts.Bins.Lab, "probe", "--proto", proto, "--target", target, "--count", "10"}
	}
	// Before vpcgw serves the demo (a lab without vpcgw of its own, until its install), the
	// Service has no EXTERNAL-IP yet: the EIP's fixed address is where it will answer.
	demo.ExternalIP = cmp.Or(demo.ExternalIP, EIPAddress)
	cmds := []Command{
		{"TCP requests from the external client through the EIP, counted per backend", probe(c.ExternalClient(), "tcp", demo.ExternalIP+":"+tcpPort)},
		{"UDP requests from the external client through the EIP", probe(c.ExternalClient(), "udp", demo.ExternalIP+":"+udpPort)},
		{"TCP requests from the VPC client to the ClusterIP", probe(c.VPCClient(), "tcp", demo.ClusterIP+":"+tcpPort)},
		{"TCP requests from the VPC client to the EIP", probe(c.VPCClient(), "tcp", demo.ExternalIP+":"+tcpPort)},
		{"the VIP policy routes in the Vpc's router (OVN NB)", []string{"ovn-nbctl", "--db=" + c.OVN.NBAddr(), "lr-policy-list", VpcName}},
		{"the components' logs (vpcgw controller, webhook, kube-ovn-controller), as of lab.json's last refresh", []string{"less", c.logsPath()}},
	}
	if gw, ok := c.GatewayNetns(); ok {
		cmds = append(cmds, Command{"the nftables of kube-ovn's gateway pod (vpcgw's and kube-ovn's)", []string{"ip", "netns", "exec", gw, "nft", "list", "table", "ip", "kube-ovn"}})
	}
	return cmds
}

// DescriptionPath is where WriteDescription writes lab.json: beside the lab's kubeconfig.
func (c *Cluster) DescriptionPath() string {
	return filepath.Join(filepath.Dir(c.Kubeconfig), "lab.json")
}

// WriteDescription writes lab.json (replacing it whole, so a reader never sees half of it) and
// returns its path.
func (c *Cluster) WriteDescription(ctx context.Context) (string, *Description, error) {
	d, err := c.Describe(ctx)
	if err != nil {
		return "", nil, err
	}
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", nil, err
	}
	if err := writeFileAtomic(c.logsPath(), []byte(c.Logs())); err != nil {
		return "", nil, fmt.Errorf("writing the lab's logs: %w", err)
	}
	path := c.DescriptionPath()
	if err := writeFileAtomic(path, append(data, '\n')); err != nil {
		return "", nil, fmt.Errorf("writing the lab's description: %w", err)
	}
	return path, d, nil
}

func (c *Cluster) logsPath() string { return filepath.Join(filepath.Dir(c.Kubeconfig), "logs.txt") }

// KeepDescription rewrites lab.json every interval until ctx ends, so that it keeps naming every
// Pod's namespace while the user scales Deployments with kubectl. A failed rewrite is reported to
// onError and retried at the next tick: the lab stays up.
func (c *Cluster) KeepDescription(ctx context.Context, interval time.Duration, onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, _, err := c.WriteDescription(ctx); err != nil && ctx.Err() == nil {
				onError(err)
			}
		}
	}
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
