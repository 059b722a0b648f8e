package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/inspect"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/version"
)

// Exit codes (documented in the root command's help and the README).
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitNotServed = 3
	exitUnknown   = 4
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// errNotServed: explain printed a Service that is not (fully) served: exit code 3.
var errNotServed = errors.New("the Service is not served")

// errUnknown: explain or status printed something whose state the plugin cannot tell (the
// output says what it may not read): exit code 4.
var errUnknown = errors.New("unknown")

type options struct {
	config              *genericclioptions.ConfigFlags
	streams             genericiooptions.IOStreams
	controllerNamespace string
	staleAfter          time.Duration
	output              string
	allNamespaces       bool
	selector            string
	// started is set once a command's own code runs: an error before it is the command line's.
	started bool
	now     func() time.Time
}

func run(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams, now: time.Now}
	root := newRootCommand(o)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errNotServed):
		return exitNotServed
	case errors.Is(err, errUnknown):
		return exitUnknown
	}
	// The exit code carries the outcome; a failed write of its explanation to stderr changes nothing.
	var ue usageError
	if errors.As(err, &ue) || !o.started {
		_, _ = fmt.Fprintf(streams.ErrOut, "error: %v\nSee '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	}
	_, _ = fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	return exitError
}

const rootLong = `kubectl vpcgw shows what vpcgw serves from kube-ovn VPC NAT gateways and why, with the
controller's own rules and the gates and flags the running controller publishes in ConfigMap
<controller-namespace>/vpcgw-controller (default namespace vpcgw-system).

It never guesses. When it cannot apply the rules (that ConfigMap is missing, stale or forbidden,
or you may not list what the rules read, such as kube-ovn's gateways and EIPs), it says what it
may not read and the permission or flag that is missing, and shows each Service as far as what
you may read of it tells: its ingress holding its EIP's address, the controller's latest event
on it (NftableLbSvcServed, or a Warning that a part is not served), its claim stamp; the BASIS
column and the basis field say which. Otherwise the state is Unknown. The chart's ClusterRoles
vpcgw-view (bind cluster-wide: everything the plugin reads) and vpcgw-tenant-view (bind in a
namespace) grant the reads.

It follows kubectl's conventions: kubectl's global flags (-n, --context, --kubeconfig, --as, ...)
go anywhere on the command line and a verb's own flags (-A, -o) after the verb; the namespace is
the kubeconfig context's unless -n says otherwise, -A reads every namespace, --context and
--kubeconfig select the cluster. -o json|yaml gives machine output (apiVersion vpcgw.io/v1alpha1,
a kind per document, fields only ever added), and kubectl's other output formats work on the
same document: -o name, -o jsonpath=<template>, -o jsonpath-file=<file>, -o go-template=<template>,
-o custom-columns=<HEADER>:<path>,... (status: a row per Service), -o wide for more columns, and
with status -l <selector> on the Services' labels and --no-headers.

Exit codes:
  0  success (explain: the Service is served)
  1  an error: kubeconfig or API errors, a Service or gateway that does not exist, no permission
     to list the Services at all
  2  a usage error: unknown command or flag, wrong arguments, an unsupported -o value
  3  explain: the Service is not (fully) served; the output says why and what to do
  4  explain: whether the Service is served is unknown; status: a Service (or the gateway) is
     Unknown. The output says what the plugin may not read and which permission is missing`

func newRootCommand(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "vpcgw",
		Short: "Inspect Services served by kube-ovn VPC NAT gateways (vpcgw)",
		Long:  rootLong,
		Example: `  kubectl vpcgw status -A
  kubectl vpcgw status gw/gw1 -o wide
  kubectl vpcgw status -l app=web -o name
  kubectl vpcgw explain svc/web -n demo
  kubectl vpcgw explain svc/web -o json
  kubectl vpcgw ruleset gw1
  kubectl vpcgw version`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl vpcgw"},
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			o.started = true
			return nil
		},
	}
	root.SetOut(o.streams.Out)
	root.SetErr(o.streams.ErrOut)
	root.SetIn(o.streams.In)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	o.config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&o.controllerNamespace, "controller-namespace", status.DefaultNamespace,
		"Namespace of the vpcgw controller, where it publishes ConfigMap "+status.ConfigMapName)
	root.PersistentFlags().DurationVar(&o.staleAfter, "stale-after", status.DefaultStaleAfter,
		"The controller is taken as not running when its published heartbeat is older than this")
	_ = root.RegisterFlagCompletionFunc("namespace", o.completeNamespaces)
	_ = root.RegisterFlagCompletionFunc("context", o.completeContexts)
	root.AddCommand(o.statusCommand(), o.explainCommand(), o.rulesetCommand(), o.versionCommand())
	return root
}

