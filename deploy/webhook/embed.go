// Package webhook embeds vpcgw's ValidatingWebhookConfiguration, so that tests install exactly
// the configuration that is shipped.
package webhook

import (
	_ "embed"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

//go:embed validatingwebhookconfiguration.yaml
var configuration []byte

// Configuration returns the shipped ValidatingWebhookConfiguration (a new copy on every call).
func Configuration() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	var c admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(configuration, &c); err != nil {
		return nil, fmt.Errorf("decoding validatingwebhookconfiguration.yaml: %w", err)
	}
	return &c, nil
}
