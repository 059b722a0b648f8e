#!/usr/bin/env bash
# Installs the Debian packages the lab and the tests use, when they are missing. Idempotent.
set -euo pipefail

# iptables and iputils-arping (the arping of kube-ovn's alpine image; Debian's "arping" exits 1 on -U):
# kmod (lsmod, modprobe): kube-ovn's gateway script (nat-gateway.sh) runs in the lab's gateway
# namespace and calls them.
# busybox: the lab's gateway containers run the base tools of kube-ovn's Alpine image from it
# (what vpcgw's controller runs there to deliver the agent: uname, sha256sum, dd, ...).
packages=(nftables iproute2 conntrack ovn-central iptables iputils-arping kmod busybox)
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
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
