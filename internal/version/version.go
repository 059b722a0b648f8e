// Package version is the version of vpcgw's binaries (vpcgw, vpcgw-agent, vpcgw-lab), set at
// build time:
//
//	go build -ldflags "-X github.com/vpcgw/vpcgw/internal/version.Version=v0.3.0" ./cmd/...
//
// The Makefile sets it from `git describe`. It imports nothing, so that the agent can link it.
package version

// Version is the release of this build; "dev" when the build did not set it.
var Version = "dev"
