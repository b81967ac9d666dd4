#!/bin/bash
# sass.sh - tools/sass.py (make test-sass): its summary of a made-up
# cuobjdump -sass listing (memory instructions by kind, load batches, one
# entry picked), clear errors for bad input, and README's command: through
# ptxas and cuobjdump where cuobjdump (with nvdisasm) is on PATH, in
# CUDA_HOME/bin or in $CUOBJDUMP, else its message saying where to get it.
# Usage: tests/sass.sh
set -u
sp="python3 $(dirname "$0")/../tools/sass.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "  ok    $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL  $1"; }

# entry k1: loads in batches 2 (an ALU op and a shuffle between them do not
# end a batch), 1 (a predicated load), then 3 after a barrier; entry k2: one
# load, a local (spill) load, one load
cat > "$tmp/d.sass" <<'S'
	code for sm_90
		Function : k1
	.headerflags	@"EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000e220000000800 */
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;  /* 0x0 */
        /*0020*/                   IMAD R8, R3, 0x4, R1 ;                 /* 0x0 */
        /*0030*/                   SHFL.IDX PT, R9, R8, RZ, 0x1f ;        /* 0x0 */
        /*0040*/                   LDG.E.128.CONSTANT R12, desc[UR4][R2.64+0x10] ;  /* 0x0 */
        /*0050*/                   STG.E.64 desc[UR4][R6.64], R4 ;        /* 0x0 */
        /*0060*/               @P0 LDG.E.U16.CONSTANT R5, desc[UR4][R2.64] ;  /* 0x0 */
        /*0070*/                   STS.64 [R0], R4 ;                      /* 0x0 */
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;          /* 0x0 */
        /*0090*/                   LDG.E R5, desc[UR4][R2.64] ;           /* 0x0 */
        /*00a0*/                   LDG.E R6, desc[UR4][R2.64+0x4] ;       /* 0x0 */
        /*00b0*/                   LDG.E R7, desc[UR4][R2.64+0x8] ;       /* 0x0 */
        /*00c0*/              @!P1 BRA 0x10 ;                             /* 0x0 */
        /*00d0*/                   EXIT ;                                 /* 0x0 */
		..........
		Function : k2
        /*0000*/                   LDG.E R5, desc[UR4][R2.64] ;           /* 0x0 */
        /*0010*/                   LDL R6, [R1] ;                         /* 0x0 */
        /*0020*/                   LDG.E R7, desc[UR4][R2.64] ;           /* 0x0 */
        /*0030*/                   EXIT ;                                 /* 0x0 */
S
cat > "$tmp/want.txt" <<'W'
k1: 14 instructions
  LDG     6  (LDG.E 3, LDG.E.128.CONSTANT 2, LDG.E.U16.CONSTANT 1)
  STG     1  (STG.E.64 1)
  STS     1  (STS.64 1)
  BAR     1  (BAR.SYNC.DEFER_BLOCKING 1)
  load batches (3): 2 1 3
k2: 4 instructions
  LDG     2  (LDG.E 2)
  LDL     1  (LDL 1)
  load batches (2): 1 1
W
if $sp --sass "$tmp/d.sass" > "$tmp/got.txt" 2>&1 && cmp -s "$tmp/want.txt" "$tmp/got.txt"; then
    ok "the summary of a listing (kinds, counts, load batches) for every entry"
else bad "summary differs"; diff "$tmp/want.txt" "$tmp/got.txt"; fi
if $sp --sass "$tmp/d.sass" --entry k2 > "$tmp/got.txt" 2>&1 && grep -q '^k2: 4 instructions' "$tmp/got.txt" &&
   ! grep -q '^k1' "$tmp/got.txt"; then ok "--entry k2 prints that entry alone"
