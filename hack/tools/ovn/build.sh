#!/usr/bin/env bash
# Builds Open vSwitch and OVN as kube-ovn v1.16.2 ships them (OVS branch-3.5 and OVN branch-25.03
# at the heads of the week v1.16.2 was tagged, kube-ovn's patches applied in the order of its
# dist/images/Dockerfile.base) into a cache directory, once: the lab and the tests run ovsdb-server,
# ovs-vswitchd, ovn-northd, ovn-controller and the ctl tools from it. Does nothing when the
# directory already holds this build.
#
# Sources, in this order:
#   1. VPCGW_OVN_SOURCES, or ../shared/third_party/ovn beside the repository (or /work/shared, the
#      shared folder of the project's machines): the two tarballs and the patches, checked
#      against SHA256SUMS (this folder's copy, not the source's own);
#   2. otherwise the public repositories: OVS and OVN cloned at the pinned commits (the commit id
#      checks the content), kube-ovn's patches from its Go module at v1.16.2 (checked as above).
#
# Usage: hack/tools/ovn/build.sh [OUTDIR]            builds OVS and OVN if missing
#        hack/tools/ovn/build.sh --rebuild-ovn [OUTDIR]  rebuilds OVN alone over the kept OVS tree
# Prints the directory last.
set -euo pipefail

OVS_COMMIT=cb3bb5a5c15ebf2f924062e721d8e9189c0ff71d
OVN_COMMIT=4eddbd952d0c52f1485723bd60923e3f1e079993
KUBE_OVN_VERSION=v1.16.2
OVS_TARBALL=ovs-branch-3.5-${OVS_COMMIT:0:12}.tar.xz
OVN_TARBALL=ovn-branch-25.03-${OVN_COMMIT:0:12}.tar.xz

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)

rebuild_ovn=false
if [ "${1:-}" = "--rebuild-ovn" ]; then
	rebuild_ovn=true
	shift
fi
out=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/vpcgw/ovn-25.03-${OVN_COMMIT:0:12}-ovs-3.5-${OVS_COMMIT:0:12}}
mkdir -p "$out"
# What this build is: the pins and the checksums of the patches. VERSION is written last, so its
# presence with this content means everything before it succeeded. The files are hashed by
# content and name only: sha256sum prints the path it is given, and a checkout elsewhere (CI's
# clean clone) must find the same build.
want="ovs $OVS_COMMIT ovn $OVN_COMMIT patches $(cd "$here" && sha256sum SHA256SUMS ovs.series ovn.series | sha256sum | cut -c1-16)"
if ! $rebuild_ovn && [ "$(cat "$out/VERSION" 2>/dev/null)" = "$want" ]; then
	echo "$out"
	exit 0
fi

