#!/bin/bash
# bench.sh - lean8-bench's contract on a machine without a GPU (make test
# runs it, with L8_DEVICE=host so a GPU machine checks the same thing):
#   1. `make bench`, exactly as README.md documents it, exits 0, prints one
#      "skipped" line per GPU-only benchmark and writes no file in the tree;
#   2. every subcommand (--quick) exits 0 and writes nothing in the current
#      directory without --json; with --json PATH it writes PATH as a JSON
#      object naming the benchmark (or nothing, when it was skipped);
#   3. bad input: an unknown benchmark, an unknown flag and an unwritable
#      --json path exit non-zero with a message;
#   4. tools/ncu_kernels.py summarizes an ncu CSV by kernel, and launch by
#      launch with the metrics asked for (--launches), on small files and on
#      tests/ncu_raw_h200.csv (four launches of real ncu output from the H200:
#      273 columns); a missing file or column gets a message and exit 1;
#   5. tools/bench_ratio.py's ratios, from one report a side and from the
#      medians of several (runs alternated on the GPU, tools/device-run.sh);
#   6. tools/device-run.sh gemmcache's plumbing (its steps fail here, no GPU):
#      GEMM_ROUNDS rounds, each lean8 and torch run with a file of its own,
#      all of them handed to the ratio step;
#   7. tools/bench_torch_gemm.py times the shapes and modes of `lean8-bench
#      gemm` in its order (modes outer, shapes in bench_gemm.c's order);
#   8. tools/device-run.sh ab: this tree, a tree with files laid over it (an
#      incremental build of its own), a tree from a tarball (git archive), a
#      patched tree and an environment, alternated (each round starting one
#      build later), each round a report of its own, and tools/bench_ab.py's
#      table of them; a patch that does not apply, or is missing (the reason
#      printed), left out;
#   9. tools/device-run.sh fortran: one SKIPPED line without the binaries
#      (FORTRAN_BIN); with them (this build's, where gfortran made them) the
#      test on cuda:0 and under memcheck, the example where .data/ is, and no
#      unpacked data left behind;
#  10. tools/device-run.sh racecheck: racecheck, then synccheck, over each
#      suite of RACE_SUITES, a step each;
#  11. tools/device-run.sh trainab (with DATA_DIR): lean8-train of this tree
#      and a patched one, two configurations, two rounds (each round one
#      build later), tools/train_json.py's reports and bench_ab.py's table of
#      them: the same losses in both builds; tools/train_json.py on a log
#      without an epoch line and on bad arguments;
#  12. tools/device-run.sh gpu with GPU_SUITES: the names reach lean8-tests
#      --suites (an unknown one fails the step, naming it).
# Usage: tests/bench.sh BUILD_DIR [DATA_DIR] (run from the repository root)
set -u
build=$(cd "$1" && pwd)
data=${2:-}
bench=$build/bin/lean8-bench
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export L8_DEVICE=host
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "  ok    $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL  $1"; }

# ---- 1. make bench, as documented ----
before=$(cd "$root" && git status --porcelain --ignored 2>/dev/null | grep -v '^!! build/' | sort)
(cd "$root" && timeout 600 make bench) > "$tmp/make.txt" 2>&1; rc=$?
after=$(cd "$root" && git status --porcelain --ignored 2>/dev/null | grep -v '^!! build/' | sort)
if [ $rc = 0 ]; then ok "make bench: exit 0 without a GPU"
else bad "make bench: rc $rc"; tail -5 "$tmp/make.txt"; fi
n=$(grep -c "skipped: needs a CUDA device" "$tmp/make.txt")
if [ "$n" = 2 ]; then ok "make bench: cast and gemm say skipped in one line each"
else bad "make bench: $n 'skipped' lines (want 2: cast, gemm)"; cat "$tmp/make.txt"; fi
if [ "$before" = "$after" ]; then ok "make bench: no file written in the tree"
else bad "make bench wrote into the tree"; diff <(echo "$before") <(echo "$after"); fi

