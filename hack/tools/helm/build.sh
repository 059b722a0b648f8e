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

have_helm() { [ -x "$bin" ] && "$bin" version --template '{{.Version}}' 2>/dev/null | grep -qxF "$HELM_VERSION"; }

if ! have_helm; then
	echo "building helm $HELM_VERSION into $out" >&2
	ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
	go -C "$here" build -ldflags "$ldflags" -o "$bin.tmp" helm.sh/helm/v3/cmd/helm
	mv "$bin.tmp" "$bin"
fi
have_helm
echo "$bin"
