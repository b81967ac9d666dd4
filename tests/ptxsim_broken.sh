#!/bin/bash
# Each ptxsim kernel test (tests/ptxsim_*.py) over a copy of its module with one
# instruction broken: it must report failing cases (a test that cannot fail checks
# nothing). Run by make test-ptxsim after the tests themselves.
#   tests/ptxsim_broken.sh BUILD
set -u
B=${1:-build}
fails=0
# broken NAME TEST MODULE OLD NEW [TEST ARGS]: OLD's first occurrence in the
# module (a path) replaced by NEW
broken() {
    local name=$1 test=$2 mod=$3 old=$4 new=$5
    shift 5
    local out=$B/ptxsim_broken_$name.ptx
    if ! python3 - "$mod" "$out" "$old" "$new" <<'PY'
import sys
src, dst, old, new = sys.argv[1:]
s = open(src).read()
if old not in s:
    sys.exit(1)
open(dst, 'w').write(s.replace(old, new, 1))
PY
    then
        echo "ptxsim_broken: '$old' is not in $mod (update tests/ptxsim_broken.sh)"
        fails=1
        return
    fi
    if python3 "$test" --ptx "$out" "$@" > "$out.log" 2>&1; then
        echo "ptxsim_broken: $test passed on a broken $mod ($name; $out.log)"
        fails=1
    elif ! grep -q '^FAIL' "$out.log"; then
        echo "ptxsim_broken: $test did not run its cases on the broken $mod ($out.log)"
        fails=1
    else
        echo "  PTXSIM  $test fails on a broken $(basename "$mod") ($name)"
    fi
}
# the e5m2 test of the first strip entry taken for e4m3's
broken fmt tests/ptxsim_strip.py $B/ptx/cast_transpose_strip.ptx \
    'setp.eq.u32     %pe5, %r1, 4;' 'setp.eq.u32     %pe5, %r1, 3;' --quick --only plain
# the byte transpose's double buffer made single (a CTA walking several tiles races)
broken buffer tests/ptxsim_transpose.py $B/ptx/transpose.ptx \
    'xor.b32         %buf, %buf, 18432;' 'xor.b32         %buf, %buf, 0;' --quick --only grid
# l8_dbias_reduce's 16 rows a round made 15
broken reduce tests/ptxsim_tile.py $B/ptx/cast_transpose.ptx \
    'add.u32         %r8, %r8, 16;' 'add.u32         %r8, %r8, 15;' --only 2100
# the scalar path's amax keeps the sign bit
broken amax tests/ptxsim_cast.py ptx/cast.ptx \
    'and.b32         %r16, %r16, 2147483647;' 'and.b32         %r16, %r16, -1;' \
    --quick --only in+2
# l8_amax_zero's thread past the count zeroes the slot after the last
broken zero tests/ptxsim_cast.py ptx/cast.ptx \
    'setp.ge.u32     %p1, %r1, %r2;' 'setp.gt.u32     %p1, %r1, %r2;' --quick --only amax_zero
# the interleave's ranks at the wrong stride (an all-gather along the wrong dimension)
broken stride tests/ptxsim_interleave.py $B/ptx/interleave.ptx \
    'mad.lo.u64      %rd8, %rd5, %rd4, %rd2;' 'mad.lo.u64      %rd8, %rd5, %rd3, %rd2;' \
    --quick --only w8
# the row gather's index check inverted
broken idx tests/ptxsim_gather.py ptx/gather.ptx \
    'selp.b64        %rd17, %rd16, 0, %p8;' 'selp.b64        %rd17, 0, %rd16, %p8;' \
    --quick --fuzz 0
# the dequantize's e5m2 test taken for e4m3's
broken fmt8 tests/ptxsim_dequantize.py ptx/dequantize.ptx \
    'setp.eq.u32     %pe5, %r1, 4;' 'setp.eq.u32     %pe5, %r1, 3;' --quick --fuzz 0
# the small GEMM's warps stepping over K by 3 chunks a round where they take 2 (a warp
# loops only where K spans more than 8 chunks of 64 bytes)
broken kloop tests/ptxsim_gemm.py $B/ptx/gemm_small.ptx \
    'add.u32         %r20, %r20, 8;' 'add.u32         %r20, %r20, 12;' --quick --fuzz 0
exit $fails
