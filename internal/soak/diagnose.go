package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// diagnose writes what the first failed step leaves to look at into a file of its own and
// returns the file's path: the gateway's and the VPC client's network state, OVN's policies and
// routes of the lab's Vpc, and the components' logs. The lab is gone once the soak returns.
func (s *Soak) diagnose() (string, error) {
	var b strings.Builder
	section := func(title string, argv ...string) {
		out, err := netlab.Run(argv...)
		fmt.Fprintf(&b, "== %s\n%s", title, out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	if gw, ok := s.C.GatewayNetns(); ok {
		for _, c := range [][]string{{"nft", "list", "ruleset"}, {"ip", "-4", "addr"}, {"ip", "-4", "route", "show", "table", "all"}, {"ip", "rule"}, {"ip", "neigh"}, {"conntrack", "-L"}} {
			section("gateway "+gw+": "+strings.Join(c, " "), append([]string{"ip", "netns", "exec", gw}, c...)...)
		}
	}
	if cl := s.C.VPCClient(); cl != "" {
		for _, c := range [][]string{{"ip", "-4", "addr"}, {"ip", "-4", "route"}, {"ip", "neigh"}} {
			section("VPC client "+cl+": "+strings.Join(c, " "), append([]string{"ip", "netns", "exec", cl}, c...)...)
		}
	}
	nb := "--db=" + s.C.OVN.NBAddr()
	section("OVN NB: lr-policy-list "+cluster.VpcName, "ovn-nbctl", nb, "lr-policy-list", cluster.VpcName)
	section("OVN NB: lr-route-list "+cluster.VpcName, "ovn-nbctl", nb, "lr-route-list", cluster.VpcName)
	b.WriteString(s.C.Logs())
	path := filepath.Join(os.TempDir(), "vpcgw-soak-"+time.Now().UTC().Format("20060102T150405")+".log")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("writing the soak's diagnostics: %w", err)
	}
	return path, nil
}
