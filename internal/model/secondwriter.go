package model

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// DefaultKubeOVNControllerDeployment is the name of kube-ovn-controller's Deployment in kube-ovn's
// namespace, in kube-ovn's install script and both of its charts.
const DefaultKubeOVNControllerDeployment = "kube-ovn-controller"

// The flags with which kube-ovn-controller serves Services through VPC NAT gateways itself (SPEC
// K10): #7047's one gate, and the two #7451 splits it into.
const (
	FlagNftableLbSvc          = "enable-nftable-lb-svc"
	FlagGwNftableLbSvc        = "enable-gw-nftable-lb-svc"
	FlagGwNftableSvcClusterIP = "enable-gw-nftable-svc-cluster-ip"
)

// kubeOVNServiceFlags are the K10 flags, in the order they are reported.
var kubeOVNServiceFlags = []string{FlagNftableLbSvc, FlagGwNftableLbSvc, FlagGwNftableSvcClusterIP}

// SecondWriter is what vpcgw knows of kube-ovn-controller's own Service controller (SPEC K10).
type SecondWriter struct {
	// Serves: kube-ovn-controller runs (or may run) with a gate of its own Service controller on,
	// so vpcgw serves and releases nothing.
	Serves bool
	// Known: the Deployment was found and read. !Known && !Serves: vpcgw could not find
	// kube-ovn-controller and serves.
	Known bool
	// Reason is a CamelCase word for conditions and metrics; Message says why, for operators (it
	// names flags and kube-ovn's Deployment, never a tenant's object).
	Reason, Message string
}

// Reasons of SecondWriter.
const (
	ReasonKubeOVNServes      = "KubeOVNServesServices"
	ReasonKubeOVNDoesNot     = "KubeOVNDoesNotServeServices"
	ReasonKubeOVNNotFound    = "KubeOVNControllerNotFound"
	ReasonKubeOVNUnreadable  = "KubeOVNFlagUnreadable"
	ReasonKubeOVNByDefault   = "KubeOVNServesServicesByDefault"
	ReasonKubeOVNConfigMap   = "KubeOVNConfigServesServices"
	kubeOVNControllerImageOf = "kube-ovn"
)

// KubeOVNServesServices decides from kube-ovn-controller's Deployment (nil: there is none) and
// kube-ovn's ConfigMap ovn-vpc-nat-config (nil: none) whether kube-ovn serves Services through
// the gateways itself (SPEC K10). It errs towards "serves": two writers of one table, one
// finalizer and one set of records is the failure this guards against, and standing aside only
// delays serving until the operator says which controller serves.
//
// A flag counts as on when it is given without a value or with a true one (the forms of pflag's
// boolean flags, "-flag" and "--flag", "$(VAR)" expanded from the container's env as the kubelet
// does). A value it cannot read (an env var from a Secret or ConfigMap, a typo) counts as on. A
// flag not given takes its default: off on kube-ovn v1.16 and older, which have none of these
// flags; on newer or unknown releases, #7403 turned --enable-nftable-lb-svc on by default, so
// vpcgw serves there only when the Deployment turns the gates off explicitly: that flag, or on
// releases with #7451's split flags (either given), both of those.
func KubeOVNServesServices(d *appsv1.Deployment, natConfig map[string]string) SecondWriter {
	if sw, ok := configMapServes(natConfig); ok {
		return sw
	}
	if d == nil {
		return SecondWriter{Reason: ReasonKubeOVNNotFound,
			Message: "kube-ovn-controller's Deployment was not found: vpcgw serves, assuming kube-ovn does not serve Services itself"}
	}
	where := "Deployment " + d.Namespace + "/" + d.Name
	flags := deploymentFlags{explicit: map[string]bool{}, minor: -1}
	for _, c := range d.Spec.Template.Spec.Containers {
		if sw := containerServes(c, where, flags.explicit); sw != nil {
			return *sw
		}
		if m, ok := kubeOVNMinor(c.Image); ok && (!flags.versioned || m > flags.minor) {
			flags.minor, flags.versioned = m, true
		}
	}
	return flags.verdict(where)
}

// configMapServes reports whether kube-ovn's ConfigMap ovn-vpc-nat-config turns on a K10 flag
// (a value it cannot read counts as on), and says so.
func configMapServes(natConfig map[string]string) (SecondWriter, bool) {
	for _, flag := range kubeOVNServiceFlags {
		v, ok := natConfig[flag]
		if !ok {
			continue
		}
		if on, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil || on {
			return SecondWriter{Serves: true, Known: true, Reason: ReasonKubeOVNConfigMap,
				Message: fmt.Sprintf("kube-ovn's ConfigMap %s sets %s=%q: kube-ovn serves Services through the gateways itself", GatewayConfigMap, flag, v)}, true
		}
	}
	return SecondWriter{}, false
}

