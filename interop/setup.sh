#!/bin/bash
# Installs the host tools the rxe-in-qemu interop harness needs (Debian/Ubuntu).
# Idempotent: when everything is present it only checks and returns in well under a second.
set -euo pipefail

pkgs=(qemu-system-x86 kmod binutils cpio tcpdump iproute2 xz-utils gzip util-linux ethtool)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "interop/setup.sh: host tools present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "interop/setup.sh: need root to install: ${missing[*]}" >&2
	exit 1
fi
echo "interop/setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
	apt-get update
	apt-get install -y --no-install-recommends "${missing[@]}"
fi
