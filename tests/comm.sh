#!/bin/bash
# comm.sh - communicators across processes (host backend, TCP on loopback):
#   1. lean8-run -n 2 and -n 4: join from the torchrun environment, all-reduce,
#      last-dimension gather and reduce-scatter checked by every rank;
#   2. a world-size mismatch fails on both ranks within 5 s, naming what differs;
#   3. a rank that leaves early: the others get L8_ERR_COMM within a small
#      L8_COMM_TIMEOUT and lean8-run exits non-zero naming the rank;
#   4. L8_INIT_FILE: the rendezvous through a file, no MASTER_ADDR;
#   5. a rank alone: L8_ERR_TIMEOUT after L8_INIT_TIMEOUT.
# Every run has its own timeout, so nothing here can hang.
# Usage: tests/comm.sh BUILD_DIR
set -u
B=$1
run=$B/bin/lean8-run
prog=$B/tests/comm_prog
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "  ok    $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL  $1"; for f in "$tmp"/out*; do [ -f "$f" ] && head -c 3000 "$f" | sed "s|^|        $(basename "$f") |"; done; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
secs() { awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $1}"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export L8_DEVICE=host L8_INIT_TIMEOUT=20 L8_COMM_TIMEOUT=20
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT L8_INIT_FILE \
      SLURM_PROCID SLURM_NTASKS OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE

for n in 2 4; do
    rm -f "$tmp"/out*
    timeout -k 5 60 "$run" -n $n "$prog" collectives > "$tmp/out" 2>&1; rc=$?
    check "lean8-run -n $n: collectives across $n processes (rc $rc)" \
        "[ $rc = 0 ] && [ \$(grep -c ': ok' $tmp/out) = $n ]"
done

# 2. mismatched world sizes: rank 0 says 2, rank 1 says 3
rm -f "$tmp"/out*
port=$(free_port)
t0=$EPOCHREALTIME
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 2 30 "$prog" join > "$tmp/out0" 2>&1 & p0=$!
RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 2 30 "$prog" join > "$tmp/out1" 2>&1 & p1=$!
wait $p0; r0=$?; wait $p1; r1=$?
t=$(secs $t0)
check "world-size mismatch: both ranks fail (rc $r0, $r1) in ${t}s, naming the difference" \
    "[ $r0 != 0 ] && [ $r1 != 0 ] && awk 'BEGIN{exit !($t < 5)}' && grep -q 'world size 3' $tmp/out0 && grep -q 'world size 3' $tmp/out1"

# 3. a rank that leaves early
rm -f "$tmp"/out*
t0=$EPOCHREALTIME
L8_COMM_TIMEOUT=5 timeout -k 5 60 "$run" -n 3 "$prog" exit-early > "$tmp/out" 2>&1; rc=$?
t=$(secs $t0)
check "a rank leaves: the others get L8_ERR_COMM, lean8-run exits $rc naming a rank, ${t}s" \
    "[ $rc = 4 ] && grep -q 'L8_ERR_COMM' $tmp/out && grep -q 'lean8-run: rank [02] exited with status 4' $tmp/out && awk 'BEGIN{exit !($t < 10)}'"

# 4. the rendezvous file
rm -f "$tmp"/out*
for r in 0 1 2; do
    RANK=$r WORLD_SIZE=3 L8_INIT_FILE=$tmp/rdzv L8_RUN_ID=job42 timeout -k 2 30 "$prog" collectives > "$tmp/out$r" 2>&1 &
done
rcs=""; for p in $(jobs -p); do wait $p; rcs="$rcs$?"; done
check "L8_INIT_FILE: three processes meet through a file (rc $rcs)" \
    "[ '$rcs' = 000 ] && grep -q ': ok' $tmp/out0 && grep -q ': ok' $tmp/out2 && [ -f $tmp/rdzv ]"

# a stale file of another job is not trusted: ranks wait for their own
rm -f "$tmp"/out*
printf 'lean8-rendezvous 1 %016x 127.0.0.1 1\n' 7 > "$tmp/stale"
RANK=1 WORLD_SIZE=2 L8_INIT_FILE=$tmp/stale L8_RUN_ID=job43 L8_INIT_TIMEOUT=1 timeout -k 2 20 "$prog" join > "$tmp/out1" 2>&1; rc=$?
check "a rendezvous file of another job is ignored (rc $rc, timeout named)" \
    "[ $rc != 0 ] && grep -q 'L8_ERR_TIMEOUT' $tmp/out1 && grep -q 'this job' $tmp/out1"

# 5. a rank alone: the init deadline
rm -f "$tmp"/out*
port=$(free_port)
t0=$EPOCHREALTIME
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port L8_INIT_TIMEOUT=2 timeout -k 2 20 "$prog" join > "$tmp/out1" 2>&1; rc=$?
t=$(secs $t0)
check "rank 0 never comes: L8_ERR_TIMEOUT after L8_INIT_TIMEOUT=2 (rc $rc, ${t}s)" \
    "[ $rc != 0 ] && grep -q 'L8_ERR_TIMEOUT' $tmp/out1 && awk 'BEGIN{exit !($t >= 1.9 && $t < 6)}'"

echo "comm: $pass passed, $fail failed"
[ $fail = 0 ]
