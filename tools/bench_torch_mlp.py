#!/usr/bin/env python3
"""PyTorch's side of lean8-train: the same MLP (784 -> hidden... -> 10, GELU),
batch, AdamW and data, on the GPU, fp32 and bf16 autocast; prints test
accuracy per epoch and images/s, to compare with `lean8-train` in the same run.

    python3 tools/bench_torch_mlp.py DATA_DIR [--hidden 512,512] [--batch 256] [--epochs 10]

DATA_DIR holds the Fashion-MNIST IDX files (gzipped or not).
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
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    norm = lambda x: (torch.tensor(x, dtype=torch.float32).reshape(len(x), -1) / 255 - 0.2860) / 0.3530
    xtr = norm(idx(os.path.join(a.data, "train-images-idx3-ubyte"))).to(dev)
    ytr = torch.tensor(idx(os.path.join(a.data, "train-labels-idx1-ubyte")), dtype=torch.long).to(dev)
    xte = norm(idx(os.path.join(a.data, "t10k-images-idx3-ubyte"))).to(dev)
    yte = torch.tensor(idx(os.path.join(a.data, "t10k-labels-idx1-ubyte")), dtype=torch.long).to(dev)
    sizes = [784] + [int(h) for h in a.hidden.split(",")] + [10]
    for mode in ("fp32", "bf16"):
        torch.manual_seed(1)
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                layers.append(torch.nn.GELU(approximate="tanh"))
        model = torch.nn.Sequential(*layers).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
        n = len(xtr)
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


if __name__ == "__main__":
    main()
