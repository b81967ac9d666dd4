#!/bin/bash
# train.sh - end-to-end checks of lean8-train (make test: the host backend;
# TRAIN_DEVICE=cuda:0 runs the same checks on a GPU, tools/device-run.sh does):
#   1. a short run's loss falls;
#   2. resuming from a checkpoint gives bitwise the same losses and accuracies
#      as the uninterrupted run;
#   3. a truncated, corrupt or mismatched checkpoint is refused with a clear
#      message naming what differs, and no file is changed by the refusal; a
#      save killed mid-write (SIGXFSZ) leaves the previous checkpoint intact
#      and the next save removes its temporary file;
#   4. bad flags and a missing dataset are clear errors naming the flag, not
#      crashes; --help and --version exit 0, and --help names the flags
#      docs/train.md documents;
#   5. --tp 2, --dp 2 and --tp 2 --dp 2 through lean8-run (host ranks over
#      TCP) train the model one rank trains: every epoch's loss and test
#      accuracy within FP8 / bf16 rounding (partial sums are added in another
#      order); a --dp 2 run resumed from its checkpoint is bitwise the
#      uninterrupted one; --tp without the ranks is a clear error. On a
#      one-GPU device this part is skipped (NCCL refuses two ranks on one GPU).
#   6. steps in a CUDA graph (the default) give the losses of --no-graph bitwise
#      (FP8 with the head in bf16, the default; --fp8-head; bf16); --graph-steps,
#      --step-times and --drop-last; a capture or a chain the driver refuses
#      (L8_GRAPH_REFUSE) falls back to eager steps or single launches with the
#      same losses.
#   7. --offload (every layer, and all but the last) gives bitwise the losses
#      of the run without it, and really gives device memory back. Without
#      offload an FP8 run splits its dGELU casts (the bias gradient on the
#      side stream, on few SMs above one 128-row tile row: --batch 256), with
#      it each layer casts its own: so these also check the split bitwise.
#      The dgrad's cast of the dY of the FP8 layer below, the head's
#      included (the default), equals each layer's own cast (--no-dgrad-cast)
#      and the top hidden layer's own (--no-head-dgrad-cast) bitwise, two and
#      three hidden layers, an FP8 head.
#   8. (host, where valgrind is installed) a short FP8 run and a short bf16 run
#      under valgrind: no invalid access, nothing definitely lost at exit.
#   9. (GPU) the GEMM plans lean8-train asks cuBLASLt for (L8_GEMM_DEBUG=1 logs
#      each): on 784-512-512-10 the comm stream's wgrads planned for 32 SMs in
#      both modes, layer 2's FP8 dgrad beside them for 100, a bf16 dgrad for
#      the whole GPU, and none for the head's dgrad (K = 16: lean8's small
#      kernel takes it).
# Usage: [TRAIN_DEVICE=host|cuda:N] tests/train.sh BUILD_DIR DATA_DIR
set -u
bin=$1/bin/lean8-train
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "  ok    $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL  $1"; }
# the deterministic part of the epoch lines (timing and memory stripped)
core() { grep '^epoch' "$1" | sed -E 's/ +[0-9.]+ img\/s.*//'; }
dev=${TRAIN_DEVICE:-host}
args=(--device "$dev" --data "$data" --limit 2048 --hidden 64,32 --batch 64 --seed 7 --quiet)

L8_DEVICE=$dev "$bin" "${args[@]}" --epochs 3 > "$tmp/full.txt" 2>&1 || bad "uninterrupted run exited non-zero"
cp "$tmp/full.txt" "$tmp/full-fp8.txt"
l1=$(core "$tmp/full.txt" | sed -n 1p | awk '{print $4}')
l3=$(core "$tmp/full.txt" | sed -n 3p | awk '{print $4}')
if [ -n "$l1" ] && [ -n "$l3" ] && awk "BEGIN{exit !($l3 < $l1)}"; then ok "loss falls ($l1 -> $l3)"
else bad "loss did not fall ($l1 -> $l3)"; cat "$tmp/full.txt"; fi

