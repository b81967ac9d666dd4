#!/usr/bin/env python3
"""sass.py - what ptxas made of a PTX kernel: per entry, the registers and
spills, the instruction count, the memory instructions by kind, and the
load batches - the global loads issued back to back before any other memory
instruction (a store, a shared or local access, an atomic), a barrier, a
branch or an exit. A batch of 8 is 8
loads in flight at once; the same loads in batches of 1 wait on memory 8
times. That is how a schedule change shows that no spill count shows: in
2026-12-04's look at ptx/cast_transpose.ptx.in, the bf16 entry's fast path
issued its 8 row loads as batches 7 + 1, and a variant with a few more
instructions after its tile loop (0 spills, 20-28% slower) as 2 + 3 + 1 + 2.

  python3 tools/sass.py build/ptx/cast_transpose.ptx [--entry NAME] [--arch sm_90]
  python3 tools/sass.py kernel.cubin [--entry NAME]
  python3 tools/sass.py --sass dump.txt [--entry NAME]   (cuobjdump -sass output)
  python3 tools/sass.py NEW.ptx --base OLD.ptx [--entry NAME]

--base compares two builds of a module entry by entry (registers, stack,
instructions, spill instructions, load batches), the check to make before
spending GPU time on a kernel change: an entry whose batches split or whose
stack grew where the change did not mean to touch it. With --sass, --base
names a second listing.

A .ptx goes through ptxas (CUDA_HOME/bin or PATH) into a cubin, a cubin
through `cuobjdump -sass` and `cuobjdump -res-usage`. cuobjdump needs
nvdisasm beside it or on PATH; where the toolkit lacks both (the CUDA 13.0
install of our build machines does), NVIDIA's pip wheels
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm carry them (nvidia/cu13/bin
inside the wheel): put that directory on PATH or name cuobjdump in
$CUOBJDUMP. Exit 0, or 1 with a message (a missing tool or file, an entry
that is not there).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

INS = re.compile(r'^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')
FUN = re.compile(r'^\s+Function\s*:\s*(\S+)')
RES = re.compile(r'REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)')


class Fail(Exception):
    pass


def tool(name, env=None):
    if env and os.environ.get(env):
        return os.environ[env]
    home = os.environ.get('CUDA_HOME', '/usr/local/cuda')
    for cand in (os.path.join(home, 'bin', name), shutil.which(name)):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise Fail('%s not found (CUDA_HOME/bin, PATH%s)%s' % (
        name, ', $' + env if env else '',
        '; pip download nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, unzip both wheels '
        'and put their nvidia/cu13/bin on PATH' if name == 'cuobjdump' else ''))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise Fail('%s failed: %s' % (os.path.basename(cmd[0]), (p.stderr or p.stdout).strip()))
    return p.stdout


def opcode(text):
    """The opcode of an instruction (its predicate dropped), e.g. LDG.E.128.CONSTANT."""
    words = text.split()
    if words and words[0].startswith('@'):
        words = words[1:]
    return words[0] if words else ''


def parse_sass(text):
    """{entry: [opcode, ...]} in address order."""
    funs, cur = {}, None
    for line in text.splitlines():
        m = FUN.match(line)
        if m:
            cur = funs.setdefault(m.group(1), [])
            continue
        m = INS.match(line)
        if m and cur is not None:
            cur.append(opcode(m.group(2)))
    return funs


def parse_res(text):
    """{entry: (registers, stack bytes, shared bytes)} from cuobjdump -res-usage."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r'\s*Function\s+([^:\s]+):', line)
        if m:
            name = m.group(1)
            continue
        m = RES.search(line)
        if m and name:
            out[name] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    return out


def kind(op):
    base = op.split('.')[0]
    if base in ('LDG', 'STG', 'LDS', 'STS', 'LDL', 'STL', 'BAR', 'BRA', 'EXIT', 'SHFL', 'RED',
                'REDG', 'ATOMG', 'ATOMS', 'LDGSTS'):
        return base
    return None


def batches(ops):
    """Sizes of the runs of global loads (ALU instructions and shuffles
    between them do not end a run; any other memory instruction, a barrier,
    a branch or an exit does)."""
    out, n = [], 0
    for op in ops:
        k = kind(op)
        if k == 'LDG':
            n += 1
        elif k is not None and k != 'SHFL':
            if n:
                out.append(n)
            n = 0
    if n:
        out.append(n)
    return out


def summary(name, ops, res):
    lines = []
    head = '%s: %d instructions' % (name, len(ops))
    if name in res:
        reg, stack, shared = res[name]
        head += ', %d registers, %d B stack, %d B shared' % (reg, stack, shared)
    lines.append(head)
    counts = {}
    for op in ops:
        k = kind(op)
        if k in ('LDG', 'STG', 'LDS', 'STS', 'LDL', 'STL', 'BAR'):
            counts.setdefault(k, {}).setdefault(op, 0)
            counts[k][op] += 1
    for k in ('LDG', 'STG', 'LDS', 'STS', 'LDL', 'STL', 'BAR'):
        if k in counts:
            total = sum(counts[k].values())
            parts = ', '.join('%s %d' % (op, c) for op, c in sorted(counts[k].items()))
            lines.append('  %-4s %4d  (%s)' % (k, total, parts))
    b = batches(ops)
    lines.append('  load batches (%d): %s' % (len(b), ' '.join(str(x) for x in b) if b else '-'))
    return lines


