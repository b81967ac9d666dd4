#!/bin/sh
# fortran_consts.sh - every named constant of the Fortran module (the
# `integer(c_int), parameter` lines of runtime/lean8.f90, continuation lines
# joined) against the C enum or macro of the same name: a C file of
# _Static_asserts compiled against the umbrella header, so a value copied
# wrong (or a name the C side lacks) fails the build of the check.
# Usage: tests/fortran_consts.sh CC [CPPFLAGS...]   (run by make test-fortran)
set -eu
cc=$1; shift
tmp=${TMPDIR:-/tmp}/lean8-fortran-consts.$$
trap 'rm -f "$tmp.c"' EXIT
awk '
    { line = line $0 }
    /&[ \t]*$/ { sub(/&[ \t]*$/, "", line); next }
    {
        if (line ~ /^[ \t]*integer[^!]*parameter[^!]*::/) {
            sub(/^[^:]*::/, "", line); sub(/!.*/, "", line)
            n = split(line, parts, ",")
            for (i = 1; i <= n; i++) {
                if (split(parts[i], kv, "=") != 2) continue
                gsub(/[ \t]/, "", kv[1]); gsub(/[ \t]/, "", kv[2]); sub(/_c_int$/, "", kv[2])
                if (kv[1] !~ /^L8_/) continue
                printf "_Static_assert((long long)(%s) == %s, \"lean8.f90: %s = %s differs from C\");\n", \
                    kv[1], kv[2], kv[1], kv[2]
                count++
            }
        }
        line = ""
    }
    END { printf "int l8_fortran_consts_checked = %d;\n", count }
' runtime/lean8.f90 > "$tmp.c"
n=$(sed -n 's/^int l8_fortran_consts_checked = \([0-9]*\);/\1/p' "$tmp.c")
[ "$n" -gt 0 ] || { echo "  FAIL  no constants found in runtime/lean8.f90"; exit 1; }
"$cc" -std=c11 -fsyntax-only "$@" -include runtime/lean8.h "$tmp.c"
echo "  CONSTS  lean8.f90: $n named constants equal to the C enums and macros"
