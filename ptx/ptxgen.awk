# ptxgen.awk - expands a PTX template (ptx/<name>.ptx.in) into plain PTX
# (build/ptx/<name>.ptx). POSIX awk (mawk, gawk, busybox): the build needs
# nothing but awk to turn one hand-written source per kernel family into
# its per-dtype entries and unrolled loops.
#
#   awk -f ptx/ptxgen.awk ptx/cast_transpose.ptx.in > build/ptx/cast_transpose.ptx
#
# Template language (directive lines may be indented; they emit nothing):
#   @for NAME in w1 w2 ...    repeat the block once per word (NAME = word)
#   @for NAME = A to B        repeat the block for NAME = A, A+1, ..., B
#   @if EXPR / @elif EXPR / @else
#   @end                      closes @for and @if
#   @set NAME = EXPR
#   @def NAME ... @end        a named block, emitted only where it is called
#   @call NAME                emit block NAME here, with the variables of now
#   @// text                  a comment of the template, not emitted
#   @include FILE             the lines of FILE (a path relative to the including
#                             file's directory; nested includes allowed, depth <= 8),
#                             read before anything is expanded
# Any other line is emitted with every ${EXPR} replaced by its value.
# EXPR: integers, "strings", variable names, ( ), unary - !, * / % (integer),
# + -, == != < <= > >=, && ||. == and != compare as numbers when both sides
# are numbers, else as strings. An unknown variable is an error. PTX's own
# '@%p' / '@!%p' predicates never start with a directive word, so they pass
# through untouched.
#
# Errors go to stderr as FILE:LINE: message, and awk exits 1 (make then
# deletes the partial output, .DELETE_ON_ERROR).

function fail(msg, ln) {
    if (ln in SRC) printf "%s: %s\n", SRC[ln], msg > "/dev/stderr"
    else printf "%s:%d: %s\n", FILENAME_, ln, msg > "/dev/stderr"
    failed = 1
    exit 1
}

# An error at a place given as FILE:LINE.
function fail_at(where, msg) {
    printf "%s: %s\n", where, msg > "/dev/stderr"
    failed = 1
    exit 1
}

# Append one template line and where it came from.
function add_line(text, where) {
    L[++nl] = text
    SRC[nl] = where
}

