#!/usr/bin/env bash
# Builds golangci-lint (github.com/golangci/golangci-lint/v2, pinned in this module's go.mod) from
# the Go module proxy into a cache directory, and does nothing when the binary there is already the
# pinned version. Its own module, so that the linters' dependencies stay out of the product's go.mod.
# Usage: hack/tools/golangci-lint/build.sh [OUTDIR]; prints the path of the binary last.
set -euo pipefail

LINT_VERSION=v2.15.0 # keep equal to the golangci-lint/v2 requirement in go.mod
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${VPCGW_GOLANGCI_LINT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vpcgw/golangci-lint-$LINT_VERSION}}
mkdir -p "$out"
bin=$out/golangci-lint

# As golangci-lint's goreleaser links it: a set date keeps `version` from reading the (absent) VCS
# stamp, so it prints the plain version this script checks for.
ldflags="-s -w -X main.version=${LINT_VERSION#v} -X main.commit=module-proxy -X main.date=unknown"

have_lint() {
	[ -x "$bin" ] && [ "$(cat "$bin.ldflags" 2>/dev/null)" = "$ldflags" ] &&
		[ "$("$bin" version --short 2>/dev/null)" = "${LINT_VERSION#v}" ]
}

if ! have_lint; then
	echo "building golangci-lint $LINT_VERSION into $out (several minutes on a cold cache)" >&2
	go -C "$here" build -ldflags "$ldflags" -o "$bin.tmp" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	mv "$bin.tmp" "$bin"
	echo "$ldflags" >"$bin.ldflags"
fi
have_lint
echo "$bin"