else bad "--entry k2"; cat "$tmp/got.txt"; fi
# --base: a second build where k1 loses its shared store and barrier (its
# batches 2 1 3 become 2 4) and spills once, k2 is the same code, k3 is new
sed -e '/STS.64/d' -e '/BAR.SYNC/d' -e 's#/\*00d0\*/                   EXIT#/*00d0*/                   STL [R1], R5 ;  /* 0x0 */\n        /*00e0*/                   EXIT#' \
    "$tmp/d.sass" > "$tmp/n.sass"
printf '\t\tFunction : k3\n        /*0000*/                   EXIT ;  /* 0x0 */\n' >> "$tmp/n.sass"
cat > "$tmp/want_b.txt" <<'W'
k1: instructions 14 -> 13, spill instructions 0 -> 1
  load batches: base 2 1 3
                this 2 4
k2: the same code: instructions 4, spill instructions 1
  load batches: 1 1 (unchanged)
k3: only in this build
W
if $sp --sass "$tmp/n.sass" --base "$tmp/d.sass" > "$tmp/got.txt" 2>&1 && cmp -s "$tmp/want_b.txt" "$tmp/got.txt"; then
    ok "--base: changed batches and spills, the same code, an entry only in one build"
else bad "--base differs"; diff "$tmp/want_b.txt" "$tmp/got.txt"; fi
if $sp --sass "$tmp/n.sass" --base "$tmp/d.sass" --entry k2 > "$tmp/got.txt" 2>&1 &&
   [ "$(head -1 "$tmp/got.txt")" = "k2: the same code: instructions 4, spill instructions 1" ] &&
   [ "$(wc -l < "$tmp/got.txt")" = 2 ]; then ok "--base --entry k2 compares that entry alone"
else bad "--base --entry k2"; cat "$tmp/got.txt"; fi
# errors: a message naming the problem, exit 1, no traceback
echo "hello" > "$tmp/junk.txt"
for c in "--sass $tmp/none.txt:No such file" "--sass $tmp/junk.txt:no SASS functions" \
         "--sass $tmp/d.sass --entry k9:no entry k9 (entries: k1, k2)" "$tmp/none.ptx:No such file" \
         "--bogus:unknown option --bogus" "--sass $tmp/d.sass --entry:--entry wants a kernel name" \
         "--sass $tmp/d.sass --base $tmp/none.txt:No such file" "--sass $tmp/d.sass --base:--base wants a file" \
         "--sass $tmp/n.sass --base $tmp/d.sass --entry k3:no entry k3 in both (entries in both: k1, k2)"; do
    args=${c%%:*}; want=${c#*:}
    $sp $args > "$tmp/o.txt" 2>&1; rc=$?
    if [ $rc = 1 ] && grep -q -- "$want" "$tmp/o.txt" && ! grep -q Traceback "$tmp/o.txt"; then ok "$(basename -- "${args##* }"): '$want', exit 1"
    else bad "$args: exit $rc"; cat "$tmp/o.txt"; fi
done
# README's command as written (from the repository root): a summary of the
# entry where cuobjdump is found, else exit 1 saying where to get it
readme=$(grep -o 'python3 tools/sass.py ptx/[^`]*' "$(dirname "$0")/../README.md" | head -1)
if [ -z "$readme" ]; then bad "README.md gives no tools/sass.py command"
elif (cd "$(dirname "$0")/.." && $readme) > "$tmp/real.txt" 2> "$tmp/real.err"; then
    if grep -q '^l8_cast_fp8: [0-9]* instructions, [0-9]* registers' "$tmp/real.txt" &&
       grep -q 'load batches' "$tmp/real.txt"; then ok "README's '$readme' through ptxas and cuobjdump"
    else bad "README's '$readme': unexpected summary"; cat "$tmp/real.txt"; fi
elif grep -q 'cuobjdump not found.*nvidia-cuda-nvdisasm' "$tmp/real.err"; then
    ok "README's '$readme' without cuobjdump: exit 1 naming the wheels that carry it"
else bad "README's '$readme'"; cat "$tmp/real.err"; fi
echo "sass: $pass passed, $fail failed"
[ $fail = 0 ]
