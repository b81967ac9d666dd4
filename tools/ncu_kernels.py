#!/usr/bin/env python3
"""Summarize `ncu --csv --page raw` output: by kernel (launches, total and mean
time, sorted by total), or launch by launch with the metrics asked for.
Used for the "where does the step's time go" breakdowns and the kernels'
L2 / DRAM figures in docs/perf.md.

    ncu --metrics gpu__time_duration.sum --csv --page raw PROGRAM ... > k.csv
    python3 tools/ncu_kernels.py k.csv [STEPS]

With STEPS, totals are also divided by the number of steps the profiled
launches cover (per-step figures).

    ncu --metrics gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,... \\
        --kernel-name regex:l8_ --csv --page raw PROGRAM ... > k.csv
    python3 tools/ncu_kernels.py --launches k.csv [METRIC...]

--launches prints a Markdown table, one row a launch in the file's order: the
kernel, its grid when the file has it, then the METRIC columns named, or
without names every metric ending in ".sum" (the rollup requested above; the
raw page also holds ~250 device and launch attributes, and .avg, .max and
.min of each metric); times in us, sectors, instructions and bytes in
millions, the rest as ncu wrote them.
"""
import csv
import sys

TIME = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
MILLIONS = {"sector", "inst", "byte"}


def read(path):
    try:
        with open(path) as f:
            rows = list(csv.reader(l for l in f if l.startswith('"')))
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"ncu_kernels.py: {path}: {e}")
    if len(rows) < 2:
        sys.exit(f"ncu_kernels.py: {path}: no ncu CSV rows (run ncu with --csv --page raw)")
    return rows[0], rows[1], rows[2:]


def column(head, name):
    if name not in head:
        sys.exit(f"ncu_kernels.py: no \"{name}\" column (ncu --csv --page raw"
                 + (f", --metrics {name})" if "__" in name else ")"))
    return head.index(name)


def shown(unit):
    """(factor, unit shown) for a column of ncu's unit: times in us, counts
    of sectors, instructions and bytes in millions, the rest as they are."""
    if unit in TIME:
        return TIME[unit], "us"
    if unit in MILLIONS:
        return 1e-6, "M" + unit
    return 1.0, unit


def value(text, unit):
    """The cell as a number in the unit shown(unit) gives, or None."""
    try:
        return float(text.replace(",", "")) * shown(unit)[0]
    except ValueError:
        return None


def by_kernel(head, units, rows, steps):
    ki, ti = column(head, "Kernel Name"), column(head, "gpu__time_duration.sum")
    agg = {}
    for r in rows:
        t = value(r[ti], units[ti] if units[ti] in TIME else "ns")
        if t is None:
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


def by_launch(head, units, rows, metrics):
    """metrics: the column names to show; none, those ending in ".sum" (see
    the module's docstring)."""
    ki = column(head, "Kernel Name")
    gi = head.index("Grid Size") if "Grid Size" in head else None
    if metrics:
        cols = [column(head, m) for m in metrics]
    else:
        cols = [i for i, h in enumerate(head) if "__" in h and h.endswith(".sum")]
    names = [f"{head[i]} ({shown(units[i])[1]})" if units[i] else head[i] for i in cols]
    table = []
    for r in rows:
        cells = [r[ki].split("(")[0][:40]] + ([r[gi]] if gi is not None else [])
        for i in cols:
            v = value(r[i], units[i])
            cells.append(r[i] if v is None else f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}")
        table.append(cells)
    head_cells = ["kernel"] + (["grid"] if gi is not None else []) + names
    print("| " + " | ".join(head_cells) + " |")
    print("|" + "---|" * len(head_cells))
    for cells in table:
        print("| " + " | ".join(cells) + " |")


def main(argv):
    if argv and argv[0] == "--launches":
        if len(argv) < 2:
            sys.exit("usage: ncu_kernels.py --launches K.CSV [METRIC...]")
        by_launch(*read(argv[1]), argv[2:])
        return
    if len(argv) not in (1, 2):
        sys.exit("usage: ncu_kernels.py K.CSV [STEPS] | ncu_kernels.py --launches K.CSV [METRIC...]")
    by_kernel(*read(argv[0]), float(argv[1]) if len(argv) > 1 else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