# CUDA graphs (the default on a GPU; the host backend runs the same calls
# eagerly): every epoch line equals --no-graph's, with a partial last batch
# (2000 = 31 x 64 + 16: its step is padded to 64 rows and launches the same
# graph): one capture, 3 x 32 launches less the warm-up. fp8-head:
# --fp8-head, every layer in FP8 (the head's dY cast too)
# Of those, the full steps that ran k to a launch as a chain of copies (on
# CUDA; the host backend has no chains): 16 by default - one chain of 16 in
# each epoch (the first has 30 full steps after the warm-up, the later 31),
# 48 - 4 for k = 4 (28 of the first epoch's 30, 28 of the later epochs' 31),
# 3 for k = 3 (30 of each epoch's full steps), none for k = 1.
chained() {
    if [ "$dev" = host ] || [ "$1" = 1 ]; then echo 0
    elif [ "$1" = 3 ]; then echo 90
    elif [ "$1" = 4 ]; then echo 84
    else echo 48; fi
}
for mode in fp8 fp8-head bf16; do
    "$bin" "${args[@]}" --$mode --limit 2000 --epochs 3 > "$tmp/g.txt" 2>&1 || bad "$mode: graph run exited non-zero"
    "$bin" "${args[@]}" --$mode --limit 2000 --epochs 3 --no-graph > "$tmp/ng.txt" 2>&1 || bad "$mode: --no-graph run exited non-zero"
    if [ -n "$(core "$tmp/g.txt")" ] && [ "$(core "$tmp/g.txt")" = "$(core "$tmp/ng.txt")" ]; then
        ok "$mode: graph steps equal eager steps bitwise ($(grep -c 'CUDA graph' "$tmp/g.txt") graph banner)"
    else bad "$mode: graph and --no-graph differ"; diff <(core "$tmp/g.txt") <(core "$tmp/ng.txt"); cat "$tmp/g.txt"; fi
    if grep -qx "graphs: 1 captures, 95 launches, $(chained 16) chained" "$tmp/g.txt" &&
       ! grep -q '^graphs' "$tmp/ng.txt"; then
        ok "$mode: one capture over 3 epochs, the partial batch's step too, $(chained 16) steps chained"
    else bad "$mode: graph captures: $(grep '^graphs' "$tmp/g.txt" "$tmp/ng.txt")"; fi
    # full steps 16 to a launch by default; 1, 3 and 4 (31 full steps an epoch:
    # ten launches of 3 and one single step, in the first epoch the warm-up
    # and capture) run the same steps: the same losses and 95 executions
    for k in 1 3 4; do
        "$bin" "${args[@]}" --$mode --limit 2000 --epochs 3 --graph-steps $k > "$tmp/k.txt" 2>&1 ||
            bad "$mode: --graph-steps $k run exited non-zero"
        if [ "$(core "$tmp/k.txt")" = "$(core "$tmp/ng.txt")" ] &&
           grep -qx "graphs: 1 captures, 95 launches, $(chained $k) chained" "$tmp/k.txt"; then
            ok "$mode: --graph-steps $k equals --no-graph bitwise, 95 step executions, $(chained $k) chained"
        else bad "$mode: --graph-steps $k"; diff <(core "$tmp/k.txt") <(core "$tmp/ng.txt"); tail -1 "$tmp/k.txt"; fi
    done
    cp "$tmp/g.txt" "$tmp/g-$mode.txt"
    cp "$tmp/ng.txt" "$tmp/ng-$mode.txt"
done
# a capture the driver refuses (L8_GRAPH_REFUSE=capture, runtime/graph.h):
# lean8-train says so after the warm-up step and runs the rest eagerly, with
# --no-graph's losses; a refused chain (=chain): single launches, the same
# losses, none chained; an unknown word: a clear error
L8_GRAPH_REFUSE=capture "$bin" "${args[@]}" --fp8 --limit 2000 --epochs 3 > "$tmp/rc.txt" 2>&1 ||
    bad "L8_GRAPH_REFUSE=capture: run exited non-zero"
if [ -n "$(core "$tmp/rc.txt")" ] && [ "$(core "$tmp/rc.txt")" = "$(core "$tmp/ng-fp8.txt")" ] &&
   grep -q 'capturing the step failed (.*L8_GRAPH_REFUSE=capture.*); running the remaining steps eagerly' \
       "$tmp/rc.txt" && ! grep -q '^graphs' "$tmp/rc.txt"; then
    ok "a refused capture: said so, the remaining steps eager, --no-graph's losses bitwise"
else bad "a refused capture"; diff <(core "$tmp/rc.txt") <(core "$tmp/ng-fp8.txt"); cat "$tmp/rc.txt"; fi
L8_GRAPH_REFUSE=chain "$bin" "${args[@]}" --fp8 --limit 2000 --epochs 3 > "$tmp/rch.txt" 2>&1 ||
    bad "L8_GRAPH_REFUSE=chain: run exited non-zero"
if [ "$(core "$tmp/rch.txt")" = "$(core "$tmp/ng-fp8.txt")" ] &&
   grep -qx "graphs: 1 captures, 95 launches, 0 chained" "$tmp/rch.txt"; then
    ok "a refused chain: single launches, --no-graph's losses bitwise"
else bad "a refused chain"; diff <(core "$tmp/rch.txt") <(core "$tmp/ng-fp8.txt"); tail -2 "$tmp/rch.txt"; fi
if L8_GRAPH_REFUSE=capture,bogus "$bin" "${args[@]}" --fp8 --limit 200 --epochs 1 > "$tmp/rb.txt" 2>&1; then
    bad "L8_GRAPH_REFUSE=capture,bogus accepted"
