#!/bin/bash
# Builds the kernel + initramfs of the rxe peer VM from Debian packages (never installed on the
# host: apt-get download + dpkg-deb -x into a staging tree), see README.md and
# /work/shared/RXE-PEER.md.
#
# Output: the last line on stdout is the directory holding `kernel` (an uncompressed vmlinux that
# qemu boots through its PVH entry, or the bzImage) and `initrd` (an uncompressed cpio), e.g.
#   /var/cache/goroce-interop/vm-3f1c0a9e2b7d4c55
# The directory name is a hash of the exact package versions and of the files under interop/vm/
# and of this script, so a rerun with a warm cache only asks apt-cache for versions (seconds).
# Cache root: $GOROCE_INTEROP_CACHE (default /var/cache/goroce-interop). Concurrent runs are
# serialised with flock on $CACHE/.lock.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${GOROCE_INTEROP_CACHE:-/var/cache/goroce-interop}
mkdir -p "$CACHE/debs"
exec 9>"$CACHE/.lock"
flock 9

log() { echo "build-vm: $*" >&2; }
t0=$(date +%s%N)
step() { log "$(( ($(date +%s%N) - t0) / 1000000 )) ms: $*"; }

# Userspace packages unpacked into the initramfs. The list is closed under the ELF NEEDED entries
# of everything we ship (checked below, the build fails naming any missing soname).
userpkgs=(
	busybox-static libc6 libgcc-s1 bash libtinfo6
	libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils libibumad3 perftest
	libnl-3-200 libnl-route-3-200 libpci3 libudev1 zlib1g
	iproute2 libmnl0 libbsd0 libmd0 libcap2 libbpf1 libelf1 libxtables12
	nvme-cli libnvme1 libjson-c5 libuuid1 libkeyutils1 libssl3 e2fsprogs libext2fs2 libcom-err2 libss2 libblkid1 libdbus-1-3 libsystemd0 liblzma5 libzstd1 liblz4-1 libgcrypt20 libgpg-error0
)

# Kernel modules (and, resolved from modules.dep, their dependencies).
modules=(virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs rdma_ucm ib_umad sch_netem sch_tbf sch_red
	configfs crc64_rocksoft_generic nvme_core nvme_fabrics nvme_rdma nvmet nvmet_rdma loop crc32c_generic ext4)

