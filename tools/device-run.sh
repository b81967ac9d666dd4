#!/bin/bash
# device-run.sh - everything lean8 checks on the GPU machine, in one go:
# build, `make test` (host and GPU suites), the GPU suites again under
# compute-sanitizer memcheck, the benchmarks with their PyTorch side-by-side
# runs, and a short table at the end. Full logs go to $OUT (or ./out).
#
#   source .device/setup.sh && bash tools/device-run.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
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
step "gpu suites (memcheck)" memcheck.log \
    compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 \
    build/bin/lean8-tests --tags gpu
step "lean8-info" info.log build/bin/lean8-info
if [ "${1:-}" != quick ]; then
    step "bench alloc" bench-alloc.log build/bin/lean8-bench alloc --json "$OUT/bench-alloc.json" \
        --dump-trace /tmp/alloc-trace.txt
    step "torch alloc replay" torch-alloc.log python3 tools/bench_alloc_torch.py /tmp/alloc-trace.txt \
        "$OUT/bench-alloc-torch.json"
fi

echo
echo "==== summary ($(cat "$OUT/gpu.txt"))"
printf '%s\n' "${summary[@]}"
grep -h -E '^(lean8|TOTAL|[0-9]+%:|gpu suites|  [a-z])' "$OUT/test.log" | tail -n 8
[ -f "$OUT/bench-alloc.log" ] && grep -A40 '^== alloc' "$OUT/bench-alloc.log" | head -n 30
[ -f "$OUT/torch-alloc.log" ] && tail -n 5 "$OUT/torch-alloc.log"
exit 0