elif grep -q 'L8_GRAPH_REFUSE holds "bogus"' "$tmp/rb.txt"; then ok "L8_GRAPH_REFUSE with an unknown word: a clear error"
else bad "L8_GRAPH_REFUSE=capture,bogus: unclear error"; cat "$tmp/rb.txt"; fi
# the padded partial batch changes nothing (host): the epoch lines of the
# graph runs above are those lean8-train printed when it ran the partial
# batch at its own 16 rows (a7fa63f, before the padding): the padding rows
# add exact zeros to every gradient and sum, and raise no amax. (On a GPU a
# GEMM of 64 rows may sum in another order than one of 16: not bitwise.)
if [ "$dev" = host ]; then
    for mode in fp8 bf16; do
        if [ $mode = fp8 ]; then want='epoch  1  loss 1.4033  train 0.5560  test acc 0.6951
epoch  2  loss 0.7497  train 0.7460  test acc 0.7474
epoch  3  loss 0.6849  train 0.7645  test acc 0.7604'
        else want='epoch  1  loss 1.3975  train 0.5610  test acc 0.6982
epoch  2  loss 0.7506  train 0.7410  test acc 0.7494
epoch  3  loss 0.6842  train 0.7670  test acc 0.7602'; fi
        if [ "$(core "$tmp/g-$mode.txt")" = "$want" ]; then
            ok "$mode: the padded partial batch trains as the unpadded one did, bitwise"
        else bad "$mode: the padded partial batch changed the run"
            diff <(echo "$want") <(core "$tmp/g-$mode.txt"); fi
    done
fi
# --step-times: after each epoch line, the GPU's time per step by kind of call:
# a launch of 16 full steps (the default --graph-steps), then 16 single steps
# (15 full and the padded partial batch; in the first epoch 14 full, the
# padded one and the warm-up); the
# losses those of the same run without it. The host backend says it does not
# time (its events have no clock).
"$bin" "${args[@]}" --fp8 --limit 2000 --epochs 3 --step-times > "$tmp/st.txt" 2>&1 ||
    bad "--step-times run exited non-zero"
t='[0-9]+\.[0-9]{2} us a step \(slowest [0-9]+\.[0-9]{2}\)'
if [ "$dev" = host ]; then want='^  steps on the GPU: not timed \(host backend\)$'
else want="^  steps on the GPU: 1 x 16 at $t; 16 x 1 at $t\$"; fi
if [ "$(grep -A1 '^epoch' "$tmp/st.txt" | grep -cE "$want")" = 3 ] &&
   [ "$(grep -c '^  steps on the GPU' "$tmp/st.txt")" = 3 ] &&
   [ "$(core "$tmp/st.txt")" = "$(core "$tmp/g-fp8.txt")" ]; then
    ok "--step-times: a line of GPU times after each epoch ($(grep -m1 '^  steps' "$tmp/st.txt" | sed 's/^  steps on the GPU: //')), the same losses"
else bad "--step-times"; cat "$tmp/st.txt"; fi

# --drop-last: whole batches only (2000 -> 1984 = 31 x 64): the run of --limit 1984
# bitwise, one capture, 3 x 31 step executions less the warm-up, as many
# chained as with the partial batch; a batch above the data set leaves
# nothing: a usage error
"$bin" "${args[@]}" --fp8 --limit 2000 --epochs 3 --drop-last > "$tmp/dl.txt" 2>&1 ||
    bad "--drop-last run exited non-zero"
"$bin" "${args[@]}" --fp8 --limit 1984 --epochs 3 > "$tmp/l1984.txt" 2>&1 ||
    bad "--limit 1984 run exited non-zero"
if [ -n "$(core "$tmp/dl.txt")" ] && [ "$(core "$tmp/dl.txt")" = "$(core "$tmp/l1984.txt")" ] &&
   grep -q ' 1984+10000 images' "$tmp/dl.txt" &&
   grep -qx "graphs: 1 captures, 92 launches, $(chained 16) chained" "$tmp/dl.txt"; then
    ok "--drop-last: the run of --limit 1984 bitwise, one capture, 92 step executions"
else bad "--drop-last"; diff <(core "$tmp/dl.txt") <(core "$tmp/l1984.txt"); grep 'images\|^graphs' "$tmp/dl.txt"; fi
"$bin" --device "$dev" --data "$data" --quiet --batch 65536 --drop-last --epochs 1 > "$tmp/o.txt" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q -- '--drop-last leaves no whole batch' "$tmp/o.txt"; then
    ok "--drop-last with --batch above the data set: exit 2, a clear message"
else bad "--drop-last --batch 65536: exit $rc"; cat "$tmp/o.txt"; fi

# FP8 mode's head is in bf16 unless --fp8-head: the banners say so, and the losses differ
if grep -q '^lean8-train: FP8 (HYBRID delayed scaling; head bf16)' "$tmp/g-fp8.txt" &&
   grep -q '^lean8-train: FP8 (HYBRID delayed scaling) ' "$tmp/g-fp8-head.txt" &&
   [ "$(core "$tmp/g-fp8.txt")" != "$(core "$tmp/g-fp8-head.txt")" ]; then
    ok "--fp8: the head in bf16; --fp8-head: in FP8 (other losses)"
else bad "--fp8 / --fp8-head: banners or losses"; head -1 "$tmp/g-fp8.txt" "$tmp/g-fp8-head.txt"; fi

