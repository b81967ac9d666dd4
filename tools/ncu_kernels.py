#!/usr/bin/env python3
"""Summarize `ncu --metrics gpu__time_duration.sum --csv --page raw` output by
kernel: launches, total and mean time, sorted by total. Used for the "where
does the step's time go" breakdowns in docs/perf.md.

    ncu --metrics gpu__time_duration.sum --csv --page raw PROGRAM ... > k.csv
    python3 tools/ncu_kernels.py k.csv [STEPS]

With STEPS, totals are also divided by the number of steps the profiled
launches cover (per-step figures).
"""
import csv
import sys


def main():
    rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
    steps = float(sys.argv[2]) if len(sys.argv) > 2 else 0
    head = rows[0]
    ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    unit = rows[1][ti] if rows[1][ti] in ("ns", "us", "usecond", "nsecond", "msecond") else ""
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
    agg = {}
    for r in rows[1:]:
        try:
            t = float(r[ti].replace(",", "")) * scale
        except ValueError:
            continue
        name = r[ki].split("(")[0][:60]
        n, s = agg.get(name, (0, 0.0))
        agg[name] = (n + 1, s + t)
    total = sum(s for _, s in agg.values())
    per = f" {'us/step':>9}" if steps else ""
    print(f"{'kernel':<60} {'launches':>8} {'total us':>10} {'mean us':>8}{per}")
    for name, (n, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        extra = f" {s / steps:9.1f}" if steps else ""
        print(f"{name:<60} {n:8d} {s:10.1f} {s / n:8.2f}{extra}")
    extra = f" {total / steps:9.1f}" if steps else ""
    print(f"{'all':<60} {sum(n for n, _ in agg.values()):8d} {total:10.1f} {'':>8}{extra}")


if __name__ == "__main__":
    main()
