package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// covers: K1, R6
// The seed's ledger form is refused on kube-ovn v1.16.2's own CRD, which prunes spec.type,
// spec.sessionAffinity and spec.clusterIP: the controller says so at start instead of losing them.
func TestSeedLedgerRefusedOnKubeOVNCRD(t *testing.T) {
	if envSkip != "" {
		testutil.Skip(t, envSkip)
	}
	err := controller.CheckLedgerForm(context.Background(), cfg, model.LedgerDnatRule)
	if err == nil || !strings.Contains(err.Error(), "has no spec.type, spec.sessionAffinity, spec.clusterIP") || !strings.Contains(err.Error(), "--ledger=service-record") {
		t.Fatalf("seed form on kube-ovn v1.16.2's CRD: %v", err)
	}
	if err := controller.CheckLedgerForm(context.Background(), cfg, model.LedgerServiceRecord); err != nil {
		t.Fatalf("the default form: %v", err)
	}
}
