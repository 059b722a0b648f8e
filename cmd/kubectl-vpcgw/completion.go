package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Shell completion (cobra's `completion` command; kubectl completes a plugin through an
// executable kubectl_complete-vpcgw on the PATH that runs `kubectl-vpcgw __complete "$@"`).

const noFiles = cobra.ShellCompDirectiveNoFileComp

// completeServices completes svc/<name> with the Services of the namespace, those that name a
// gateway first.
func (o *options) completeServices(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, noFiles
	}
	_, c, ns, err := o.client()
	if err != nil {
		return nil, noFiles
	}
	var svcs corev1.ServiceList
	if err := c.List(cmd.Context(), &svcs, client.InNamespace(ns)); err != nil {
		return nil, noFiles
	}
	var bound, other []string
	for _, s := range svcs.Items {
		name := "svc/" + s.Name
		if !strings.HasPrefix(name, toComplete) {
			continue
		}
		if s.Annotations[model.AnnotationGateway] != "" {
			bound = append(bound, name+"\tgateway "+s.Annotations[model.AnnotationGateway])
		} else {
			other = append(other, name)
		}
	}
	return append(bound, other...), noFiles
}

// completeGateways completes gateway names, with prefix (e.g. "gw/").
func (o *options) completeGateways(prefix string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, noFiles
		}
		_, c, _, err := o.client()
		if err != nil {
			return nil, noFiles
		}
		var gws kubeovnv1.VpcNatGatewayList
		if err := c.List(cmd.Context(), &gws); err != nil {
			return nil, noFiles
		}
		var out []string
		for _, g := range gws.Items {
			if name := prefix + g.Name; strings.HasPrefix(name, toComplete) {
				out = append(out, name)
			}
		}
		return out, noFiles
	}
}

func (o *options) completeNamespaces(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	_, c, _, err := o.client()
	if err != nil {
		return nil, noFiles
	}
	var nss corev1.NamespaceList
	if err := c.List(cmd.Context(), &nss); err != nil {
		return nil, noFiles
	}
	var out []string
	for _, n := range nss.Items {
		if strings.HasPrefix(n.Name, toComplete) {
			out = append(out, n.Name)
		}
	}
	return out, noFiles
}

func (o *options) completeContexts(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	raw, err := o.config.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, noFiles
	}
	var out []string
	for name := range raw.Contexts {
		if strings.HasPrefix(name, toComplete) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, noFiles
}
