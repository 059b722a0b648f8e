#!/usr/bin/env bash
# Builds kube-ovn-controller v1.16.2 from the Go module proxy and gathers, from the same module,
# what the lab and the tests need to run it as a cluster would: kube-ovn's own CRDs, the OVN NB/SB
# schemas its models were generated from, its gateway script, and the NetworkAttachmentDefinition
# CRD. Does nothing when the directory already holds them.
# Usage: hack/tools/kubeovn/build.sh [OUTDIR]; prints the directory last.
set -euo pipefail

KUBE_OVN_VERSION=v1.16.2
NAD_VERSION=v1.7.7
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/vpcgw/kube-ovn-$KUBE_OVN_VERSION}
mkdir -p "$out"

moddir() { go -C "$here" mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }

# The version file is written last: its presence means everything before it succeeded.
if [ "$(cat "$out/VERSION" 2>/dev/null)" != "$KUBE_OVN_VERSION" ]; then
	src=$(moddir "github.com/kubeovn/kube-ovn@$KUBE_OVN_VERSION")
	nad=$(moddir "github.com/k8snetworkplumbingwg/network-attachment-definition-client@$NAD_VERSION")
	[ -d "$src" ] && [ -d "$nad" ] || { echo "kube-ovn or NAD module not found in the module cache" >&2; exit 1; }
	echo "building kube-ovn-controller $KUBE_OVN_VERSION into $out (about 5 minutes on a cold cache)" >&2
	# kube-ovn chooses its role by the binary's name: it must be called kube-ovn-controller.
	CGO_ENABLED=0 go -C "$here" build -o "$out/kube-ovn-controller.tmp" github.com/kubeovn/kube-ovn/cmd/controller
	mv "$out/kube-ovn-controller.tmp" "$out/kube-ovn-controller"
	go -C "$here" run ./schemas "$src" "$out"
	install -m 0644 "$src/charts/kube-ovn/templates/kube-ovn-crd.yaml" "$out/kube-ovn-crd.yaml"
	install -m 0755 "$src/dist/images/vpcnatgateway/nat-gateway.sh" "$out/nat-gateway.sh"
	install -m 0644 "$nad/artifacts/networks-crd.yaml" "$out/networks-crd.yaml"
	echo "$KUBE_OVN_VERSION" >"$out/VERSION"
fi
echo "$out"