# ---- 2. each subcommand: nothing without --json, a JSON object with it ----
for b in alloc cast gemm linear offload comm ddp trace; do
    d=$tmp/run-$b
    mkdir -p "$d"
    (cd "$d" && timeout 300 "$bench" "$b" --quick) > "$tmp/$b.txt" 2>&1; rc=$?
    left=$(ls -A "$d")
    if [ $rc = 0 ] && [ -z "$left" ]; then ok "$b: exit 0, nothing written without --json"
    else bad "$b: rc $rc, left in cwd: '$left'"; tail -3 "$tmp/$b.txt"; fi
    (cd "$d" && timeout 300 "$bench" "$b" --quick --json "$tmp/$b.json") > /dev/null 2>&1; rc=$?
    if [ $rc != 0 ]; then bad "$b --json: rc $rc"
    elif [ ! -e "$tmp/$b.json" ] && grep -q "skipped" "$tmp/$b.txt"; then
        ok "$b --json: skipped, no file"
    elif python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(j.get("bench") != sys.argv[2])' \
            "$tmp/$b.json" "$b"; then ok "$b --json: a JSON object naming \"$b\""
    else bad "$b --json: not a JSON object naming the benchmark"; head -c 300 "$tmp/$b.json"; fi
done

# ---- 3. bad input ----
"$bench" nosuch > "$tmp/o.txt" 2>&1; rc=$?
if [ $rc != 0 ] && grep -qi "usage\|unknown" "$tmp/o.txt"; then ok "unknown benchmark: rc $rc with usage"
else bad "unknown benchmark: rc $rc"; cat "$tmp/o.txt"; fi
"$bench" alloc --bogus > "$tmp/o.txt" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q -- "--bogus" "$tmp/o.txt"; then ok "unknown flag: rc $rc naming it"
else bad "unknown flag: rc $rc"; cat "$tmp/o.txt"; fi
"$bench" alloc --quick --json "$tmp/missing/dir/x.json" > "$tmp/o.txt" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q "missing/dir/x.json" "$tmp/o.txt"; then ok "unwritable --json: rc $rc naming the path"
else bad "unwritable --json: rc $rc"; cat "$tmp/o.txt"; fi

# ---- 4. tools/ncu_kernels.py (the per-kernel breakdowns in docs/perf.md) on an
# ncu --csv --page raw file as ncu writes it: a header, a units row, one row a launch ----
cat > "$tmp/k.csv" <<'CSV'
==PROF== Connected to process 1
"ID","Process ID","Kernel Name","gpu__time_duration.sum"
"","","","nsecond"
"0","1","l8_cast_transpose_bf16","8,192"
"1","1","nvjet_sm90_tst_64x24(int)","5,000"
"2","1","l8_cast_transpose_bf16","4,000"
CSV
python3 tools/ncu_kernels.py "$tmp/k.csv" 2 > "$tmp/k.txt" 2>&1; rc=$?
if [ $rc = 0 ] && grep -Eq '^l8_cast_transpose_bf16 +2 +12\.2 +6\.10 +6\.1$' "$tmp/k.txt" &&
   grep -Eq '^all +3 +17\.2 +8\.6$' "$tmp/k.txt"; then
    ok "ncu_kernels.py: launches, total, mean and per-step us by kernel"
else bad "ncu_kernels.py: rc $rc"; cat "$tmp/k.txt"; fi
# --launches: a row a launch with the .sum metric columns, units scaled (ns -> us, sectors in M)
cat > "$tmp/l.csv" <<'CSV'
"ID","Process ID","Kernel Name","Grid Size","gpu__time_duration.sum","lts__t_sectors_srcunit_tex_op_read.sum"
"","","","","nsecond","sector"
"0","1","l8_transpose_b8","(4096, 1, 1)","37,280","2,097,152"
"1","1","l8_transpose_b8","(4096, 1, 1)","49,600","2,917,220"
CSV
python3 tools/ncu_kernels.py --launches "$tmp/l.csv" > "$tmp/l.txt" 2>&1; rc=$?
python3 tools/ncu_kernels.py --launches > /dev/null 2>&1; rc2=$?
if [ $rc = 0 ] && [ $rc2 != 0 ] &&
   grep -q '^| kernel | grid | gpu__time_duration.sum (us) | lts__t_sectors_srcunit_tex_op_read.sum (Msector) |$' "$tmp/l.txt" &&
   grep -q '^| l8_transpose_b8 | (4096, 1, 1) | 49.600 | 2.917 |$' "$tmp/l.txt"; then
    ok "ncu_kernels.py --launches: a table row a launch, the .sum metrics, units scaled"
