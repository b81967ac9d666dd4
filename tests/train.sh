#!/bin/bash
# train.sh - end-to-end checks of lean8-train (make test: the host backend;
# TRAIN_DEVICE=cuda:0 runs the same checks on a GPU, tools/device-run.sh does):
#   1. a short run's loss falls;
#   2. resuming from a checkpoint gives bitwise the same losses and accuracies
#      as the uninterrupted run;
#   3. a truncated, corrupt or mismatched checkpoint is refused with a clear
#      message, and the previous checkpoint is left intact;
#   4. bad flags and a missing dataset are clear errors, not crashes;
#   5. --offload (every layer, and all but the last) gives bitwise the losses
#      of the run without it, and really gives device memory back.
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
if "$bin" "${args[@]}" --offload=-1 > "$tmp/o.txt" 2>&1; then bad "--offload=-1 accepted"
else ok "--offload=-1 refused"; fi

for mode in fp8 bf16; do
    "$bin" "${args[@]}" --$mode --epochs 1 --save "$tmp/$mode.ckpt" > /dev/null 2>&1 || bad "$mode save"
done
# a run that fails to save (unwritable target) leaves the old checkpoint byte-identical
cp "$tmp/fp8.ckpt" "$tmp/keep.ckpt"
if "$bin" "${args[@]}" --epochs 1 --save "$tmp/nodir/x.ckpt" > "$tmp/o.txt" 2>&1; then bad "save into a missing directory succeeded"
else ok "save into a missing directory is an error: $(grep -m1 -o 'L8_ERR_[A-Z_]*' "$tmp/o.txt")"; fi
cmp -s "$tmp/fp8.ckpt" "$tmp/keep.ckpt" && ok "previous checkpoint intact" || bad "previous checkpoint changed"

size=$(stat -c %s "$tmp/fp8.ckpt")
head -c $((size / 2)) "$tmp/fp8.ckpt" > "$tmp/trunc.ckpt"
cp "$tmp/fp8.ckpt" "$tmp/corrupt.ckpt"
printf '\xff' | dd of="$tmp/corrupt.ckpt" bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
for c in trunc corrupt; do
    if "$bin" "${args[@]}" --epochs 2 --resume "$tmp/$c.ckpt" > "$tmp/o.txt" 2>&1; then bad "$c checkpoint accepted"
    elif grep -q "$c.ckpt" "$tmp/o.txt"; then ok "$c checkpoint refused: $(grep -m1 -o 'L8_ERR_[A-Z_]*' "$tmp/o.txt")"
    else bad "$c checkpoint refused without naming the file"; cat "$tmp/o.txt"; fi
done
if "$bin" "${args[@]}" --fp8 --epochs 2 --resume "$tmp/bf16.ckpt" > "$tmp/o.txt" 2>&1; then bad "bf16 checkpoint accepted by an fp8 run"
elif grep -q "another model" "$tmp/o.txt"; then ok "mismatched checkpoint refused"
else bad "mismatch message unclear"; cat "$tmp/o.txt"; fi
cmp -s "$tmp/fp8.ckpt" "$tmp/keep.ckpt" && ok "checkpoint untouched by failed loads" || bad "checkpoint changed by a load"

if "$bin" --data "$tmp/none" --epochs 1 > "$tmp/o.txt" 2>&1; then bad "missing dataset accepted"
elif grep -q "dataset-fashion-mnist" "$tmp/o.txt"; then ok "missing dataset: clear error"
else bad "missing dataset message unclear"; cat "$tmp/o.txt"; fi
for a in "--batch 100" "--hidden 0" "--lr -1" "--epochs x" "--frobnicate"; do
    "$bin" $a > "$tmp/o.txt" 2>&1; rc=$?
    [ $rc = 2 ] && ok "bad flag '$a' -> usage (exit 2)" || { bad "bad flag '$a' exit $rc"; cat "$tmp/o.txt"; }
done
echo "train ($dev): $pass passed, $fail failed"
[ $fail = 0 ]
