#!/usr/bin/env python3
"""PyTorch's side of `lean8-bench linear`: bf16 nn.Linear forward + backward
(the weight's gradient accumulated in f32 like lean8's main_grad is not
modelled: PyTorch keeps a bf16 .grad) on the same shapes, timed with CUDA
events (median of blocks), and the ratios to lean8's JSON.

    lean8-bench linear --json L.json && python3 tools/bench_torch_linear.py L.json
"""
import json
import sys

import torch

SHAPES = [(16384, 4096, 4096), (16384, 4096, 16384)]


def main():
    l8 = json.load(open(sys.argv[1])) if len(sys.argv) > 1 else {}
    dev = torch.device("cuda", 0)
    print(f"== torch bf16 nn.Linear fwd+bwd ({torch.cuda.get_device_name(dev)}, torch {torch.__version__})")
    print(f"  {'T x K -> N':<22} {'torch ms':>9} {'lean8 fp8':>10} {'lean8 bf16':>11} {'fp8 speedup':>12}")
    for T, K, N in SHAPES:
        lin = torch.nn.Linear(K, N, device=dev, dtype=torch.bfloat16)
        x = torch.randn(T, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(T, N, device=dev, dtype=torch.bfloat16) * 0.01

        def step():
            y = lin(x)
            y.backward(dy)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t = []
        for _ in range(15):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(5):
                step()
            b.record()
            b.synchronize()
            t.append(a.elapsed_time(b) / 5)
        t.sort()
        ms = t[len(t) // 2]
        key = f"{T}x{K}x{N}"
        f8 = l8.get(f"linear_fp8_{key}_ms", 0)
        b16 = l8.get(f"linear_bf16_{key}_ms", 0)
        print(f"  {T:6d} x {K:5d} -> {N:5d} {ms:9.3f} {f8:10.3f} {b16:11.3f} {(ms / f8) if f8 else 0:11.2f}x")


if __name__ == "__main__":
    main()