for mode in fp8 bf16; do
    [ $mode = bf16 ] && L8_DEVICE=$dev "$bin" "${args[@]}" --bf16 --epochs 3 > "$tmp/full.txt" 2>&1
    "$bin" "${args[@]}" --$mode --epochs 3 --stop-after 2 --save "$tmp/a.ckpt" > "$tmp/part1.txt" 2>&1 || bad "$mode: first half exited non-zero"
    "$bin" "${args[@]}" --$mode --epochs 3 --resume "$tmp/a.ckpt" > "$tmp/part2.txt" 2>&1 || bad "$mode: resume exited non-zero"
    if [ "$(core "$tmp/full.txt")" = "$(core "$tmp/part1.txt"; core "$tmp/part2.txt")" ] && [ -n "$(core "$tmp/part2.txt")" ]; then
        ok "$mode: resume reproduces the uninterrupted run bitwise"
    else bad "$mode: resume differs"; diff <(core "$tmp/full.txt") <(core "$tmp/part1.txt"; core "$tmp/part2.txt"); fi
done

# --offload: $tmp/full.txt is the bf16 run now, full-fp8.txt the FP8 one
for mode in fp8 bf16; do
    ref="$tmp/full.txt"; [ $mode = fp8 ] && ref="$tmp/full-fp8.txt"
    for k in 0 1; do
        "$bin" "${args[@]}" --$mode --epochs 3 --offload=$k > "$tmp/off.txt" 2>&1 || bad "$mode --offload=$k exited non-zero"
        if [ "$(core "$tmp/off.txt")" = "$(core "$ref")" ] && [ -n "$(core "$ref")" ] &&
           grep -Eq '^offload: .* [1-9][0-9]* device blocks given back' "$tmp/off.txt"; then
            ok "$mode --offload=$k: bitwise the losses without offload ($(grep -o '[0-9]* copies out ([0-9.]* MiB)' "$tmp/off.txt"))"
        else bad "$mode --offload=$k differs or offloaded nothing"; diff <(core "$ref") <(core "$tmp/off.txt"); grep '^offload' "$tmp/off.txt"; fi
    done
done
"$bin" "${args[@]}" --fp8 --batch 256 --epochs 2 > "$tmp/b.txt" 2>&1 || bad "fp8 --batch 256 exited non-zero"
"$bin" "${args[@]}" --fp8 --batch 256 --epochs 2 --offload > "$tmp/off.txt" 2>&1 || bad "fp8 --batch 256 --offload exited non-zero"
if [ "$(core "$tmp/off.txt")" = "$(core "$tmp/b.txt")" ] && [ -n "$(core "$tmp/b.txt")" ]; then
    ok "fp8 --batch 256: the split casts give bitwise the losses of --offload's own casts"
else bad "fp8 --batch 256: split and --offload differ"; diff <(core "$tmp/b.txt") <(core "$tmp/off.txt"); fi
# FP8 hidden layers (the default): the dgrad of the FP8 layer above each
# casts its dY (l8_linear_backward_fp8_dx: on a GPU in the small GEMM kernel's
# launch at these shapes), the head's too (l8_linear_backward_dx);
# --no-head-dgrad-cast: the top hidden layer casts its own; --no-dgrad-cast:
# each layer casts its own.
# Bitwise the same, with two hidden layers and with three (the dY8 buffer's
# two slots in turn), and with the head in FP8
for h in "64,32" "64,48,32" "64,32 --fp8-head"; do
    "$bin" "${args[@]}" --fp8 --hidden $h --epochs 2 > "$tmp/dc.txt" 2>&1 || bad "fp8 --hidden $h exited non-zero"
    for f in --no-dgrad-cast --no-head-dgrad-cast; do
        "$bin" "${args[@]}" --fp8 --hidden $h --epochs 2 $f > "$tmp/nd.txt" 2>&1 ||
            bad "fp8 --hidden $h $f exited non-zero"
        if [ "$(core "$tmp/dc.txt")" = "$(core "$tmp/nd.txt")" ] && [ -n "$(core "$tmp/dc.txt")" ]; then
            ok "fp8 --hidden $h: the default's dY casts equal $f's bitwise"
        else bad "fp8 --hidden $h: the default and $f differ"; diff <(core "$tmp/dc.txt") <(core "$tmp/nd.txt"); fi
    done
