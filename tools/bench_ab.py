#!/usr/bin/env python3
"""bench_ab.py - one benchmark's figures over several builds (or environments)
of lean8, side by side: the table of tools/device-run.sh's `ab` stage.

  python3 tools/bench_ab.py [--keys REGEX] NAME=R1,R2,... NAME=R1,R2,...

Each NAME is a variant, each R a JSON report of `lean8-bench BENCH --json R`
from one round (the rounds alternate the variants, so that clocks and
temperature drift hit them alike). Prints one row per numeric key matching
REGEX (default `_ratio$`, the cast bench's x-copy figures): every variant's
values round by round ("a/b"), then each variant's median over the first
variant's. A report that cannot be read is left out with a line saying so.
Exit status 0 (a report, not a gate), 1 when no variant has a readable
report, 2 on bad arguments.
"""
import re
import statistics
import sys

from bench_ratio import read_reports   # tools/, next to this script


def num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def main(argv):
    keys = r"_ratio$"
    if len(argv) >= 2 and argv[0] == "--keys":
        keys, argv = argv[1], argv[2:]
    if not argv or any("=" not in a for a in argv):
        print("usage: bench_ab.py [--keys REGEX] NAME=REPORT[,REPORT...] ...", file=sys.stderr)
        return 2
    try:
        pat = re.compile(keys)
    except re.error as e:
        print(f"bench_ab: --keys {keys}: {e}", file=sys.stderr)
        return 2
    variants = [(a.split("=", 1)[0], read_reports(a.split("=", 1)[1], "bench_ab")) for a in argv]
    if not any(reps for _, reps in variants):
        print("bench_ab: no readable report")
        return 1
    rows = []
    for _, reps in variants:
        for r in reps:
            rows += [k for k in r if num(r[k]) and pat.search(k) and k not in rows]
    names = [n for n, _ in variants]
    width = max([len(k) for k in rows] + [3])
    cell = max([8 * max(len(reps), 1) for _, reps in variants] + [len(n) + 1 for n in names])
    head = "".join(f" {n:>{cell}}" for n in names)
    head += "".join(f" {n + '/' + names[0]:>{len(n) + len(names[0]) + 2}}" for n in names[1:])
    print(f"{'key':<{width}}{head}")
    for k in rows:
        vals = [[r[k] for r in reps if num(r.get(k))] for _, reps in variants]
        line = "".join(f" {'/'.join(f'{v:.3f}' for v in vs) or '-':>{cell}}" for vs in vals)
        base = statistics.median(vals[0]) if vals[0] else 0
        for n, vs in zip(names[1:], vals[1:]):
            w = len(n) + len(names[0]) + 2
            line += f" {statistics.median(vs) / base:>{w}.3f}" if vs and base else f" {'-':>{w}}"
        print(f"{k:<{width}}{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
