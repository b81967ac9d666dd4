#!/usr/bin/env python3
"""apidoc.py - write docs/api/<name>.md from a public header: its banner, then
each function's declaration and the contract comment written above it.

    python3 tools/apidoc.py runtime/comm.h [more headers...]

The headers carry the contracts; the pages are their readable copy (tests/abi.sh
checks that every exported function has an entry)."""
import os
import re
import sys

PROTO = re.compile(
    r'((?:^[ \t]*/\*(?:(?!\*/).)*\*/\n)*)'               # comment blocks on their own lines above
    r'^((?:L8_NODISCARD )?[A-Za-z_][\w ]*?[\w\*] ?\*?(l8_\w+)\((?:[^;{])*\);'
    r'(?:[ \t]*/\*[^\n]*\*/)?)',                          # and a comment on the same line
    re.S | re.M)


def clean_comment(block):
    out = []
    for line in block.strip().split('\n'):
        line = line.strip()
        line = re.sub(r'^/\*+ ?', '', line)
        line = re.sub(r' ?\*/$', '', line)
        line = re.sub(r'^\* ?', '', line)
        out.append(line)
    return '\n'.join(out).strip()


def page(header):
    text = open(header).read()
    name = os.path.basename(header)
    banner = re.match(r'/\*(.*?)\*/', text, re.S).group(1)
    lines = [re.sub(r'^ ?\* ?', '', l) for l in banner.split('\n')]
    first = lines[0].strip()
    title = first.split(' - ', 1)[1] if ' - ' in first else first
    body = '\n'.join(lines[1:]).strip('\n')
    out = ['# `%s` \u2014 %s' % (name, title), '', body, '',
           'Installed as `include/lean8/%s`; `#include <lean8.h>` brings it in. Each entry '
           'below is the declaration and the contract written beside it in the header.' % name, '']
    rest = text[len(re.match(r'/\*.*?\*/', text, re.S).group(0)):]
    entries = []                  # [names, decls, comment]; uncommented ones join the one above
    last_end = -1
    for m in PROTO.finditer(rest):
        comment, decl, fn = m.group(1), m.group(2), m.group(3)
        if decl.lstrip().startswith(('typedef', 'static', 'return')):
            continue
        decl = re.sub(r'\s+', ' ', decl.replace('L8_NODISCARD ', ''))
        gap = rest[last_end:m.start()]
        adjacent = entries and not comment and gap.strip() == '' and gap.count('\n') <= 1
        if adjacent:
            entries[-1][0].append(fn)
            entries[-1][1].append(decl)
        else:
            entries.append([[fn], [decl], clean_comment(comment) if comment else ''])
        last_end = m.end()
    for names, decls, c in entries:
        out += ['### ' + ', '.join('`%s`' % n for n in names), '', '```c'] + decls + ['```', '']
        if c:
            out += [c, '']
    return '\n'.join(out)


def main(argv):
    for h in argv[1:]:
        dst = os.path.join('docs', 'api', os.path.splitext(os.path.basename(h))[0] + '.md')
        with open(dst, 'w') as f:
            f.write(page(h))
        print('  APIDOC  %s -> %s' % (h, dst))


if __name__ == '__main__':
    main(sys.argv)