done
# batches that are not a multiple of 16 (100, with a last batch of 48 of the
# 2048 images; 7, with a last batch of 4): the FP8 layers' transposes
# row-padded for their wgrads (the split casts' and the first layer's by
# lean8-train, the rest by the layers): graph steps, --no-graph and --offload
# (every layer casting its own) agree bitwise, with the head in bf16 and in FP8
for cfg in "fp8 100" "fp8-head 100" "fp8 7"; do
    set -- $cfg; mode=$1; b=$2
    "$bin" "${args[@]}" --$mode --batch $b --epochs 2 > "$tmp/b.txt" 2>&1 || bad "$mode --batch $b exited non-zero"
    "$bin" "${args[@]}" --$mode --batch $b --epochs 2 --no-graph > "$tmp/ng.txt" 2>&1 || bad "$mode --batch $b --no-graph exited non-zero"
    "$bin" "${args[@]}" --$mode --batch $b --epochs 2 --offload > "$tmp/off.txt" 2>&1 || bad "$mode --batch $b --offload exited non-zero"
    l1=$(core "$tmp/b.txt" | sed -n 1p | awk '{print $4}')
    l2=$(core "$tmp/b.txt" | sed -n 2p | awk '{print $4}')
    if [ -n "$l2" ] && [ "$(core "$tmp/b.txt")" = "$(core "$tmp/ng.txt")" ] &&
       [ "$(core "$tmp/b.txt")" = "$(core "$tmp/off.txt")" ] && awk "BEGIN{exit !($l2 < $l1)}"; then
        ok "$mode --batch $b: trains ($l1 -> $l2); graph, --no-graph and --offload agree bitwise"
    else bad "$mode --batch $b: runs differ or the loss did not fall"; core "$tmp/b.txt"; core "$tmp/ng.txt"; core "$tmp/off.txt"; fi
done
if "$bin" "${args[@]}" --offload=-1 > "$tmp/o.txt" 2>&1; then bad "--offload=-1 accepted"
else ok "--offload=-1 refused"; fi

for mode in fp8 bf16; do
    "$bin" "${args[@]}" --$mode --epochs 1 --save "$tmp/$mode.ckpt" > /dev/null 2>&1 || bad "$mode save"
done
cp "$tmp/fp8.ckpt" "$tmp/keep.ckpt"
# --save is checked before training: a missing directory fails at once, no epoch runs
if "$bin" "${args[@]}" --epochs 1 --save "$tmp/nodir/x.ckpt" > "$tmp/o.txt" 2>&1; then bad "save into a missing directory succeeded"
elif grep -q '^epoch' "$tmp/o.txt"; then bad "save into a missing directory failed only after training"
else ok "save into a missing directory is an error before training: $(grep -m1 -o 'L8_ERR_[A-Z_]*' "$tmp/o.txt")"; fi
# a save killed half-way (file size limit: SIGXFSZ) over an existing checkpoint
# leaves that checkpoint byte-identical; the next save removes the temporary
rc=$( { (ulimit -c 0; ulimit -f 64; exec "$bin" "${args[@]}" --epochs 1 --save "$tmp/fp8.ckpt") \
        > "$tmp/o.txt" 2>&1; echo $?; } 2>/dev/null )
stale=$(ls "$tmp"/fp8.ckpt.tmp.* 2>/dev/null | wc -l)
if [ $rc -ne 0 ] && [ "$stale" -gt 0 ]; then ok "a save killed by SIGXFSZ (exit $rc) leaves a temporary file"
else bad "the size-limited save did not die mid-write (exit $rc, $stale temporaries)"; fi
cmp -s "$tmp/fp8.ckpt" "$tmp/keep.ckpt" && ok "previous checkpoint intact after the killed save" || bad "previous checkpoint changed by the killed save"
"$bin" "${args[@]}" --epochs 1 --save "$tmp/fp8.ckpt" > "$tmp/o.txt" 2>&1 || bad "save after a killed save"
if ls "$tmp"/fp8.ckpt.tmp.* > /dev/null 2>&1; then bad "the stale temporary file is still there"
else ok "the next save removed the stale temporary: $(grep -m1 -o 'removed [^ ]*' "$tmp/o.txt")"; fi
cp "$tmp/fp8.ckpt" "$tmp/keep.ckpt"

size=$(stat -c %s "$tmp/fp8.ckpt")
head -c $((size / 2)) "$tmp/fp8.ckpt" > "$tmp/trunc.ckpt"
cp "$tmp/fp8.ckpt" "$tmp/corrupt.ckpt"
printf '\xff' | dd of="$tmp/corrupt.ckpt" bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
mkdir -p "$tmp/keep" && cp "$tmp/trunc.ckpt" "$tmp/corrupt.ckpt" "$tmp/bf16.ckpt" "$tmp/keep/"
# every refused resume also names fp8.ckpt as --save: a run that fails before
# training must not touch the checkpoint it would have written
for c in trunc corrupt; do
    if "$bin" "${args[@]}" --epochs 2 --resume "$tmp/$c.ckpt" --save "$tmp/fp8.ckpt" > "$tmp/o.txt" 2>&1; then bad "$c checkpoint accepted"
    elif grep -q "$c.ckpt" "$tmp/o.txt"; then ok "$c checkpoint refused: $(grep -m1 -o 'L8_ERR_[A-Z_]*' "$tmp/o.txt")"
    else bad "$c checkpoint refused without naming the file"; cat "$tmp/o.txt"; fi
