#!/usr/bin/env bash
# Builds the krew archives of the kubectl plugin (kubectl-vpcgw, its completion helper
# kubectl_complete-vpcgw and the LICENSE; static, -trimpath) and writes the krew manifest
# deploy/krew/vpcgw.yaml with the version, the download URL and each archive's sha256 filled in.
# The work is hack/tools/release's (`release krew`); `make release` builds the same archives.
# Usage: deploy/krew/build.sh [OUT]   (default bin/krew): OUT/kubectl-vpcgw_<os>_<arch>.tar.gz, OUT/vpcgw.yaml
#   VERSION     what `kubectl vpcgw version` prints and the manifest's spec.version, made a
#               v-prefixed semantic version as krew requires (default: git describe; an untagged
#               commit 7dbcc4c gives v0.0.0-7dbcc4c, see hack/tools/release/version.go)
#   PLATFORMS   default "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
#   BASE_URL    where the archives are published (default the GitHub release of the version)
#   SOURCE_DATE_EPOCH  the archives' file times (default the commit's): same inputs, same sha256
# Install locally: kubectl krew install --manifest=bin/krew/vpcgw.yaml --archive=bin/krew/kubectl-vpcgw_linux_amd64.tar.gz
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
args=(--repo "$repo" --out "${1:-$repo/bin/krew}")
[ -z "${VERSION:-}" ] || args+=(--version "$VERSION")
[ -z "${PLATFORMS:-}" ] || args+=(--platforms "$PLATFORMS")
[ -z "${BASE_URL:-}" ] || args+=(--base-url "$BASE_URL")
[ -z "${SOURCE_DATE_EPOCH:-}" ] || args+=(--source-date-epoch "$SOURCE_DATE_EPOCH")
go=${GO:-go}
exec "$go" -C "$repo/hack/tools/release" run . krew --go "$go" "${args[@]}"
