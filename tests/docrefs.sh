#!/bin/sh
# docrefs.sh - what the user docs (README.md and docs/, the performance log
# aside: it is history) point at exists in the tree:
#   - every l8_ / L8_ name: a public header, the Fortran module, or the
#     sources (environment variables, kernels); a name ending in _ is a
#     prefix ("the l8_event_* calls");
#   - every path of a source, script or doc file (runtime/..., ptx/..., ...);
#   - every entry that docs/perf.md's table "Where the targets stand" cites
#     ("2026-12-01 (afternoon)", or "2026-12-01, allocator" for the heading
#     "2026-12-01 — allocator: ...") is the start of one of its headings.
# Catches docs that still name a renamed or removed function, constant,
# variable or file.
# Usage: tests/docrefs.sh   (from the repository root; run by make test-abi)
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
ls docs/*.md docs/api/*.md README.md | grep -v '^docs/perf\.md$' |
    xargs grep -ohE '\b(ptx|ops|runtime|alloc|tools|tests|examples|docs)/[A-Za-z0-9_./-]+\.(c|h|ptx|in|inc|sh|py|f90|awk|mk|md)\b' |
    sort -u > "$tmp.paths"
gone=$(while read -r f; do [ -e "$f" ] || printf '%s ' "$f"; done < "$tmp.paths")
if [ -n "$gone" ]; then
    echo "  FAIL  the docs name files the tree does not have: $gone"
    exit 1
fi
echo "  DOCS    the $(wc -l < "$tmp.paths") file paths the docs give all exist"
# the standing table's last column, each a heading of the log below it
awk '/^## Where the targets stand/{t=1; next} t && /^## /{exit} t && /^\| / && !/^\| target/ && !/^\|---/' \
    docs/perf.md | awk -F'|' '{gsub(/^ +| +$/, "", $(NF-1)); print $(NF-1)}' > "$tmp.cites"
nc=$(wc -l < "$tmp.cites")
uncited=$(while read -r c; do
    h=$(printf '%s' "$c" | sed 's/, / — /')
    grep -qF -- "## $h" docs/perf.md || printf '"%s" ' "$c"
done < "$tmp.cites")
if [ "$nc" -lt 1 ] || [ -n "$uncited" ]; then
    echo "  FAIL  docs/perf.md's standing table cites no entry or entries it lacks: $uncited"
    exit 1
fi
echo "  DOCS    the $nc rows of perf.md's standing table cite entries it has"
