#!/bin/bash
# bench/profile.sh: where goroce's CPU goes per message, by category.
#
#   bash bench/profile.sh WRITE.64 [3s]       # the 64 B WRITE stream (perftest's shape)
#   bash bench/profile.sh WRITE.65536 [3s]    # the 64 KiB WRITE stream
#   bash bench/profile.sh rawrate [3s]        # the raw 1 KiB-frame cell (nic links only)
#   MTU=9000 bash bench/profile.sh WRITE.65536 # at veth MTU 9000 (path MTU 4096)
#   BIN=/tmp/bench-old bash bench/profile.sh WRITE.65536 # a prebuilt bench binary
#   BWPEER=goroutine bash bench/profile.sh WRITE.64   # both ends in one process (-bw-peer)
#
# Builds bench, runs one cell (`bench -cells bw -bw STREAM -backends afxdp
# -mtus 1500 -reps 1`, the responder in a child process of its own since
# -bw-peer process became the default, both ends in one with BWPEER=goroutine;
# or `-cells rawrate`) under `perf record -F 1999 -g` (frame pointers: Go and
# the kernel; perf follows the child), and classifies every sample of the
# bench processes by its stack: walking from the
# leaf towards the root, the first frame that names a category decides
# (memmove counts where it is called from); a stack under setup (namespaces,
# Open, connect) is setup. Prints the CPU-seconds and share per category and
# the µs per message (per frame for rawrate). Needs root and perf. The
# namespaces are bench's own (198.18.0.0/15, removed at its end).
set -euo pipefail
stream=${1:-WRITE.64}
t=${2:-3s}
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ -n "${BIN:-}" ]; then
	cp "$BIN" "$dir/bench" # a prebuilt bench (BIN=/tmp/bench-old: alternate trees)
else
	(cd "$here" && go build -o "$dir/bench" ./bench)
fi
if [ "$stream" = rawrate ]; then
	args=(-cells rawrate)
else
	args=(-cells bw -bw "$stream")
	if [ -n "${BWPEER:-}" ]; then
		args+=(-bw-peer "$BWPEER")
	fi
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
perf record -q -F 1999 -g -o "$dir/perf.data" -- "$dir/bench" "${args[@]}" -backends afxdp -mtus "${MTU:-1500}" -reps 1 -time "$t" >"$dir/out.md" 2>"$dir/err"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E "goroce WRITE|goroce READ|raw [0-9]+ B frames" "$dir/err" | sed 's/^bench: //'
if [ "$stream" = rawrate ]; then
	# frames received of the path-MTU rate (the second raw line)
	n=$(grep -E "raw [0-9]+ B frames" "$dir/err" | tail -1 | sed -E 's/.*, ([0-9]+) of [0-9]+ sent received.*/\1/')
	unit=frame
else
	n=$(grep -E "goroce (WRITE|READ)" "$dir/err" | sed -E 's/.*, ([0-9]+) msgs,.*/\1/')
	unit=msg
fi
# Go symbols: perf prints the offset into the (non-PIE) binary for them;
# resolve them with go tool addr2line at 0x400000 + offset.
perf script -i "$dir/perf.data" -F comm,period,ip,sym --comm bench 2>/dev/null |
	perl -pe 's/^(\s+)([0-9a-f]+) \[unknown\]/sprintf("%s0x%x [unknown]", $1, hex($2) + 0x400000)/e' >"$dir/script"
