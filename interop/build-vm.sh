#!/bin/bash
# Builds the kernel + initramfs of the rxe peer VM from Debian packages (never installed on the
# host: apt-get download + dpkg-deb -x into a staging tree), see README.md and
# /work/shared/RXE-PEER.md.
#
# Output: the last line on stdout is the directory holding vmlinuz and initrd.gz, e.g.
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

# Userspace packages unpacked into the initramfs. The list is closed under the ELF NEEDED entries
# of everything we ship (checked below, the build fails naming any missing soname).
userpkgs=(
	busybox-static libc6 libgcc-s1 bash libtinfo6
	libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils libibumad3 perftest
	libnl-3-200 libnl-route-3-200 libpci3 libudev1 zlib1g
	iproute2 libmnl0 libbsd0 libmd0 libcap2 libbpf1 libelf1 libxtables12
)

# Kernel modules (and, resolved from modules.dep, their dependencies).
modules=(virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs rdma_ucm ib_umad sch_netem)

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
if [ -f "$out/initrd.gz" ] && [ -f "$out/vmlinuz" ]; then
	log "cached: $out"
	echo "$out"
	exit 0
fi

t0=$(date +%s%N)
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

work=$(mktemp -d "$CACHE/tmp-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/stage root=$work/root
mkdir -p "$stage" "$root"
for p in "${allpkgs[@]}"; do dpkg-deb -x "$(debfile "$p")" "$stage"; done
kver=$(ls "$stage/lib/modules")
[ "$(echo "$kver" | wc -l)" = 1 ] || { log "expected one kernel in $kpkg, got: $kver"; exit 1; }
depmod -b "$stage" "$kver"

# Root tree: everything the packages ship except docs, the kernel tree and unused providers.
cp -a "$stage/." "$root/"
rm -rf "$root/boot" "$root/lib/modules" "$root/usr/share" "$root/usr/lib/x86_64-linux-gnu/gconv" \
	"$root/usr/lib/x86_64-linux-gnu/perl"* "$root/etc/init.d" "$root/lib/systemd" "$root/usr/lib/systemd" "$root/lib/udev"
# iproute2 extras whose libraries we do not ship.
rm -f "$root/usr/sbin/arpd" "$root/usr/lib/x86_64-linux-gnu/tc/q_atm.so" "$root/bin/ss"
find "$root/etc/libibverbs.d" -type f ! -name rxe.driver -delete
find "$root/usr/lib/x86_64-linux-gnu/libibverbs" -type f ! -name 'librxe-*' -delete

# Modules in load order (dependencies first), uncompressed.
mdir=$stage/lib/modules/$kver
declare -A seen
order=()
add_mod() { # $1: path relative to $mdir
	local m=$1 deps d
	[ -n "${seen[$m]:-}" ] && return
	seen[$m]=1
	deps=$(awk -v m="$m:" '$1==m {for (i=2; i<=NF; i++) print $i}' "$mdir/modules.dep")
	# modules.dep lists dependencies so that the last one must be loaded first.
	for d in $(echo "$deps" | tac); do add_mod "$d"; done
	order+=("$m")
}
for m in "${modules[@]}"; do
	rel=$(awk -F: -v n="/$m.ko" 'index($1, n) && substr($1, length($1)-length(n)+1) == n {print $1}' "$mdir/modules.dep" | head -n1)
	for ext in .xz .zst .gz; do
		[ -n "$rel" ] && break
		rel=$(awk -F: -v n="/$m.ko$ext" 'substr($1, length($1)-length(n)+1) == n {print $1}' "$mdir/modules.dep" | head -n1)
	done
	if [ -z "$rel" ]; then
		grep -q "/$m.ko" "$mdir/modules.builtin" && continue
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
	*) cp "$mdir/$m" "$root/lib/modules/$base" ;;
	esac
	echo "$base" >> "$root/etc/goroce/modules"
done
log "${#order[@]} modules: $(tr '\n' ' ' < "$root/etc/goroce/modules")"

# Busybox applets for every command no package provides.
for a in $("$root/bin/busybox" --list-full); do
	[ -e "$root/$a" ] || [ -L "$root/$a" ] || { mkdir -p "$root/$(dirname "$a")"; ln -s /bin/busybox "$root/$a"; }
done

# Check the NEEDED closure (libgcc_s is dlopen()ed by glibc for pthread_exit, it is in libgcc-s1).
libdirs=(lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu lib64)
missing=""
while IFS= read -r f; do
	for n in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		ok=""
		for d in "${libdirs[@]}"; do [ -e "$root/$d/$n" ] && ok=1 && break; done
		[ -n "$ok" ] || missing+="$f needs $n"$'\n'
	done
done < <(find "$root" -type f \( -perm -u+x -o -name '*.so*' \) ! -name '*.ko' -print)
[ -e "$root/lib/x86_64-linux-gnu/libgcc_s.so.1" ] || missing+="libgcc_s.so.1"$'\n'
if [ -n "$missing" ]; then
	log "unresolved shared libraries (add their packages to userpkgs):"
	printf '%s' "$missing" >&2
	exit 1
fi

install -m 0755 "$here/vm/init" "$root/init"
install -m 0755 "$here/vm/jobd" "$root/etc/goroce/jobd"
mkdir -p "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/run" "$root/jobs" "$root/root" "$root/var/tmp"
printf '%s' "$manifest" > "$root/etc/goroce/packages"
echo "root:x:0:0:root:/root:/bin/bash" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"
echo "127.0.0.1 localhost" > "$root/etc/hosts"

mkdir -p "$work/out"
(cd "$root" && find . -print0 | sort -z | cpio --null -o -H newc --quiet) | gzip -1 > "$work/out/initrd.gz"
cp "$stage/boot/vmlinuz-$kver" "$work/out/vmlinuz"
printf '%s' "$manifest" > "$work/out/packages"
echo "$kver" > "$work/out/kernel-version"
rm -rf "$out"
mv "$work/out" "$out"

# Keep only this build and the debs it used.
for d in "$CACHE"/vm-*; do [ "$d" = "$out" ] || rm -rf "$d"; done
keep=$(for p in "${allpkgs[@]}"; do basename "$(debfile "$p")"; done)
for f in "$CACHE"/debs/*.deb; do grep -qxF "$(basename "$f")" <<<"$keep" || rm -f "$f"; done

log "built $out in $(( ($(date +%s%N) - t0) / 1000000 )) ms ($(du -h "$out/initrd.gz" | cut -f1) initrd)"
echo "$out"
