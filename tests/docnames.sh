#!/bin/sh
# docnames.sh - every l8_ / L8_ name the user docs mention (README.md and
# docs/, the performance log aside: it is history) exists in the tree: a
# public header, the Fortran module, or the sources (environment variables,
# kernels). A name ending in _ is a prefix ("the l8_event_* calls"). Catches
# docs that still name a renamed or removed function, constant or variable.
# Usage: tests/docnames.sh   (from the repository root; run by make test-abi)
set -eu
tmp=${TMPDIR:-/tmp}/lean8-docnames.$$
trap 'rm -f "$tmp".*' EXIT
cat runtime/*.h runtime/*.c runtime/*.f90 ops/*.h ops/*.c alloc/*.h alloc/*.c tools/*.c \
    tools/*.h ptx/*.ptx ptx/*.in ptx/*.inc examples/*.c examples/*.f90 2>/dev/null |
    grep -oE '\b[lL]8_[A-Za-z0-9_]+' | sort -u > "$tmp.known"
ls docs/*.md docs/api/*.md README.md | grep -v '^docs/perf\.md$' |
    xargs grep -ohE '\b[lL]8_[A-Za-z0-9_]+' | grep -v '_$' | sort -u > "$tmp.used"
missing=$(comm -23 "$tmp.used" "$tmp.known" | tr '\n' ' ')
n=$(wc -l < "$tmp.used")
if [ -n "$missing" ]; then
    echo "  FAIL  the docs name what the tree does not have: $missing"
    grep -rnwE "$(echo $missing | tr ' ' '|')" README.md docs --include=*.md | grep -v '^docs/perf\.md' | head -20
    exit 1
fi
echo "  DOCS    the $n l8_/L8_ names the docs use all exist in the tree"