# Debian's build dependencies (kube-ovn's list without the NUMA, pcap and D-Bus features the lab
# does not use). Installed only when missing.
deps=(build-essential autoconf automake libtool pkg-config python3 libssl-dev libcap-ng-dev libunbound-dev)
missing=()
for p in "${deps[@]}"; do
	[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "missing build packages: ${missing[*]}; run as root (or: sudo apt-get install -y ${missing[*]})" >&2
		exit 1
	fi
	echo "installing ${missing[*]}" >&2
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# checked FILE DIR: FILE's sha256 in DIR is the one this folder's SHA256SUMS names.
checked() {
	local sum
	sum=$(awk -v f="$1" '$2 == f {print $1}' "$here/SHA256SUMS")
	[ -n "$sum" ] || { echo "no checksum for $1 in $here/SHA256SUMS" >&2; return 1; }
	echo "$sum  $2/$1" | sha256sum --quiet -c - || { echo "checksum mismatch: $2/$1" >&2; return 1; }
}

src=$out/src
jobs=$(nproc)
# -O2 without kube-ovn's -g: a third less to compile and nothing the lab reads.
export CFLAGS="-O2 -fPIC"

# fetch_source ovs|ovn: the component's source in $src/<component>, patched in series order.
fetch_source() {
	local c=$1 commit tarball url
	case $c in
	ovs) commit=$OVS_COMMIT tarball=$OVS_TARBALL url=https://github.com/openvswitch/ovs.git ;;
	ovn) commit=$OVN_COMMIT tarball=$OVN_TARBALL url=https://github.com/ovn-org/ovn.git ;;
	esac
	rm -rf "${src:?}/$c" "$src/patches/$c"
	mkdir -p "$src/patches/$c"
	local local_dir=${VPCGW_OVN_SOURCES:-} f d
	if [ -z "$local_dir" ]; then
		# Beside the checkout, or the shared folder of this project's machines (a clone elsewhere,
		# as CI's, finds it there).
		for d in "$repo/../shared/third_party/ovn" /work/shared/third_party/ovn; do
			if [ -f "$d/$tarball" ]; then
				local_dir=$d
				break
			fi
		done
	fi
	if [ -n "$local_dir" ] && [ -f "$local_dir/$tarball" ]; then
		echo "$c: sources from $local_dir" >&2
		checked "$tarball" "$local_dir"
		tar -C "$src" -xJf "$local_dir/$tarball"
		cp "$local_dir/patches/$c/"*.patch "$src/patches/$c/"
	else
		echo "$c: from $url; kube-ovn's patches from its Go module $KUBE_OVN_VERSION" >&2
		clone "$url" "$commit" "$src/$c"
		local mod
		mod=$(go -C "$here/../kubeovn" mod download -json "github.com/kubeovn/kube-ovn@$KUBE_OVN_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
		[ -d "$mod/dist/images/patches" ] || { echo "kube-ovn $KUBE_OVN_VERSION's patches not found in the module cache" >&2; exit 1; }
		while read -r f; do cp "$mod/dist/images/patches/$f" "$src/patches/$c/"; done <"$here/$c.series"
	fi
	while read -r f; do
		checked "patches/$c/$f" "$src"
		patch -d "$src/$c" -p1 --quiet --forward <"$src/patches/$c/$f"
	done <"$here/$c.series"
}

clone() {
	git init -q "$3"
	git -C "$3" fetch -q --depth=1 "$1" "$2"
	git -C "$3" checkout -q FETCH_HEAD
	[ "$(git -C "$3" rev-parse HEAD)" = "$2" ] || { echo "$1: got $(git -C "$3" rev-parse HEAD), want $2" >&2; exit 1; }
}

build_ovs() {
	echo "building Open vSwitch ${OVS_COMMIT:0:12} into $out (about 8 minutes on two cores)" >&2
	(cd "$src/ovs" && ./boot.sh >/dev/null && ./configure -q --prefix="$out" --localstatedir="$out/var" --sysconfdir="$out/etc" >/dev/null)
	make -s -C "$src/ovs" -j"$jobs" >/dev/null
	make -s -C "$src/ovs" install >/dev/null
}

build_ovn() {
	echo "building OVN ${OVN_COMMIT:0:12} into $out (about 3 minutes on two cores)" >&2
	(cd "$src/ovn" && ./boot.sh >/dev/null && ./configure -q --prefix="$out" --localstatedir="$out/var" --sysconfdir="$out/etc" \
		--with-ovs-source="$src/ovs" --with-ovs-build="$src/ovs" >/dev/null)
	make -s -C "$src/ovn" -j"$jobs" >/dev/null
	make -s -C "$src/ovn" install >/dev/null
}

rm -f "$out/VERSION"
mkdir -p "$src"
if ! $rebuild_ovn || [ ! -x "$src/ovs/vswitchd/ovs-vswitchd" ]; then
	fetch_source ovs
	build_ovs
fi
fetch_source ovn
build_ovn
for b in sbin/ovsdb-server sbin/ovs-vswitchd bin/ovsdb-tool bin/ovs-vsctl bin/ovs-appctl bin/ovs-ofctl \
	bin/ovn-northd bin/ovn-controller bin/ovn-nbctl bin/ovn-sbctl bin/ovn-appctl bin/ovn-trace; do
	[ -x "$out/$b" ] || { echo "the build made no $out/$b" >&2; exit 1; }
done
echo "$want" >"$out/VERSION"
echo "$out"
