# ptx_pdl.awk - every kernel entry of the given PTX files must begin with
# griddepcontrol.wait: lean8 launches its kernels with programmatic
# dependent launch (runtime/ctx.c), so a kernel may start while the one
# before it on the stream still runs, and nothing may touch memory before
# that wait. The first statement of each entry body after its declarations
# (.reg, .shared, .local; comments and blank lines skipped) must be it.
# Prints each offending entry and exits 1; prints the count and exits 0.
#
#   awk -f tests/ptx_pdl.awk build/ptx/*.ptx ptx/*.ptx
/\.entry[ \t]/ {
    entry = $0; sub(/.*\.entry[ \t]+/, "", entry); sub(/\(.*/, "", entry)
    where = FILENAME ":" FNR; state = 1; n++; next
}
state == 1 && /^[ \t]*\{[ \t]*$/ { state = 2; next }
state == 2 {
    line = $0; sub(/\/\/.*/, "", line); gsub(/^[ \t]+|[ \t]+$/, "", line)
    if (line == "" || line ~ /^\.(reg|shared|local)[ \t]/) next
    if (line !~ /^griddepcontrol\.wait;/) {
        printf "%s: entry %s: first statement is \"%s\", not griddepcontrol.wait\n", where, entry, line
        bad++
    }
    state = 0
}
END {
    if (n == 0) { print "ptx_pdl: no kernel entry found"; exit 1 }
    if (bad) exit 1
    printf "  PDL     %d kernel entries begin with griddepcontrol.wait\n", n
}