# @include: the file's lines in place of the directive (recursively).
function include_file(spec, from, depth,    path, dir, line, n, r, t) {
    path = spec
    sub(/^[ \t]+/, "", path)
    sub(/[ \t]+$/, "", path)
    if (path == "") fail_at(from, "@include needs a file name")
    if (path !~ /^\//) {
        dir = from
        sub(/:[0-9]+$/, "", dir)
        if (dir ~ /\//) { sub(/\/[^\/]*$/, "", dir); path = dir "/" path }
    }
    if (depth > 8) fail_at(from, "@include nested too deeply at " path)
    n = 0
    while ((r = (getline line < path)) > 0) {
        n++
        t = line
        sub(/^[ \t]+/, "", t)
        if (t ~ /^@include([ \t]|$)/) include_file(substr(t, 9), path ":" n, depth + 1)
        else add_line(line, path ":" n)
    }
    if (r < 0) fail_at(from, "cannot read @include file " path)
    close(path)
}

# ---- expressions -----------------------------------------------------------
function tokenize(s, ln,    n, c, t) {
    n = 0
    while (length(s) > 0) {
        c = substr(s, 1, 1)
        if (c == " " || c == "\t") { s = substr(s, 2); continue }
        if (match(s, /^[0-9]+/) || match(s, /^[A-Za-z_][A-Za-z_0-9]*/) ||
            match(s, /^"[^"]*"/) || match(s, /^(==|!=|<=|>=|&&|\|\|)/) ||
            match(s, /^[-+*\/%()<>!]/)) {
            tok[++n] = substr(s, 1, RLENGTH)
            s = substr(s, RLENGTH + 1)
            continue
        }
        fail("bad character '" c "' in expression", ln)
    }
    ntok = n
    tpos = 1
    return n
}
function isnum(v) { return v ~ /^-?[0-9]+$/ }
function peek() { return tpos <= ntok ? tok[tpos] : "" }
function eval(s, ln,    v) {
    eln = ln
    if (tokenize(s, ln) == 0) fail("empty expression", ln)
    v = p_or()
    if (tpos <= ntok) fail("unexpected '" tok[tpos] "' in expression '" s "'", ln)
    return v
}
function p_or(    a, b) {
    a = p_and()
    while (peek() == "||") { tpos++; b = p_and(); a = (a != 0 || b != 0) ? 1 : 0 }
    return a
}
function p_and(    a, b) {
    a = p_cmp()
    while (peek() == "&&") { tpos++; b = p_cmp(); a = (a != 0 && b != 0) ? 1 : 0 }
    return a
}
function p_cmp(    a, b, op) {
    a = p_sum()
    op = peek()
    if (op == "==" || op == "!=" || op == "<" || op == "<=" || op == ">" || op == ">=") {
        tpos++
        b = p_sum()
        if (op == "==") return (isnum(a) && isnum(b)) ? (a + 0 == b + 0) : (a "" == b "")
        if (op == "!=") return (isnum(a) && isnum(b)) ? (a + 0 != b + 0) : (a "" != b "")
        if (!isnum(a) || !isnum(b)) fail("'" op "' needs numbers", eln)
        if (op == "<") return a + 0 < b + 0
        if (op == "<=") return a + 0 <= b + 0
        if (op == ">") return a + 0 > b + 0
        return a + 0 >= b + 0
    }
    return a
}
function p_sum(    a, b, op) {
    a = p_term()
    while (peek() == "+" || peek() == "-") {
        op = tok[tpos++]
        b = p_term()
        if (!isnum(a) || !isnum(b)) fail("'" op "' needs numbers", eln)
        a = (op == "+") ? a + b : a - b
    }
    return a
}
function p_term(    a, b, op) {
    a = p_unary()
    while (peek() == "*" || peek() == "/" || peek() == "%") {
        op = tok[tpos++]
        b = p_unary()
        if (!isnum(a) || !isnum(b)) fail("'" op "' needs numbers", eln)
        if (op != "*" && b + 0 == 0) fail("division by zero", eln)
        if (op == "*") a = a * b
        else if (op == "/") a = int(a / b)
        else a = a % b
    }
    return a
}
function p_unary(    a) {
    if (peek() == "-") { tpos++; a = p_unary(); if (!isnum(a)) fail("'-' needs a number", eln); return -a }
    if (peek() == "!") { tpos++; a = p_unary(); return (a != 0) ? 0 : 1 }
    return p_primary()
}
function p_primary(    t, v) {
    if (tpos > ntok) fail("expression ends too early", eln)
    t = tok[tpos++]
    if (t == "(") {
        v = p_or()
        if (peek() != ")") fail("missing ')'", eln)
        tpos++
        return v
    }
    if (t ~ /^[0-9]+$/) return t + 0
    if (t ~ /^"/) return substr(t, 2, length(t) - 2)
    if (t ~ /^[A-Za-z_]/) {
        if (!(t in var)) fail("unknown variable '" t "'", eln)
        return var[t]
    }
    fail("unexpected '" t "'", eln)
}

# ---- lines -----------------------------------------------------------------
function subst(s, ln,    out, e, rs, rl) {
    out = ""
    while (match(s, /\$\{[^}]*\}/)) {
        rs = RSTART; rl = RLENGTH          # eval() runs match() itself
        e = substr(s, rs + 2, rl - 3)
        out = out substr(s, 1, rs - 1)
        out = out eval(e, ln)
        s = substr(s, rs + rl)
    }
    if (index(s, "${") > 0) fail("unterminated ${", ln)
    return out s
}

# kind[i]: "", "for", "if", "elif", "else", "end", "set", "def", "call",
# "comment"; arg[i]: the rest of the line. nxt[i] for for/def/if/elif/else: the
# line of the matching @end (for, def) or the next branch (@elif / @else / @end) of the same @if.
function scan(    i, d, k, s, top, stk) {
    top = 0
    for (i = 1; i <= nl; i++) {
        kind[i] = ""
        s = L[i]
        sub(/^[ \t]+/, "", s)
        if (s !~ /^@(for|if|elif|else|end|set|def|call|\/\/)([ \t]|$)/) continue
        k = s
        sub(/^@/, "", k)
        sub(/[ \t].*$/, "", k)
        if (k == "//") { kind[i] = "comment"; continue }
        kind[i] = k
        arg[i] = substr(s, length(k) + 2)
        sub(/^[ \t]+/, "", arg[i])
        sub(/[ \t]+$/, "", arg[i])
        if (k == "for" || k == "if" || k == "def") { stk[++top] = i; continue }
        if (k == "elif" || k == "else" || k == "end") {
            if (top == 0) fail("@" k " without @for or @if", i)
            d = stk[top]
            if ((k == "elif" || k == "else") && kind[d] != "if" && kind[d] != "elif")
                fail("@" k " inside @for (no @if open)", i)
            if (kind[d] == "else" && k != "end") fail("@" k " after @else", i)
            nxt[d] = i
            if (k == "end") top--
            else stk[top] = i
        }
    }
    if (top > 0) fail("@" kind[stk[top]] " without @end", stk[top])
}

function run(lo, hi,    i, k, w, nw, j, a, b, name, had, old, m, e) {
    i = lo
    while (i <= hi) {
        k = kind[i]
        if (k == "") { print subst(L[i], i); i++; continue }
        if (k == "comment") { i++; continue }
        if (k == "def") {
            if (arg[i] !~ /^[A-Za-z_][A-Za-z_0-9]*$/) fail("@def NAME", i)
            if ((arg[i] in defat) && defat[arg[i]] != i) fail("block '" arg[i] "' defined twice", i)
            defat[arg[i]] = i
            i = nxt[i] + 1
            continue
        }
        if (k == "call") {
            if (!(arg[i] in defat)) fail("@call of unknown block '" arg[i] "' (define it above)", i)
            if (arg[i] in active) fail("@call '" arg[i] "' calls itself", i)
            active[arg[i]] = 1
            run(defat[arg[i]] + 1, nxt[defat[arg[i]]] - 1)
            delete active[arg[i]]
            i++
            continue
        }
        if (k == "set") {
            if (!match(arg[i], /^[A-Za-z_][A-Za-z_0-9]*[ \t]*=/)) fail("@set NAME = EXPR", i)
            name = arg[i]; sub(/[ \t]*=.*$/, "", name)
            e = substr(arg[i], RLENGTH + 1)
            var[name] = eval(e, i)
            i++
            continue
        }
        if (k == "for") {
            e = nxt[i]
            name = arg[i]; sub(/[ \t].*$/, "", name)
            if (name !~ /^[A-Za-z_][A-Za-z_0-9]*$/) fail("@for NAME in WORDS / @for NAME = A to B", i)
            had = (name in var); old = var[name]
            m = substr(arg[i], length(name) + 1)
            sub(/^[ \t]+/, "", m)
            if (m ~ /^in([ \t]|$)/) {
                nw = split(substr(m, 3), w, /[ \t]+/)
                for (j = 1; j <= nw; j++) {
                    if (w[j] == "") continue
                    var[name] = w[j]
                    run(i + 1, e - 1)
                }
            } else if (m ~ /^=/ && match(m, /[ \t]to[ \t]/)) {
                b = substr(m, RSTART + RLENGTH)
                a = eval(substr(m, 2, RSTART - 2), i)
                b = eval(b, i)
                for (j = a; j <= b; j++) { var[name] = j; run(i + 1, e - 1) }
            } else fail("@for NAME in WORDS / @for NAME = A to B", i)
            if (had) var[name] = old; else delete var[name]
            i = e + 1
            continue
        }
        if (k == "if") {
            # walk the branches; run the first whose condition holds
            j = i
            while (kind[j] != "end") {
                if (kind[j] == "else" || eval(arg[j], j) != 0) { run(j + 1, nxt[j] - 1); break }
                j = nxt[j]
            }
            while (kind[j] != "end") j = nxt[j]
            i = j + 1
            continue
        }
        fail("@" k " without @for or @if", i)
    }
}

{
    FILENAME_ = FILENAME
    t = $0
    sub(/^[ \t]+/, "", t)
    if (t ~ /^@include([ \t]|$)/) include_file(substr(t, 9), FILENAME ":" FNR, 1)
    else add_line($0, FILENAME ":" FNR)
}
END {
    if (failed) exit 1
    scan()
    run(1, nl)
}
