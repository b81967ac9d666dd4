#!/usr/bin/env python3
"""bench_torch_gemm.py - PyTorch's side of `lean8-bench gemm`: the same shapes
and modes, D[M,N] = A[M,K] . B[N,K]^T on random data, timed the same way
(3 warm-ups, then blocks of back-to-back calls timed with CUDA events, the
median block), in the same order (modes outer, shapes inner: each key follows the
same work on both sides, so the GPU's clocks and temperature have the same history
when it is timed), written as JSON with the same keys.

  fp8_fast  torch._scaled_mm(E4M3 A, E4M3 B^T, scale_a, scale_b, bf16 out, use_fast_accum=True)
  fp8       the same with use_fast_accum=False
  bf16      torch.matmul(A, B.t()) on bf16

_scaled_mm wants its second operand column-major: B.t() of a row-major
[N,K] B is exactly that, so both sides run cuBLASLt's TN layout on the same
bytes.

  python3 tools/bench_torch_gemm.py [--json PATH] [--quick] [--order modes|shapes]

--order shapes runs each shape's three modes together instead (this script's order
before 2026-12-03; kept to measure what the order does).
"""
import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = [(8192, 8192, 8192), (16384, 4096, 4096), (4096, 4096, 4096),
          (16384, 12288, 4096), (16384, 4096, 16384)]
MODES = ["fp8_fast", "fp8", "bf16"]


def time_ms(fn, reps, quick):
    for _ in range(3):
        fn()
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    one = max(e0.elapsed_time(e1), 1e-3)
    iters = min(500, max(3, int((10.0 if quick else 50.0) / one)))
    t = []
    for _ in range(reps):
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        t.append(e0.elapsed_time(e1) / iters)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench-torch-gemm.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--order", choices=("modes", "shapes"), default="modes")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("== torch gemm: skipped: no CUDA device")
        return 0
    reps = 3 if args.quick else 7
    dev = torch.device("cuda")
    out = {"bench": "torch-gemm", "device": torch.cuda.get_device_name(0),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
           "order": args.order}
    print(f"== torch gemm: D[M,N] = A[M,K] . B[N,K]^T, TFLOP/s ({out['device']}, torch {torch.__version__})")
    print(f"  {'M x N x K':<22} {'mode':<9} {'TFLOP/s':>10}")
    one = torch.ones((), device=dev, dtype=torch.float32)

    def call(mode, a16, b16, a8, b8):
        if mode == "bf16":
            return lambda: torch.matmul(a16, b16.t())
        return lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16,
                                        use_fast_accum=mode == "fp8_fast")

    if args.order == "modes":
        runs = [(mode, shape) for mode in MODES for shape in SHAPES]
    else:
        runs = [(mode, shape) for shape in SHAPES for mode in MODES]
    tf = {}
    for (mode, (m, n, k)) in runs:
        # values of about unit size, like lean8's table in [-2, 2)
        a16 = (torch.rand(m, k, device=dev, dtype=torch.bfloat16) * 4 - 2)
        b16 = (torch.rand(n, k, device=dev, dtype=torch.bfloat16) * 4 - 2)
        a8 = a16.to(torch.float8_e4m3fn)
        b8 = b16.to(torch.float8_e4m3fn)
        ms = time_ms(call(mode, a16, b16, a8, b8), reps, args.quick)
        tf[(mode, (m, n, k))] = 2.0 * m * n * k / (ms * 1e-3) / 1e12
        del a16, b16, a8, b8
        torch.cuda.empty_cache()
    for (m, n, k) in SHAPES:
        shape = f"{m}x{n}x{k}"
        for i, mode in enumerate(MODES):
            out[f"{mode}_{shape}_tflops"] = tf[(mode, (m, n, k))]
            print(f"  {shape if i == 0 else '':<22} {mode:<9} {tf[(mode, (m, n, k))]:10.1f}")
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