// client is a client of the kubeconfig's cluster and the namespace the command works in.
func (o *options) client() (*rest.Config, client.Client, string, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, nil, "", err
	}
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, nil, "", err
	}
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubeovnv1.AddToScheme, vpcgwv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, nil, "", err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	return cfg, c, ns, err
}

// view reads the controller's status and a snapshot, and plans it with the controller's rules.
func (o *options) view(ctx context.Context, c client.Client, ns string, include *corev1.Service) (*inspect.View, error) {
	info, pub, err := inspect.ReadController(ctx, c, o.controllerNamespace, o.staleAfter, o.now())
	if err != nil {
		return nil, err
	}
	kubeOVN := ""
	if info.Flags != nil {
		kubeOVN = info.Flags.KubeOVNNamespace
	}
	rd, err := inspect.Snapshot(ctx, c, inspect.SnapshotOptions{Namespace: ns, KubeOVNNamespace: kubeOVN, Include: include, Events: !info.Running})
	if err != nil {
		return nil, err
	}
	v := inspect.NewView(rd, info, pub)
	for _, w := range v.Warnings() {
		if _, err := fmt.Fprintf(o.streams.ErrOut, "Warning: %s\n", w); err != nil {
			return nil, fmt.Errorf("write warning: %w", err)
		}
	}
	return v, nil
}

// typedName parses "<kind>/<name>" for one of kinds; bare is allowed for kinds[0] when set.
func typedName(arg string, bare bool, kinds ...string) (string, bool) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok {
		return arg, bare && arg != ""
	}
	return name, name != "" && slices.Contains(kinds, strings.ToLower(kind))
}

var (
	gatewayKinds = []string{"gw", "gateway", "gateways", "vpc-nat-gateway", "vpc-nat-gateways", "vpcnatgateway", "vpcnatgateways"}
	serviceKinds = []string{"svc", "service", "services"}
)

func (o *options) statusCommand() *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "status [gw/<gateway>]",
		Short: "Show the Services that name a gateway, or one gateway, as the controller serves them",
		Long: `Without an argument: one line per Service of the namespace (-n, default the context's; -A: all,
with a NAMESPACE column) that names a VpcNatGateway or holds something of vpcgw's: gateway, EIP,
ingress, identities, backends, affinity, whether the controller has confirmed it (READY: True,
False, or Unknown when the plugin cannot tell) and why a part is not served. When the controller's
rules cannot be applied, a BASIS column says what each READY is based on. -o wide adds the type,
ClusterIP, state and record; -l selects Services by label, as kubectl get's -l does. Exit code 4
when a Service shown is Unknown.

With gw/<gateway> (or gateway/<gateway>): the gateway, its instances with the state generation
each acknowledged and its agent's version, its VIP routes, and its Services in every namespace
you may read.`,
		Example: `  kubectl vpcgw status
  kubectl vpcgw status -A -o json
  kubectl vpcgw status -l app=web --no-headers
  kubectl vpcgw status -A -o name
  kubectl vpcgw status -A -o custom-columns=NAMESPACE:.namespace,NAME:.name,STATE:.state,INGRESS:.ingress
  kubectl vpcgw status -o jsonpath='{range .items[*]}{.name}{"\t"}{.state}{"\n"}{end}'
  kubectl vpcgw status gw/gw1`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("status takes at most one argument, gw/<gateway>; got %q", args)
			}
			if len(args) == 1 {
				if _, ok := typedName(args[0], false, gatewayKinds...); !ok {
					return usagef("status: %q is not gw/<gateway>", args[0])
				}
			}
			return nil
		},
		ValidArgsFunction: o.completeGateways("gw/"),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.runStatus(cmd.Context(), out, args) },
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List the Services of every namespace")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "Selector (label query) on the Services to list, as kubectl get's: supports '=', '==', '!=', 'in', 'notin' and 'key' (e.g. -l key1=value1,key2=value2)")
	out = o.addOutputFlags(cmd, outputSpec{name: true, customColumns: true, wide: true, noHeaders: true})
	return cmd
}

