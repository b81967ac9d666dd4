#!/usr/bin/env python3
"""PyTorch's side of `lean8-bench offload`: 8 x (bf16 nn.Linear(4096, 4096) +
GELU), 16384 tokens, forward + backward, without offload and under
torch.autograd.graph.save_on_cpu(pin_memory=True) (every saved activation
to pinned host memory), timed with CUDA events (median of blocks), with the
peak allocated memory of one step, next to lean8's JSON.

    lean8-bench offload --json O.json && python3 tools/bench_torch_offload.py O.json
"""
import contextlib
import json
import sys

import torch

L, T, H = 8, 16384, 4096


def main():
    l8 = json.load(open(sys.argv[1])) if len(sys.argv) > 1 else {}
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(H, H, device=dev, dtype=torch.bfloat16) for _ in range(L)]
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    g = torch.randn(T, H, device=dev, dtype=torch.bfloat16) * 0.01

    def step(offload):
        ctx = torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else contextlib.nullcontext()
        with ctx:
            h = x.clone().requires_grad_(True)
            for lin in layers:
                h = torch.nn.functional.gelu(lin(h))
        h.backward(g)

    res = {}
    for offload in (False, True):
        for _ in range(2):
            step(offload)
        torch.cuda.synchronize()
        t = []
        for _ in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(3):
                step(offload)
            b.record()
            b.synchronize()
            t.append(a.elapsed_time(b) / 3)
        t.sort()
        torch.cuda.reset_peak_memory_stats(dev)
        step(offload)
        torch.cuda.synchronize()
        res[offload] = (t[len(t) // 2], torch.cuda.max_memory_allocated(dev) / 2**20)

    print(f"== torch bf16 {L} x (Linear({H}, {H}) + GELU), {T} tokens, save_on_cpu(pin_memory=True)"
          f" ({torch.cuda.get_device_name(dev)}, torch {torch.__version__})")
    (b_ms, b_mib), (o_ms, o_mib) = res[False], res[True]
    print(f"  {'':<26} {'step ms':>9} {'peak MiB':>9}")
    print(f"  {'torch, no offload':<26} {b_ms:9.2f} {b_mib:9.0f}")
    print(f"  {'torch, save_on_cpu':<26} {o_ms:9.2f} {o_mib:9.0f}   ({o_ms / b_ms:.2f}x slower)")
    for mode in ("bf16", "fp8"):
        base, allo = l8.get(f"{mode}_step_base_ms"), l8.get(f"{mode}_step_all_ms")
        if not base:
            continue
        print(f"  {'lean8 ' + mode + ', no offload':<26} {base:9.2f} {l8[mode + '_peak_base_mib']:9.0f}")
        print(f"  {'lean8 ' + mode + ', all offloaded':<26} {allo:9.2f} {l8[mode + '_peak_all_mib']:9.0f}"
              f"   ({allo / base:.2f}x; torch save_on_cpu / lean8 = {o_ms / allo:.2f})")
        if l8.get(f"{mode}_best_keep", -1) >= 0:
            print(f"  {'lean8 ' + mode + ', all but last ' + str(int(l8[mode + '_best_keep'])):<26}"
                  f" {l8[mode + '_step_best_ms']:9.2f} {l8[mode + '_peak_best_mib']:9.0f}"
                  f"   ({l8[mode + '_best_ratio']:.2f}x)")


if __name__ == "__main__":
    main()