else bad "ncu_kernels.py --launches: rc $rc / $rc2"; cat "$tmp/l.txt"; fi
# the same on ncu's own output (on the H200 machine, CUDA 13.0: `--metrics gpu__time_duration.sum,
# lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum --csv
# --page raw lean8-train ...`, program output between the rows): by kernel; by launch
# the three .sum columns, not the ~250 attributes and .avg/.max/.min ncu adds; named
# metrics, any column
real=tests/ncu_raw_h200.csv
python3 tools/ncu_kernels.py "$real" > "$tmp/r1.txt" 2>&1; rc=$?
python3 tools/ncu_kernels.py --launches "$real" > "$tmp/r2.txt" 2>&1; rc2=$?
python3 tools/ncu_kernels.py --launches "$real" gpu__time_duration.max \
    launch__registers_per_thread > "$tmp/r3.txt" 2>&1; rc3=$?
python3 tools/ncu_kernels.py --launches "$real" lts__no_such.sum > "$tmp/r4.txt" 2>&1; rc4=$?
if [ $rc = 0 ] && [ $rc2 = 0 ] && [ $rc3 = 0 ] && [ $rc4 = 1 ] &&
   grep -Eq '^l8_transpose_b8 +1 +4\.7 +4\.74$' "$tmp/r1.txt" &&
   grep -Eq '^all +4 +21\.6 *$' "$tmp/r1.txt" &&
   grep -qx '| kernel | grid | gpu__time_duration.sum (us) | lts__t_sectors_srcunit_tex_op_read.sum (Msector) | lts__t_sectors_srcunit_tex_op_write.sum (Msector) |' "$tmp/r2.txt" &&
   grep -qx '| l8_cast_transpose_sm_many_f32 | (164, 1, 1) | 6.304 | 0.083 | 0.048 |' "$tmp/r2.txt" &&
   [ "$(wc -l < "$tmp/r2.txt")" = 6 ] &&
   grep -qx '| l8_transpose_b8 | (14, 1, 1) | 4.736 | 80.000 |' "$tmp/r3.txt" &&
   grep -q 'no "lts__no_such.sum" column' "$tmp/r4.txt"; then
    ok "ncu_kernels.py on real ncu output: by kernel; by launch the .sum metrics or those named"
else bad "ncu_kernels.py on real ncu output: rc $rc / $rc2 / $rc3 / $rc4"; cat "$tmp"/r[1-4].txt; fi
# bad input: a missing file, a CSV without the time column: one line naming the
# problem and exit 1, no Python traceback
printf '"ID","Kernel Name"\n"",""\n"0","k"\n' > "$tmp/n.csv"
python3 tools/ncu_kernels.py "$tmp/none.csv" > "$tmp/n1.txt" 2>&1; rc=$?
python3 tools/ncu_kernels.py "$tmp/n.csv" > "$tmp/n2.txt" 2>&1; rc2=$?
if [ $rc = 1 ] && [ $rc2 = 1 ] && ! grep -q Traceback "$tmp/n1.txt" "$tmp/n2.txt" &&
   grep -q 'none.csv: .*No such file' "$tmp/n1.txt" &&
   grep -q 'no "gpu__time_duration.sum" column' "$tmp/n2.txt"; then
    ok "ncu_kernels.py: a missing file or a CSV without the time column: a message, exit 1"
else bad "ncu_kernels.py bad input: rc $rc / $rc2"; cat "$tmp/n1.txt" "$tmp/n2.txt"; fi

# ---- 5. bench_ratio.py: one report a side, and medians of several ----
for k in 1 2 3; do
    echo "{\"device\": \"D\", \"fp8_8x8x16_tflops\": $k.0, \"fp8_8x8x16_tuned_tflops\": 2.0}" > "$tmp/l$k.json"