done
if "$bin" "${args[@]}" --fp8 --epochs 2 --resume "$tmp/bf16.ckpt" --save "$tmp/fp8.ckpt" > "$tmp/o.txt" 2>&1; then bad "bf16 checkpoint accepted by an fp8 run"
elif grep -q "another model.*written by a --bf16 run, this run is --fp8" "$tmp/o.txt"; then ok "mismatched checkpoint refused, naming the field"
else bad "mismatch message unclear"; cat "$tmp/o.txt"; fi
if "$bin" "${args[@]}" --fp8-head --epochs 2 --resume "$tmp/fp8.ckpt" --save "$tmp/fp8.ckpt" > "$tmp/o.txt" 2>&1; then bad "an --fp8 (head bf16) checkpoint accepted by an --fp8-head run"
elif grep -q "another model.*written by a --fp8 run, this run is --fp8 --fp8-head" "$tmp/o.txt"; then ok "a head-bf16 checkpoint refused by an --fp8-head run, naming both"
else bad "head mismatch message unclear"; cat "$tmp/o.txt"; fi
if "$bin" "${args[@]}" --fp8 --epochs 2 --batch 32 --resume "$tmp/fp8.ckpt" > "$tmp/o.txt" 2>&1; then bad "resume with another --batch accepted"
elif grep -q -- "--batch 64, this run 32" "$tmp/o.txt"; then ok "resume with another --batch refused, naming it"
else bad "resume mismatch message unclear"; cat "$tmp/o.txt"; fi
# a --drop-last run's checkpoint holds it as --limit at the last whole batch
# (2000 -> 1984): a resume without --drop-last is refused, saying so; with it,
# the run continues
"$bin" "${args[@]}" --limit 2000 --drop-last --epochs 2 --stop-after 1 --save "$tmp/dl.ckpt" > "$tmp/o.txt" 2>&1 ||
    bad "--drop-last --save exited non-zero"
if "$bin" "${args[@]}" --limit 2000 --epochs 2 --resume "$tmp/dl.ckpt" > "$tmp/o.txt" 2>&1; then bad "a --drop-last checkpoint resumed without it"
elif grep -q -- "--limit 1984, this run 2000 (--drop-last counts as --limit" "$tmp/o.txt"; then
    ok "a --drop-last checkpoint resumed without it: refused, naming --drop-last"
else bad "--drop-last resume message unclear"; cat "$tmp/o.txt"; fi
"$bin" "${args[@]}" --limit 2000 --drop-last --epochs 2 --resume "$tmp/dl.ckpt" > "$tmp/o.txt" 2>&1 &&
    [ -n "$(core "$tmp/o.txt")" ] && ok "a --drop-last checkpoint resumed with --drop-last" ||
    { bad "--drop-last resume"; cat "$tmp/o.txt"; }
cmp -s "$tmp/fp8.ckpt" "$tmp/keep.ckpt" && ok "--save target untouched by runs whose resume failed" || bad "--save target changed by a failed run"
same=1
for c in trunc corrupt bf16; do cmp -s "$tmp/$c.ckpt" "$tmp/keep/$c.ckpt" || same=0; done
[ $same = 1 ] && ok "refused checkpoints are left as they were" || bad "a refused checkpoint was modified"

