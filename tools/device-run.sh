#!/bin/bash
# device-run.sh - everything lean8 checks on the GPU machine, in one go:
# build, `make test` (host and GPU suites), the GPU suites again under
# compute-sanitizer memcheck, the benchmarks with their PyTorch side-by-side
# runs, and a short table at the end. Full logs go to $OUT/logs.tgz (or ./out).
#
#   source .device/setup.sh && bash tools/device-run.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/out}
OUT=$(mktemp -d /tmp/l8logs.XXXX)    # everything here; FINAL gets a tarball and the key files
mkdir -p "$FINAL"
export NCCL_NVLS_ENABLE=0
summary=()
step() {  # step NAME LOGFILE COMMAND...
    local name=$1 log=$2; shift 2
    local t0=$(date +%s)
    if "$@" >"$OUT/$log" 2>&1; then r=ok; else r="FAILED($?)"; fi
    summary+=("$(printf '%-28s %-10s %4ss  %s' "$name" "$r" $(( $(date +%s) - t0 )) "$log")")
    echo "== $name: $r"; tail -n 4 "$OUT/$log"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
step "build" build.log make -j16 all WERROR=1
step "make test" test.log make test
step "gpu suites (memcheck)" memcheck.log env L8_TEST_QUICK=1 \
    compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 \
    build/bin/lean8-tests --tags gpu
step "lean8-info" info.log build/bin/lean8-info
if [ "${1:-}" != quick ]; then
    step "bench alloc" bench-alloc.log build/bin/lean8-bench alloc --json "$OUT/bench-alloc.json" \
        --dump-trace /tmp/alloc-trace.txt
    step "torch alloc replay" torch-alloc.log python3 tools/bench_alloc_torch.py /tmp/alloc-trace.txt \
        "$OUT/bench-alloc-torch.json"
    step "bench cast" bench-cast.log build/bin/lean8-bench cast --json "$OUT/bench-cast.json"
    step "torch cast" torch-cast.log python3 tools/bench_torch_cast.py "$OUT/bench-cast.json" \
        "$OUT/bench-cast-torch.json"
    step "bench gemm" bench-gemm.log build/bin/lean8-bench gemm --json "$OUT/bench-gemm.json"
    step "torch gemm" torch-gemm.log python3 tools/bench_torch_gemm.py --json /tmp/bench-gemm-torch.json
    step "bench linear" bench-linear.log build/bin/lean8-bench linear --json "$OUT/bench-linear.json"
    step "torch linear" torch-linear.log python3 tools/bench_torch_linear.py "$OUT/bench-linear.json"
    if [ -d .data ]; then      # Fashion-MNIST carried along (the machine has no package registry)
        step "train fp8" train-fp8.log build/bin/lean8-train --data .data --quiet
        step "train bf16" train-bf16.log build/bin/lean8-train --data .data --quiet --bf16
        step "train 512x512" train-512.log build/bin/lean8-train --data .data --quiet --hidden 512,512 --batch 256
        step "torch mlp" torch-mlp.log python3 tools/bench_torch_mlp.py .data
        step "torch mlp 512x512" torch-mlp-512.log python3 tools/bench_torch_mlp.py .data --hidden 512,512 --batch 256
    fi
    step "gemm ratios" gemm-ratio.log python3 tools/bench_ratio.py "$OUT/bench-gemm.json" \
        /tmp/bench-gemm-torch.json
fi

echo
echo "==== summary ($(cat "$OUT/gpu.txt"))"
printf '%s\n' "${summary[@]}"
grep -h -E '^(lean8|TOTAL|[0-9]+%:|gpu suites|  [a-z])' "$OUT/test.log" | tail -n 8
[ -f "$OUT/bench-alloc.log" ] && grep -A40 '^== alloc' "$OUT/bench-alloc.log" | head -n 30
[ -f "$OUT/torch-alloc.log" ] && tail -n 5 "$OUT/torch-alloc.log"
[ -f "$OUT/bench-cast.log" ] && cat "$OUT/bench-cast.log"
[ -f "$OUT/torch-cast.log" ] && cat "$OUT/torch-cast.log"
[ -f "$OUT/gemm-ratio.log" ] && cat "$OUT/gemm-ratio.log"
for f in bench-linear torch-linear train-fp8 train-bf16 train-512; do [ -f "$OUT/$f.log" ] && tail -n 6 "$OUT/$f.log"; done
for f in torch-mlp torch-mlp-512; do [ -f "$OUT/$f.log" ] && grep -E 'epoch 10' "$OUT/$f.log"; done
tar -czf "$FINAL/logs.tgz" -C "$OUT" .
for f in test.log memcheck.log bench-alloc.json bench-cast.json bench-gemm.json; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL/"
done
exit 0