done
echo '{"fp8_8x8x16_tflops": 2.0, "bf16_8x8x16_tflops": 1.0}' > "$tmp/t1.json"
echo '{"fp8_8x8x16_tflops": 4.0}' > "$tmp/t2.json"
python3 tools/bench_ratio.py "$tmp/l3.json" "$tmp/t1.json" > "$tmp/r1.txt" 2>&1; rc1=$?
python3 tools/bench_ratio.py "$tmp/l1.json,$tmp/l3.json,$tmp/l2.json" "$tmp/t1.json,$tmp/t2.json" \
    > "$tmp/r2.txt" 2>&1; rc2=$?
if [ $rc1 = 0 ] && grep -Eq '^  8x8x16 +fp8 +2\.0 +3\.0 +2\.0 +1\.500 +1\.000$' "$tmp/r1.txt" &&
   [ $rc2 = 0 ] && grep -q 'medians of 3 and 2 runs' "$tmp/r2.txt" &&
   grep -Eq '^  8x8x16 +fp8 +3\.0 +2\.0 +2\.0 +0\.667 +0\.667$' "$tmp/r2.txt" &&
   grep -Eq 'fp8 +geomean lean8/torch 0\.667 \(min 0\.667\)' "$tmp/r2.txt"; then
    ok "bench_ratio.py: ratios from one report a side and from the medians of several"
else bad "bench_ratio.py: rc $rc1 / $rc2"; cat "$tmp/r1.txt" "$tmp/r2.txt"; fi

# ---- 6. device-run.sh gemmcache: one file a round and side, all to the ratios ----
mkdir -p "$tmp/dr"
(cd "$root" && TMPDIR=$tmp/dr OUT=$tmp/dr/out GEMM_ROUNDS=2 DEADLINE=300 \
    bash tools/device-run.sh gemmcache) > "$tmp/dr.txt" 2>&1
drlog=$(ls -d "$tmp"/dr/l8logs.*)
if grep -q '^torch gemm (cache, round 1)' "$tmp/dr.txt" &&
   grep -q '^torch gemm (cache, round 2)' "$tmp/dr.txt" &&
   ! grep -q 'round 3' "$tmp/dr.txt" &&
   [ -f "$drlog/torch-gemm-c-1.log" ] && [ -f "$drlog/torch-gemm-c-2.log" ] &&
   [ -f "$drlog/gemm-cache2-1.log" ] && [ -f "$drlog/gemm-cache2-2.log" ] &&
   grep -q 'bench-gemm-warm-1.json,[^ ]*bench-gemm-warm-2.json' "$drlog/gemm-cache-ratio.log" &&
   [ -f "$tmp/dr/out/logs.tgz" ]; then
    ok "device-run.sh gemmcache: two rounds, a log each side, every report to the ratio step"
else bad "device-run.sh gemmcache's rounds"; tail -20 "$tmp/dr.txt"; fi

# ---- 7. the PyTorch GEMM bench: lean8's shapes and modes, in lean8's order ----
if python3 - "$root/tools/bench_gemm.c" "$root/tools/bench_torch_gemm.py" > "$tmp/order.txt" 2>&1 <<'PY'
import ast, re, sys
c = open(sys.argv[1]).read()
body = lambda name: c[c.index(name):c.index("};", c.index(name))]
shapes = [tuple(int(x) for x in m) for m in
          re.findall(r"\{ *(\d+), *(\d+), *(\d+) *\}", body("k_shapes[][3]"))]
modes = re.findall(r'\{ *"(\w+)"', body("k_modes[]"))
tree = ast.parse(open(sys.argv[2]).read())
py = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
      for t in n.targets if isinstance(t, ast.Name) and t.id in ("SHAPES", "MODES")}
order = [kw.value.value for n in ast.walk(tree) if isinstance(n, ast.Call)
         and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == "--order"
         for kw in n.keywords if kw.arg == "default"]
print("lean8:", shapes, modes, "torch:", py.get("SHAPES"), py.get("MODES"), order)
sys.exit(0 if shapes and modes and [tuple(x) for x in py.get("SHAPES", [])] == shapes
         and py.get("MODES") == modes and order == ["modes"] else 1)
