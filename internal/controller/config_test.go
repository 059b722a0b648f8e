package controller

import (
	"strings"
	"testing"
)

// covers: F1, F2
func TestFlagsValidate(t *testing.T) {
	cases := []struct {
		name    string
		flags   Flags
		wantErr string // substring; "" means valid
	}{
		{"defaults: both gates off", Flags{}, ""},
		{"EIP gate alone", Flags{EnableGwNftableLbSvc: true}, ""},
		{"ClusterIP gate alone", Flags{EnableGwNftableSvcClusterIP: true}, ""},
		{"both gateway gates", Flags{EnableGwNftableLbSvc: true, EnableGwNftableSvcClusterIP: true}, ""},
		{"EIP gate with OVN LB", Flags{EnableGwNftableLbSvc: true, EnableLb: true}, ""},
		{"ClusterIP gate with OVN LB", Flags{EnableGwNftableSvcClusterIP: true, EnableLb: true}, "--enable-lb both claim"},
		{"EIP gate with LB pods", Flags{EnableGwNftableLbSvc: true, EnableLbSvc: true, EnableLb: true}, "--enable-lb-svc both claim"},
		{"LB pods without ClusterIP owner", Flags{EnableLbSvc: true}, "needs ClusterIPs to be served"},
		{"LB pods with OVN LB", Flags{EnableLbSvc: true, EnableLb: true}, ""},
		{"LB pods with ClusterIP gate", Flags{EnableLbSvc: true, EnableGwNftableSvcClusterIP: true}, ""},
		// SPEC N4: a gateway's complete state stays well under the agent's line bound.
		{"gateway bounds at their defaults", Flags{MaxIdentitiesPerGateway: 65536, MaxBackendsPerGateway: 500000}, ""},
		{"gateway bounds past half the agent's line", Flags{MaxBackendsPerGateway: 2_000_000}, "more than half the agent's 64 MiB line"},
		{"negative gateway bound", Flags{MaxBackendsPerGateway: -1}, "must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.flags.Validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, c.wantErr)
			}
		})
	}
}

// covers: F3
func TestRemovedFlagNamesReplacements(t *testing.T) {
	for _, args := range [][]string{
		{"--enable-nftable-lb-svc"}, {"--enable-nftable-lb-svc=true"}, {"-enable-nftable-lb-svc=false"},
		{"--enable-lb", "--enable-nftable-lb-svc", "true"},
	} {
		err := CheckRemovedFlags(args)
		if err == nil {
			t.Fatalf("%v accepted", args)
		}
		for _, want := range []string{"--enable-gw-nftable-lb-svc", "--enable-gw-nftable-svc-cluster-ip"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%v: error %q does not name %s", args, err, want)
			}
		}
	}
	if err := CheckRemovedFlags([]string{"--enable-gw-nftable-lb-svc", "--", "--enable-nftable-lb-svc"}); err != nil {
		t.Fatalf("flag after -- rejected: %v", err)
	}
}
