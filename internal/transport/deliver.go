package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/client-go/tools/remotecommand"
)

// The agent reaches kube-ovn's own gateway container unchanged (SPEC K5, O5): before it starts
// the agent, Dial copies the static agent binary for the container's CPU architecture into the
// container through the same exec API it runs the agent with, verifies it by SHA-256 and runs it
// from there. What it runs there are fixed argvs of tools kube-ovn's image has (busybox on
// Alpine: uname, sha256sum, mkdir, dd, chmod, mv, ls, rm), never a shell, and no word of them
// comes from a Kubernetes object: paths are made of the directory below and the binary's digest.
//
// The copy lives in the container's own filesystem, so a restarted container or a new Pod starts
// without it and the next Dial copies it again; a new controller version brings a new binary (a
// new digest, so a new path), which every gateway gets at its next stream.

// AgentBinariesDir is where the controller image keeps the agent builds.
const AgentBinariesDir = "/usr/lib/vpcgw/agents"

// AgentInstallDir is the directory in the gateway container the agent is copied to. /run is in
// the container's own writable layer (kube-ovn's image declares no volume there).
const AgentInstallDir = "/run/vpcgw"

// agentFilePrefix names the builds in AgentBinariesDir: vpcgw-agent-linux-<GOARCH>.
const agentFilePrefix = DefaultAgentBinary + "-linux-"

// maxProbeOutput bounds what the controller reads from the short commands of a delivery.
const maxProbeOutput = 64 << 10

// AgentBinaries are the agent builds the controller delivers, by GOARCH.
type AgentBinaries struct {
	byArch map[string]agentBinary
}

type agentBinary struct {
	arch   string
	data   []byte
	digest string // hex SHA-256
}

// installedPath is where the binary is kept in a container: named by its digest, so that two
// versions (a controller upgrade in progress) never overwrite each other's file.
func (b agentBinary) installedPath() string {
	return path.Join(AgentInstallDir, DefaultAgentBinary+"-"+b.digest[:16])
}

// LoadAgentBinaries reads every vpcgw-agent-linux-<GOARCH> file of dir.
func LoadAgentBinaries(dir string) (*AgentBinaries, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("agent binaries: %w", err)
	}
	bins := &AgentBinaries{byArch: map[string]agentBinary{}}
	for _, e := range entries {
		arch, ok := strings.CutPrefix(e.Name(), agentFilePrefix)
		if !ok || arch == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("agent binaries: %w", err)
		}
		sum := sha256.Sum256(data)
		bins.byArch[arch] = agentBinary{arch: arch, data: data, digest: hex.EncodeToString(sum[:])}
	}
	if len(bins.byArch) == 0 {
		return nil, fmt.Errorf("agent binaries: no %s<GOARCH> file in %s", agentFilePrefix, dir)
	}
	return bins, nil
}

// Archs lists the architectures there are builds for.
func (b *AgentBinaries) Archs() []string {
	var out []string
	for a := range b.byArch {
		out = append(out, a)
	}
	return out
}

// Digest is the hex SHA-256 of the build for arch ("" when there is none).
func (b *AgentBinaries) Digest(arch string) string { return b.byArch[arch].digest }

// goarchOf maps `uname -m` to Go's architecture names.
func goarchOf(machine string) (string, bool) {
	switch strings.TrimSpace(machine) {
	case "x86_64", "amd64":
		return "amd64", true
	case "aarch64", "arm64", "armv8l":
		return "arm64", true
	case "ppc64le":
		return "ppc64le", true
	case "s390x":
		return "s390x", true
	case "riscv64":
		return "riscv64", true
	}
	return "", false
}

// WithAgentDelivery makes Dial copy the agent from bins into the container before it starts it:
// the agent command's first word is replaced by the copy's path, its other words (flags) kept.
func WithAgentDelivery(bins *AgentBinaries) ExecOption { return func(e *Exec) { e.binaries = bins } }

var installedName = regexp.MustCompile(`^` + regexp.QuoteMeta(DefaultAgentBinary) + `-[0-9a-f]{16}(\.part-[0-9a-f]+)?$`)