# Fast path: the apt lists and our inputs are as they were at the last build (apt-cache alone takes
# seconds on a busy machine).
fast=$( { stat -c '%n %s %Y' /var/lib/apt/lists/* 2>/dev/null; cat "${BASH_SOURCE[0]}"; find "$here/vm" -type f | sort | xargs cat; } | sha256sum | cut -c1-16)
if [ -f "$CACHE/fast-$fast" ]; then
	out=$(cat "$CACHE/fast-$fast")
	if [ -f "$out/initrd" ] && [ -f "$out/kernel" ]; then
		log "cached: $out"
		echo "$out"
		exit 0
	fi
fi

kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}' || true)
if [ -z "$kpkg" ]; then
	log "no linux-image-amd64 in the apt lists, running apt-get update"
	apt-get update >&2
	kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
allpkgs=("$kpkg" "${userpkgs[@]}")

# Candidate versions, one apt-cache call.
declare -A ver
while read -r p v; do ver[$p]=$v; done < <(apt-cache policy "${allpkgs[@]}" | awk '
	/^[^ ].*:$/ {p=substr($1, 1, length($1)-1)}
	/^  Candidate:/ {print p, $2}')
manifest=""
for p in "${allpkgs[@]}"; do
	v=${ver[$p]:-}
	if [ -z "$v" ] || [ "$v" = "(none)" ]; then
		log "no candidate version for $p (apt-get update?)"
		exit 1
	fi
	manifest+="$p=$v"$'\n'
done
key=$( { printf '%s' "$manifest"; cat "${BASH_SOURCE[0]}"; find "$here/vm" -type f | sort | xargs cat; } | sha256sum | cut -c1-16)
out="$CACHE/vm-$key"
if [ -f "$out/initrd" ] && [ -f "$out/kernel" ]; then
	rm -f "$CACHE"/fast-*
	echo "$out" > "$CACHE/fast-$fast"
	log "cached: $out"
	echo "$out"
	exit 0
fi

step "versions resolved, building $out"
# Download what is not in the deb cache yet.
debfile() { # the file name apt-get download gives: epoch ':' is written %3a
	local p=$1 v=${ver[$1]}
	ls "$CACHE/debs/${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -n1
}
need=()
for p in "${allpkgs[@]}"; do
	[ -n "$(debfile "$p")" ] || need+=("$p=${ver[$p]}")
done
if [ ${#need[@]} -gt 0 ]; then
	log "downloading ${#need[@]} packages"
	(cd "$CACHE/debs" && apt-get download "${need[@]}" 2>&1 | grep -v -e '^W: Download is performed unsandboxed' >&2) || true
	for p in "${allpkgs[@]}"; do
		[ -n "$(debfile "$p")" ] || { log "download of $p=${ver[$p]} failed"; exit 1; }
	done
fi

step "downloaded"
work=$(mktemp -d "$CACHE/tmp-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
kst=$work/kernel root=$work/root
mkdir -p "$kst" "$root"
(for p in "${userpkgs[@]}"; do dpkg-deb -x "$(debfile "$p")" "$root"; done) &
userpid=$!
# Only the parts of the kernel package that can hold our modules and their dependencies (the
# whole tree is ~440 MB; a dependency outside these directories makes the build fail below).
dpkg-deb --fsys-tarfile "$(debfile "$kpkg")" | tar -x -C "$kst" --wildcards --no-wildcards-match-slash \
	'./boot/vmlinuz-*' './lib/modules/*/modules.*' './lib/modules/*/kernel/net' './lib/modules/*/kernel/fs' \
	'./lib/modules/*/kernel/crypto' './lib/modules/*/kernel/lib' './lib/modules/*/kernel/arch' \
	'./lib/modules/*/kernel/drivers/virtio' './lib/modules/*/kernel/drivers/infiniband' \
	'./lib/modules/*/kernel/drivers/net/*.ko*' './lib/modules/*/kernel/drivers/nvme' './lib/modules/*/kernel/block' \
	'./lib/modules/*/kernel/drivers/block/loop.ko*'
step "unpacked"
wait "$userpid" || { log "unpacking the user packages failed"; exit 1; }
kver=$(ls "$kst/lib/modules")
[ "$(echo "$kver" | wc -l)" = 1 ] || { log "expected one kernel in $kpkg, got: $kver"; exit 1; }
depmod -b "$kst" "$kver"

step "depmod done"
# Root tree: the user packages without docs and unused providers.
rm -rf "$root/usr/share" "$root/usr/lib/x86_64-linux-gnu/gconv" \
	"$root/etc/init.d" "$root/lib/systemd" "$root/usr/lib/systemd" "$root/lib/udev"
find "$root/etc/libibverbs.d" -type f ! -name rxe.driver -delete
find "$root/usr/lib/x86_64-linux-gnu/libibverbs" -type f ! -name 'librxe-*' -delete
# iproute2 extras whose libraries we do not ship.
rm -f "$root/usr/sbin/arpd" "$root/usr/lib/x86_64-linux-gnu/tc/q_atm.so" "$root/bin/ss"

# Modules in load order (dependencies first), uncompressed. modules.dep is read once into maps.
mdir=$kst/lib/modules/$kver
declare -A dep byname seen
while IFS=: read -r path deps; do
	dep[$path]=$deps
	base=${path##*/}
	base=${base%.xz}; base=${base%.zst}; base=${base%.gz}
	byname[${base%.ko}]=$path
done < "$mdir/modules.dep"
order=()
add_mod() { # $1: path relative to $mdir
	local m=$1 d i
	[ -n "${seen[$m]:-}" ] && return
	seen[$m]=1
	# modules.dep lists dependencies so that the last one must be loaded first.
	local -a ds=(${dep[$m]})
	for ((i = ${#ds[@]} - 1; i >= 0; i--)); do add_mod "${ds[i]}"; done
	order+=("$m")
}
for m in "${modules[@]}"; do
	# Module names use _ where file names may use - (and vice versa).
	rel=${byname[$m]:-${byname[${m//_/-}]:-}}
	if [ -z "$rel" ]; then
		grep -q -e "/$m.ko" -e "/${m//_/-}.ko" "$mdir/modules.builtin" && continue
		log "module $m not found"; exit 1
	fi
	add_mod "$rel"
done
mkdir -p "$root/lib/modules" "$root/etc/goroce"
: > "$root/etc/goroce/modules"
for m in "${order[@]}"; do
	base=$(basename "$m")
	case $base in
	*.ko.xz) xz -dc "$mdir/$m" > "$root/lib/modules/${base%.xz}"; base=${base%.xz} ;;
	*.ko.zst) zstd -qdc "$mdir/$m" > "$root/lib/modules/${base%.zst}"; base=${base%.zst} ;;
	*.ko.gz) gzip -dc "$mdir/$m" > "$root/lib/modules/${base%.gz}"; base=${base%.gz} ;;
	*) cp "$mdir/$m" "$root/lib/modules/$base" || { log "module file $m missing from the partial kernel tree"; exit 1; } ;;
	esac
	echo "$base" >> "$root/etc/goroce/modules"
done
log "${#order[@]} modules: $(tr '\n' ' ' < "$root/etc/goroce/modules")"

step "modules copied"
# Check the NEEDED closure (libgcc_s is dlopen()ed by glibc for pthread_exit, it is in libgcc-s1).
libdirs=(lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu lib64)
missing=""
f=""
while IFS= read -r line; do
	case $line in
	"File: "*) f=${line#File: } ;;
	*"(NEEDED)"*)
		n=${line##*[}; n=${n%]}
		ok=""
		for d in "${libdirs[@]}"; do [ -e "$root/$d/$n" ] && ok=1 && break; done
		[ -n "$ok" ] || missing+="$f needs $n"$'\n'
		;;
	esac
done < <(find "$root" -type f \( -perm -u+x -o -name '*.so*' \) ! -name '*.ko' -print0 |
	xargs -0 readelf -d -W 2>/dev/null | grep -e '^File: ' -e '(NEEDED)')
[ -e "$root/lib/x86_64-linux-gnu/libgcc_s.so.1" ] || missing+="libgcc_s.so.1"$'\n'
if [ -n "$missing" ]; then
	log "unresolved shared libraries (add their packages to userpkgs):"
	printf '%s' "$missing" >&2
	exit 1
fi

step "NEEDED closure checked"
install -m 0755 "$here/vm/init" "$root/init"
install -m 0755 "$here/vm/jobd" "$root/etc/goroce/jobd"
mkdir -p "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/run" "$root/jobs" "$root/root" "$root/var/tmp"
printf '%s' "$manifest" > "$root/etc/goroce/packages"
echo "root:x:0:0:root:/root:/bin/bash" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"
echo "127.0.0.1 localhost" > "$root/etc/hosts"

mkdir -p "$work/out"
# Uncompressed initramfs and kernel: under TCG, decompressing them costs the guest more CPU
# than qemu reading 20 + 65 MB. qemu boots an uncompressed vmlinux ELF through its PVH entry
# (XEN_ELFNOTE_PHYS32_ENTRY, note type 0x12); without one we keep the bzImage.
(cd "$root" && find . -print0 | sort -z | cpio --null -o -H newc --quiet) > "$work/out/initrd"
vmlinuz=$kst/boot/vmlinuz-$kver
off=$(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$vmlinuz" | head -n1 | cut -d: -f1 || true)
# (xz stops at the end of the stream; process substitution keeps tail's SIGPIPE out of pipefail.)
if [ -n "$off" ] && xz -dc --single-stream < <(tail -c +$((off + 1)) "$vmlinuz") > "$work/out/kernel" 2>/dev/null &&
	readelf -n "$work/out/kernel" 2>/dev/null | grep -q 'Xen.*(0x00000012)'; then
	log "kernel: uncompressed vmlinux (PVH boot)"
else
	log "kernel: bzImage (no PVH entry found in an XZ payload)"
	cp "$vmlinuz" "$work/out/kernel"
fi
printf '%s' "$manifest" > "$work/out/packages"
echo "$kver" > "$work/out/kernel-version"
step "initramfs written"
rm -rf "$out"
mv "$work/out" "$out"

# Keep only this build and the debs it used.
for d in "$CACHE"/vm-*; do [ "$d" = "$out" ] || rm -rf "$d"; done
keep=$(for p in "${allpkgs[@]}"; do basename "$(debfile "$p")"; done)
for f in "$CACHE"/debs/*.deb; do grep -qxF "$(basename "$f")" <<<"$keep" || rm -f "$f"; done

rm -f "$CACHE"/fast-*
echo "$out" > "$CACHE/fast-$fast"
log "built $out in $(( ($(date +%s%N) - t0) / 1000000 )) ms ($(du -h "$out/initrd" | cut -f1) initrd, $(du -h "$out/kernel" | cut -f1) kernel)"
echo "$out"
