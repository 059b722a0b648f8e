package cluster

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovn"
)

// routeProto tags the routes the translator installs, so it owns exactly those.
const routeProto = "210"

// translator plays OVN's part for the VIP policies: it watches the Logical_Router_Policies that
// vpcgw wrote for the lab's VPC router (priority 29210, reroute) and installs the same steering
// in the router namespace as /32 routes, so that a VPC client reaches a VIP only through them.
type translator struct {
	reader *ovn.Writer // used read-only
	vpc    string      // the VPC's logical router
	router string      // namespace of the VPC router
	log    logr.Logger
	routes map[string]string // vip -> installed next hops, "a,b"
}

// runVIPRouteTranslator plays OVN's data path for the VIP policies of logical router vpc (read
// through reader, never written) in the router namespace routerNetns, until ctx ends.
func runVIPRouteTranslator(ctx context.Context, reader *ovn.Writer, vpc, routerNetns string, log logr.Logger) error {
	t := &translator{reader: reader, vpc: vpc, router: routerNetns, log: log, routes: map[string]string{}}
	return t.run(ctx)
}

func (t *translator) run(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := t.sync(ctx); err != nil && ctx.Err() == nil {
			t.log.Error(err, "translating VIP policies into routes")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (t *translator) sync(ctx context.Context) error {
	pols, err := t.reader.Policies(ctx, t.vpc, "")
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, p := range pols {
		if p.Priority == model.VIPRoutePriority && p.Action == "reroute" && p.VIP != "" && len(p.NextHops) > 0 {
			want[p.VIP] = strings.Join(p.NextHops, ",")
		}
	}
	for vip, hops := range want {
		if t.routes[vip] == hops {
			continue
		}
		args := []string{"ip", "-n", t.router, "route", "replace", vip + "/32", "proto", routeProto}
		nh := strings.Split(hops, ",")
		if len(nh) == 1 {
			args = append(args, "via", nh[0])
		} else {
			for _, h := range nh {
				args = append(args, "nexthop", "via", h)
			}
		}
		if _, err := netlab.Run(args...); err != nil {
			return err
		}
		t.routes[vip] = hops
		t.log.Info("VIP route installed from NB policy", "vip", vip, "nexthops", hops)
	}
	for _, vip := range slices.Sorted(maps.Keys(t.routes)) {
		if _, ok := want[vip]; ok {
			continue
		}
		if _, err := netlab.Run("ip", "-n", t.router, "route", "del", vip+"/32", "proto", routeProto); err != nil {
			return err
		}
		delete(t.routes, vip)
		t.log.Info("VIP route removed with its NB policy", "vip", vip)
	}
	return nil
}
