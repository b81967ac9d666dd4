#!/usr/bin/env python3
"""PyTorch's side of `lean8-bench linear`: bf16 nn.Linear forward + backward
(the weight's gradient accumulated in f32 like lean8's main_grad is not
modelled: PyTorch keeps a bf16 .grad) on the same shapes, eager and with the
step captured in one CUDA graph, timed with CUDA events (median of 15 blocks
of 5 steps), and the ratios of every lean8 variant in its JSON to both.

    lean8-bench linear --json L.json && python3 tools/bench_torch_linear.py L.json [T.json]
"""
import json
import sys

import torch

SHAPES = [(16384, 4096, 4096), (16384, 4096, 16384), (16383, 4096, 4096)]
VARIANTS = ["fp8", "fp8_graph", "fp8_tuned", "fp8_tuned_graph", "bf16", "bf16_graph", "bf16_tuned_graph"]


def time_ms(fn):
    t = []
    for _ in range(15):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(5):
            fn()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) / 5)
    t.sort()
    return t[len(t) // 2]


def main():
    l8 = json.load(open(sys.argv[1])) if len(sys.argv) > 1 else {}
    out = sys.argv[2] if len(sys.argv) > 2 else None
    dev = torch.device("cuda", 0)
    res = {"bench": "linear-torch", "device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    print(f"== torch bf16 nn.Linear fwd+bwd ({res['device']}, torch {torch.__version__})")
    for T, K, N in SHAPES:
        lin = torch.nn.Linear(K, N, device=dev, dtype=torch.bfloat16)
        x = torch.randn(T, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(T, N, device=dev, dtype=torch.bfloat16) * 0.01

        def step():
            y = lin(x)
            y.backward(dy)

        side = torch.cuda.Stream()          # warm-up off the default stream, as capture wants
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        eager = time_ms(step)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        g.replay()
        torch.cuda.synchronize()
        graph = time_ms(g.replay)
        key = f"{T}x{K}x{N}"
        res[f"torch_eager_{key}_ms"] = eager
        res[f"torch_graph_{key}_ms"] = graph
        print(f"  {T} x {K} -> {N}: torch eager {eager:.3f} ms, torch graph {graph:.3f} ms")
        print(f"    {'lean8 variant':<18} {'ms':>9} {'x torch eager':>14} {'x torch graph':>14}")
        for v in VARIANTS:
            ms = l8.get(f"linear_{v}_{key}_ms", 0)
            if ms:
                print(f"    {v:<18} {ms:9.3f} {eager / ms:13.2f}x {graph / ms:13.2f}x")
                res[f"ratio_{v}_vs_eager_{key}"] = eager / ms
                res[f"ratio_{v}_vs_graph_{key}"] = graph / ms
    if out:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
