#!/usr/bin/env bash
# Regenerates the API artefacts with controller-gen (pinned in hack/tools/controllergen):
#   api/kubeovn/v1/zz_generated.deepcopy.go   deepcopy methods of the kube-ovn types vpcgw reads
#   api/vpcgw/v1alpha1/zz_generated.deepcopy.go deepcopy methods of vpcgw's own types
#   config/crd/vpcgw.io_*.yaml                vpcgw's own CustomResourceDefinitions
# No kubeovn.io CRD is generated: kube-ovn's own come from its module (SPEC K1).
# Usage: hack/generate.sh [OUTDIR]
# With OUTDIR the same relative paths are written under OUTDIR and the tree is left alone
# (used by the staleness test to compare against the committed files).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
outdir=${1:-}

# `go tool -n` builds controller-gen into the Go build cache and prints its path, so the binary
# runs from the main module's root (where the API packages live) and repeated runs are cheap.
controller_gen=$(go -C "$root/hack/tools/controllergen" tool -n controller-gen)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Subnet status counters are float64 (kube-ovn writes IPv6 counts beyond int64): allowDangerousTypes.
cd "$root"
"$controller_gen" \
	object:headerFile="" crd:allowDangerousTypes=true paths=./api/kubeovn/... output:object:dir="$work/api/kubeovn/v1" output:crd:none
"$controller_gen" \
	object paths=./api/vpcgw/... output:object:dir="$work/api/vpcgw/v1alpha1" \
	crd paths=./api/vpcgw/... output:crd:dir="$work/config/crd"

if [[ -n $outdir ]]; then
	mkdir -p "$outdir/api/kubeovn/v1" "$outdir/api/vpcgw/v1alpha1" "$outdir/config/crd"
	cp "$work/api/kubeovn/v1/zz_generated.deepcopy.go" "$outdir/api/kubeovn/v1/"
	cp "$work/api/vpcgw/v1alpha1/zz_generated.deepcopy.go" "$outdir/api/vpcgw/v1alpha1/"
	cp "$work"/config/crd/*.yaml "$outdir/config/crd/"
	exit 0
fi

# Replace the generated CRDs as a set, so a CRD whose type was removed does not linger.
rm -f "$root"/config/crd/*.yaml
cp "$work"/config/crd/*.yaml "$root/config/crd/"
cp "$work/api/kubeovn/v1/zz_generated.deepcopy.go" "$root/api/kubeovn/v1/"
cp "$work/api/vpcgw/v1alpha1/zz_generated.deepcopy.go" "$root/api/vpcgw/v1alpha1/"
