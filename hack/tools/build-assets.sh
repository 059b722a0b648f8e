#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver v1.37.2 and etcd v3.7.0), kube-controller-manager
# v1.37.2 (its EndpointSlice controllers serve the lab and the tests), kubectl v1.37.2 (the
# install-script tests), kube-proxy v1.37.2 (the bench runs it beside vpcgw) and agnhost (the
# backend of the user guide's walkthrough in the lab), from the Go
# module proxy into a cache directory, and does nothing when the binaries there are already good.
# Usage: hack/tools/build-assets.sh [OUTDIR]; prints the directory for KUBEBUILDER_ASSETS last.
set -euo pipefail

K8S_VERSION=v1.37.2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${VPCGW_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/vpcgw/envtest-$K8S_VERSION}}
mkdir -p "$out"

# Reports whether binary $1 exists and "$@" prints the pinned version. The output is captured, not
# piped into `grep -q`: grep exiting at the first match would kill the writer with SIGPIPE, and
# pipefail would turn a good binary into a failure (exit 141).
have_version() {
	[ -x "$1" ] || return 1
	local v
	v=$("$@" 2>/dev/null) || return 1
	[[ $v == *"$K8S_VERSION"* ]]
}
have_apiserver() { have_version "$out/kube-apiserver" --version; }
have_etcd() { [ -x "$out/etcd" ] && "$out/etcd" --version >/dev/null 2>&1; }
have_kcm() { have_version "$out/kube-controller-manager" --version; }
have_kubectl() { have_version "$out/kubectl" version --client; }
have_kubeproxy() { have_version "$out/kube-proxy" --version; }
# agnhost, Kubernetes' e2e test image's binary (test/images/agnhost of the same module): the lab
# node runs it as registry.k8s.io/e2e-test-images/agnhost:<its VERSION>, the backend the user
# guide's walkthrough deploys. Static (CGO_ENABLED=0): the lab node runs an image's binary
# chrooted in its root filesystem. The stamp names the module version it was built from.
agnhost_stamp="agnhost $(cat "$(go -C "$here" list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/VERSION" 2>/dev/null) from k8s.io/kubernetes $K8S_VERSION"
have_agnhost() { [ -x "$out/agnhost" ] && [ "$(cat "$out/agnhost.version" 2>/dev/null)" == "$agnhost_stamp" ]; }

# One fixed set of flags: changing anything but -ldflags invalidates the whole build cache (~10 min).
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
done
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"

if ! have_apiserver; then
	echo "building kube-apiserver $K8S_VERSION into $out (about 10 minutes on a cold cache)" >&2
	go -C "$here" build -ldflags "$ldflags" -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
	mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
fi
if ! have_etcd; then
	echo "building etcd into $out" >&2
	go -C "$here" build -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
	mv "$out/etcd.tmp" "$out/etcd"
fi
if ! have_kcm; then
	echo "building kube-controller-manager into $out" >&2
	go -C "$here" build -ldflags "$ldflags" -o "$out/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager
	mv "$out/kube-controller-manager.tmp" "$out/kube-controller-manager"
fi
if ! have_kubectl; then
	echo "building kubectl into $out" >&2
	go -C "$here" build -ldflags "$ldflags" -o "$out/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
	mv "$out/kubectl.tmp" "$out/kubectl"
fi
if ! have_kubeproxy; then
	echo "building kube-proxy into $out" >&2
	go -C "$here" build -ldflags "$ldflags" -o "$out/kube-proxy.tmp" k8s.io/kubernetes/cmd/kube-proxy
	mv "$out/kube-proxy.tmp" "$out/kube-proxy"
fi
if ! have_agnhost; then
	echo "building agnhost into $out (static; a few minutes on a cold cache)" >&2
	CGO_ENABLED=0 go -C "$here" build -ldflags "-s -w" -o "$out/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
	mv "$out/agnhost.tmp" "$out/agnhost"
	echo "$agnhost_stamp" >"$out/agnhost.version"
fi
have_apiserver && have_etcd && have_kcm && have_kubectl && have_kubeproxy && have_agnhost
echo "$out"