run=$(dirname "$bin")/lean8-run
if [ "$dev" = host ]; then
    # name ranks flags: several ranks over TCP on the host train as one rank does
    for cfg in "tp2 2 --tp 2" "dp2 2 --dp 2" "tp2xdp2 4 --tp 2 --dp 2"; do
        set -- $cfg; name=$1; n=$2; shift 2
        for mode in fp8 bf16; do
            tpa=(--device host --data "$data" --limit 2048 --hidden 64,32 --batch 64 --seed 7 --quiet --epochs 2 --$mode)
            "$bin" "${tpa[@]}" > "$tmp/tp1.txt" 2>&1
            L8_DEVICE=host timeout -k 5 120 "$run" -n $n --no-prefix "$bin" "${tpa[@]}" "$@" > "$tmp/tp2.txt" 2>&1; rc=$?
            close=$(paste <(core "$tmp/tp1.txt") <(core "$tmp/tp2.txt") | awk -v n=0 '
                { n++; d = $4 - $13; if (d < 0) d = -d; a = $9 - $18; if (a < 0) a = -a;
                  if (d > 0.02 * $4 || a > 0.01) bad = 1 }
                END { print (n == 2 && !bad) ? "yes" : "no" }')
            if [ $rc = 0 ] && [ "$close" = yes ]; then ok "$mode: $* (lean8-run -n $n) trains as one rank: $(core "$tmp/tp2.txt" | tail -1 | awk '{print "loss", $4, "acc", $9}') vs $(core "$tmp/tp1.txt" | tail -1 | awk '{print $4, $9}')"
            else bad "$mode: $* differs from one rank (rc $rc)"; paste <(core "$tmp/tp1.txt") <(core "$tmp/tp2.txt"); tail -5 "$tmp/tp2.txt"; fi
        done
    done
    # --dp resume: rank 0 saves, every rank resumes; bitwise the uninterrupted run
    dpa=(--device host --data "$data" --limit 2048 --hidden 64,32 --batch 64 --seed 7 --quiet --epochs 3 --dp 2)
    L8_DEVICE=host timeout -k 5 120 "$run" -n 2 --no-prefix "$bin" "${dpa[@]}" > "$tmp/dfull.txt" 2>&1
    L8_DEVICE=host timeout -k 5 120 "$run" -n 2 --no-prefix "$bin" "${dpa[@]}" --stop-after 2 --save "$tmp/dp.ckpt" > "$tmp/d1.txt" 2>&1
    L8_DEVICE=host timeout -k 5 120 "$run" -n 2 --no-prefix "$bin" "${dpa[@]}" --resume "$tmp/dp.ckpt" > "$tmp/d2.txt" 2>&1
    if [ "$(core "$tmp/dfull.txt")" = "$(core "$tmp/d1.txt"; core "$tmp/d2.txt")" ] && [ -n "$(core "$tmp/d2.txt")" ]; then
        ok "--dp 2: resume reproduces the uninterrupted run bitwise"
    else bad "--dp 2: resume differs"; diff <(core "$tmp/dfull.txt") <(core "$tmp/d1.txt"; core "$tmp/d2.txt"); tail -3 "$tmp/d2.txt"; fi
    # --zero1: the same run as plain --dp (bitwise), its per-rank checkpoints resume bitwise,
    # and a resume by another number of ranks is refused naming both
    L8_DEVICE=host timeout -k 5 120 "$run" -n 2 --no-prefix "$bin" "${dpa[@]}" --zero1 > "$tmp/zfull.txt" 2>&1
    L8_DEVICE=host timeout -k 5 120 "$run" -n 2 --no-prefix "$bin" "${dpa[@]}" --zero1 --stop-after 2 --save "$tmp/z.ckpt" > "$tmp/z1.txt" 2>&1
    L8_DEVICE=host timeout -k 5 120 "$run" -n 2 --no-prefix "$bin" "${dpa[@]}" --zero1 --resume "$tmp/z.ckpt" > "$tmp/z2.txt" 2>&1
    if [ "$(core "$tmp/zfull.txt")" = "$(core "$tmp/dfull.txt")" ] && [ -n "$(core "$tmp/zfull.txt")" ]; then
        ok "--dp 2 --zero1 trains bitwise as --dp 2"
    else bad "--zero1 differs from plain --dp"; diff <(core "$tmp/dfull.txt") <(core "$tmp/zfull.txt"); tail -3 "$tmp/zfull.txt"; fi
    if [ "$(core "$tmp/zfull.txt")" = "$(core "$tmp/z1.txt"; core "$tmp/z2.txt")" ] && [ -n "$(core "$tmp/z2.txt")" ] && [ -f "$tmp/z.ckpt.rank1" ]; then
        ok "--zero1: per-rank checkpoints resume bitwise"
    else bad "--zero1 resume differs"; diff <(core "$tmp/zfull.txt") <(core "$tmp/z1.txt"; core "$tmp/z2.txt"); tail -3 "$tmp/z2.txt"; fi
    zra=(--device host --data "$data" --limit 2048 --hidden 64,32 --batch 64 --seed 7 --quiet --epochs 3 --dp 4 --zero1)
    L8_DEVICE=host timeout -k 5 120 "$run" -n 4 "$bin" "${zra[@]}" --resume "$tmp/z.ckpt" > "$tmp/o.txt" 2>&1; rc=$?
    # every rank that reports says it: ranks 2 and 3, which have no file, too (it was
    # a race which rank lean8-run heard from first)
    if [ $rc != 0 ] && grep -q "written by 2 ranks.*this run has 4 ranks" "$tmp/o.txt" &&
       ! grep -q "No such file" "$tmp/o.txt"; then ok "--zero1: a 2-rank checkpoint resumed by 4 ranks is refused, naming both"
    else bad "--zero1 resume by 4 ranks: rc $rc"; head -5 "$tmp/o.txt"; fi
    # a rank's lost file: named as missing, with what rank 0's file says
    mkdir "$tmp/lost" && cp "$tmp/z.ckpt.rank0" "$tmp/lost/z.ckpt.rank0"
    L8_DEVICE=host timeout -k 5 120 "$run" -n 2 "$bin" "${dpa[@]}" --zero1 --resume "$tmp/lost/z.ckpt" > "$tmp/o.txt" 2>&1; rc=$?
    if [ $rc != 0 ] && grep -q "checkpoint $tmp/lost/z.ckpt.rank1 is missing; .*holds the ZeRO-1 shard of rank 0 of 2 ranks" "$tmp/o.txt"; then
        ok "--zero1: a rank's missing file is named, with what rank 0's says"
    else bad "--zero1 with a rank's file lost: rc $rc"; head -5 "$tmp/o.txt"; fi
    "$bin" --device host --data "$data" --tp 2 --epochs 1 > "$tmp/o.txt" 2>&1; rc=$?
    if [ $rc != 0 ] && grep -q "lean8-run -n 2" "$tmp/o.txt"; then ok "--tp 2 without two ranks: a clear error"
    else bad "--tp 2 alone: rc $rc"; cat "$tmp/o.txt"; fi
else
    echo "  skip  --tp/--dp: one GPU cannot hold two NCCL ranks (run them on the host backend)"
fi

if "$bin" --data "$tmp/none" --epochs 1 > "$tmp/o.txt" 2>&1; then bad "missing dataset accepted"
elif grep -q "dataset-fashion-mnist" "$tmp/o.txt"; then ok "missing dataset: clear error"
else bad "missing dataset message unclear"; cat "$tmp/o.txt"; fi
for a in "--batch 0" "--batch 65537" "--hidden 0" "--lr -1" "--epochs x" "--frobnicate" "--epochs 4294967297" \
         "--seed -1" "--lr inf" "--wd nan" "--limit 10" "--batch" "--fp8-head --bf16" \
         "--graph-steps 0" "--graph-steps 65" "--graph-steps"; do
    "$bin" $a > "$tmp/o.txt" 2>&1; rc=$?
    flag=${a%% *}
    if [ $rc = 2 ] && grep -q -- "$flag" "$tmp/o.txt"; then ok "bad flag '$a' -> message naming $flag, exit 2"
    else bad "bad flag '$a' exit $rc"; cat "$tmp/o.txt"; fi
done
for a in --help --version; do
    "$bin" $a > "$tmp/o.txt" 2>&1; rc=$?
    [ $rc = 0 ] && [ -s "$tmp/o.txt" ] && ok "$a exits 0" || { bad "$a exit $rc"; cat "$tmp/o.txt"; }
done
# under valgrind: no memory errors, nothing the tool leaks at exit (a host
# run; on a GPU compute-sanitizer checks the suites, tools/device-run.sh)
if [ "$dev" = host ] && command -v valgrind > /dev/null; then
    for mode in fp8 bf16; do
        valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=9 \
            "$bin" --device host --data "$data" --limit 512 --epochs 1 --quiet --hidden 32,16 \
            --batch 64 --$mode > "$tmp/vg.txt" 2>&1; rc=$?
        if [ $rc = 0 ]; then ok "$mode under valgrind: no memory errors, nothing definitely lost"
        else bad "$mode under valgrind: rc $rc"; grep -A12 "==[0-9]*==" "$tmp/vg.txt" | head -40; fi
    done
fi
# the plans of the step's GEMMs on a GPU (docs/train.md: the wgrads on the
# comm stream for 32 SMs, an FP8 layer's dgrad beside them for 100), with the
# heuristic's plans (no plan cache, no tuning) and the small kernel's default
if [ "$dev" != host ]; then
    for mode in fp8 bf16; do
        env -u L8_GEMM_CACHE -u L8_GEMM_AUTOTUNE -u L8_GEMM_SMALL L8_GEMM_DEBUG=1 \
            "$bin" --device "$dev" --data "$data" --limit 512 --epochs 1 --quiet \
            --hidden 512,512 --batch 256 --$mode > "$tmp/plans.txt" 2>&1 ||
            bad "$mode plans run exited non-zero"
        t=$([ $mode = fp8 ] && echo e5m2 || echo bf16)
        wg="^lean8: gemm plan 512x512x256 $t x [a-z0-9]+ -> f32: .*\(for 32 SMs\)$"
        dg="^lean8: gemm plan 256x512x512 $t x [a-z0-9]+ -> bf16: .*\(for 100 SMs\)$"
        hd="^lean8: gemm plan 256x512x16 "
        n100=$(grep -c '(for 100 SMs)$' "$tmp/plans.txt")
        if ! grep -Eq "$wg" "$tmp/plans.txt"; then
            bad "$mode plans: no line matching '$wg'"; grep 'gemm plan' "$tmp/plans.txt"
        elif grep -Eq "$hd" "$tmp/plans.txt" || ! grep -Eq "^lean8: gemm plan 16x512x256 " "$tmp/plans.txt"; then
            bad "$mode plans: a plan for the head's dgrad, or none for its wgrad"; grep 'gemm plan' "$tmp/plans.txt"
        elif [ $mode = fp8 ] && { ! grep -Eq "$dg" "$tmp/plans.txt" || [ "$n100" != 1 ]; }; then
            bad "$mode plans: not one line, matching '$dg', for 100 SMs"; grep 'gemm plan' "$tmp/plans.txt"
        elif [ $mode = bf16 ] && [ "$n100" != 0 ]; then
            bad "bf16 plans: a plan for 100 SMs"; grep 'gemm plan' "$tmp/plans.txt"
        else
            ok "$mode plans: layer 2's wgrad for 32 SMs, $([ $mode = fp8 ] && echo "its dgrad for 100" || echo "no plan for 100"), none for the head's dgrad"
        fi
    done
fi
# docs/train.md's flag table and --help name the same flags
if flagdiff=$("$(dirname "$0")/doc_flags.sh" --both "$bin" "$(dirname "$0")/../docs/train.md") && [ -z "$flagdiff" ]
then ok "docs/train.md and --help name the same flags"
else bad "docs/train.md and --help differ: only in --help: ${flagdiff:-(--help names no flag)}"; fi
echo "train ($dev): $pass passed, $fail failed"
[ $fail = 0 ]
