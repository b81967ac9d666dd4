#!/bin/sh
# doc_flags.sh - the flags a tool's --help names that a doc does not: prints
# them on one line (an empty line when all are documented) and exits 0;
# exits 1 when --help names no flag at all (the tool is broken, not the doc).
# With --both, also the flags the doc names that --help does not, after
# "only in the doc:".
#   tests/doc_flags.sh [--both] BIN DOC     (the trace, launcher, train and bench scripts)
set -eu
both=0
[ "$1" = --both ] && { both=1; shift; }
tmp=${TMPDIR:-/tmp}/doc_flags.$$
trap 'rm -f "$tmp".*' EXIT
flags() { grep -oE -- '--[a-z][a-z0-9-]*' | sort -u; }
"$1" --help 2>&1 | flags > "$tmp.help"
flags < "$2" > "$tmp.doc"
[ -s "$tmp.help" ] || exit 1
out=$(comm -23 "$tmp.help" "$tmp.doc" | tr '\n' ' ')
extra=$(comm -13 "$tmp.help" "$tmp.doc" | tr '\n' ' ')
[ $both = 1 ] && [ -n "$extra" ] && out="${out}only in the doc: $extra"
echo "$out"
