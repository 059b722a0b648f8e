#!/usr/bin/env bash
# Builds the helm command (helm.sh/helm/v3, pinned in this module's go.mod together with the
# Kubernetes libraries it was released with) from the Go module proxy into a cache directory, and
# does nothing when the binary there is already the pinned version.
# Usage: hack/tools/helm/build.sh [OUTDIR]; prints the path of the helm binary last.
set -euo pipefail

HELM_VERSION=v3.22.0 # keep equal to the helm.sh/helm/v3 requirement in go.mod
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${VPCGW_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vpcgw/helm-$HELM_VERSION}}
mkdir -p "$out"
bin=$out/helm

K8S_MINOR=37          # the k8s.io modules' minor version in go.mod (v0.37.x): helm's default
                      # Kubernetes version for `helm template` and lint, as helm's Makefile sets it

# As helm's own Makefile links it; a stamp file records the flags, so that changing them rebuilds.
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$K8S_MINOR"
done

have_helm() {
	[ -x "$bin" ] && [ "$(cat "$bin.ldflags" 2>/dev/null)" = "$ldflags" ] &&
		[ "$("$bin" version --template '{{.Version}}' 2>/dev/null)" = "$HELM_VERSION" ]
}

if ! have_helm; then
	echo "building helm $HELM_VERSION into $out (a few minutes on a cold cache)" >&2
	go -C "$here" build -ldflags "$ldflags" -o "$bin.tmp" helm.sh/helm/v3/cmd/helm
	mv "$bin.tmp" "$bin"
	echo "$ldflags" >"$bin.ldflags"
fi
have_helm
echo "$bin"
