#!/usr/bin/env python3
"""PyTorch's side of `lean8-bench comm` on several GPUs: NCCL all-reduce,
all-gather (first dimension, and the last dimension as Megatron does it: the
first-dimension gather plus a chunk/cat copy) and reduce-scatter, bf16, at the
same sizes, bus bandwidth by nccl-tests' formula, median of timed blocks.
Run under the same launcher as lean8's bench, one process per GPU:

    lean8-run -n 2 lean8-bench comm --json L.json
    lean8-run -n 2 python3 tools/bench_torch_comm.py L.json

Rank 0 prints the table (with lean8 / PyTorch ratios when given lean8's JSON)
and writes bench-torch-comm.json next to it.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

SIZES = [1 << 20, 16 << 20, 256 << 20, 1 << 30]
COLS = 1024


def busbw(kind, nbytes, ms, w):
    algbw = nbytes / (ms * 1e-3) / 1e9
    return algbw * (2.0 * (w - 1) / w if kind == "all_reduce" else (w - 1) / w)


def timed(fn, reps=9, iters=5):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) / iters)
    t.sort()
    return t[len(t) // 2]


def main():
    lean8 = json.load(open(sys.argv[1])) if len(sys.argv) > 1 else {}
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, w = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)
    out = {"bench": "torch-comm", "torch": torch.__version__, "world": w,
           "device": torch.cuda.get_device_name(dev)}
    if rank == 0:
        print(f"== torch NCCL collectives ({out['device']}, {w} ranks, torch {torch.__version__}): "
              f"bus bandwidth GB/s, bf16")
        print(f"  {'MiB':>8} {'AR busbw':>10} {'AG busbw':>10} {'AG-last':>10} {'RS busbw':>10}"
              f" {'last/1st':>9}   lean8/torch AR AG RS")
    for size in SIZES:
        rows = max(1, size // 2 // COLS // w)
        small = torch.zeros(rows, COLS, device=dev, dtype=torch.bfloat16)
        big = torch.zeros(rows * w, COLS, device=dev, dtype=torch.bfloat16)
        last = torch.empty(rows, COLS * w, device=dev, dtype=torch.bfloat16)
        nbytes = big.numel() * 2

        def ag_last():
            dist.all_gather_into_tensor(big, small)
            torch.cat(big.chunk(w, dim=0), dim=-1, out=last)

        ms = {
            "all_reduce": timed(lambda: dist.all_reduce(big)),
            "all_gather": timed(lambda: dist.all_gather_into_tensor(big, small)),
            "all_gather_lastdim": timed(ag_last),
            "reduce_scatter": timed(lambda: dist.reduce_scatter_tensor(small, big)),
        }
        mib = nbytes / 1048576
        bw = {k: busbw(k, nbytes, v, w) for k, v in ms.items()}
        for k in ms:
            out[f"torch_w{w}_{mib:.0f}MiB_{k}_busbw_gbps"] = bw[k]
            out[f"torch_w{w}_{mib:.0f}MiB_{k}_ms"] = ms[k]
        ratios = []
        for k in ("all_reduce", "all_gather", "reduce_scatter"):
            key = f"nccl_w{w}_{mib:.0f}MiB_{k}_busbw_gbps"
            if key in lean8:
                r = lean8[key] / bw[k]
                out[f"ratio_w{w}_{mib:.0f}MiB_{k}"] = r
                ratios.append(f"{r:.3f}")
        if rank == 0:
            print(f"  {mib:8.1f} {bw['all_reduce']:10.2f} {bw['all_gather']:10.2f} "
                  f"{bw['all_gather_lastdim']:10.2f} {bw['reduce_scatter']:10.2f} "
                  f"{ms['all_gather_lastdim'] / ms['all_gather']:9.3f}   {' '.join(ratios)}")
    if rank == 0:
        json.dump(out, open("bench-torch-comm.json", "w"), indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
