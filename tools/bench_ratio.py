#!/usr/bin/env python3
"""bench_ratio.py - lean8 / PyTorch throughput ratios from two JSON reports
written in the same run: `lean8-bench gemm --json L` and
`tools/bench_torch_gemm.py --json T` (same keys: <mode>_<shape>_tflops; lean8
adds <mode>_<shape>_tuned_tflops for its autotuned handle).

  python3 tools/bench_ratio.py bench-gemm.json bench-torch-gemm.json
  python3 tools/bench_ratio.py l1.json,l2.json,l3.json t1.json,t2.json,t3.json

Either side may be a comma-separated list of reports (runs of the two
alternated, so that clocks and temperature drift hit both alike): each key
then takes the median of the reports that have it. Prints one row per
(shape, mode): torch, lean8 heuristic, lean8 autotuned, and the two ratios;
then the geometric mean and minimum of each ratio per mode. A report that
cannot be read is left out with a line saying so. Exit status 0 (a report,
not a gate), 1 when a side has no readable report.
"""
import json
import math
import sys


def read_reports(arg, who="bench_ratio"):
    """The readable JSON reports among those arg names (comma-separated), in
    order; each one left out says so, prefixed with who."""
    reps = []
    for path in arg.split(","):
        try:
            with open(path) as f:
                reps.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"{who}: {path}: {e} (left out)")
    return reps


def load(arg):
    """The reports named by arg (comma-separated), merged: each numeric key
    the median of its values, other keys the first report's."""
    reps = read_reports(arg)
    if not reps:
        raise SystemExit(f"bench_ratio: no readable report in {arg}")
    out = dict(reps[0])
    for key in {k for r in reps for k in r}:
        v = sorted(r[key] for r in reps if isinstance(r.get(key), (int, float)))
        if v and not isinstance(v[0], bool):
            n = len(v)
            out[key] = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return out, len(reps)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[0])
        print("usage: bench_ratio.py LEAN8.json TORCH.json")
        return 2
    l8, n8 = load(sys.argv[1])
    th, nt = load(sys.argv[2])
    rows = []
    for key, tv in th.items():
        if not key.endswith("_tflops") or not isinstance(tv, (int, float)) or tv <= 0:
            continue
        base = key[: -len("_tflops")]
        mode, shape = base.rsplit("_", 1)
        h = l8.get(key)
        t = l8.get(base + "_tuned_tflops")
        if h is None:
            continue
        rows.append((shape, mode, tv, h, t))
    if not rows:
        print("bench_ratio: no common keys")
        return 0
    runs = f", medians of {n8} and {nt} runs" if n8 > 1 or nt > 1 else ""
    print(f"== lean8 / torch GEMM ({l8.get('device', '?')}{runs})")
    print(f"  {'M x N x K':<20} {'mode':<9} {'torch':>8} {'lean8':>8} {'tuned':>8} {'l8/t':>7} {'tuned/t':>8}")
    per = {}
    for shape, mode, tv, h, t in rows:
        rh = h / tv if h else 0.0
        rt = (t / tv) if t else 0.0
        per.setdefault(mode, []).append((rh, rt))
        print(f"  {shape:<20} {mode:<9} {tv:8.1f} {h:8.1f} {t or 0:8.1f} {rh:7.3f} {rt:8.3f}")

    def gmean(v):
        v = [x for x in v if x > 0]
        return math.exp(sum(math.log(x) for x in v) / len(v)) if v else 0.0

    for mode, v in per.items():
        print(f"  {mode:<9} geomean lean8/torch {gmean([a for a, _ in v]):.3f} (min {min(a for a, _ in v):.3f}),"
              f" tuned/torch {gmean([b for _, b in v]):.3f} (min {min(b for _, b in v):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