// containerServes is the answer when container c's command line turns a K10 flag on or gives it
// a value vpcgw cannot read (nil: neither); it adds each flag given as false to explicit.
func containerServes(c corev1.Container, where string, explicit map[string]bool) *SecondWriter {
	env := containerEnv(c)
	for _, arg := range append(append([]string(nil), c.Command...), c.Args...) {
		name, value, hasValue, ok := flagOf(arg)
		if !ok || !isServiceFlag(name) {
			continue
		}
		if !hasValue {
			sw := served(where, c.Name, name, "given without a value")
			return &sw
		}
		expanded, resolved := expandEnv(value, env)
		on, err := strconv.ParseBool(expanded)
		switch {
		case !resolved || err != nil:
			return &SecondWriter{Serves: true, Known: true, Reason: ReasonKubeOVNUnreadable, Message: fmt.Sprintf(
				"%s, container %s: cannot read --%s=%s, so kube-ovn may serve Services through the gateways itself; give it as true or false", where, c.Name, name, value)}
		case on:
			sw := served(where, c.Name, name, "on")
			return &sw
		}
		explicit[name] = true
	}
	return nil
}

// deploymentFlags is what a Deployment whose containers turn no K10 flag on says: the flags it
// gives as false, and the newest kube-ovn minor version of its images (versioned: one is known).
type deploymentFlags struct {
	explicit  map[string]bool // flag → given explicitly as false
	minor     int
	versioned bool
}

// verdict applies the defaults of the kube-ovn release to the flags not given.
func (f deploymentFlags) verdict(where string) SecondWriter {
	if f.versioned && f.minor <= 16 {
		return SecondWriter{Known: true, Reason: ReasonKubeOVNDoesNot, Message: where + ": kube-ovn v1." + strconv.Itoa(f.minor) + " has no Service controller of its own"}
	}
	explicit := f.explicit
	split := explicit[FlagGwNftableLbSvc] || explicit[FlagGwNftableSvcClusterIP]
	if explicit[FlagGwNftableLbSvc] && explicit[FlagGwNftableSvcClusterIP] || !split && explicit[FlagNftableLbSvc] {
		return SecondWriter{Known: true, Reason: ReasonKubeOVNDoesNot, Message: where + ": kube-ovn's own Service controller is turned off"}
	}
	release := "a kube-ovn release newer than v1.16"
	if !f.versioned {
		release = "a kube-ovn release vpcgw cannot tell from the image"
	}
	missing := "--" + FlagNftableLbSvc + "=false (or, on releases with --" + FlagGwNftableLbSvc + ", both --" + FlagGwNftableLbSvc + "=false and --" + FlagGwNftableSvcClusterIP + "=false)"
	if split {
		missing = "both --" + FlagGwNftableLbSvc + "=false and --" + FlagGwNftableSvcClusterIP + "=false"
	}
	return SecondWriter{Serves: true, Known: true, Reason: ReasonKubeOVNByDefault, Message: fmt.Sprintf(
		"%s runs %s, whose own Service controller is on unless turned off: set %s on it to let vpcgw serve", where, release, missing)}
}

func served(where, container, flag, how string) SecondWriter {
	return SecondWriter{Serves: true, Known: true, Reason: ReasonKubeOVNServes, Message: fmt.Sprintf(
		"%s, container %s: --%s is %s, so kube-ovn serves Services through the gateways itself; vpcgw serves and releases nothing while it does", where, container, flag, how)}
}

func isServiceFlag(name string) bool {
	for _, f := range kubeOVNServiceFlags {
		if name == f {
			return true
		}
	}
	return false
}

// flagOf splits "--name=value", "-name=value", "--name" and "-name" (pflag and Go's flag
// package); ok is false for anything else.
func flagOf(arg string) (name, value string, hasValue, ok bool) {
	s, found := strings.CutPrefix(arg, "--")
	if !found {
		if s, found = strings.CutPrefix(arg, "-"); !found {
			return "", "", false, false
		}
	}
	name, value, hasValue = strings.Cut(s, "=")
	return name, value, hasValue, name != ""
}

// containerEnv is a container's literal env values; one set from elsewhere (valueFrom) is absent,
// so that a reference to it stays unresolved.
func containerEnv(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandEnv expands "$(VAR)" as the kubelet expands a container's args; resolved is false when a
// referenced variable has no literal value here.
func expandEnv(s string, env map[string]string) (string, bool) {
	resolved := true
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		v, ok := env[ref[2:len(ref)-1]]
		if !ok {
			resolved = false
			return ref
		}
		return v
	})
	return strings.TrimSpace(out), resolved
}

var imageVersion = regexp.MustCompile(`^v?1\.(\d+)(\.\d+)?([-+.].*)?$`)

// kubeOVNMinor reads the minor version of a kube-ovn 1.x image ("…/kube-ovn:v1.16.2", with or
// without a digest). Another image, a tag that is not a version, or a digest alone: not known.
func kubeOVNMinor(image string) (int, bool) {
	ref, _, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash {
		return 0, false
	}
	if repo := ref[slash+1 : colon]; repo != kubeOVNControllerImageOf {
		return 0, false
	}
	m := imageVersion.FindStringSubmatch(ref[colon+1:])
	if m == nil {
		return 0, false
	}
	minor, err := strconv.Atoi(m[1])
	return minor, err == nil
}