// deliver makes sure the container of inst has the agent build for its architecture and returns
// its path there.
func (e *Exec) deliver(ctx context.Context, inst Instance) (string, error) {
	machine, err := e.run(ctx, inst, nil, "uname", "-m")
	if err != nil {
		return "", fmt.Errorf("reading the container's architecture: %w", err)
	}
	arch, ok := goarchOf(string(machine))
	if !ok {
		return "", fmt.Errorf("the container's architecture %q is not one vpcgw builds the agent for", strings.TrimSpace(string(machine)))
	}
	bin, ok := e.binaries.byArch[arch]
	if !ok {
		return "", fmt.Errorf("no agent build for %s (have %v): the controller image lacks %s%s", arch, e.binaries.Archs(), agentFilePrefix, arch)
	}
	dst := bin.installedPath()
	if sum, err := e.run(ctx, inst, nil, "sha256sum", dst); err == nil && digestOf(sum) == bin.digest {
		return dst, nil // there already (an earlier stream of this container)
	}
	start := time.Now()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	part := dst + ".part-" + hex.EncodeToString(suffix) // one per copy: two controllers may copy at once
	steps := []struct {
		stdin []byte
		argv  []string
	}{
		{nil, []string{"mkdir", "-p", AgentInstallDir}},
		{bin.data, []string{"dd", "of=" + part, "bs=65536"}},
		{nil, []string{"chmod", "0755", part}},
	}
	for _, s := range steps {
		var in io.Reader
		if s.stdin != nil {
			in = bytes.NewReader(s.stdin)
		}
		if _, err := e.run(ctx, inst, in, s.argv...); err != nil {
			e.cleanup(ctx, inst, "")
			return "", fmt.Errorf("copying the agent into the container (%s): %w", s.argv[0], err)
		}
	}
	sum, err := e.run(ctx, inst, nil, "sha256sum", part)
	if err != nil || digestOf(sum) != bin.digest {
		e.cleanup(ctx, inst, "")
		return "", fmt.Errorf("the agent copied into the container does not verify (sha256 %q, want %s): %v", digestOf(sum), bin.digest, err)
	}
	if _, err := e.run(ctx, inst, nil, "mv", "-f", part, dst); err != nil {
		e.cleanup(ctx, inst, "")
		return "", fmt.Errorf("installing the agent in the container: %w", err)
	}
	e.log.Info("agent delivered into the gateway container", "instance", inst.String(), "arch", arch, "sha256", bin.digest, "bytes", len(bin.data), "took", time.Since(start).String())
	e.cleanup(ctx, inst, path.Base(dst))
	return dst, nil
}

// cleanup removes what earlier deliveries left in the container (older versions, unfinished
// copies), keeping keep. Best effort: a leftover costs only space in the container's layer.
func (e *Exec) cleanup(ctx context.Context, inst Instance, keep string) {
	out, err := e.run(ctx, inst, nil, "ls", "-1", AgentInstallDir)
	if err != nil {
		return
	}
	var stale []string
	for _, name := range strings.Split(string(out), "\n") {
		if name = strings.TrimSpace(name); name != keep && installedName.MatchString(name) {
			stale = append(stale, path.Join(AgentInstallDir, name))
		}
	}
	if len(stale) > 0 {
		_, _ = e.run(ctx, inst, nil, append([]string{"rm", "-f"}, stale...)...)
	}
}

// digestOf reads sha256sum's output: "<hex>  <path>".
func digestOf(out []byte) string {
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// run executes argv in inst's container through the exec API and returns its stdout (at most
// maxProbeOutput bytes). A non-zero exit is an error carrying the command's stderr.
func (e *Exec) run(ctx context.Context, inst Instance, stdin io.Reader, argv ...string) ([]byte, error) {
	exe, err := e.executor(e.urlFor(inst, argv, stdin != nil))
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.dialTimeout)
	defer cancel()
	stdout, stderr := &limitedBuffer{max: maxProbeOutput}, &limitedBuffer{max: 4 << 10}
	opts := remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}
	if stdin != nil {
		opts.Stdin = stdin
	}
	if err := exe.StreamWithContext(rctx, opts); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", argv[0], err, sanitizeLine(msg, 256))
		}
		return nil, fmt.Errorf("%s: %w", argv[0], err)
	}
	return stdout.Bytes(), nil
}

// limitedBuffer keeps the first max bytes written and discards the rest.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (e *Exec) noteDelivered(inst Instance) {
	e.dialedMu.Lock()
	defer e.dialedMu.Unlock()
	if e.dialed == nil {
		e.dialed = map[string]Instance{}
	}
	e.dialed[inst.String()] = inst
}

// RemoveDelivered removes the agent copies (and unfinished copies) from the containers this Exec
// delivered agents to, and checks that none is left (vpcgw release, SPEC O4). Call it once the
// streams are closed: an agent started after it would be copied in again. The error names each
// container where a copy remains.
func (e *Exec) RemoveDelivered(ctx context.Context) error {
	e.dialedMu.Lock()
	insts := make([]Instance, 0, len(e.dialed))
	for _, inst := range e.dialed {
		insts = append(insts, inst)
	}
	e.dialedMu.Unlock()
	var errs []error
	for _, inst := range insts {
		e.cleanup(ctx, inst, "")
		left, err := e.delivered(ctx, inst)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("instance %s: listing %s: %w", inst, AgentInstallDir, err))
		case len(left) > 0:
			errs = append(errs, fmt.Errorf("instance %s: %s still holds %v", inst, AgentInstallDir, left))
		default:
			e.log.Info("agent copy removed from the gateway container", "instance", inst.String())
		}
	}
	return errors.Join(errs...)
}

// delivered lists the agent copies in inst's container (none when the directory is missing).
func (e *Exec) delivered(ctx context.Context, inst Instance) ([]string, error) {
	out, err := e.run(ctx, inst, nil, "ls", "-1", AgentInstallDir)
	if err != nil {
		if strings.Contains(err.Error(), "No such file") {
			return nil, nil
		}
		return nil, err
	}
	var names []string
	for _, name := range strings.Split(string(out), "\n") {
		if name = strings.TrimSpace(name); installedName.MatchString(name) {
			names = append(names, name)
		}
	}
	return names, nil
}
