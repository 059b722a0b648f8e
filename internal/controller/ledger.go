package controller

import (
	"context"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/model"
)

// dnatRuleCRD is kube-ovn's CRD of the seed's ledger form.
const dnatRuleCRD = "iptables-dnat-rules.kubeovn.io"

// dnatRuleLedgerFields are the spec fields the seed's ledger form writes. A CRD without them prunes
// them on every write (kube-ovn v1.16.x lacks all three, master the last two), and a record
// without spec.type is an ordinary DNAT that kube-ovn-controller programs itself (SPEC K1, K2).
var dnatRuleLedgerFields = []string{"type", "sessionAffinity", "clusterIP"}

// CheckLedgerForm refuses the seed's ledger form where the installed IptablesDnatRule CRD would
// prune what the form writes (SPEC R6, K1): it reports the missing fields rather than losing them.
// The ServiceRecord form needs no check: its CRD is vpcgw's own.
func CheckLedgerForm(ctx context.Context, cfg *rest.Config, form model.LedgerForm) error {
	if form != model.LedgerDnatRule {
		return nil
	}
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: dnatRuleCRD}, &crd); err != nil {
		return fmt.Errorf("--ledger=%s needs to read CRD %s to check that it keeps the record fields: %w", form, dnatRuleCRD, err)
	}
	missing := MissingLedgerFields(&crd)
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("--ledger=%s: the installed CRD %s has no spec.%s, so every record would lose them and kube-ovn-controller "+
		"would program the records as its own DNATs; use --ledger=%s (the default)", form, dnatRuleCRD, strings.Join(missing, ", spec."), model.LedgerServiceRecord)
}

// MissingLedgerFields lists the seed form's spec fields that the served version of crd lacks.
func MissingLedgerFields(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var spec *apiextensionsv1.JSONSchemaProps
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Name == "v1" && v.Served && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			if p, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]; ok {
				spec = &p
			}
		}
	}
	var missing []string
	for _, f := range dnatRuleLedgerFields {
		if spec == nil {
			missing = append(missing, f)
			continue
		}
		if _, ok := spec.Properties[f]; !ok && (spec.XPreserveUnknownFields == nil || !*spec.XPreserveUnknownFields) {
			missing = append(missing, f)
		}
	}
	return missing
}