def load(src, arch, listing):
    """({entry: [opcode, ...]}, {entry: (registers, stack, shared)}) of a
    .ptx (through ptxas), a .cubin, or with listing a cuobjdump -sass text."""
    if listing:
        try:
            with open(src) as f:
                text = f.read()
        except OSError as e:
            raise Fail('%s: %s' % (src, e.strerror))
        res = {}
    else:
        if not os.path.isfile(src):
            raise Fail('%s: No such file' % src)
        objdump = tool('cuobjdump', 'CUOBJDUMP')
        with tempfile.TemporaryDirectory() as tmp:
            cubin = src
            if src.endswith('.ptx'):
                cubin = os.path.join(tmp, 'k.cubin')
                run([tool('ptxas'), '-arch=' + arch, src, '-o', cubin])
            text = run([objdump, '-sass', cubin])
            res = parse_res(run([objdump, '-res-usage', cubin]))
    funs = parse_sass(text)
    if not funs:
        raise Fail('no SASS functions found in %s' % src)
    return funs, res


def compare(name, old, new, res_old, res_new):
    """The lines of --base for one entry present in both builds."""
    def spills(ops):
        return sum(1 for op in ops if kind(op) in ('LDL', 'STL'))
    parts = []
    for label, a, b in (('instructions', len(old), len(new)),
                        ('spill instructions', spills(old), spills(new))):
        parts.append('%s %d' % (label, b) if a == b else '%s %d -> %d' % (label, a, b))
    if name in res_old and name in res_new:
        for label, i, unit in (('registers', 0, ''), ('stack', 1, ' B')):
            a, b = res_old[name][i], res_new[name][i]
            parts.append('%s %d%s' % (label, b, unit) if a == b else
                         '%s %d -> %d%s' % (label, a, b, unit))
    bo, bn = batches(old), batches(new)
    same = old == new and res_old.get(name) == res_new.get(name)
    lines = ['%s: %s%s' % (name, 'the same code: ' if same else '', ', '.join(parts))]
    if bo == bn:
        lines.append('  load batches: %s (unchanged)' % (' '.join(map(str, bn)) or '-'))
    else:
        lines.append('  load batches: base %s' % (' '.join(map(str, bo)) or '-'))
        lines.append('                this %s' % (' '.join(map(str, bn)) or '-'))
    return lines


def main(argv):
    args, entry, arch, sass_file, base = [], None, 'sm_90', None, None
    it = iter(argv)
    for a in it:
        if a == '--base':
            base = next(it, None)
            if not base:
                raise Fail('--base wants a file')
        elif a == '--entry':
            entry = next(it, None)
            if not entry:
                raise Fail('--entry wants a kernel name')
        elif a == '--arch':
            arch = next(it, None)
            if not arch:
                raise Fail('--arch wants an architecture (sm_90)')
        elif a == '--sass':
            sass_file = next(it, None)
            if not sass_file:
                raise Fail('--sass wants a file')
        elif a in ('-h', '--help'):
            print(__doc__.strip())
            return 0
        elif a.startswith('-'):
            raise Fail('unknown option %s (see --help)' % a)
        else:
            args.append(a)
    if sass_file:
        if args:
            raise Fail('--sass takes no other input file')
        src = sass_file
    else:
        if len(args) != 1:
            raise Fail('one .ptx or .cubin file wanted (see --help)')
        src = args[0]
    funs, res = load(src, arch, bool(sass_file))
    if base is not None:
        bfuns, bres = load(base, arch, bool(sass_file))
        names = [n for n in funs if n in bfuns]
        if entry:
            if entry not in names:
                raise Fail('no entry %s in both (entries in both: %s)' % (
                    entry, ', '.join(sorted(names)) or 'none'))
            names = [entry]
        for name in names:
            print('\n'.join(compare(name, bfuns[name], funs[name], bres, res)))
        if not entry:
            for name in sorted(set(funs) - set(bfuns)):
                print('%s: only in this build' % name)
            for name in sorted(set(bfuns) - set(funs)):
                print('%s: only in the base' % name)
        return 0
    if entry:
        if entry not in funs:
            raise Fail('no entry %s (entries: %s)' % (entry, ', '.join(sorted(funs))))
        funs = {entry: funs[entry]}
    for name in funs:
        print('\n'.join(summary(name, funs[name], res)))
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main(sys.argv[1:]))
    except Fail as e:
        print('sass.py: %s' % e, file=sys.stderr)
        sys.exit(1)