PY
then ok "bench_torch_gemm.py: lean8-bench gemm's shapes and modes, modes outer by default"
else bad "bench_torch_gemm.py and bench_gemm.c disagree"; cat "$tmp/order.txt"; fi

# ---- 8. device-run.sh ab: four variants, two rounds, one table ----
mkdir -p "$tmp/ab/ov" && echo overlay > "$tmp/ab/ov/AB_OVERLAY"
# a whole tree as docs/gpu-machine.md makes one (git archive), else the files without build/
(cd "$root" && { git archive HEAD 2>/dev/null || tar c --exclude=./build --exclude=./.git .; }) \
    > "$tmp/ab/base.tar"
# a patch that applies (a new file), a stale one (its context is not in the
# Makefile) and a missing one: the last two are left out with FAILED(patch)
printf -- '--- /dev/null\n+++ b/AB_PATCHED\n@@ -0,0 +1 @@\n+patched\n' > "$tmp/ab/pt.patch"
printf -- '--- a/Makefile\n+++ b/Makefile\n@@ -1,2 +1,2 @@\n-no such line\n-nor this one\n+x\n+y\n' \
    > "$tmp/ab/stale.diff"
(cd "$root" && TMPDIR=$tmp/ab OUT=$tmp/ab/out \
    AB_TREES="ov=$tmp/ab/ov base=$tmp/ab/base.tar pt=$tmp/ab/pt.patch st=$tmp/ab/stale.diff no=$tmp/ab/no.patch" \
    AB_ENVS="e:L8_AB_TEST=1" \
    AB_BENCH=alloc AB_ROUNDS=2 AB_KEYS='^pair_ns_lean8_512$' DEADLINE=300 \
    bash tools/device-run.sh ab) > "$tmp/ab.txt" 2>&1
ablog=$(ls -d "$tmp"/ab/l8logs.*)
n=$(ls "$ablog"/ab-{this,ov,base,pt,e}-[12].json 2>/dev/null | wc -l)
f='[0-9.]+/[0-9.]+ +'
if [ "$n" = 10 ] && grep -q '^ab build ov  *ok' "$tmp/ab.txt" && grep -q '^ab build base  *ok' "$tmp/ab.txt" &&
   grep -q '^ab build pt  *ok' "$tmp/ab.txt" && grep -Eq '^ab tree st +FAILED\(patch\)' "$tmp/ab.txt" &&
   grep -Eq '^ab tree no +FAILED\(patch\)' "$tmp/ab.txt" && grep -q 'no\.patch: No such file' "$tmp/ab.txt" && ! grep -Eq '^ab (build )?(st|no) ' "$tmp/ab.txt" &&
   grep -Eq '^key +this +ov +base +pt +e +ov/this +base/this +pt/this +e/this$' "$tmp/ab.txt" &&
   grep -Eq "^pair_ns_lean8_512 +$f$f$f$f$f[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+\$" "$tmp/ab.txt" &&
   [ "$(grep -Eo '^ab [a-z]+ #[12]' "$tmp/ab.txt" | tr '\n' ' ')" = \
     "ab this #1 ab ov #1 ab base #1 ab pt #1 ab e #1 ab ov #2 ab base #2 ab pt #2 ab e #2 ab this #2 " ] &&
   ! ls -d "$tmp"/ab/l8ab.* > /dev/null 2>&1 && [ ! -e "$root/AB_PATCHED" ]; then
    ok "device-run.sh ab: this tree, an overlaid one, a tarball's, a patched one and an environment (each round one later), one table; a stale and a missing patch left out"
else bad "device-run.sh ab ($n reports)"; tail -20 "$tmp/ab.txt"; fi

# ---- 9. device-run.sh fortran: skipped without the binaries, else each one run ----
(cd "$root" && TMPDIR=$tmp OUT=$tmp/fo-out1 FORTRAN_BIN=$tmp/no-fbin DEADLINE=300 \
    bash tools/device-run.sh fortran) > "$tmp/fo1.txt" 2>&1
