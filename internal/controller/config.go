package controller

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport/lineio"
)

// Flags are the controller's mode switches (SPEC F1, F2).
type Flags struct {
	EnableGwNftableLbSvc        bool // --enable-gw-nftable-lb-svc
	EnableGwNftableSvcClusterIP bool // --enable-gw-nftable-svc-cluster-ip
	EnableLb                    bool // --enable-lb: OVN load balancers own the ClusterIP data plane
	EnableLbSvc                 bool // --enable-lb-svc: kube-ovn's LB pods own LoadBalancer ingress
	// Ledger is the form of the records (SPEC R6): service-record (default) or iptables-dnat-rule.
	Ledger string
	// EndpointsWithoutPods allows endpoints without a Pod target as backends, within the Subnets
	// of the gateway's VPC (SPEC N2).
	EndpointsWithoutPods bool
	// MaxPortsPerService and MaxBackendsPerIdentity bound one Service's demands (SPEC N4).
	MaxPortsPerService, MaxBackendsPerIdentity int
	// MaxIdentitiesPerGateway and MaxBackendsPerGateway bound what all Services together ask of
	// one gateway (SPEC N4).
	MaxIdentitiesPerGateway, MaxBackendsPerGateway int
	// KubeOVNNamespace is kube-ovn-controller's namespace: its ovn-vpc-nat-config ConfigMap and,
	// unless a gateway's spec.namespace says otherwise, its gateway pods (SPEC K5).
	KubeOVNNamespace string
	// KubeOVNControllerDeployment is kube-ovn-controller's Deployment in KubeOVNNamespace, whose
	// arguments tell whether kube-ovn serves Services through the gateways itself (SPEC K10).
	KubeOVNControllerDeployment string
	// Release is not a flag: vpcgw release sets it, and the model releases everything (SPEC O4).
	Release bool
}

// RemovedFlag is the flag of kube-ovn's first implementation, which vpcgw does not accept (SPEC F3).
const RemovedFlag = "enable-nftable-lb-svc"

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&f.EnableGwNftableLbSvc, "enable-gw-nftable-lb-svc", false, "serve LoadBalancer Services through their EIP on the VPC NAT gateway")
	fs.BoolVar(&f.EnableGwNftableSvcClusterIP, "enable-gw-nftable-svc-cluster-ip", false, "hold and serve Service ClusterIPs on the VPC NAT gateway")
	fs.BoolVar(&f.EnableLb, "enable-lb", false, "the cluster's kube-ovn serves ClusterIPs with OVN load balancers")
	fs.BoolVar(&f.EnableLbSvc, "enable-lb-svc", false, "the cluster's kube-ovn serves LoadBalancer Services with its LB pods")
	fs.StringVar(&f.Ledger, "ledger", string(model.LedgerServiceRecord), "where the records of served Services live: "+
		string(model.LedgerServiceRecord)+" (vpcgw.io ServiceRecords, which kube-ovn never acts on) or "+
		string(model.LedgerDnatRule)+" (share IptablesDnatRules, only for a kube-ovn that treats them as a ledger)")
	fs.BoolVar(&f.EndpointsWithoutPods, "allow-endpoints-without-pods", false,
		"use endpoints without a Pod target as backends (only addresses inside the Subnets of the gateway's VPC); off: only Pods of the Service's namespace")
	fs.IntVar(&f.MaxPortsPerService, "max-ports-per-service", model.DefaultMaxPortsPerService, "a Service with more TCP/UDP ports is not served (event)")
	fs.IntVar(&f.MaxBackendsPerIdentity, "max-backends-per-identity", model.DefaultMaxBackendsPerIdentity, "at most this many ready backends of a Service port are used (event)")
	fs.IntVar(&f.MaxIdentitiesPerGateway, "max-identities-per-gateway", model.DefaultMaxIdentitiesPerGateway,
		"a gateway serves at most this many identities (EIP or ClusterIP, port, protocol); Services past it are not served (event), those already served first; each namespace gets an even share of it")
	fs.IntVar(&f.MaxBackendsPerGateway, "max-backends-per-gateway", model.DefaultMaxBackendsPerGateway,
		"a gateway serves at most this many backends (source ranges count too), with the same order and share")
	fs.StringVar(&f.KubeOVNNamespace, "kube-ovn-namespace", model.DefaultGatewayNamespace,
		"kube-ovn-controller's namespace: where its "+model.GatewayConfigMap+" ConfigMap is and where it runs gateway pods without spec.namespace")
	fs.StringVar(&f.KubeOVNControllerDeployment, "kube-ovn-controller-deployment", model.DefaultKubeOVNControllerDeployment,
		"kube-ovn-controller's Deployment in --kube-ovn-namespace: while its arguments turn on kube-ovn's own Service controller, vpcgw serves and releases nothing")
}