awk '$2=="[unknown]" {print $1}' "$dir/script" | sort -u >"$dir/addrs"
go tool addr2line "$dir/bench" <"$dir/addrs" | awk 'NR%2==1' >"$dir/names"
paste "$dir/addrs" "$dir/names" >"$dir/symtab"
awk -v n="$n" -v unit="$unit" -v hz=1999 '
function cat(f) {
	if (f ~ /wire\.ICRC|wire\.\(\*ICRC|wire\.VerifyICRC|hash\/crc32|wire\.slicing8/) return "ICRC"
	if (f ~ /wire\.Parse|wire\.parse|wire\.\(\*Packet\)|wire\.BTHFields|wire\.parseL3/) return "header parse"
	if (f ~ /wire\.Build|wire\..*Encode|wire\.Put|wire\.IPv4\.|wire\.build|wire\.\(\*Frame\)/) return "header build"
	if (f ~ /afxdp\.txKick|xsk_sendmsg|__sys_sendto/) return "kick: sendto (kernel copy-mode transmit + the peer'"'"'s XDP receive)"
	if (f ~ /afxdp\.rxWakeup|__sys_recvfrom/) return "receive wake-up (recvfrom)"
	if (f ~ /sync\.\(\*Mutex\)|sync\.\(\*RWMutex\)|runtime\.lock2|runtime\.unlock2|sync\.runtime_Semacquire|sync\.runtime_Semrelease/) return "locks"
	if (f ~ /transport\.\(\*completer\)|qp\.\(\*CQ\)|qp\.\(\*cqRing|transport\.\(\*QP\)\.Complete/) return "completions (completer, CQ)"
	if (f ~ /nic\/afxdp\.|nic\/internal\/sockio\.\(\*BatchWait\)\.Wait|afxdp\.\(\*Link\)/) return "nic ring handling (descriptors, UMEM copies)"
	if (f ~ /transport\./) return "engine (transport)"
	if (f ~ /runtime\.gcBgMarkWorker|runtime\.gcDrain|runtime\.mallocgc|runtime\.bgsweep|runtime\.scavenge/) return "GC and allocation"
	if (f ~ /runtime\.netpoll|epoll_wait|do_epoll|sys_poll|do_sys_poll|runtime\.futex|futex_|runtime\.usleep|do_nanosleep|runtime\.findRunnable|runtime\.schedule|runtime\.park_m|runtime\.mcall|runtime\.goready|runtime\.ready|runtime\.wakep|runtime\.notewakeup|runtime\.notesleep|runtime\.stopm|runtime\.startm|runtime\.handoffp|runtime\.entersyscall|runtime\.exitsyscall|sockio\.\(\*Parker\)|runtime\.gopark|runtime\.Gosched|runtime\.osyield|sched_yield|^schedule$|^__schedule$/) return "waits, wake-ups and goroutine hand-offs (scheduler, netpoll, futex)"
	if (f ~ /qp\./) return "device (qp: drive loop, batches, posts)"
	if (f ~ /main\.rate|main\.bwRun|main\.bw$/) return "bench loop"
	return ""
}
# origin names where the stack of a wait sample comes from (all: its
# frames, leaf first): the goroutine that parks or yields, or an idle thread.
function origin(all) {
	# The scheduler runs on the thread stack (g0): a yield or a park shows
	# as runtime.mcall -> gosched_m or park_m, without the goroutine.
	if (all ~ /runtime\.gosched_m|runtime\.goschedImpl/) return "a goroutine yielding (runtime.Gosched: bench pollWait between empty CQ polls), the scheduler after it"
	if (all ~ /runtime\.park_m/) return "a goroutine parking (gopark: the runtime poller, CQ.Wait, channels), the scheduler after it"
	if (all ~ /runtime\.sysmon/) return "sysmon"
	if (all ~ /runtime\.mstart|runtime\.stopm|runtime\.findRunnable|runtime\.schedule/) return "an idle thread looking for work (mstart, stopm, findRunnable)"
	return "a goroutine on its own stack (the wait or wake-up calls: Parker.Wait, ready, futex)"
}
function setup(f) { return f ~ /netns\.|afxdp\.Open|qp\.OpenInterface|qp\.openLink|main\.\(\*rdmaPair\)\.connect|afxdp\.\(\*Link\)\.Close|qp\.\(\*Device\)\.Close|main\.openEnd|main\.openRaw|bpf_|exec\.|runtime\.doInit|main\.buildFrames/ }
FILENAME == ARGV[1] { sym[$1] = $2; next }
/^[^ \t]/ { if (depth > 0) flush(); depth = 0; period = $2; next }
/^[ \t]*$/ { if (depth > 0) flush(); depth = 0; next }
{
	s = $2
	if (s == "[unknown]" && ($1 in sym)) s = sym[$1]
	st[depth++] = s
}
function flush(   i, c, all) {
	total++
	all = ""
	for (i = 0; i < depth; i++) all = all " " st[i]
	if (st[0] ~ /memmove/ && !setup(all)) {
		if (all ~ /afxdp\.\(\*Link\)\.(receive|tryReceive|ReadBatch|TryReadBatch)/) mv["out of the UMEM on receive"]++
		else if (all ~ /afxdp\.\(\*Link\)\.WriteBatch/) mv["into the UMEM (WriteBatch)"]++
		else if (all ~ /walkSGL/) mv["MR <-> frame (walkSGL)"]++
		else mv["other"]++
	}
	if (!setup(all) && all ~ /wire\.\(\*ICRCCache\)\.ICRC|wire\.ICRC |wire\.parseL3/ && st[0] ~ /slicing8|crc32|ieeeCLMUL|wire\.ICRC|wire\.\(\*ICRC/) rxcrc++
	for (i = 0; i < depth; i++) if (setup(st[i])) { cnt["setup (namespaces, Open, connect, Close)"]++; return }
	for (i = 0; i < depth; i++) {
		c = cat(st[i])
		if (c != "") {
			cnt[c]++
			if (c ~ /^kick/) { kick[st[0]]++; kc = c }
			if (c ~ /^waits/) { wait[st[i]]++; wc = c; worigin[origin(all)]++ }
			return
		}
	}
	if (st[0] ~ /^[a-z_0-9.]+$/ && st[0] !~ /^runtime/) cnt["other kernel"]++; else cnt["other (runtime, bench)"]++
}
END {
	if (depth > 0) flush()
	run = total - cnt["setup (namespaces, Open, connect, Close)"]
	printf "%d samples at %d Hz, %d outside setup; %d %ss\n\n", total, hz, run, n, unit
	printf "| category | CPU-s | share (outside setup) | µs per %s |\n|---|---|---|---|\n", unit
	for (c in cnt) {
		if (c ~ /^setup/) continue
		per = n > 0 ? cnt[c] / hz / n * 1e6 : 0
		printf("%d\t| %s | %.3f | %.1f %% | %.3f |\n", cnt[c], c, cnt[c] / hz, 100 * cnt[c] / run, per) | "sort -rn | cut -f2-"
	}
	close("sort -rn | cut -f2-")
	per = n > 0 ? run / hz / n * 1e6 : 0
	printf("| total outside setup | %.3f | 100 %% | %.3f |\n", run / hz, per)
	printf "\nInside the kick, by the sampled kernel function (the top 12):\n\n| function | share of the kick | µs per %s |\n|---|---|---|\n", unit
	for (f in kick) {
		per = n > 0 ? kick[f] / hz / n * 1e6 : 0
		printf("%d\t| %s | %.1f %% | %.3f |\n", kick[f], f, 100 * kick[f] / cnt[kc], per) | "sort -rn | head -12 | cut -f2-"
	}
	close("sort -rn | head -12 | cut -f2-")
	printf "\nInside the waits, by the frame that named the category (the top 8):\n\n| frame | share of the waits | µs per %s |\n|---|---|---|\n", unit
	for (f in wait) {
		per = n > 0 ? wait[f] / hz / n * 1e6 : 0
		printf("%d\t| %s | %.1f %% | %.3f |\n", wait[f], f, 100 * wait[f] / cnt[wc], per) | "sort -rn | head -8 | cut -f2-"
	}
	close("sort -rn | head -8 | cut -f2-")
	printf "\nThe waits by origin (the goroutine or thread of the stack):\n\n| origin | share of the waits | µs per %s |\n|---|---|---|\n", unit
	for (f in worigin) printf("%d\t| %s | %.1f %% | %.3f |\n", worigin[f], f, 100 * worigin[f] / cnt[wc], n > 0 ? worigin[f] / hz / n * 1e6 : 0) | "sort -rn | cut -f2-"
	close("sort -rn | cut -f2-")
	printf "\nCopies (memmove by caller) and the receive ICRC check, share of all samples outside setup:\n\n| what | share | µs per %s |\n|---|---|---|\n", unit
	for (f in mv) printf("| memmove %s | %.1f %% | %.3f |\n", f, 100 * mv[f] / run, n > 0 ? mv[f] / hz / n * 1e6 : 0)
	printf("| receive ICRC check (wire.Parse) | %.1f %% | %.3f |\n", 100 * rxcrc / run, n > 0 ? rxcrc / hz / n * 1e6 : 0)
}' "$dir/symtab" "$dir/script"