if grep -Eq "^fortran +SKIPPED\(no $tmp/no-fbin: make device-fortran\)" "$tmp/fo1.txt" &&
   ! grep -q '^fortran test' "$tmp/fo1.txt"; then
    ok "device-run.sh fortran without binaries: one SKIPPED line naming make device-fortran"
else bad "device-run.sh fortran without binaries"; tail -20 "$tmp/fo1.txt"; fi
if [ -x "$build/bin/lean8-fortran-test" ] && [ -x "$build/bin/fmnist_mlp" ]; then
    mkdir -p "$tmp/fbin" "$tmp/fo2" && cp "$build/bin/lean8-fortran-test" "$build/bin/fmnist_mlp" "$tmp/fbin/" &&
        echo bench-sh > "$tmp/fbin/built_from"
    (cd "$root" && TMPDIR=$tmp/fo2 OUT=$tmp/fo-out2 FORTRAN_BIN=$tmp/fbin DEADLINE=300 \
        bash tools/device-run.sh fortran) > "$tmp/fo2.txt" 2>&1
    folog=$(ls -d "$tmp"/fo2/l8logs.*)
    # on cuda:0: every check passes on a GPU, and without one the test stops at once
    if grep -q '^== fortran: binaries built from bench-sh$' "$tmp/fo2.txt" &&
       grep -q '^fortran test (cuda:0) ' "$tmp/fo2.txt" && grep -q '^fortran test (memcheck) ' "$tmp/fo2.txt" &&
       grep -Eq 'Fortran test on |FAIL  no context' "$folog/fortran.log" &&
       ! grep -q 'Fortran test on host' "$folog/fortran.log" &&
       if [ -d "$root/.data" ]; then grep -q '^fmnist_mlp (cuda:0) ' "$tmp/fo2.txt"
       else ! grep -q '^fmnist_mlp' "$tmp/fo2.txt"; fi &&
       ! ls -d "$tmp"/fo2/l8fm.* > /dev/null 2>&1; then
        ok "device-run.sh fortran: the test on cuda:0, under memcheck, and the example where .data is"
    else bad "device-run.sh fortran with binaries"; tail -20 "$tmp/fo2.txt"; fi
else echo "  skip  device-run.sh fortran with binaries: no gfortran here, none were built"; fi

# ---- 10. device-run.sh racecheck: each tool over each suite, a step each ----
(cd "$root" && TMPDIR=$tmp OUT=$tmp/rc-out RACE_SUITES="fp8 gpu" DEADLINE=300 \
    bash tools/device-run.sh racecheck) > "$tmp/rc.txt" 2>&1
if [ "$(grep -Eo '^(racecheck|synccheck) [a-z0-9]+ ' "$tmp/rc.txt" | tr '\n' '|')" = \
     "racecheck fp8 |racecheck gpu |synccheck fp8 |synccheck gpu |" ]; then
    ok "device-run.sh racecheck: racecheck then synccheck over RACE_SUITES, a step each"
else bad "device-run.sh racecheck's steps"; tail -20 "$tmp/rc.txt"; fi

