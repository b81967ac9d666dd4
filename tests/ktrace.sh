#!/bin/bash
# ktrace.sh - tools/ktrace.py on a made-up trace (make test-ktrace): the
# steady-state timeline it prints, the graph it picks, --graph, --all, and clear
# errors for a missing, malformed or graph-less file; and, where the CUDA
# toolkit has CUPTI, that libl8ktrace.so exports the driver's entry point.
# Usage: tests/ktrace.sh BUILD_DIR
set -u
kt="python3 $(dirname "$0")/../tools/ktrace.py"
lib=$1/libl8ktrace.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "  ok    $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL  $1"; }

# graph 3: nine launches 100 us apart (correlation 10..18), a GEMM on stream
# 7, a cast (a name with a comma) and a memset on stream 9; launch 14, in the
# steady third, runs its cast 1 us late (the median ignores it, a mean would
# not). Graph 4: two launches; one eager kernel (graph 0).
for i in 0 1 2 3 4 5 6 7 8; do
    t=$((1000000 + i * 100000)); c=$((10 + i)); late=0; [ $i = 4 ] && late=1000
    echo "K,7,$t,$((t + 5000)),3,1,$c,gemm_kernel"
    echo "K,9,$((t + 2500 + late)),$((t + 4500 + late)),3,2,$c,cast<a, b>"
    echo "S,9,$((t + 5200)),$((t + 5700)),3,3,$c,memset16"
done > "$tmp/t.csv"
echo "K,7,2000000,2001000,4,1,40,other" >> "$tmp/t.csv"
echo "K,7,2100000,2101000,4,1,41,other" >> "$tmp/t.csv"
echo "K,7,500,900,0,0,5,eager" >> "$tmp/t.csv"
cat > "$tmp/want.txt" <<'W'
graph 3: 9 launches, 3 in steady state; span 5.70 us, period 100.00 us, 3 nodes
     start      end      us  stream name
      0.00     5.00    5.00  s0     gemm_kernel
      2.50     4.50    2.00  s1     cast<a, b>
      5.20     5.70    0.50  s1     memset16
W
if $kt "$tmp/t.csv" > "$tmp/got.txt" 2>&1 && cmp -s "$tmp/want.txt" "$tmp/got.txt"; then
    ok "the steady-state timeline of the graph launched most often (medians, streams, names)"
else bad "timeline differs"; diff "$tmp/want.txt" "$tmp/got.txt"; fi
if $kt "$tmp/t.csv" --graph 4 > "$tmp/got.txt" 2>&1 && grep -q '^graph 4: 2 launches, 1 in steady state' "$tmp/got.txt" &&
   grep -q 'other' "$tmp/got.txt"; then ok "--graph 4 picks that graph"
else bad "--graph 4"; cat "$tmp/got.txt"; fi
# --all: every graph in id order, graph 3's timeline as above, a blank line, graph 4's
if $kt "$tmp/t.csv" --all > "$tmp/got.txt" 2>&1 &&
   head -n 5 "$tmp/got.txt" | cmp -s "$tmp/want.txt" - && [ "$(sed -n 6p "$tmp/got.txt")" = "" ] &&
   sed -n 7p "$tmp/got.txt" | grep -q '^graph 4: 2 launches' &&
   [ "$(grep -c '^graph ' "$tmp/got.txt")" = 2 ]; then ok "--all: graph 3, then graph 4"
else bad "--all"; cat "$tmp/got.txt"; fi
# errors: a message naming the problem, exit 1, no traceback
grep -v ',3,\|,4,' "$tmp/t.csv" > "$tmp/eager.csv"
echo "K,7,1,x,3,1,10,bad" > "$tmp/bad.csv"
echo "hello" > "$tmp/junk.csv"
for c in "$tmp/none.csv:No such file" "$tmp/eager.csv:none from a CUDA graph" "$tmp/bad.csv:bad.csv:1: a number" \
         "$tmp/junk.csv:junk.csv:1: not a libl8ktrace line" "$tmp/t.csv --graph 9:no graph 9 (graphs: 3, 4)" \
         "$tmp/t.csv --graph x:--graph wants a graph id" "$tmp/t.csv --al:usage: ktrace.py"; do
    args=${c%%:*}; want=${c#*:}
    $kt $args > "$tmp/o.txt" 2>&1; rc=$?
    label=$(basename "${args%% *}"); [ "$args" != "${args#* }" ] && label="$label ${args#* }"
    if [ $rc = 1 ] && grep -q -- "$want" "$tmp/o.txt" && ! grep -q Traceback "$tmp/o.txt"; then ok "$label: '$want', exit 1"
    else bad "$args: exit $rc"; cat "$tmp/o.txt"; fi
done
if [ -f "$lib" ]; then
    if nm -D --defined-only "$lib" | grep -qw InitializeInjection; then ok "libl8ktrace.so exports InitializeInjection"
    else bad "libl8ktrace.so lacks InitializeInjection"; fi
else echo "  skip  libl8ktrace.so: not built (the CUDA toolkit at CUDA_HOME has no CUPTI)"; fi
echo "ktrace: $pass passed, $fail failed"
[ $fail = 0 ]
