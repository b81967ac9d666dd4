#!/usr/bin/env python3
"""api_docs.py - write docs/api/<header>.md from the public headers.

    python3 tools/api_docs.py runtime/status.h runtime/ctx.h ...   (the Makefile's HEADERS)

Each exported function becomes an entry with its declaration and the contract comment
written above it in the header (declarations on consecutive lines share one entry).
The header is the source: edit the comment there, then rerun this. tests/abi.sh (make
test) fails naming any exported function that has no entry.
"""
import re, sys, os
def clean_comment(lines):
    c = '\n'.join(lines).strip()
    c = re.sub(r'^/\*+', '', c); c = re.sub(r'\*+/$', '', c)
    return '\n'.join(re.sub(r'^\s*\* ?', '', l).rstrip() for l in c.split('\n')).strip()
for h in [a for a in sys.argv[1:] if not a.endswith('/lean8.h')]:
    L = open(h).read().split('\n')
    mod = os.path.basename(h)[:-2]
    i = 0; adjacent = False; comment = None; banner = None; entries = []; depth = 0
    while i < len(L):
        l = L[i]
        if depth == 0 and l.lstrip().startswith('/*'):
            adjacent = False
            block = [l]
            while '*/' not in L[i]:
                i += 1; block.append(L[i])
            if banner is None: banner = block; comment = None
            else: comment = block
            i += 1; continue
        if l.startswith('#'):
            while L[i].endswith('\\'): i += 1
            i += 1; continue
        if depth == 0 and re.match(r'(L8_NODISCARD |const |void|l8_|int|size_t|uint|float|double|unsigned|char)', l) and not l.startswith('typedef'):
            decl = [l]
            while ';' not in L[i] and '{' not in L[i]:
                i += 1; decl.append(L[i])
            d = ' '.join(' '.join(decl).split())
            fm = re.search(r'\b(l8_\w+)\s*\(', d)
            if fm and '{' not in d:
                if comment is None and adjacent and entries:
                    entries[-1][0].append(fm.group(1)); entries[-1][1].append(d)
                else:
                    entries.append(([fm.group(1)], [d], clean_comment(comment) if comment else ''))
                adjacent = True
            comment = None; i += 1; continue
        if l.startswith('extern "C"'): i += 1; continue
        depth = max(0, depth + l.count('{') - l.count('}'))
        if l.strip() == '' : adjacent = False
        elif depth == 0 and not l.strip().startswith('}'): comment = None
        i += 1
    b = clean_comment(banner or [])
    first, _, rest = b.partition('\n')
    title = first.split(' - ', 1)[-1]
    out = [f'# `{mod}.h` — {title}', '']
    if rest.strip(): out += [rest.strip(), '']
    out += [f'Installed as `include/lean8/{mod}.h`; `#include <lean8.h>` brings it in. Each entry below is the declaration and the contract written beside it in the header.', '']
    n = 0
    for names, decls, com in entries:
        n += len(names)
        decl = '\n'.join(d.replace('L8_NODISCARD ', '').replace(' L8_PRINTF(7, 8)', '') for d in decls)
        out += ['### ' + ', '.join(f'`{x}`' for x in names), '', '```c', decl, '```', '']
        if com: out += [com, '']
    open(f'docs/api/{mod}.md', 'w').write('\n'.join(out).rstrip() + '\n')
    print(f'docs/api/{mod}.md: {n} functions')