# ---- 11. device-run.sh trainab: two builds, two configurations, two rounds ----
if [ -n "$data" ]; then
    mkdir -p "$tmp/ta"            # the patched tree: part 8's patch
    (cd "$root" && TMPDIR=$tmp/ta OUT=$tmp/ta/out AB_TREES="pt=$tmp/ab/pt.patch" AB_ROUNDS=2 \
        TRAIN_AB_DATA=$data TRAIN_AB="--hidden 32 --batch 64;--hidden 32 --batch 64 --bf16" \
        TRAIN_AB_ARGS="--limit 1000 --epochs 1" DEADLINE=300 \
        bash tools/device-run.sh trainab) > "$tmp/ta.txt" 2>&1
    talog=$(ls -d "$tmp"/ta/l8logs.*)
    n=$(ls "$talog"/trainab-{this,pt}-[12].json 2>/dev/null | wc -l)
    same() {  # the row of KEY: both builds' two rounds one value, the ratio 1.000
        grep -Eq "^$1 +([0-9.]+)/\1 +\1/\1 +1\.000\$" "$tmp/ta.txt"
    }
    if [ "$n" = 4 ] && grep -q '^trainab build pt  *ok' "$tmp/ta.txt" &&
       grep -q '^   c1: --hidden 32 --batch 64 --bf16$' "$tmp/ta.txt" &&
       [ "$(grep -Eo '^trainab [a-z]+ c[01] #[12]' "$tmp/ta.txt" | tr '\n' ' ')" = \
         "trainab this c0 #1 trainab pt c0 #1 trainab this c1 #1 trainab pt c1 #1 trainab pt c0 #2 trainab this c0 #2 trainab pt c1 #2 trainab this c1 #2 " ] &&
       grep -Eq '^key +this +pt +pt/this$' "$tmp/ta.txt" &&
       grep -Eq '^c1_million_images_per_s +[0-9.]+/[0-9.]+ +[0-9.]+/[0-9.]+ +[0-9.]+$' "$tmp/ta.txt" &&
       same c0_loss && same c0_test_acc && same c1_loss && same c1_test_acc &&
       grep -Eq "^c1_loss +$(awk '$2 == "epoch" { l = $5 } END { printf "%.3f", l }' \
           "$talog/trainab-pt-c1-2.log")/" "$tmp/ta.txt" &&
       ! grep -q '_failed' "$tmp/ta.txt" && ! ls -d "$tmp"/ta/l8ab.* > /dev/null 2>&1; then
        ok "device-run.sh trainab: this tree and a patched one alternated over two configurations and rounds, one table, the same losses"
    else bad "device-run.sh trainab ($n reports)"; tail -25 "$tmp/ta.txt"; fi
else echo "  skip  device-run.sh trainab: no DATA_DIR"; fi
echo "nothing here" > "$tmp/noepoch.log"
python3 tools/train_json.py "$tmp/tj.json" c0="$tmp/noepoch.log" > "$tmp/tj.txt" 2>&1; rc1=$?
python3 tools/train_json.py "$tmp/tj2.json" nolabel > /dev/null 2>&1; rc2=$?
if [ $rc1 = 0 ] && grep -q 'no epoch line' "$tmp/tj.txt" && grep -q '"c0_failed": 1' "$tmp/tj.json" &&
   [ $rc2 = 2 ] && [ ! -e "$tmp/tj2.json" ]; then
    ok "train_json.py: a log without an epoch line is reported failed; bad arguments exit 2"
else bad "train_json.py: rc $rc1 / $rc2"; cat "$tmp/tj.txt"; fi

# ---- 12. device-run.sh gpu: GPU_SUITES reaches lean8-tests --suites ----
mkdir -p "$tmp/gs"
(cd "$root" && TMPDIR=$tmp/gs OUT=$tmp/gs/out GPU_SUITES=linear,nosuch DEADLINE=300 \
    bash tools/device-run.sh gpu) > "$tmp/gs.txt" 2>&1
if grep -Eq '^gpu suites +FAILED\(2\)' "$tmp/gs.txt" &&
   grep -q 'no suite "nosuch"' "$tmp"/gs/l8logs.*/gpu.log; then
    ok "device-run.sh gpu: GPU_SUITES handed to lean8-tests --suites (an unknown suite refused)"
else bad "device-run.sh gpu with GPU_SUITES"; tail -20 "$tmp/gs.txt"; fi

# every flag --help names is in the README, and every benchmark --help lists
"$bench" --help > "$tmp/help.txt" 2>&1
undoc=$("$(dirname "$0")/doc_flags.sh" "$bench" "$(dirname "$0")/../README.md") || undoc="(--help names no flag) "
for b in $(awk '/^  [a-z]+ /{print $1}' "$tmp/help.txt"); do
    grep -qE "\`(lean8-bench )?$b\`" "$(dirname "$0")/../README.md" || undoc="$undoc$b "
done
[ -z "$undoc" ] && ok "README names every lean8-bench flag and benchmark" \
    || bad "lean8-bench flags or benchmarks missing from README.md: $undoc"

echo "bench: $pass passed, $fail failed"
[ $fail = 0 ]
