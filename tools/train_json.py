#!/usr/bin/env python3
"""train_json.py - lean8-train runs as one JSON report, for tools/bench_ab.py:
the `trainab` stage of tools/device-run.sh writes one per build and round.

  python3 tools/train_json.py OUT.json LABEL=LOG [LABEL=LOG ...]

Each LOG is the output of one `lean8-train ... --step-times` run (lines may
carry device-run.sh's timestamp column). From its last epoch line the report
takes LABEL_million_images_per_s, LABEL_loss and LABEL_test_acc; from the
`steps on the GPU` line below it LABEL_us_per_step (the first kind of call:
the graph launches of --graph-steps steps; absent on the host backend, which
prints "not timed"). A log without an epoch line adds LABEL_failed = 1 and a
line saying so. Writes {"bench": "train", ...}; exit 0, or 2 on bad
arguments or an unwritable OUT.
"""
import json
import re
import sys

EPOCH = re.compile(r"^(?:\s*[0-9.]+\s+)?epoch\s+\d+\s+loss\s+([0-9.]+)\s+train\s+[0-9.]+\s+"
                   r"test acc\s+([0-9.]+)\s+([0-9.]+) img/s")
STEPS = re.compile(r"steps on the GPU: \d+ x \d+ at ([0-9.]+) us a step")


def read(label, path, rep):
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError as e:
        print(f"train_json: {path}: {e.strerror}")
        rep[label + "_failed"] = 1
        return
    last = None
    for i, line in enumerate(lines):
        if EPOCH.match(line):
            last = i
    if last is None:
        print(f"train_json: {path}: no epoch line")
        rep[label + "_failed"] = 1
        return
    loss, acc, ips = EPOCH.match(lines[last]).groups()
    rep[label + "_million_images_per_s"] = float(ips) / 1e6
    rep[label + "_loss"] = float(loss)
    rep[label + "_test_acc"] = float(acc)
    if last + 1 < len(lines):
        m = STEPS.search(lines[last + 1])
        if m:
            rep[label + "_us_per_step"] = float(m.group(1))


def main(argv):
    if len(argv) < 2 or any("=" not in a or not a.split("=", 1)[0] for a in argv[1:]):
        print("usage: train_json.py OUT.json LABEL=LOG [LABEL=LOG ...]", file=sys.stderr)
        return 2
    rep = {"bench": "train"}
    for a in argv[1:]:
        label, path = a.split("=", 1)
        read(label, path, rep)
    try:
        with open(argv[0], "w") as f:
            json.dump(rep, f, indent=1)
            f.write("\n")
    except OSError as e:
        print(f"train_json: {argv[0]}: {e.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