// Validate applies the startup matrix of SPEC F2.
func (f Flags) Validate() error {
	errs := f.gateErrors()
	if errs2 := validation.IsDNS1123Label(f.kubeOVNNamespace()); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--kube-ovn-namespace=%q is not a namespace name: %s", f.KubeOVNNamespace, errs2[0]))
	}
	if errs2 := validation.IsDNS1123Subdomain(f.kubeOVNControllerDeployment()); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--kube-ovn-controller-deployment=%q is not a Deployment name: %s", f.KubeOVNControllerDeployment, errs2[0]))
	}
	if f.MaxPortsPerService < 0 || f.MaxBackendsPerIdentity < 0 || f.MaxIdentitiesPerGateway < 0 || f.MaxBackendsPerGateway < 0 {
		errs = append(errs, errors.New("--max-ports-per-service, --max-backends-per-identity, --max-identities-per-gateway and --max-backends-per-gateway must not be negative (0: the defaults)"))
	} else if g := f.Gates(); gwstate.MaxEncodedSize(g.Bounds().Identities, g.Bounds().Backends) > lineio.MaxStateLine/2 {
		// A gateway's complete state must stay well under the agent's line bound, or a restarted
		// gateway would get no state at all (SPEC N4).
		errs = append(errs, fmt.Errorf("--max-identities-per-gateway=%d with --max-backends-per-gateway=%d allow a gateway state of up to %d MiB, more than half the agent's %d MiB line: lower them",
			g.Bounds().Identities, g.Bounds().Backends, gwstate.MaxEncodedSize(g.Bounds().Identities, g.Bounds().Backends)>>20, lineio.MaxStateLine>>20))
	}
	if _, err := model.ParseLedgerForm(f.Ledger); err != nil {
		errs = append(errs, fmt.Errorf("--ledger: %w", err))
	}
	return errors.Join(errs...)
}

// gateErrors are the combinations of the gates that the startup matrix (SPEC F2) refuses.
func (f Flags) gateErrors() (errs []error) {
	if f.EnableGwNftableSvcClusterIP && f.EnableLb {
		errs = append(errs, errors.New("--enable-gw-nftable-svc-cluster-ip and --enable-lb both claim Service ClusterIPs: turn one off"))
	}
	if f.EnableGwNftableLbSvc && f.EnableLbSvc {
		errs = append(errs, errors.New("--enable-gw-nftable-lb-svc and --enable-lb-svc both claim LoadBalancer ingress: turn one off"))
	}
	if f.EnableLbSvc && !f.EnableLb && !f.EnableGwNftableSvcClusterIP {
		errs = append(errs, errors.New("--enable-lb-svc needs ClusterIPs to be served: turn on --enable-lb or --enable-gw-nftable-svc-cluster-ip"))
	}
	return errs
}

// Gates returns the model's view of the flags.
func (f Flags) Gates() model.Gates {
	ledger, _ := model.ParseLedgerForm(f.Ledger) // Validate reported an unknown form
	return model.Gates{LoadBalancer: f.EnableGwNftableLbSvc, ClusterIP: f.EnableGwNftableSvcClusterIP, KubeOVNLoadBalancers: f.EnableLb, Ledger: ledger, EndpointsWithoutPods: f.EndpointsWithoutPods,
		MaxPortsPerService: f.MaxPortsPerService, MaxBackendsPerIdentity: f.MaxBackendsPerIdentity, MaxIdentitiesPerGateway: f.MaxIdentitiesPerGateway, MaxBackendsPerGateway: f.MaxBackendsPerGateway,
		Release: f.Release}
}

func (f Flags) kubeOVNNamespace() string {
	if f.KubeOVNNamespace == "" {
		return model.DefaultGatewayNamespace
	}
	return f.KubeOVNNamespace
}

func (f Flags) kubeOVNControllerDeployment() string {
	if f.KubeOVNControllerDeployment == "" {
		return model.DefaultKubeOVNControllerDeployment
	}
	return f.KubeOVNControllerDeployment
}

// CheckRemovedFlags fails with a message naming the replacements when args use the removed flag.
// It runs before flag parsing so that the user sees this message, not "flag provided but not defined".
func CheckRemovedFlags(args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if strings.HasPrefix(a, "-") && name == RemovedFlag {
			return fmt.Errorf("--%s was removed: use --enable-gw-nftable-lb-svc (LoadBalancer ingress through the EIP) and/or --enable-gw-nftable-svc-cluster-ip (ClusterIPs on the gateway)", RemovedFlag)
		}
	}
	return nil
}
