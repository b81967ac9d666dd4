#!/bin/bash
# launcher.sh - end-to-end checks of lean8-run with small shell and perl ranks:
#   1. the torchrun environment of every rank at N = 1, 2, 4; --master-addr/-port;
#      the picked MASTER_PORT is free: rank 0 listens on it and the others connect;
#   2. output: "[r] " prefixes, stdout and stderr apart, whole lines under
#      concurrent writers, partial last lines, long lines, --no-prefix, --tee;
#   3. a rank that exits 3 / dies by a signal stops the others (SIGKILL after
#      the grace for one that ignores SIGTERM) and sets the exit status;
#   4. SIGTERM and SIGINT to the launcher reach every rank; a second one kills;
#      a killed launcher leaves no ranks behind; --timeout;
#   5. bad flags exit 2 naming the flag; a missing program exits 127.
# Every launcher run has its own timeout, so nothing here can hang.
# Usage: tests/launcher.sh BUILD_DIR
set -u
bin=$1/bin/lean8-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "  ok    $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL  $1"; for f in "$tmp/out" "$tmp/err"; do [ -f "$f" ] && head -c 2000 "$f" | sed 's/^/        | /'; done; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

# run ARGS...: lean8-run under a 30 s timeout; sets rc and secs (wall time)
run() {
    local t0=$EPOCHREALTIME
    timeout -k 5 30 "$bin" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
    rc=$?
    secs=$(awk "BEGIN{printf \"%.2f\", $EPOCHREALTIME - $t0}")
}
# start ARGS...: lean8-run in the background (SIGINT not ignored, as it would
# be for a plain `&`), with a 30 s watchdog; sets lpid
start() {
    perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV or die "exec: $!"' "$bin" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null &
    lpid=$!
    ( sleep 30; kill -KILL $lpid 2>/dev/null ) > /dev/null 2>&1 &
    wpid=$!
}
# finish: wait for the background launcher; sets rc
finish() { wait $lpid 2>/dev/null; rc=$?; kill $wpid 2>/dev/null; wait $wpid 2>/dev/null; }
# wait_lines PATTERN N: until $tmp/out has N lines matching (at most 10 s)
wait_lines() {
    for _ in $(seq 100); do
        [ "$(grep -c -- "$1" "$tmp/out")" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
lt() { awk "BEGIN{exit !($1 < $2)}"; }

# ---- 1. environment ---------------------------------------------------------
env_prog='echo "env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $L8_RUN_ID $TORCHELASTIC_RUN_ID ${L8_DEVICE-unset}"'
for n in 1 2 4; do
    L8_DEVICE= run -n $n env -u L8_DEVICE sh -c "$env_prog"
    port=$(sed -n 's/^\[0\] env .* 127\.0\.0\.1 \([0-9]*\) .*/\1/p' "$tmp/out")
    id=$(sed -n 's/^\[0\] env .* \([0-9a-f]\{16\}\) \1 unset$/\1/p' "$tmp/out")
    want=$(for r in $(seq 0 $((n - 1))); do echo "[$r] env $r $n $r $n 0 127.0.0.1 $port $id $id unset"; done)
    check "N=$n: RANK, WORLD_SIZE, LOCAL_*, GROUP_RANK, MASTER_*, run id per rank (port $port)" \
        '[ $rc = 0 ] && [ -n "$port" ] && [ "$port" -gt 0 ] && [ -n "$id" ] && [ "$(sort "$tmp/out")" = "$want" ]'
done
run -n 2 --master-addr localhost --master-port 29517 sh -c 'echo "$MASTER_ADDR:$MASTER_PORT $ROLE_RANK $TORCHELASTIC_USE_AGENT_STORE"'
check "--master-addr and --master-port are passed as given; torchrun's extras" \
    '[ $rc = 0 ] && [ "$(sort "$tmp/out")" = "$(printf "[0] localhost:29517 0 False\n[1] localhost:29517 1 False")" ]'
run -n 2 sh -c 'echo $L8_RUN_ID'; id1=$(sort -u "$tmp/out" | sed 's/^\[.\] //' | sort -u)
run -n 2 sh -c 'echo $L8_RUN_ID'; id2=$(sort -u "$tmp/out" | sed 's/^\[.\] //' | sort -u)
check "a new run id for each run ($id1, $id2)" '[ "$(echo "$id1" | wc -l)" = 1 ] && [ "$id1" != "$id2" ]'
run --master-addr 192.0.2.1 -n 2 true
check "a master address that is not local, without a port: clear error" \
    '[ $rc = 1 ] && grep -q "cannot bind a port on --master-addr .192.0.2.1" "$tmp/err"'

rdzv='use IO::Socket::INET;
my ($a, $p, $r, $n) = @ENV{qw(MASTER_ADDR MASTER_PORT RANK WORLD_SIZE)};
if ($r == 0) {
    my $l = IO::Socket::INET->new(LocalAddr => $a, LocalPort => $p, Listen => $n, ReuseAddr => 1)
        or die "rank 0: bind $a:$p: $!\n";
    for (2 .. $n) { my $c = $l->accept or die "accept: $!\n"; print $c "hello from 0\n"; close $c }
    print "served ", $n - 1, "\n";
} else {
    my $c;
    for (1 .. 200) { last if $c = IO::Socket::INET->new(PeerAddr => $a, PeerPort => $p); select(undef, undef, undef, 0.05) }
    $c or die "rank $r: connect $a:$p: $!\n";
    print "rank $r got: ", scalar <$c>;
}'
run -n 4 perl -e "$rdzv"
check "the picked MASTER_PORT works: rank 0 listens, ranks 1-3 connect" \
    '[ $rc = 0 ] && grep -q "^\[0\] served 3$" "$tmp/out" && [ "$(grep -c "^\[[123]\] rank [123] got: hello from 0$" "$tmp/out")" = 3 ]'

# ---- 2. output ----------------------------------------------------------------
run -n 2 sh -c 'echo "out $RANK"; echo "err $RANK" >&2; echo "two $RANK"; printf "tail $RANK"'
check "prefixed lines, stdout and stderr apart, partial last line flushed" \
    '[ $rc = 0 ] && [ "$(sort "$tmp/out")" = "$(printf "[0] out 0\n[0] tail 0\n[0] two 0\n[1] out 1\n[1] tail 1\n[1] two 1")" ] &&
     [ "$(sort "$tmp/err")" = "$(printf "[0] err 0\n[1] err 1")" ]'
a=$(printf 'a%.0s' $(seq 100)); b=$(printf 'b%.0s' $(seq 100))
run -n 4 sh -c "i=0; while [ \$i -lt 300 ]; do printf %s $a; printf '%s\n' $b; i=\$((i + 1)); done"
check "4 ranks writing lines in pieces: every line whole (1200 lines)" \
    '[ $rc = 0 ] && [ "$(grep -cE "^\[[0-3]\] a{100}b{100}$" "$tmp/out")" = 1200 ] && [ "$(wc -l < "$tmp/out")" = 1200 ]'
run -n 1 sh -c 'head -c 150000 /dev/zero | tr "\0" x; echo; echo after'
check "a 150000-byte line comes out in 65536-byte pieces, nothing lost" \
    '[ $rc = 0 ] && [ "$(sed -n 1p "$tmp/out" | wc -c)" = $((65536 + 5)) ] &&
     [ "$(grep -o x "$tmp/out" | wc -l)" = 150000 ] && [ "$(tail -n1 "$tmp/out")" = "[0] after" ]'
run -n 1 sh -c 'head -c 65536 /dev/zero | tr "\0" y; echo; echo z'
check "a line of exactly 65536 bytes stays one line" \
    '[ $rc = 0 ] && [ "$(awk "{print length(\$0)}" "$tmp/out" | tr "\n" " ")" = "65540 5 " ]'
run -n 2 --no-prefix sh -c 'echo "plain $RANK"'
check "--no-prefix" '[ $rc = 0 ] && [ "$(sort "$tmp/out")" = "$(printf "plain 0\nplain 1")" ]'
run -n 2 --tee "$tmp/logs" sh -c 'echo "out $RANK"; echo "err $RANK" >&2; printf "no newline"'
check "--tee DIR: raw per-rank files, and the prefixed lines still printed" \
    '[ $rc = 0 ] && [ "$(cat "$tmp/logs/rank1.stdout")" = "$(printf "out 1\nno newline")" ] &&
     [ "$(cat "$tmp/logs/rank0.stderr")" = "err 0" ] && grep -q "^\[1\] out 1$" "$tmp/out"'
: > "$tmp/file"
run -n 2 --tee "$tmp/file" true
check "--tee on a file: clear error" '[ $rc = 1 ] && grep -q "cannot create directory .*: Not a directory" "$tmp/err"'
t0=$EPOCHREALTIME
timeout 20 "$bin" -n 2 cat > "$tmp/out" 2> "$tmp/err" < <(sleep 5); rc=$?
check "ranks read /dev/null, not the launcher's stdin" '[ $rc = 0 ] && lt $(awk "BEGIN{print $EPOCHREALTIME - $t0}") 4'
run -n 2 sh -c '(sleep 4 &); echo done'
check "a helper that keeps the pipe open does not hold the run (${secs}s)" \
    '[ $rc = 0 ] && [ "$(grep -c done "$tmp/out")" = 2 ] && lt $secs 3.5'

# ---- 3. failures --------------------------------------------------------------
run -n 4 --grace 10 sh -c '[ $RANK = 1 ] && { sleep 0.3; exit 3; }; exec sleep 100'
check "rank 1 exits 3: the others stopped by SIGTERM, exit 3 (${secs}s)" \
    '[ $rc = 3 ] && grep -q "^lean8-run: rank 1 exited with status 3; stopping the others$" "$tmp/err" && lt $secs 3'
run -n 3 --grace 1 sh -c '[ $RANK = 2 ] && { sleep 0.3; exit 3; }; trap "" TERM; exec sleep 100'
check "ranks that ignore SIGTERM are killed after the 1 s grace (${secs}s)" \
    '[ $rc = 3 ] && grep -q "rank 2 exited with status 3" "$tmp/err" && grep -q "2 rank(s) still running 1 s after SIGTERM; sending SIGKILL" "$tmp/err" &&
     lt 0.9 $secs && lt $secs 4'
run -n 2 sh -c '[ $RANK = 0 ] && { sleep 0.3; kill -KILL $$; }; exec sleep 100'
check "rank 0 killed by SIGKILL: exit 137, the rank and signal named (${secs}s)" \
    '[ $rc = 137 ] && grep -q "^lean8-run: rank 0 was killed by signal 9 (SIGKILL); stopping the others$" "$tmp/err" && lt $secs 3'
run -n 3 sh -c 'echo "last words $RANK"; [ $RANK = 2 ] && exit 7; exit 0'
check "a failing rank's output comes out before the verdict; exit 7" \
    '[ $rc = 7 ] && grep -q "^\[2\] last words 2$" "$tmp/out" && grep -q "rank 2 exited with status 7" "$tmp/err"'
run -n 1 sh -c 'exit 5'
check "N=1: exit status passed through, no 'stopping the others'" \
    '[ $rc = 5 ] && grep -qx "lean8-run: rank 0 exited with status 5" "$tmp/err"'
run -n 4 sh -c '[ $RANK = 3 ] && sleep 0.5; exit 0'
check "every rank exits 0 (at different times): exit 0, no message" '[ $rc = 0 ] && [ ! -s "$tmp/err" ]'

# ---- 4. signals and --timeout --------------------------------------------------
for sig in TERM INT; do
    start -n 2 --grace 5 sh -c "trap 'echo got $sig; kill \$! 2>/dev/null; exit 0' $sig; echo ready; sleep 100 & wait"
    wait_lines ready 2; kill -$sig $lpid; finish
    code=$((128 + $(kill -l $sig)))
    check "SIG$sig to the launcher reaches every rank; exit $code" \
        '[ $rc = $code ] && [ "$(grep -c "got $sig" "$tmp/out")" = 2 ] && grep -q "got SIG$sig; forwarding it to every rank" "$tmp/err"'
done
t0=$EPOCHREALTIME
start -n 2 --grace 30 sh -c 'trap "" TERM; echo ready; exec sleep 100'
wait_lines ready 2; kill -TERM $lpid; sleep 0.3; kill -TERM $lpid; finish
check "a second SIGTERM kills at once, not after the 30 s grace" \
    '[ $rc = 143 ] && grep -q "got SIGTERM again; sending SIGKILL" "$tmp/err" && lt $(awk "BEGIN{print $EPOCHREALTIME - $t0}") 5'
start -n 3 sh -c 'echo "pid $$"; exec sleep 100'
wait_lines pid 3; pids=$(sed -n 's/^\[.\] pid //p' "$tmp/out")
kill -KILL $lpid; finish
for _ in $(seq 50); do left=0; for p in $pids; do kill -0 $p 2>/dev/null && left=1; done; [ $left = 0 ] && break; sleep 0.1; done
check "a SIGKILLed launcher leaves no ranks behind (PR_SET_PDEATHSIG)" '[ $left = 0 ] && [ "$(echo $pids | wc -w)" = 3 ]'
[ $left = 0 ] || kill -KILL $pids 2>/dev/null
run -n 2 --timeout 1 --grace 1 sh -c 'exec sleep 100'
check "--timeout 1: ranks stopped, exit 124 naming the timeout (${secs}s)" \
    '[ $rc = 124 ] && grep -q "timeout: ranks still running after 1 s (--timeout); stopping them" "$tmp/err" && lt 0.9 $secs && lt $secs 3'
run -n 2 --timeout 5 sh -c 'exit 0'
check "--timeout does not touch a run that ends in time" '[ $rc = 0 ] && lt $secs 2'

# ---- 5. usage -------------------------------------------------------------------
bad_usage() {   # bad_usage WHAT-THE-MESSAGE-NAMES ARGS...
    local want=$1; shift
    run "$@"
    check "refused with exit 2 naming '$want': lean8-run $*" '[ $rc = 2 ] && grep -qF -- "$want" "$tmp/err" && [ ! -s "$tmp/out" ]'
}
bad_usage "--bogus" --bogus -n 2 true
bad_usage "-n" -n 0 true
bad_usage "-n" -n -1 true
bad_usage "-n" -n 1025 true
bad_usage "-n" -n 99999999999999999999 true
bad_usage "--nproc" --nproc=abc true
bad_usage "needs a value" -n
bad_usage "--timeout" --timeout 0 true
bad_usage "--timeout" --timeout -5 true
bad_usage "--timeout" --timeout nan true
bad_usage "--grace" --grace x true
bad_usage "--master-port" --master-port 70000 true
bad_usage "no program" -n 2
run --help
check "--help: usage on stdout, exit 0" '[ $rc = 0 ] && grep -q "^usage: lean8-run" "$tmp/out"'
run --version
check "--version: exit 0" '[ $rc = 0 ] && grep -qE "^lean8-run \(lean8\) [0-9]" "$tmp/out"'
run -n 2 ./no-such-program-here
check "a missing program: exit 127 naming it" '[ $rc = 127 ] && grep -q "cannot run .\./no-such-program-here.: No such file" "$tmp/err"'
run -n 1024 true
check "-n 1024 (${secs}s)" '[ $rc = 0 ] && [ ! -s "$tmp/err" ]'
# 40 ranks need 112 descriptors: the launcher raises a soft limit of 64, the ranks get 64 back
( ulimit -Sn 64 && exec timeout 30 "$bin" -n 40 sh -c 'ulimit -n' ) > "$tmp/out" 2> "$tmp/err" < /dev/null; rc=$?
check "a low soft file limit is raised for the launcher and restored for the ranks" \
    '[ $rc = 0 ] && [ "$(grep -c "^\[[0-9]*\] 64$" "$tmp/out")" = 40 ]'
( ulimit -n 64 && exec timeout 30 "$bin" -n 40 true ) > "$tmp/out" 2> "$tmp/err" < /dev/null; rc=$?
check "a hard file limit too low for -n: clear error" \
    '[ $rc = 1 ] && grep -q "^lean8-run: -n 40 needs 112 open files; the limit is 64 (ulimit -Hn)$" "$tmp/err"'
run -n 2 -- sh -c 'printf "%s\n" "$0"' -n
check "'--' ends the options" '[ $rc = 0 ] && [ "$(sort "$tmp/out")" = "$(printf "[0] -n\n[1] -n")" ]'

# every flag --help names is documented in docs/distributed.md
undoc=$("$(dirname "$0")/doc_flags.sh" "$bin" "$(dirname "$0")/../docs/distributed.md") || undoc="(--help names no flag)"
check "docs/distributed.md documents every flag of lean8-run --help${undoc:+ (missing: $undoc)}" '[ -z "$undoc" ]'

echo "launcher: $pass passed, $fail failed"
[ $fail = 0 ]
