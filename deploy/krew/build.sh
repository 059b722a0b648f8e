#!/usr/bin/env bash
# Builds the krew archives of the kubectl plugin (kubectl-vpcgw and its completion helper
# kubectl_complete-vpcgw, static, -trimpath) and writes the krew manifest deploy/krew/vpcgw.yaml
# with the version, the download URL and each archive's sha256 filled in.
# Usage: deploy/krew/build.sh [OUT]   (default bin/krew): OUT/kubectl-vpcgw_<os>_<arch>.tar.gz, OUT/vpcgw.yaml
#   VERSION     what `kubectl vpcgw version` prints and the manifest's spec.version; krew wants a
#               v-prefixed semantic version (default: git describe, which suits a tagged commit)
#   PLATFORMS   default "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
#   BASE_URL    where the archives are published (default the GitHub release of VERSION)
#   SOURCE_DATE_EPOCH  the archives' file times (default the commit's): same inputs, same sha256
# Install locally: kubectl krew install --manifest=bin/krew/vpcgw.yaml --archive=bin/krew/kubectl-vpcgw_linux_amd64.tar.gz
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/bin/krew}
version=${VERSION:-$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)}
platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
base=${BASE_URL:-https://github.com/vpcgw/vpcgw/releases/download/$version}
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}
go=${GO:-go}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
subst=(-e "s|@VERSION@|$version|g" -e "s|@BASE_URL@|$base|g")
for p in $platforms; do
	os=${p%/*} arch=${p#*/}
	d=$work/$os-$arch
	mkdir -p "$d"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$go" -C "$repo" build -trimpath \
		-ldflags "-s -w -X github.com/vpcgw/vpcgw/internal/version.Version=$version" -o "$d/kubectl-vpcgw" ./cmd/kubectl-vpcgw
	# kubectl completes a plugin's arguments through kubectl_complete-<plugin> on the PATH.
	printf '#!/bin/sh\nexec kubectl-vpcgw __complete "$@"\n' >"$d/kubectl_complete-vpcgw"
	chmod 0755 "$d/kubectl-vpcgw" "$d/kubectl_complete-vpcgw"
	touch -d "@$epoch" "$d/kubectl-vpcgw" "$d/kubectl_complete-vpcgw"
	archive=kubectl-vpcgw_${os}_${arch}.tar.gz
	tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$d" -cf - kubectl-vpcgw kubectl_complete-vpcgw | gzip -9n >"$out/$archive"
	sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
	subst+=(-e "s|@SHA256_${os}_${arch}@|$sum|g")
	echo "$out/$archive $sum"
done
# The manifest: the template's platforms that were built, filled in.
awk -v built=" $platforms " '
	/^    # @platform / { keep = index(built, " " $3 " ") > 0; next }
	/^  platforms:/ { inplatforms = 1; print; next }
	!inplatforms || keep { print }
' "$here/vpcgw.yaml" | sed "${subst[@]}" >"$out/vpcgw.yaml"
if grep -n '@[A-Z0-9_a-z]*@' "$out/vpcgw.yaml"; then
	echo "deploy/krew/build.sh: placeholders left in $out/vpcgw.yaml" >&2
	exit 1
fi
echo "$out/vpcgw.yaml"
