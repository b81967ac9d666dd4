#!/usr/bin/env python3
"""ptx_entries.py - every kernel the C code asks for exists in its PTX module.

The library finds its kernels by name at run time (l8i_kernel(ctx, MODULE,
ENTRY, &f)), so a misspelt entry, or one a template no longer generates,
shows only on a GPU, as L8_ERR_CUDA from cuModuleGetFunction. This check
runs where there is no GPU (make test-ptx): it reads the C sources for the
names they pass and the PTX modules for the entries they define.

  python3 tools/ptx_entries.py PTX_FILE... -- C_FILE...

Names are taken from
  - l8i_kernel(ctx, MODULE, ENTRY, &f) and l8i_kernel_smem(ctx, MODULE, ENTRY,
    SMEM, &f): MODULE a literal or `c ? "a" : "b"`,
    ENTRY a literal, `c ? "a" : "b"`, an expression of an array declared
    `static const char *const NAME[...] = { ... }` in the same file (every
    literal of the array), or a parameter passed on by a helper;
  - the string literals that helpers taking such a parameter receive:
    a call HELPER(..., "l8_x", ...) where HELPER's definition passes its own
    parameter on as ENTRY (launch(), meta_kernel()).
A name is checked against the modules the call can use (for a helper: the
modules of its l8i_kernel calls). Module MODULE is the PTX file named
MODULE.ptx. Exit 0 with a count, or 1 naming each name that is missing.
"""
import os
import re
import sys

ENTRY_DEF = re.compile(r'^\s*\.visible\s+\.entry\s+(\w+)\s*\(', re.M)
CALL = re.compile(r'\bl8i_kernel(_smem)?\s*\(')
ARRAY = re.compile(r'static\s+const\s+char\s*\*\s*const\s+(\w+)\s*(?:\[[^\]]*\])+\s*=\s*\{',
                   re.S)
LIT = re.compile(r'"([^"\\]*)"')
FUNC = re.compile(r'^[a-z][\w \t\*]*?\b(\w+)\s*\(([^;{]*?)\)\s*\{', re.M)


def args_of(text, start):
    """The top-level comma-separated arguments of the call whose '(' is
    text[start - 1]; returns (args, end)."""
    depth, cur, out, i = 0, [], [], start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            if depth == 0:
                out.append(''.join(cur).strip())
                return out, i + 1
            depth -= 1
        elif ch == ',' and depth == 0:
            out.append(''.join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(ch)
        i += 1
    raise ValueError('unterminated call')


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def arrays_of(text):
    """[(offset, NAME, literals)] of every `static const char *const NAME[..]
    = {...}` (function-local tables may share a name: a call uses the last
    one before it)."""
    out = []
    for m in ARRAY.finditer(text):
        _, end = args_of(text, m.end())    # the initializer, as one call's arguments
        out.append((m.start(), m.group(1), LIT.findall(text[m.end():end])))
    return out


def names_in(expr, arrays, params):
    """('lits', [...]) for an expression naming literals, ('param', NAME) for
    a parameter passed on, or None for one this script cannot read."""
    lits = LIT.findall(expr)
    if lits:
        return ('lits', lits)
    m = re.match(r'^(\w+)\s*(\[.*)?$', expr, re.S)
    if m and m.group(2) and m.group(1) in arrays:
        return ('lits', arrays[m.group(1)])
    if m and not m.group(2) and m.group(1) in params:
        return ('param', m.group(1))
    return None


def main(argv):
    if '--' not in argv:
        print('usage: ptx_entries.py PTX_FILE... -- C_FILE...', file=sys.stderr)
        return 1
    k = argv.index('--')
    ptx_files, c_files = argv[:k], argv[k + 1:]
    if not ptx_files or not c_files:
        print('ptx_entries: need PTX files and C files', file=sys.stderr)
        return 1
    modules = {}
    for p in ptx_files:
        try:
            with open(p) as f:
                modules[os.path.basename(p)[:-len('.ptx')]] = set(ENTRY_DEF.findall(f.read()))
        except OSError as e:
            print('ptx_entries: %s: %s' % (p, e.strerror), file=sys.stderr)
            return 1
    missing, pending = [], []
    for path in c_files:
        helpers = {}                 # this file's helpers: name -> (argument index, modules)
        try:
            with open(path) as f:
                text = strip_comments(f.read())
        except OSError as e:
            print('ptx_entries: %s: %s' % (path, e.strerror), file=sys.stderr)
            return 1
        arrays = arrays_of(text)
        funcs = [(m.start(), m.group(1), re.findall(r'(\w+)\s*(?:,|$)', m.group(2)))
                 for m in FUNC.finditer(text)]
        for m in CALL.finditer(text):
            args, end = args_of(text, m.end())
            if re.match(r'\s*\{', text[end:]):
                continue                                  # the definition
            line = text.count('\n', 0, m.start()) + 1
            where = '%s:%d' % (path, line)
            fn = [f for f in funcs if f[0] < m.start()]
            fname, params = (fn[-1][1], fn[-1][2]) if fn else ('', [])
            if fname == 'l8i_kernel':
                continue                                  # passes its own arguments on
            if len(args) != (5 if m.group(1) else 4):
                missing.append('%s: l8i_kernel%s with %d arguments' % (where, m.group(1) or '',
                                                                       len(args)))
                continue
            mods = LIT.findall(args[1])
            if not mods:
                missing.append('%s: module %s is not a literal' % (where, args[1]))
                continue
            for mod in mods:
                if mod not in modules:
                    missing.append('%s: module "%s" has no %s.ptx' % (where, mod, mod))
            tables = {}
            for pos, name, lits in arrays:
                if pos < m.start() and (not fn or pos > fn[-1][0]):
                    tables[name] = lits                   # this function's tables
            got = names_in(args[2], tables, params)
            if got is None:
                missing.append('%s: entry %s: not a literal, array or parameter' % (where, args[2]))
            elif got[0] == 'param':
                helpers.setdefault(fname, (params.index(got[1]), set()))[1].update(mods)
            else:
                pending.append((where, got[1], mods))
        # the helpers' calls in this file: HELPER(..., "l8_x", ...), and its
        # definition (the parameter's own name at that place)
        for hname, (idx, mods) in helpers.items():
            for m in re.finditer(r'\b%s\s*\(' % re.escape(hname), text):
                args, end = args_of(text, m.end())
                if re.match(r'\s*\{', text[end:]):
                    continue                              # the definition
                where = '%s:%d' % (path, text.count('\n', 0, m.start()) + 1)
                if idx < len(args) and LIT.fullmatch(args[idx]):
                    pending.append((where, LIT.findall(args[idx]), sorted(mods)))
                else:
                    missing.append('%s: %s() passes entry %s, not a literal' % (
                        where, hname, args[idx] if idx < len(args) else '(none)'))
    for where, names, mods in pending:
        for n in names:
            if not any(n in modules.get(mod, ()) for mod in mods):
                missing.append('%s: entry "%s" is in none of %s' % (
                    where, n, ', '.join('%s.ptx' % mod for mod in mods)))
    for line in missing:
        print('ptx_entries: ' + line)
    if missing:
        return 1
    uses = sum(len(names) for _, names, _ in pending)
    names = len({n for _, ns, _ in pending for n in ns})
    print('  ENTRIES %d kernels named in %d C files (%d uses), each in its PTX module' % (
        names, len(c_files), uses))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
