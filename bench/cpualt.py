#!/usr/bin/env python3
"""bench/cpualt.py: process CPU per op of Go benchmarks, old and new binaries alternating.

    go test -c -o /tmp/qp-old.test ./qp/      # in a worktree at the old commit
    go test -c -o /tmp/qp-new.test ./qp/
    python3 bench/cpualt.py BusyPollWriteList64 1000000 10 /tmp/qp-old.test /tmp/qp-new.test

Runs each binary with -test.bench 'NAME$' -test.benchtime Nx, REPS times in turn, GOMAXPROCS=1 (GMP=2
to change), and takes the children's user+system CPU (getrusage) per op, less the start-up cost (the
least CPU of three 100-op runs, per binary). Prints min, first quartile and median per binary. On a
loaded machine CPU per op is far steadier than wall ns/op; the spread that is left is bimodal (the
other processes' cache and CPU pressure), so compare min/q1 as well as medians.
"""
import os
import resource
import statistics
import subprocess
import sys

bench, n, reps, bins = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
env = dict(os.environ, GOMAXPROCS=os.environ.get("GMP", "1"))


def run(b, k):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([b, "-test.run", "^$", "-test.bench", bench + "$", "-test.count", "1",
                    "-test.benchtime", f"{k}x"], env=env, stdout=subprocess.DEVNULL, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


base = {b: min(run(b, 100) for _ in range(3)) for b in bins}
res = {b: [] for b in bins}
for _ in range(reps):
    for b in bins:
        res[b].append((run(b, n) - base[b]) * 1e9 / n)
for b in bins:
    v = sorted(res[b])
    print(f"{os.path.basename(b)}: min {v[0]:.0f} q1 {v[len(v)//4]:.0f} median {statistics.median(v):.0f} ns CPU per op"
          f"  all {' '.join(f'{x:.0f}' for x in v)}")
