package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A release's version is a v-prefixed semantic version without build metadata: krew requires
// the v and the semver, Helm the semver (the chart's version is it without the v), and an image
// tag cannot hold the '+' of build metadata. releaseVersion makes one of VERSION, which is
// `git describe --tags --always --dirty` by default:
//
//	v0.3.0, v0.3.0-rc.1         as is: a release tag
//	v0.3.0-4-gabcdef0[-dirty]   v0.3.1-dev.4.gabcdef0[.dirty]: 4 commits after v0.3.0, so after
//	                            it and before v0.3.1 in semver order (as Go's pseudo-versions)
//	v0.3.0-rc.1-4-gabcdef0      v0.3.0-rc.1.dev.4.gabcdef0: after rc.1, before v0.3.0
//	v0.3.0-dirty                v0.3.1-dev.0.dirty
//	anything else               v0.0.0-<it as a pre-release>: an untagged repository's describe,
//	                            7dbcc4c or 7dbcc4c-dirty, gives v0.0.0-7dbcc4c[-dirty]
func releaseVersion(v string) (string, error) {
	if strings.Contains(v, "+") {
		return "", fmt.Errorf("VERSION %q has build metadata (+...), which an image tag cannot hold", v)
	}
	out := v
	if m := describeRe.FindStringSubmatch(v); m != nil && semverRe.MatchString(m[1]) {
		out = after(m[1], "dev."+m[2]+".g"+m[3]+dotted(m[4]))
	} else if base, ok := strings.CutSuffix(v, "-dirty"); ok && semverRe.MatchString(base) {
		out = after(base, "dev.0.dirty")
	} else if !semverRe.MatchString(v) {
		out = "v0.0.0-" + preRelease(v)
	}
	if !semverRe.MatchString(out) || len(out) > 128 {
		return "", fmt.Errorf("VERSION %q gives %q, which is not a semantic version that can be an image tag", v, out)
	}
	return out, nil
}

var (
	// semverRe: https://semver.org's grammar with a leading v, without build metadata.
	semverRe = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
		`(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?$`)
	// describeRe: git describe on a commit after a tag: <tag>-<commits>-g<hash>[-dirty].
	describeRe = regexp.MustCompile(`^(v[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+?)?)-([0-9]+)-g([0-9a-f]{4,64})(-dirty)?$`)
	notIdent   = regexp.MustCompile(`[^0-9A-Za-z-]+`)
)

func dotted(dirty string) string {
	if dirty != "" {
		return ".dirty"
	}
	return ""
}

// after returns a version after base and before the next one: the next patch's pre-release
// suffix, or base's own pre-release extended (which sorts after it).
func after(base, suffix string) string {
	if strings.Contains(base, "-") {
		return base + "." + suffix
	}
	parts := strings.SplitN(strings.TrimPrefix(base, "v"), ".", 3)
	patch, _ := strconv.Atoi(parts[2])
	return fmt.Sprintf("v%s.%s.%d-%s", parts[0], parts[1], patch+1, suffix)
}

// preRelease makes s a semver pre-release: dot-separated identifiers of [0-9A-Za-z-], numeric
// ones without a leading zero.
func preRelease(s string) string {
	var ids []string
	for _, id := range strings.Split(s, ".") {
		id = strings.Trim(notIdent.ReplaceAllString(id, "-"), "-")
		if id == "" {
			continue
		}
		if strings.Trim(id, "0123456789") == "" && len(id) > 1 && id[0] == '0' {
			id = "g" + id // an abbreviated commit hash of digits only
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return "dev"
	}
	return strings.Join(ids, ".")
}

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
