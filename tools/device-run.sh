#!/bin/bash
# device-run.sh - everything lean8 checks on the GPU machine, in one go:
# build, the GPU suites (every test's result streamed with a timestamp), the
# GPU suites again under compute-sanitizer memcheck, the benchmarks with their
# PyTorch side-by-side runs, and a short table at the end. Full logs go to
# $OUT/logs.tgz (or ./out); the key JSON files next to it.
#
#   source .device/setup.sh && bash tools/device-run.sh [STAGE...]
#
# Stages (default: all but "test"):
#   gpu       lean8-tests --tags gpu (full: the exhaustive 2^32 sweep too);
#             GPU_SUITES=a,b,... runs only those suites (lean8-tests --suites),
#             e.g. the rest of a run cut short
#   memcheck  the GPU suites in quick mode under compute-sanitizer (runs last;
#             GPU_SUITES too)
#   test      make test (host suites, link check, train.sh with .data/)
#   info      lean8-info
#   alloc cast gemm linear offload    lean8-bench NAME and its PyTorch script
#   gemmsmall lean8-bench gemmsmall (lean8-train's FP8 GEMMs: cuBLASLt, lean8's small
#             kernel and cuBLASLt bf16; no PyTorch side)
#   trace     (not in the default set) lean8-bench trace, a traced and an untraced
#             lean8-train run (2 epochs), lean8-trace summary / plot / export of the trace
#   ddp       lean8-bench ddp (the data-parallel step: no reducer, after backward,
#             overlapped; at world size 1 the reducer's own overhead)
#   comm      lean8-bench comm (the last-dimension rearrangement vs a device copy) and
#             the NCCL watchdog at world size 1 (tests/comm_prog watchdog: an
#             all-reduce stuck behind a second of GEMMs must be aborted)
#   fortran   the Fortran module on cuda:0: its test (also under compute-sanitizer
#             memcheck) and examples/fmnist_mlp.f90 (5 epochs, the 0.88 bar; needs
#             .data/), from binaries `make device-fortran` put into FORTRAN_BIN
#             (default .device/fbin): the machine has no gfortran
#   racecheck (not in the default set) the GPU suites RACE_SUITES (default fp8:
#             the hand-written cast and transpose kernels) in quick mode under
#             compute-sanitizer racecheck (shared-memory hazards), then synccheck
#             (barriers)
#   train     tests/train.sh on cuda:0 (bitwise resume, bad checkpoints,
#             CUDA graph steps equal --no-graph bitwise), lean8-train fp8/bf16
#             and tools/bench_torch_mlp.py (needs .data/, the Fashion-MNIST
#             files carried along: the machine has no package registry)
#   modes     (not in the default set) lean8-train FP8 against bf16 mode with CUDA
#             graphs, the default model and 784-512-512-10 (batch 256), twice each
#   timeline  (not in the default set) the CUDA graph step of lean8-train on
#             784-512-512-10, batch 256, traced by build/libl8ktrace.so (the
#             README's command) in FP8 (head bf16), --fp8-head and bf16 mode, and
#             tools/ktrace.py's timeline of each
#   lineartl  (not in the default set) lean8-bench linear --quick traced by
#             build/libl8ktrace.so, and tools/ktrace.py --all: the timeline of each
#             of its CUDA graphs, in the order the bench makes them - per shape
#             (16384 -> 4096, -> 16384, 16383 -> 4096) fp8, fp8 tuned, bf16, bf16 tuned
#   graphs    (not in the default set) the graph comparison on 784-512-512-10,
#             batch 256: lean8-train fp8 and bf16 with CUDA graphs and with
#             --no-graph, PyTorch with the whole step in one CUDA graph
#             (bench_torch_mlp.py --graph), 3 epochs each
#   gemmcache (not in the default set) lean8-bench gemm with one plan cache
#             file: the first run's tuned handle fills it, the later runs'
#             default handle (autotune 0) reads it - their "heuristic" column
#             is the default handle with a warm cache; GEMM_ROUNDS (default 3)
#             warm runs alternated with tools/bench_torch_gemm.py, ratios of
#             each key's medians (tools/bench_ratio.py)
#   ab        (not in the default set) one benchmark over several builds of lean8,
#             alternated (round r starting with the r-th build), and a table
#             of them side by side (tools/bench_ab.py): this tree, then each
#             AB_TREES entry NAME=PATH (PATH a directory of files laid over
#             a copy of this tree, or a patch, PATH ending in .patch or .diff,
#             that `patch -p1` applies to one (`git diff > .device/x.patch`): its
#             build/ copied along so only what they change is rebuilt; or a
#             tarball of a whole tree, e.g. `git archive REV >
#             .device/base.tar`, built afresh), then each
#             AB_ENVS entry NAME:VAR=VALUE (this tree's binary under that
#             environment). AB_BENCH (default cast) and AB_ARGS (default
#             --quick) give the lean8-bench command, AB_ROUNDS (default 2)
#             the rounds, AB_KEYS (default _ratio$) the JSON keys of the
#             table. Runs first, before the other stages.
#   trainab   (not in the default set; needs TRAIN_AB_DATA, default .data/)
#             lean8-train over the builds and environments of AB_TREES and
#             AB_ENVS, as ab: each configuration of TRAIN_AB (flag sets
#             separated by ';'; default: the default model and 784-512-512-10
#             at batch 256, FP8 and bf16) run with --quiet --step-times and
#             TRAIN_AB_ARGS (default --epochs 3), alternated over AB_ROUNDS
#             rounds (round r starting with the r-th build); tools/bench_ab.py's
#             table of the last epoch's images/s, the GPU's us a step, loss and
#             test accuracy (tools/train_json.py). Runs after ab.
# GEMM_AUTOTUNE=2 makes the gemm bench's tuned handle search configurations
# beyond the heuristic's list (autotune mode 2; default 1).
# Each step has a time limit (STEP_LIMIT, default 300 s) so one hang cannot
# eat the whole call, and no step runs past DEADLINE seconds after the start
# (default 540: the device tool's calls end at 600 s, and the logs are only
# packed at the end); steps that find no time left are reported SKIPPED.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/out}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/l8logs.XXXX")   # everything here; FINAL gets a tarball and the key files
mkdir -p "$FINAL"
export NCCL_NVLS_ENABLE=0
LIMIT=${STEP_LIMIT:-300}
DEADLINE=$(( $(date +%s) + ${DEADLINE:-540} ))
stages=${*:-gpu memcheck info alloc cast gemm gemmsmall linear offload comm ddp fortran train}
want() { [[ " $stages " == *" $1 "* ]]; }
summary=()
stamp() { python3 -u -c '
import sys, time
t0 = time.time()
for l in sys.stdin: print("%7.1f %s" % (time.time() - t0, l), end="", flush=True)'; }
step() {  # step NAME LOGFILE COMMAND...
    local name=$1 log=$2; shift 2
    local t0=$(date +%s) lim=$LIMIT r
    (( DEADLINE - t0 < lim )) && lim=$(( DEADLINE - t0 ))
    if (( lim < 10 )); then
        summary+=("$(printf '%-24s %-11s' "$name" "SKIPPED(deadline)")"); return
    fi
    if timeout -k 5 "$lim" "$@" 2>&1 | stamp >"$OUT/$log"; then r=ok; else r="FAILED(${PIPESTATUS[0]})"; fi
    summary+=("$(printf '%-24s %-11s %4ss  %s' "$name" "$r" $(( $(date +%s) - t0 )) "$log")")
    echo "== $name: $r"; tail -n 4 "$OUT/$log"
}


nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
step "build" build.log make -j16 all build/tests/comm_prog WERROR=1
# copy_tree DIR: this tree (its build/ along, not .device, .data or .git) into DIR
copy_tree() { tar c --exclude=./.device --exclude=./.data --exclude=./.git . | tar x -C "$1"; }
# ab_builds STAGE TARGET: the variants of an A/B stage in ab_names, ab_dirs
# and ab_envs - this tree, each AB_TREES entry with TARGET built in a copy
# (left out when its build fails), each AB_ENVS entry
ab_builds() {
    local st=$1 target=$2 v n p t
    ab_names=(this) ab_dirs=(.) ab_envs=("")
    for v in ${AB_TREES:-}; do
        n=${v%%=*} p=${v#*=} t=$(mktemp -d "${TMPDIR:-/tmp}/l8ab.XXXX")
        if [ -d "$p" ]; then
            copy_tree "$t" && cp -r "$p"/. "$t"/
        elif [[ $p == *.patch || $p == *.diff ]]; then
            copy_tree "$t"
            # (-t: never a question; the input redirected last, so that a
            # missing patch's "No such file" lands in the log too)
            if ! patch -d "$t" -p1 -s -t --no-backup-if-mismatch > "$OUT/$st-patch-$n.log" 2>&1 \
                    < "$p"; then
                summary+=("$(printf '%-24s %-11s' "$st tree $n" "FAILED(patch)")")
                echo "== $st tree $n: FAILED(patch)"; tail -n 4 "$OUT/$st-patch-$n.log"
                rm -rf "$t"; continue
            fi
        elif ! tar xf "$p" -C "$t"; then
            summary+=("$(printf '%-24s %-11s' "$st tree $n" "FAILED(tar)")"); rm -rf "$t"; continue
        fi
        rm -f "$t/$target"                          # a failed build leaves none, not this tree's
        step "$st build $n" $st-build-$n.log make -C "$t" -j16 "$target" WERROR=1
        if [ -x "$t/$target" ]; then ab_names+=("$n") ab_dirs+=("$t") ab_envs+=(""); else rm -rf "$t"; fi
    done
    for v in ${AB_ENVS:-}; do ab_names+=("${v%%:*}") ab_dirs+=(.) ab_envs+=("${v#*:}"); done
}
# ab_table STAGE WHAT KEYS: tools/bench_ab.py's table of the KEYS of the
# variants' reports (ab_reports, one list per variant) into $OUT/STAGE.log;
# then the copies of the builds removed
ab_table() {
    local args=() i d
    for i in "${!ab_names[@]}"; do args+=("${ab_names[$i]}=${ab_reports[$i]}"); done
    echo "== $1: $2, ${AB_ROUNDS:-2} rounds"
    python3 tools/bench_ab.py --keys "$3" "${args[@]}" | tee "$OUT/$1.log"
    for d in "${ab_dirs[@]}"; do [ "$d" = . ] || rm -rf "$d"; done
}
if want ab; then
    ab_builds ab build/bin/lean8-bench
    ab_reports=()
    nv=${#ab_names[@]}
    for round in $(seq 1 "${AB_ROUNDS:-2}"); do
        # round r starts with the r-th build (cycling): on the H200 the first
        # run of a round measured ~0.7% faster than an identical build after it
        for o in "${!ab_names[@]}"; do
            i=$(( (o + round - 1) % nv ))
            n=${ab_names[$i]}
            # shellcheck disable=SC2086  # AB_ARGS is a word list
            step "ab $n #$round" ab-$n-$round.log env ${ab_envs[$i]:+"${ab_envs[$i]}"} \
                "${ab_dirs[$i]}/build/bin/lean8-bench" \
                "${AB_BENCH:-cast}" ${AB_ARGS---quick} --json "$OUT/ab-$n-$round.json"
            ab_reports[$i]="${ab_reports[$i]:-}${ab_reports[$i]:+,}$OUT/ab-$n-$round.json"
        done
    done
    ab_table ab "${AB_BENCH:-cast}" "${AB_KEYS:-_ratio\$}"
fi
if want trainab && [ -d "${TRAIN_AB_DATA:-.data}" ]; then
    ab_builds trainab build/bin/lean8-train
    IFS=';' read -ra cfgs <<< "${TRAIN_AB-;--bf16;--hidden 512,512 --batch 256;--hidden 512,512 --batch 256 --bf16}"
    [ ${#cfgs[@]} = 0 ] && cfgs=("")               # TRAIN_AB= : lean8-train's defaults alone
    echo "== trainab: lean8-train --data ${TRAIN_AB_DATA:-.data} --quiet --step-times" \
        "${TRAIN_AB_ARGS---epochs 3}, then:"
    for c in "${!cfgs[@]}"; do echo "   c$c: ${cfgs[$c]:-(no more flags)}"; done
    ab_reports=()
    nv=${#ab_names[@]}
    for round in $(seq 1 "${AB_ROUNDS:-2}"); do
        logs=()
        for c in "${!cfgs[@]}"; do
            for o in "${!ab_names[@]}"; do      # round r starts with the r-th build, as ab
                i=$(( (o + round - 1) % nv ))
                n=${ab_names[$i]}
                # shellcheck disable=SC2086  # TRAIN_AB_ARGS and the configurations are word lists
                step "trainab $n c$c #$round" trainab-$n-c$c-$round.log \
                    env ${ab_envs[$i]:+"${ab_envs[$i]}"} "${ab_dirs[$i]}/build/bin/lean8-train" \
                    --data "${TRAIN_AB_DATA:-.data}" --quiet --step-times ${TRAIN_AB_ARGS---epochs 3} \
                    ${cfgs[$c]}
                logs[$i]="${logs[$i]:-} c$c=$OUT/trainab-$n-c$c-$round.log"
            done
        done
        for i in "${!ab_names[@]}"; do
            n=${ab_names[$i]}
            # shellcheck disable=SC2086  # logs[i] is a word list
            python3 tools/train_json.py "$OUT/trainab-$n-$round.json" ${logs[$i]}
            ab_reports[$i]="${ab_reports[$i]:-}${ab_reports[$i]:+,}$OUT/trainab-$n-$round.json"
        done
    done
    ab_table trainab lean8-train '_(million_images_per_s|us_per_step|loss|test_acc|failed)$'
elif want trainab; then
    summary+=("$(printf '%-24s %-11s' trainab "SKIPPED(no ${TRAIN_AB_DATA:-.data})")")
fi
want gpu && step "gpu suites" gpu.log env CK_LOG_FILE_NAME=- stdbuf -oL build/bin/lean8-tests --tags gpu \
    ${GPU_SUITES:+--suites "$GPU_SUITES"}
want test && step "make test" test.log make test FMNIST_DIR=$PWD/.data
want info && step "lean8-info" info.log build/bin/lean8-info
if want alloc; then
    step "bench alloc" bench-alloc.log build/bin/lean8-bench alloc --json "$OUT/bench-alloc.json" \
        --dump-trace /tmp/alloc-trace.txt
    step "torch alloc replay" torch-alloc.log python3 tools/bench_alloc_torch.py /tmp/alloc-trace.txt \
        "$OUT/bench-alloc-torch.json"
fi
if want cast; then
    step "bench cast" bench-cast.log build/bin/lean8-bench cast --json "$OUT/bench-cast.json"
    step "torch cast" torch-cast.log python3 tools/bench_torch_cast.py "$OUT/bench-cast.json" \
        "$OUT/bench-cast-torch.json"
fi
if want gemm; then
    step "bench gemm" bench-gemm.log env L8_GEMM_AUTOTUNE=${GEMM_AUTOTUNE:-1} \
        build/bin/lean8-bench gemm --json "$OUT/bench-gemm.json"
    step "torch gemm" torch-gemm.log python3 tools/bench_torch_gemm.py --json "$OUT/bench-gemm-torch.json"
    step "gemm ratios" gemm-ratio.log python3 tools/bench_ratio.py "$OUT/bench-gemm.json" \
        "$OUT/bench-gemm-torch.json"
fi
if want gemmsmall; then
    step "bench gemmsmall" bench-gemmsmall.log build/bin/lean8-bench gemmsmall \
        --json "$OUT/bench-gemmsmall.json"
fi
if want linear; then
    step "bench linear" bench-linear.log build/bin/lean8-bench linear --json "$OUT/bench-linear.json"
    step "torch linear" torch-linear.log python3 tools/bench_torch_linear.py "$OUT/bench-linear.json" \
        "$OUT/bench-linear-torch.json"
fi
if want offload; then
    step "bench offload" bench-offload.log build/bin/lean8-bench offload --json "$OUT/bench-offload.json"
    step "torch offload" torch-offload.log python3 tools/bench_torch_offload.py "$OUT/bench-offload.json"
fi
if want ddp; then
    step "bench ddp" bench-ddp.log build/bin/lean8-bench ddp --json "$OUT/bench-ddp.json"
fi
if want comm; then
    step "bench comm" bench-comm.log build/bin/lean8-bench comm --json "$OUT/bench-comm.json"
    step "nccl watchdog" watchdog.log env L8_COMM_TIMEOUT=0.3 build/tests/comm_prog watchdog
fi
if want fortran; then
    # the machine has no gfortran: `make device-fortran` on the build machine links the
    # test and the example (libgfortran static) into FORTRAN_BIN, carried with .device
    fb=${FORTRAN_BIN:-.device/fbin}
    if [ -x "$fb/lean8-fortran-test" ] && [ -x "$fb/fmnist_mlp" ]; then
        echo "== fortran: binaries built from $(cat "$fb/built_from" 2>/dev/null || echo '(unknown)')"
        step "fortran test (cuda:0)" fortran.log env L8_DEVICE=cuda:0 "$fb/lean8-fortran-test"
        step "fortran test (memcheck)" fortran-memcheck.log env L8_DEVICE=cuda:0 \
            compute-sanitizer --tool memcheck --leak-check full --report-api-errors no \
            --error-exitcode 9 "$fb/lean8-fortran-test"
        if [ -d .data ]; then
            fm=$(mktemp -d "${TMPDIR:-/tmp}/l8fm.XXXX")
            for f in .data/*-ubyte.gz; do gunzip -c "$f" > "$fm/$(basename "$f" .gz)"; done
            step "fmnist_mlp (cuda:0)" fmnist-mlp.log env L8_DEVICE=cuda:0 "$fb/fmnist_mlp" \
                "$fm" 5 60000 0.88 "$fm/weights.ckpt"
            rm -rf "$fm"
        fi
    else
        summary+=("$(printf '%-24s %-11s' "fortran" "SKIPPED(no $fb: make device-fortran)")")
    fi
fi
if want train && [ -d .data ]; then
    step "train.sh on cuda:0" train-sh.log env TRAIN_DEVICE=cuda:0 tests/train.sh build .data
    step "train fp8" train-fp8.log build/bin/lean8-train --data .data --quiet
    step "train bf16" train-bf16.log build/bin/lean8-train --data .data --quiet --bf16
    step "train 512x512" train-512.log build/bin/lean8-train --data .data --quiet --hidden 512,512 --batch 256
    step "torch mlp" torch-mlp.log python3 tools/bench_torch_mlp.py .data
    step "torch mlp 512x512" torch-mlp-512.log python3 tools/bench_torch_mlp.py .data --hidden 512,512 --batch 256
fi
if want graphs && [ -d .data ]; then
    g=(--data .data --quiet --hidden 512,512 --batch 256 --epochs 3)
    step "train fp8 graph" graphs-fp8.log build/bin/lean8-train "${g[@]}"
    step "train fp8 no-graph" graphs-fp8-eager.log build/bin/lean8-train "${g[@]}" --no-graph
    step "train bf16 graph" graphs-bf16.log build/bin/lean8-train "${g[@]}" --bf16
    step "train bf16 no-graph" graphs-bf16-eager.log build/bin/lean8-train "${g[@]}" --bf16 --no-graph
    step "torch mlp graph" graphs-torch.log python3 tools/bench_torch_mlp.py .data --hidden 512,512 \
        --batch 256 --epochs 3 --graph
fi
if want modes && [ -d .data ]; then
    # FP8 mode against bf16 mode (issue 13: FP8 >= bf16), CUDA graphs on (the
    # default), the default model and 784-512-512-10 at batch 256, 3 epochs each;
    # FP8 mode as it runs by default (head in bf16) and with --fp8-head; with
    # --step-times, the GPU's time per step beside each epoch's images/s
    lt="build/bin/lean8-train --data .data --quiet --step-times --epochs 3"
    m512="--hidden 512,512 --batch 256"
    for rr in 1 2; do
        step "modes default fp8 #$rr" modes-def-fp8-$rr.log $lt
        step "modes default bf16 #$rr" modes-def-bf16-$rr.log $lt --bf16
        step "modes 512x512 fp8 #$rr" modes-512-fp8-$rr.log $lt $m512
        step "modes 512x512 bf16 #$rr" modes-512-bf16-$rr.log $lt $m512 --bf16
        step "modes default fp8-head #$rr" modes-def-fp8h-$rr.log $lt --fp8-head
        step "modes 512x512 fp8-head #$rr" modes-512-fp8h-$rr.log $lt $m512 --fp8-head
    done
fi
if want timeline && [ -d .data ]; then
    for mode in fp8 fp8-head bf16; do
        step "timeline $mode" timeline-$mode.log env CUDA_INJECTION64_PATH=build/libl8ktrace.so \
            L8_KTRACE="$OUT/ktrace-$mode.csv" build/bin/lean8-train --data .data --quiet --epochs 2 \
            --hidden 512,512 --batch 256 --$mode
        step "ktrace.py $mode" ktrace-$mode.log python3 tools/ktrace.py "$OUT/ktrace-$mode.csv"
    done
fi
if want lineartl; then
    step "linear timeline" linear-timeline.log env CUDA_INJECTION64_PATH=build/libl8ktrace.so \
        L8_KTRACE="$OUT/ktrace-linear.csv" build/bin/lean8-bench linear --quick
    step "ktrace.py linear" ktrace-linear.log \
        python3 tools/ktrace.py "$OUT/ktrace-linear.csv" --all
fi
if want trace && [ -d .data ]; then
    # the recorder's cost per event (this machine's CPU), lean8-trace over 10 M events, and a
    # traced lean8-train run (one file per rank: %r) summarized and plotted
    step "bench trace" bench-trace.log build/bin/lean8-bench trace --json "$OUT/bench-trace.json"
    rm -f /tmp/l8train.*.l8trace
    step "train traced" train-traced.log env L8_TRACE=/tmp/l8train.%r.l8trace build/bin/lean8-train \
        --data .data --quiet --epochs 2
    step "train untraced" train-untraced.log build/bin/lean8-train --data .data --quiet --epochs 2
    step "lean8-trace" lean8-trace.log sh -c 'build/bin/lean8-trace summary /tmp/l8train.0.l8trace && \
        build/bin/lean8-trace plot /tmp/l8train.0.l8trace -o '"$OUT"'/train-trace.svg && \
        build/bin/lean8-trace export --chrome /tmp/l8train.0.l8trace -o /tmp/train-trace.json && \
        ls -la '"$OUT"'/train-trace.svg /tmp/train-trace.json'
fi
if want gemmcache; then
    rm -f "$OUT/gemm-plans.l8c"
    step "bench gemm (fill cache)" gemm-cache1.log env L8_GEMM_DEBUG=1 L8_GEMM_AUTOTUNE=${GEMM_AUTOTUNE:-1} \
        build/bin/lean8-bench gemm --cache "$OUT/gemm-plans.l8c" --json "$OUT/bench-gemm-fill.json"
    # GEMM_ROUNDS rounds (default 3) of a warm lean8 run then a torch run,
    # alternated so that clock and temperature drift hit both alike; the
    # ratios are of each key's medians (tools/bench_ratio.py)
    warm="" torch=""
    for round in $(seq 1 "${GEMM_ROUNDS:-3}"); do
        step "bench gemm (warm cache, round $round)" gemm-cache2-$round.log env \
            L8_GEMM_AUTOTUNE=${GEMM_AUTOTUNE:-1} build/bin/lean8-bench gemm \
            --cache "$OUT/gemm-plans.l8c" --json "$OUT/bench-gemm-warm-$round.json"
        step "torch gemm (cache, round $round)" torch-gemm-c-$round.log python3 tools/bench_torch_gemm.py \
            --json "$OUT/bench-gemm-torch-c-$round.json"
        warm="$warm${warm:+,}$OUT/bench-gemm-warm-$round.json"
        torch="$torch${torch:+,}$OUT/bench-gemm-torch-c-$round.json"
    done
    step "gemm ratios (warm cache)" gemm-cache-ratio.log python3 tools/bench_ratio.py \
        "$warm" "$torch"
fi
if want racecheck; then
    # shared-memory hazards (racecheck) and barrier misuse (synccheck) in the
    # hand-written kernels: RACE_SUITES (default fp8: the casts and transposes)
    for tool in racecheck synccheck; do
        for s in ${RACE_SUITES:-fp8}; do
            step "$tool $s" "$tool-$s.log" env L8_TEST_QUICK=1 CK_RUN_SUITE="$s" \
                CK_LOG_FILE_NAME=- stdbuf -oL compute-sanitizer --tool "$tool" \
                --error-exitcode 9 build/bin/lean8-tests --tags gpu
        done
    done
fi
# last: the slowest step, and the one the deadline may cut
want memcheck && step "gpu suites (memcheck)" memcheck.log env L8_TEST_QUICK=1 \
    CK_LOG_FILE_NAME=- stdbuf -oL compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 \
    build/bin/lean8-tests --tags gpu ${GPU_SUITES:+--suites "$GPU_SUITES"}

echo
echo "==== summary ($(cat "$OUT/gpu.txt"))"
printf '%s\n' "${summary[@]}"
for f in gpu memcheck; do
    [ -f "$OUT/$f.log" ] || continue
    echo "-- $f: failures and slow tests"
    grep -E ':[FE]:' "$OUT/$f.log" | head -n 20
    grep -E 'Checks|ERROR SUMMARY|LEAK SUMMARY|bytes leaked' "$OUT/$f.log" | tail -n 4
done
[ -f "$OUT/bench-alloc.log" ] && grep -A40 '^== alloc' "$OUT/bench-alloc.log" | head -n 30
[ -f "$OUT/torch-alloc.log" ] && tail -n 5 "$OUT/torch-alloc.log"
for f in bench-cast torch-cast gemm-ratio bench-comm; do [ -f "$OUT/$f.log" ] && cat "$OUT/$f.log"; done
for f in bench-offload torch-offload; do [ -f "$OUT/$f.log" ] && cat "$OUT/$f.log"; done
for f in bench-linear torch-linear; do [ -f "$OUT/$f.log" ] && cat "$OUT/$f.log"; done
for f in train-sh train-fp8 train-bf16 train-512; do
    [ -f "$OUT/$f.log" ] && tail -n 6 "$OUT/$f.log"
done
for f in torch-mlp torch-mlp-512; do [ -f "$OUT/$f.log" ] && grep -E 'epoch 10|img' "$OUT/$f.log" | tail -n 3; done
for f in graphs-fp8 graphs-fp8-eager graphs-bf16 graphs-bf16-eager graphs-torch; do
    [ -f "$OUT/$f.log" ] && { echo "-- $f"; grep -E 'epoch|graph' "$OUT/$f.log" | tail -n 4; }
done
for f in "$OUT"/ktrace-*.log; do [ -f "$f" ] && { echo "-- $(basename "$f" .log)"; cat "$f"; }; done
for f in "$OUT"/modes-*.log; do
    [ -f "$f" ] && printf '%-24s %s\n%-24s %s\n' "$(basename "$f" .log)" \
        "$(grep -E '^ *[0-9.]+ +epoch' "$f" | tail -n 1)" "" \
        "$(grep -E '^ *[0-9.]+ +steps on the GPU' "$f" | tail -n 1 | sed -E 's/^ *[0-9.]+ +//')"
done
[ -f "$OUT/gemm-cache1.log" ] && grep -E 'lean8 gemm search|plan cache' "$OUT/gemm-cache1.log" | head -n 20
[ -f "$OUT/gemm-cache-ratio.log" ] && cat "$OUT/gemm-cache-ratio.log"
tar -czf "$FINAL/logs.tgz" -C "$OUT" .
for f in gpu.log memcheck.log bench-cast.json bench-gemm.json bench-gemmsmall.json bench-linear.json bench-comm.json bench-ddp.json bench-offload.json; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL/"
done
exit 0
