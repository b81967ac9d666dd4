#!/bin/bash
# sanitize.sh - lean8-train and lean8-run built with ASan and UBSan (make
# test-sanitize builds them in BUILD_DIR): short host runs through the paths
# the host suites do not reach whole: FP8 training with offload, saved and
# resumed, bf16, 4 ranks (--tp 2 --dp 2) and 2 with ZeRO-1 (saved and resumed
# per rank) over lean8-run's TCP rendezvous, teardown included. Any sanitizer
# report ends its process with a non-zero status, which fails the check.
# Usage: tests/sanitize.sh BUILD_DIR FMNIST_DIR (from the repository root)
set -u
bin=$1/bin/lean8-train run=$1/bin/lean8-run data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export L8_DEVICE=host ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
pass=0 fail=0
a=(--device host --data "$data" --limit 512 --hidden 32,32 --batch 64 --seed 3 --quiet)
check() {   # name command...
    local name=$1; shift
    if timeout -k 5 300 "$@" > "$tmp/out.txt" 2>&1; then pass=$((pass + 1)); echo "  ok    $name"
    else fail=$((fail + 1)); echo "  FAIL  $name"; grep -a -m1 -A12 "Sanitizer\|runtime error" \
        "$tmp/out.txt" || tail -5 "$tmp/out.txt"; fi
}
check "fp8, offload, --save" "$bin" "${a[@]}" --epochs 2 --stop-after 1 --offload \
    --save "$tmp/a.ckpt"
check "fp8, --resume" "$bin" "${a[@]}" --epochs 2 --offload --resume "$tmp/a.ckpt"
check "bf16" "$bin" "${a[@]}" --epochs 1 --bf16
check "4 ranks: --tp 2 --dp 2" "$run" -n 4 "$bin" "${a[@]}" --epochs 1 --tp 2 --dp 2
check "2 ranks: --dp 2 --zero1, --save" "$run" -n 2 "$bin" "${a[@]}" --epochs 2 --stop-after 1 \
    --dp 2 --zero1 --save "$tmp/z.ckpt"
check "2 ranks: --dp 2 --zero1, --resume" "$run" -n 2 "$bin" "${a[@]}" --epochs 2 --dp 2 \
    --zero1 --resume "$tmp/z.ckpt"
echo "sanitize: $pass passed, $fail failed"
[ $fail = 0 ]
