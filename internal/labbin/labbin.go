// Package labbin names the binaries the labs run (the product's vpcgw and vpcgw-agent, and the
// dev-only vpcgw-lab) and builds them for tests. Only dev code imports it (cmd/vpcgw-lab, the
// labs, the bench, their tests).
package labbin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Names of the binaries, as `make build` writes them to bin/.
const (
	VpcgwName = "vpcgw"
	AgentName = "vpcgw-agent"
	LabName   = "vpcgw-lab"
)

// Packages of the binaries.
const (
	VpcgwPackage = "github.com/vpcgw/vpcgw/cmd/vpcgw"
	AgentPackage = "github.com/vpcgw/vpcgw/cmd/vpcgw-agent"
	LabPackage   = "github.com/vpcgw/vpcgw/cmd/vpcgw-lab"
)

// Binaries are the paths of the three binaries.
type Binaries struct {
	// Vpcgw runs the controller and the webhook (cmd/vpcgw).
	Vpcgw string
	// Agent is the gateway agent (cmd/vpcgw-agent): the argv the controller runs in a gateway.
	Agent string
	// Lab runs echo backends and probes, and is the helper the lab node and kube-ovn-controller
	// re-execute (cmd/vpcgw-lab: it calls kubeovnrun.MaybeRunMountHelper and
	// labnode.MaybeRunExecHelper first thing).
	Lab string
}

// Beside returns the binaries of the directory of lab (vpcgw and vpcgw-agent next to it, as
// `make build` puts them in bin/), with lab as Lab.
func Beside(lab string) Binaries {
	dir := filepath.Dir(lab)
	return Binaries{Vpcgw: filepath.Join(dir, VpcgwName), Agent: filepath.Join(dir, AgentName), Lab: lab}
}

// Abs makes the paths absolute: the lab node runs the agent's argv in a container whose working
// directory is not the lab's.
func (b Binaries) Abs() (Binaries, error) {
	for _, p := range []*string{&b.Vpcgw, &b.Agent, &b.Lab} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return b, err
		}
		*p = abs
	}
	return b, nil
}

// Check reports a binary that is not given or not an executable file.
func (b Binaries) Check() error {
	var errs []error
	for _, f := range []struct{ what, path string }{{VpcgwName, b.Vpcgw}, {AgentName, b.Agent}, {LabName, b.Lab}} {
		if f.path == "" {
			errs = append(errs, fmt.Errorf("no %s binary given", f.what))
			continue
		}
		st, err := os.Stat(f.path)
		if err == nil && (st.IsDir() || st.Mode().Perm()&0o111 == 0) {
			err = errors.New("not an executable file")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s binary %s: %w (make build)", f.what, f.path, err))
		}
	}
	return errors.Join(errs...)
}

// Build builds the three binaries into dir as `make build` does (the agent static, with
// CGO_ENABLED=0) and returns their paths. It runs the go command, so only tests call it.
func Build(ctx context.Context, dir string) (Binaries, error) {
	b := Binaries{Vpcgw: filepath.Join(dir, VpcgwName), Agent: filepath.Join(dir, AgentName), Lab: filepath.Join(dir, LabName)}
	for _, step := range []struct {
		env  []string
		out  string
		pkgs []string
	}{
		{nil, dir + string(filepath.Separator), []string{VpcgwPackage, LabPackage}},
		{[]string{"CGO_ENABLED=0"}, b.Agent, []string{AgentPackage}},
	} {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", step.out}, step.pkgs...)...)
		cmd.Env = append(os.Environ(), step.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %v: %w\n%s", step.pkgs, err, out)
		}
	}
	return b, nil
}