// runStatus prints one gateway (gw/<gateway>) or the Services of the namespace that name a gateway.
func (o *options) runStatus(ctx context.Context, out *output, args []string) error {
	if err := out.complete(); err != nil {
		return err
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return usagef("-l %q: %v", o.selector, err)
	}
	_, c, ns, err := o.client()
	if err != nil {
		return err
	}
	v, err := o.view(ctx, c, ns, nil)
	if err != nil {
		return err
	}
	if len(args) == 1 {
		name, _ := typedName(args[0], false, gatewayKinds...)
		return o.printGatewayStatus(out, v, name, sel)
	}
	if o.allNamespaces {
		ns = ""
	}
	return o.printServicesStatus(out, v, ns, sel)
}

// anyUnknown is errUnknown when a Service's readiness is Unknown.
func anyUnknown(items []inspect.ServiceStatus) error {
	if slices.ContainsFunc(items, func(st inspect.ServiceStatus) bool { return st.ReadyStatus == inspect.ReadyUnknown }) {
		return errUnknown
	}
	return nil
}

func (o *options) printGatewayStatus(out *output, v *inspect.View, name string, sel labels.Selector) error {
	now := o.now()
	gs := v.Gateway(name)
	if !gs.Exists && !gs.ExistsUnknown && gs.Programmed == nil {
		return fmt.Errorf("VpcNatGateway %q not found", name)
	}
	gs.Services = v.Select(gs.Services, sel)
	table := inspect.TableOptions{Wide: out.wide(), NoHeaders: out.noHeaders}
	err := out.print(o.streams.Out, gs, func(w io.Writer) error { return inspect.PrintGateway(w, gs, table, now) },
		func() runtime.Object {
			return refList(ref(kubeovnv1.GroupVersion.String(), "VpcNatGateway", "", gs.Name))
		})
	if err != nil {
		return err
	}
	if gs.ExistsUnknown && !gs.Exists {
		return errUnknown
	}
	return anyUnknown(gs.Services)
}

// printServicesStatus prints the Services of ns (every namespace when empty) that name a gateway;
// with none, it says so on stderr and prints an empty list.
func (o *options) printServicesStatus(out *output, v *inspect.View, ns string, sel labels.Selector) error {
	list := v.List(ns)
	list.Items = v.Select(list.Items, sel)
	names := func() runtime.Object {
		refs := make([]unstructured.Unstructured, 0, len(list.Items))
		for _, it := range list.Items {
			refs = append(refs, ref("v1", "Service", it.Namespace, it.Name))
		}
		return refList(refs...)
	}
	err := out.print(o.streams.Out, list, func(w io.Writer) error {
		if len(list.Items) == 0 {
			match := ""
			if !sel.Empty() {
				match = " and match -l " + sel.String()
			}
			if ns == "" {
				_, err := fmt.Fprintf(o.streams.ErrOut, "No Services name a gateway%s.\n", match)
				return err
			}
			_, err := fmt.Fprintf(o.streams.ErrOut, "No Services name a gateway%s in namespace %s.\n", match, ns)
			return err
		}
		return inspect.PrintServices(w, list.Items, inspect.TableOptions{Wide: out.wide(), NoHeaders: out.noHeaders, Namespaces: ns == ""})
	}, names)
	if err != nil {
		return err
	}
	return anyUnknown(list.Items)
}

