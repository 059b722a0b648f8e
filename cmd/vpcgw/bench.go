package main

import (
	"context"

	"github.com/vpcgw/vpcgw/internal/bench"
)

// runBench is `vpcgw bench`: end-to-end scale and latency in the lab (SPEC P2, P3).
func runBench(ctx context.Context, args []string) error {
	return bench.Main(ctx, args)
}
