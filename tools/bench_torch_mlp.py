#!/usr/bin/env python3
"""PyTorch's side of lean8-train: the same MLP (784 -> hidden... -> 10, GELU),
batch, AdamW and data, on the GPU, fp32 and bf16 autocast; prints test
accuracy per epoch and images/s, to compare with `lean8-train` in the same run.

    python3 tools/bench_torch_mlp.py DATA_DIR [--hidden 512,512] [--batch 256] [--epochs 10]
                                     [--graph] [--modes fp32,bf16]

DATA_DIR holds the Fashion-MNIST IDX files (gzipped or not).

--graph captures the whole training step - the batch gather from the data on
the device, forward, loss, backward and the AdamW step (capturable=True) -
in one CUDA graph (torch.cuda.graph, after 3 warm-up steps on a side stream,
autocast with cache_enabled=False as PyTorch's docs require) and replays it
per batch; a step is then one index copy into a static buffer and one
replay. This is PyTorch's fastest form of the step, the peer lean8-train is
measured against. Partial last batches are dropped in this mode (a graph
has fixed shapes), so img/s counts only the full batches it ran; the warm-up
steps train on the first batch before epoch 1.
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch


def idx(path):
    for p in (path + ".gz", path):
        if os.path.exists(p):
            data = (gzip.open if p.endswith(".gz") else open)(p, "rb").read()
            nd = data[3]
            dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd)]
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)
    raise FileNotFoundError(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--graph", action="store_true", help="the whole step in one CUDA graph")
    ap.add_argument("--modes", default="fp32,bf16")
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    norm = lambda x: (torch.tensor(x, dtype=torch.float32).reshape(len(x), -1) / 255 - 0.2860) / 0.3530
    xtr = norm(idx(os.path.join(a.data, "train-images-idx3-ubyte"))).to(dev)
    ytr = torch.tensor(idx(os.path.join(a.data, "train-labels-idx1-ubyte")), dtype=torch.long).to(dev)
    xte = norm(idx(os.path.join(a.data, "t10k-images-idx3-ubyte"))).to(dev)
    yte = torch.tensor(idx(os.path.join(a.data, "t10k-labels-idx1-ubyte")), dtype=torch.long).to(dev)
    sizes = [784] + [int(h) for h in a.hidden.split(",")] + [10]
    for mode in a.modes.split(","):
        torch.manual_seed(1)
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                layers.append(torch.nn.GELU(approximate="tanh"))
        model = torch.nn.Sequential(*layers).to(dev)
        n = len(xtr)
        if a.graph:
            run_graphed(a, mode, model, xtr, ytr, xte, yte, dev)
            continue
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
        for e in range(a.epochs):
            perm = torch.randperm(n, device=dev)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for b in range(0, n, a.batch):
                i = perm[b:b + a.batch]
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
                    loss = torch.nn.functional.cross_entropy(model(xtr[i]), ytr[i])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
                acc = (model(xte).argmax(1) == yte).float().mean().item()
            print(f"torch {mode} epoch {e + 1:2d}  test acc {acc:.4f}  {n / dt:9.0f} img/s", flush=True)


def run_graphed(a, mode, model, xtr, ytr, xte, yte, dev):
    """The step in one CUDA graph: static index buffer -> gather -> forward,
    loss, backward, AdamW (capturable); one replay per full batch."""
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, capturable=True)
    bf16 = mode == "bf16"
    n, B = len(xtr), a.batch
    static_idx = torch.arange(B, device=dev)

    def step():
        x = xtr.index_select(0, static_idx)
        y = ytr.index_select(0, static_idx)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=False)
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=False)
    with torch.cuda.graph(graph):
        opt.zero_grad(set_to_none=False)
        step()
    full = n // B * B
    for e in range(a.epochs):
        perm = torch.randperm(n, device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for b in range(0, full, B):
            static_idx.copy_(perm[b:b + B])
            graph.replay()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        print(f"torch {mode} graph epoch {e + 1:2d}  test acc {acc:.4f}  {full / dt:9.0f} img/s",
              flush=True)


if __name__ == "__main__":
    main()
