#!/usr/bin/env python3
"""The FP8 cast ops of `lean8-bench cast` through PyTorch on the same GPU, in
the same run, eager and torch.compile, and the lean8 / PyTorch ratios.

    lean8-bench cast --json L.json && python3 tools/bench_torch_cast.py L.json [T.json]

Same definitions as lean8 (bytes = input read + outputs written):
  cast    amax = x.abs().max(); q = (x.float() * scale).to(e4m3)
  cast_t  the same plus q.t().contiguous()
Times are CUDA-event medians of 21 blocks of 20 calls after warm-up.
"""
import json
import sys

import torch

SHAPES = [(8192, 8192), (16384, 4096), (8191, 8200), (8200, 8192), (8192, 8200), (8191, 8191)]


def cast(x, scale):
    amax = x.abs().max()
    q = (x.float() * scale).to(torch.float8_e4m3fn)
    return q, amax


def cast_t(x, scale):
    amax = x.abs().max()
    q = (x.float() * scale).to(torch.float8_e4m3fn)
    return q, q.t().contiguous(), amax


def time_ms(fn, *args, reps=21, iters=20):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn(*args)
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) / iters)
    t.sort()
    return t[len(t) // 2]


def main():
    l8 = json.load(open(sys.argv[1])) if len(sys.argv) > 1 else {}
    out = sys.argv[2] if len(sys.argv) > 2 else "bench-torch-cast.json"
    dev = torch.device("cuda", 0)
    res = {"bench": "cast-torch", "device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    scale = torch.tensor(64.0, device=dev)
    fns = {"cast": cast, "cast_t": cast_t}
    compiled = {k: torch.compile(v) for k, v in fns.items()}
    print(f"== torch cast ({res['device']}, torch {torch.__version__})")
    print(f"  {'op':<8} {'in':<5} {'shape':<12} {'eager ms':>9} {'compile ms':>11} {'lean8 ms':>9} "
          f"{'x eager':>8} {'x compile':>10}")
    for dt, dname, es in ((torch.bfloat16, "bf16", 2), (torch.float32, "f32", 4)):
        for r, c in SHAPES:
            x = (torch.rand(r, c, device=dev) * 4 - 2).to(dt)
            shp = f"{r}x{c}"
            for op in ("cast", "cast_t"):
                nbytes = r * c * (es + (2 if op == "cast_t" else 1))
                e = time_ms(fns[op], x, scale)
                try:
                    cm = time_ms(compiled[op], x, scale)
                except Exception as ex:  # a compile failure is a result, not a crash
                    print(f"  torch.compile failed for {op}: {ex}")
                    cm = float("nan")
                key = f"{op}_{dname}_{shp}"
                res[f"eager_{key}_ms"] = e
                res[f"compile_{key}_ms"] = cm
                res[f"eager_{key}_tbps"] = nbytes / (e * 1e-3) / 1e12
                res[f"compile_{key}_tbps"] = nbytes / (cm * 1e-3) / 1e12
                lm = l8.get(f"{key}_ms", 0)
                print(f"  {op:<8} {dname:<5} {shp:<12} {e:9.4f} {cm:11.4f} {lm:9.4f} "
                      f"{(e / lm) if lm else 0:8.2f} {(cm / lm) if lm else 0:10.2f}")
    # the copy ceiling as PyTorch sees it, for reference
    a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    cp = time_ms(b.copy_, a, reps=11, iters=5)
    res["copy_tbps"] = 2 * (1 << 30) / (cp * 1e-3) / 1e12
    print(f"  torch copy 1 GiB: {res['copy_tbps']:.2f} TB/s (lean8 measured {l8.get('copy_tbps', 0):.2f})")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
