#!/usr/bin/env python3
"""Replay lean8's training-like allocation trace through PyTorch's caching
allocator, side by side with `lean8-bench alloc` in the same run.

    lean8-bench alloc --dump-trace trace.txt && python3 tools/bench_alloc_torch.py trace.txt

The trace is text: "a ID BYTES" allocates, "f ID" frees. Prints reserved peak /
allocated peak as PyTorch's allocator reports them, and the alloc+free pair
cost of torch.empty on a cache hit, and writes the same numbers as JSON.
"""
import json
import sys
import time

import torch


def main():
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else path.rsplit(".", 1)[0] + "-torch.json"
    ops = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            if p[0] == "a":
                ops.append((0, int(p[1]), int(p[2])))
            elif p[0] == "f":
                ops.append((1, int(p[1]), 0))
    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)          # initialise CUDA before asking for memory stats
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    live = {}
    t0 = time.perf_counter()
    for kind, ident, size in ops:
        if kind == 0:
            live[ident] = torch.empty(size, dtype=torch.uint8, device=dev)
        else:
            del live[ident]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    alloc_peak = torch.cuda.max_memory_allocated(dev)
    reserved_peak = torch.cuda.max_memory_reserved(dev)
    live.clear()
    ratio = reserved_peak / alloc_peak
    # the cost of a cache-hit pair through the Python API, for reference
    x = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
    del x
    n = 100000
    t1 = time.perf_counter()
    for _ in range(n):
        x = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
        del x
    pair_ns = (time.perf_counter() - t1) / n * 1e9
    print(f"== torch alloc replay ({torch.cuda.get_device_name(dev)}, torch {torch.__version__})")
    print(f"  ops {len(ops)}  replay {dt:.2f} s")
    print(f"  allocated peak {alloc_peak / 2**30:.2f} GiB  reserved peak {reserved_peak / 2**30:.2f} GiB")
    print(f"  torch reserved / allocated = {ratio:.3f}")
    print(f"  torch.empty+del 1 MiB pair (Python API): {pair_ns:.0f} ns")
    with open(out, "w") as f:
        json.dump({"bench": "alloc-torch", "ops": len(ops), "allocated_peak": alloc_peak,
                   "reserved_peak": reserved_peak, "fragmentation_ratio": ratio,
                   "pair_ns_torch_empty_1MiB": pair_ns, "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
