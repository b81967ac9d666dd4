#!/bin/bash
# abi.sh - the exported ABI of liblean8.so (make test-abi):
#   1. the soname is liblean8.so.0;
#   2. only l8_ names are exported (no l8i_ internal, no other name);
#   3. every exported l8_ name is declared in an installed header;
#   4. every exported function has an entry in the API reference (docs/api/),
#      naming each one that lacks it.
# Usage: tests/abi.sh LIB.so HEADER... (the installed headers, the umbrella's set)
set -u
so=$1; shift
fail=0
bad() { fail=1; echo "  FAIL  $1"; }

soname=$(objdump -p "$so" | awk '/SONAME/ {print $2}')
[ "$soname" = liblean8.so.0 ] || bad "soname is '$soname', wanted liblean8.so.0"

syms=$(nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//' | sort -u)
others=$(echo "$syms" | grep -v '^l8_' || true)
[ -z "$others" ] || bad "liblean8.so exports names outside l8_ (hide them; runtime/lean8.map):
$others"

funcs=$(nm -D --defined-only "$so" | awk '$2 == "T" {print $3}' | sed 's/@.*//' | sort -u)
ndoc=0
for s in $(echo "$syms" | grep '^l8_'); do
    # the header that declares it (a line at column 0 naming it), else any mention
    hdr=$(grep -lE -- "^[^ /].*\\b$s\\b" "$@" 2>/dev/null | head -1)
    [ -n "$hdr" ] || hdr=$(grep -lw -- "$s" "$@" 2>/dev/null | head -1)
    if [ -z "$hdr" ]; then bad "$s is exported but declared in no installed header"; continue; fi
    if echo "$funcs" | grep -qx -- "$s"; then
        if ! grep -rqw -- "$s" docs/api/; then
            bad "$s (declared in $hdr) has no entry in docs/api/ (add it to docs/api/$(basename "$hdr" .h).md; tools/apidoc.py writes a page from the header comments)"
        else ndoc=$((ndoc + 1)); fi
    fi
done
[ "$fail" = 0 ] || exit 1
echo "  ABI     liblean8.so.0: $(echo "$syms" | wc -l) l8_ names exported, no internals; $ndoc functions documented in docs/api/"
