#!/usr/bin/env python3
"""apidoc.py - write docs/api/<name>.md from a public header: its banner, then
each function's declaration and the contract comment written above it.

    python3 tools/apidoc.py runtime/comm.h [more headers...]
    python3 tools/apidoc.py --check HEADERS...   (make test-abi: exit 1 naming every
                                                 page that differs from its header)

The headers carry the contracts; the pages are their readable copy (tests/abi.sh
checks that every exported function has an entry, --check that every page is
what its header writes now). A contract is the comment right above a
declaration, or above the #define lines just before it. A section divider
above a declaration (a comment of its own such as /* ---- tensors ---- */) is
not part of its contract: it becomes a section heading of the page before
that entry."""
import os
import re
import sys

PROTO = re.compile(
    r'((?:^[ \t]*/\*(?:(?!\*/).)*\*/\n)*)'               # comment blocks on their own lines above
    r'((?:^#define [^\n]*\n)*)'                            # a constant the contract names
    r'^((?:L8_NODISCARD )?[A-Za-z_][\w ]*?[\w\*] ?\*?(l8_\w+)\((?:[^;{])*\);'
    r'(?:[ \t]*/\*[^\n]*\*/)?)',                          # and a comment on the same line
    re.S | re.M)


# A section divider: a comment that opens with dashes, "/* ---- title ---- */"
# or "/* ---- title ----\n * more text */".
DIVIDER = re.compile(r'^[ \t]*/\*[ \t]*-{2,}((?:(?!\*/).)*)\*/', re.S | re.M)
BLOCK = re.compile(r'/\*(?:(?!\*/).)*\*/', re.S)


def strip_lines(block):
    out = []
    for line in block.strip().split('\n'):
        line = line.strip()
        line = re.sub(r'^/\*+ ?', '', line)
        line = re.sub(r' ?\*/$', '', line)
        line = re.sub(r'^\* ?', '', line)
        out.append(line)
    return '\n'.join(out).strip()


def clean_comment(block):
    """The contract: the comment blocks above a declaration, dividers left out."""
    kept = [c for c in BLOCK.findall(block) if not re.match(r'/\*[ \t]*-{2,}', c)]
    return strip_lines('\n'.join(kept))


def section(m):
    """A divider as (heading, text): the words between its dashes (they may run
    over several lines), then the rest of the comment."""
    lines = [re.sub(r'^[ \t]*\*? ?', '', l).rstrip() for l in m.group(1).split('\n')]
    n = next((i for i, l in enumerate(lines) if re.search(r'-{2,}$', l)), 0)
    title = ' '.join(l.strip() for l in lines[:n + 1])
    title = re.sub(r'[ \t]*-{2,}$', '', title).strip()
    more = '\n'.join(lines[n + 1:]).strip()
    return title[:1].upper() + title[1:], more


def page(header):
    text = open(header).read()
    name = os.path.basename(header)
    banner = re.match(r'/\*(.*?)\*/', text, re.S).group(1)
    lines = [re.sub(r'^ ?\* ?', '', l).rstrip() for l in banner.split('\n')]
    first = lines[0].strip()
    title = first.split(' - ', 1)[1] if ' - ' in first else first
    body = '\n'.join(lines[1:]).strip('\n')
    out = ['# `%s` \u2014 %s' % (name, title), '', body, '',
           'Installed as `include/lean8/%s`; `#include <lean8.h>` brings it in. Each entry '
           'below is the declaration and the contract written beside it in the header.' % name, '']
    rest = text[len(re.match(r'/\*.*?\*/', text, re.S).group(0)):]
    entries = []                  # [names, decls, comment, at]; uncommented ones join the one above
    last_end = -1
    for m in PROTO.finditer(rest):
        comment, defines, decl, fn = m.group(1), m.group(2), m.group(3), m.group(4)
        if decl.lstrip().startswith(('typedef', 'static', 'return')):
            continue
        decl = re.sub(r'\s+', ' ', decl.replace('L8_NODISCARD ', ''))
        decl = re.sub(r'\s*L8_PRINTF\(\d+, *\d+\)', '', decl)   # attributes, as L8_NODISCARD
        gap = rest[last_end:m.start()]
        adjacent = entries and not comment and gap.strip() == '' and gap.count('\n') <= 1
        decls = [re.sub(r'\s+', ' ', d.strip()) for d in defines.strip().split('\n') if d] + [decl]
        if adjacent:
            entries[-1][0].append(fn)
            entries[-1][1].extend(decls)
        else:
            entries.append([[fn], decls, clean_comment(comment) if comment else '',
                            m.start(3)])
        last_end = m.end()
    secs = [(d.start(), section(d)) for d in DIVIDER.finditer(rest)]
    for names, decls, c, at in entries:
        while secs and secs[0][0] < at:       # the dividers above this entry
            (heading, more) = secs.pop(0)[1]
            out += ['## ' + heading, ''] + ([more, ''] if more else [])
        out += ['### ' + ', '.join('`%s`' % n for n in names), '', '```c'] + decls + ['```', '']
        if c:
            out += [c, '']
    return '\n'.join(out)


def dest(header):
    return os.path.join('docs', 'api', os.path.splitext(os.path.basename(header))[0] + '.md')


def main(argv):
    check = len(argv) > 1 and argv[1] == '--check'
    headers = argv[2:] if check else argv[1:]
    stale = []
    for h in headers:
        dst, text = dest(h), page(h)
        if check:
            old = open(dst).read() if os.path.exists(dst) else None
            if old != text:
                stale.append('%s (from %s)' % (dst, h))
            continue
        with open(dst, 'w') as f:
            f.write(text)
        print('  APIDOC  %s -> %s' % (h, dst))
    if check:
        if stale:
            print('  APIDOC  stale pages (run python3 tools/apidoc.py on their headers): ' +
                  ', '.join(stale))
            return 1
        print('  APIDOC  %d pages match their headers' % len(headers))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
