#!/usr/bin/env bash
# Installs the Debian packages the lab and the tests use, when they are missing. Idempotent.
set -euo pipefail

# iptables and iputils-arping (the arping of kube-ovn's alpine image; Debian's "arping" exits 1 on -U):
# kmod (lsmod, modprobe): kube-ovn's gateway script (nat-gateway.sh) runs in the lab's gateway
# namespace and calls them.
# busybox: the lab's gateway containers run the base tools of kube-ovn's Alpine image from it
# (what vpcgw's controller runs there to deliver the agent: uname, sha256sum, dd, ...).
# ethtool: the lab's chassis (internal/ovsnode) turns tx checksum offload off on the Pods' veths,
# as kube-ovn-cni does on a userspace datapath.
# curl: the user guide's walkthrough (test/kubeovn) asks a Service through its EIP with it.
# openssl: `make test` makes a throwaway key to sign its release, and test/release verifies with it.
# Open vSwitch and OVN are not Debian's: hack/tools/ovn/build.sh builds kube-ovn's (and installs
# the build's own packages: a compiler, autotools, libssl-dev, ...).
packages=(nftables iproute2 conntrack iptables iputils-arping kmod busybox ethtool curl openssl)
missing=()
for p in "${packages[@]}"; do
	[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "missing packages: ${missing[*]}; run as root (or: sudo apt-get install -y ${missing[*]})" >&2
	exit 1
fi
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A package's maintainer scripts may start system services: the lab never uses them (it runs its
# own daemons with private sockets), and in a container without an init they fail or linger. A
# policy-rc.d that refuses every start, put in place only for this install when the machine has
# none, keeps them from starting.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# hack/install-deps.sh: no service starts during this install\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