func (o *options) explainCommand() *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "explain svc/<name>",
		Short: "Say why a Service is or is not served, and what to do about it",
		Long: `Explains one Service of the namespace (-n, default the context's) with the controller's rules:
for each part (its EIP, for a LoadBalancer, and its ClusterIP) whether it is served and, if not,
the controller's own reason (its event text), the event reason and the fix. For a served
Service: its identities and backends, its record and whether it is Ready, the gateway's instances
with the generation each acknowledged, and the routes of its VIPs.

When the controller's rules cannot be applied (its status is missing, stale or forbidden, or
you may not list what they read), it says what it may not read and which permission or flag is
missing, and the Service's state comes from what you may read of it (its basis): its ingress
holding the EIP's address, the controller's latest event on it; else it is Unknown.

Exit code 0 when the Service is served (state Served), 3 when it is not (NotServed,
PartiallyServed, or Pending: not yet confirmed by the controller), 4 when that is unknown, 1 on
an error (the Service does not exist), 2 on a usage error.`,
		Example: `  kubectl vpcgw explain svc/web
  kubectl vpcgw explain svc/web -n demo -o json
  kubectl vpcgw explain svc/web -o jsonpath='{.service.state}'
  kubectl vpcgw explain svc/web -o custom-columns=STATE:.service.state,EIP:.service.eipPart.reason --no-headers
  kubectl vpcgw explain svc/web && curl http://$(kubectl get svc web -o jsonpath='{.status.loadBalancer.ingress[0].ip}')`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("explain takes one argument, svc/<name>; got %d", len(args))
			}
			if _, ok := typedName(args[0], false, serviceKinds...); !ok {
				return usagef("explain: %q is not svc/<name>", args[0])
			}
			return nil
		},
		ValidArgsFunction: o.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.complete(); err != nil {
				return err
			}
			name, _ := typedName(args[0], false, serviceKinds...)
			_, c, ns, err := o.client()
			if err != nil {
				return err
			}
			var svc corev1.Service
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("Service %s/%s not found", ns, name) //nolint:staticcheck // ST1005: "Service" is the Kubernetes kind, named as kubectl names it
				}
				return err
			}
			v, err := o.view(cmd.Context(), c, ns, &svc)
			if err != nil {
				return err
			}
			ex, err := v.Explain(ns, name)
			if err != nil {
				return err
			}
			now := o.now()
			text := func(w io.Writer) error { return inspect.PrintExplanation(w, ex, now) }
			names := func() runtime.Object { return refList(ref("v1", "Service", ns, name)) }
			if err := out.print(o.streams.Out, ex, text, names); err != nil {
				return err
			}
			switch {
			case ex.Served:
				return nil
			case ex.Service.ReadyStatus == inspect.ReadyUnknown:
				return errUnknown
			}
			return errNotServed
		},
	}
	out = o.addOutputFlags(cmd, outputSpec{name: true, customColumns: true, wide: true, noHeaders: true})
	return cmd
}

func (o *options) rulesetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ruleset <gateway>",
		Short: "Print the programmed nft table ip kube-ovn of every instance of a gateway",
		Long: `Runs "nft list table ip kube-ovn" in the vpc-nat-gw container of every running instance of the
gateway, through the exec API (you need create on pods/exec in the gateways' namespace).`,
		Example: `  kubectl vpcgw ruleset gw1`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("ruleset takes one argument, the gateway; got %d", len(args))
			}
			if _, ok := typedName(args[0], true, gatewayKinds...); !ok {
				return usagef("ruleset: %q is not a gateway", args[0])
			}
			return nil
		},
		ValidArgsFunction: o.completeGateways(""),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := typedName(args[0], true, gatewayKinds...)
			cfg, c, ns, err := o.client()
			if err != nil {
				return err
			}
			v, err := o.view(cmd.Context(), c, ns, nil)
			if err != nil {
				return err
			}
			return ruleset(cmd.Context(), cfg, v, name, o.streams.Out)
		},
	}
}

func (o *options) versionCommand() *cobra.Command {
	var clientOnly bool
	var out *output
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the running controller's",
		Long: `Prints the plugin's version and the version the running controller publishes in ConfigMap
<controller-namespace>/vpcgw-controller, or that no controller is running (--client: the plugin's
only).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("version takes no arguments; got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.complete(); err != nil {
				return err
			}
			doc := inspect.VersionInfo{TypeMeta: inspect.TypeMeta{APIVersion: inspect.APIVersion, Kind: inspect.KindVersion}, Plugin: version.Version}
			if clientOnly {
				return out.print(o.streams.Out, doc, func(w io.Writer) error { _, err := fmt.Fprintf(w, "kubectl-vpcgw: %s\n", version.Version); return err }, nil)
			}
			_, c, _, err := o.client()
			if err != nil {
				return err
			}
			info, _, err := inspect.ReadController(cmd.Context(), c, o.controllerNamespace, o.staleAfter, o.now())
			if err != nil {
				return err
			}
			doc.Controller = &info
			now := o.now()
			return out.print(o.streams.Out, doc, func(w io.Writer) error { return inspect.PrintVersion(w, doc, now) }, nil)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print the plugin's version only, without contacting the cluster")
	out = o.addOutputFlags(cmd, outputSpec{})
	return cmd
}
