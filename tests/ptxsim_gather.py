#!/usr/bin/env python3
"""ptxsim_gather.py - the row moves (ptx/gather.ptx, l8_gather_rows: the kernel of
l8_gather_rows, l8_gather_rows_at and l8_put_rows_at) run through tools/ptxsim.py on the
CPU and compared with a reference written from the kernel's banner, ops/gather.h and
ops/gather.c's launcher (its contract), not from its code:

    gather  (mode 0)  dst[r, :] = src[idx[r], :]                     r < R, lim = R
    at      (mode 1)  dst[r, :] = src[idx[off + r], :]               r < R, lim = L
    put     (mode 2)  dst[off + r, :] = src[r, :]                    r < R, lim = M
    off = *cursor * stride (s32 times s64; 0 for gather)

A position off + r outside [0, L) or an index outside [0, N) (negatives included) writes
row r as zeros; a put row off + r outside [0, M) is not written; each such row adds 1 to
*bad (a u32 counter, absent when bad is 0). The launch is the launcher's (move_rows):
128 threads, wide (16-byte words) when the row bytes, both row strides and both bases
are multiples of 16, else 1-byte words; grid (min(ceil(words / 128), 64), min(R, 65535));
a case may force a smaller grid (the banner's strided loops over words and rows). src
and the idx / cursor words sit at offsets in their allocations; the bytes before src,
between its rows and past its last row are never written (a copy of them faults as an
undefined value). dst and bad lie between guard bytes: the test checks that the kernel
wrote every byte of the rows it should and nothing else (the row padding of a strided
dst, the rows a put leaves alone, the guards), compares every byte, and the counter.

    python3 tests/ptxsim_gather.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                   [--fuzz N] [--strict-undef]

--ptx defaults to ptx/gather.ptx (a hand-written module: the build embeds it as it is).
A simulator fault (out of bounds, misaligned, undefined value, race, deadlock) fails the
case with its location. --ptx runs a modified copy of the module (the test must fail on
a broken kernel). Exit status 0 only if every case passes.
"""

import random
import struct
import sys

import ptxsim_ref as R
from ptxsim_ref import ptxsim

MODES = {'gather': 0, 'at': 1, 'put': 2}           # p_mode
THREADS, MAX_X, MAX_Y = 128, 64, 65535             # ops/gather.c: G_THREADS, G_MAX_X/Y


class Case:
    """mode; rows R moved; rb bytes a row; n: rows of src (gather, at) or of dst (put);
    L: idx entries (at; gather has R); dpad / spad: bytes past a row in its stride;
    doff / soff: the bases' offsets; pat: the index pattern ('perm', 'rep', 'ends',
    'bad'); cur, stride: the cursor (at, put); bad: the counter's earlier value, or None
    for no counter; grid: (gx, gy) forced."""

    def __init__(self, mode, rows, rb, n, L=None, dpad=0, spad=0, doff=0, soff=0,
                 pat='perm', cur=0, stride=0, bad=0, grid=None):
        assert rows >= 1 and rb >= 1 and n >= 1      # the launcher launches nothing else
        self.mode, self.rows, self.rb, self.n, self.L = mode, rows, rb, n, L or rows
        self.dpad, self.spad, self.doff, self.soff = dpad, spad, doff, soff
        self.pat, self.cur, self.stride, self.bad, self.grid = pat, cur, stride, bad, grid

    def __str__(self):
        s = '%-6s R %-4d rb %-5d %s %-4d' % (self.mode, self.rows, self.rb,
                                             'M' if self.mode == 'put' else 'N', self.n)
        if self.mode == 'at':
            s += ' L %-4d' % self.L
        if self.mode != 'put':
            s += ' %-4s' % self.pat
        if self.mode != 'gather':
            s += ' off %d*%d' % (self.cur, self.stride)
        if self.dpad or self.spad:
            s += ' ld +%d/+%d' % (self.dpad, self.spad)
        if self.doff or self.soff:
            s += ' at +%d/+%d' % (self.doff, self.soff)
        s += ' bad %s' % ('-' if self.bad is None else self.bad)
        if self.grid:
            s += ' grid %dx%d' % self.grid
        return s


def make_idx(rnd, pat, count, n):
    """count s32 indices into n rows: 'perm' distinct (as far as n allows), 'rep' a few
    rows repeated, 'ends' mostly 0 and n - 1, 'bad' a quarter outside [0, n) (negatives,
    n, the s32 extremes) with the first and last entries among them; every pattern
    puts row 0 and row n - 1 at random positions."""
    if pat == 'perm':
        idx = rnd.sample(range(n), min(n, count))
        idx += [rnd.randrange(n) for _ in range(count - len(idx))]
    elif pat == 'rep':
        few = [rnd.randrange(n) for _ in range(3)]
        idx = [rnd.choice(few) for _ in range(count)]
    elif pat == 'ends':
        idx = [rnd.choice((0, n - 1, 0, n - 1, rnd.randrange(n))) for _ in range(count)]
    else:
        idx = [rnd.randrange(n) for _ in range(count)]
    if count >= 2:
        a, b = rnd.sample(range(count), 2)
        idx[a], idx[b] = 0, n - 1
    else:
        idx[0] = rnd.choice((0, n - 1))
    if pat == 'bad':
        worst = (-1, n, n + 1, -2 ** 31, 2 ** 31 - 1, -n, n + 1000)
        for i in range(count):
            if rnd.random() < 0.25:
                idx[i] = rnd.choice(worst)
        idx[0] = rnd.choice(worst)
        if count > 2:
            idx[-1] = rnd.choice(worst)
    return idx


def run_case(mod, case, rnd, strict=False):
    mode, Rr, rb = case.mode, case.rows, case.rb
    put = mode == 'put'
    N = Rr if put else case.n                  # src rows
    M = case.n if put else Rr                  # dst rows
    L = {'gather': Rr, 'at': case.L, 'put': 0}[mode]
    src_ld, dst_ld = rb + case.spad, rb + case.dpad
    off = case.cur * case.stride if mode != 'gather' else 0

    # the input: N rows of random bytes; idx, cursor
    rows = [bytes(rnd.getrandbits(8) for _ in range(rb)) for _ in range(N)]
    idx = make_idx(rnd, case.pat, L, N) if not put else []

    mem = ptxsim.Memory()
    a_src = mem.alloc(case.soff + (N - 1) * src_ld + rb)
    p_src = a_src + case.soff
    for i, row in enumerate(rows):
        mem.write(p_src + i * src_ld, row)
    p_idx = 0
    if not put:
        p_idx = mem.alloc(4 + 4 * L) + 4
        mem.write(p_idx, struct.pack('<%di' % L, *idx))
    p_cur = 0
    if mode != 'gather':
        p_cur = mem.alloc(12) + 8
        mem.write(p_cur, struct.pack('<i', case.cur))
    outs = R.Outputs(mem)
    dsize = (M - 1) * dst_ld + rb
    p_dst = outs.alloc('dst', dsize, case.doff)
    p_bad = outs.alloc('bad', 4, fill=struct.pack('<I', case.bad)) if case.bad is not None \
        else 0

    # the reference: each dst row's bytes (None: left alone), the count
    want_rows = [None] * M
    nbad = 0
    for r in range(Rr):
        if put:
            d = off + r
            if 0 <= d < M:
                want_rows[d] = rows[r]
            else:
                nbad += 1
            continue
        p = off + r
        i = idx[p] if 0 <= p < L else -1
        if 0 <= i < N:
            want_rows[r] = rows[i]
        else:
            want_rows[r] = bytes(rb)
            nbad += 1

    # the launcher's launch
    wide = int(((rb | dst_ld | src_ld | p_dst | p_src) & 15) == 0)
    words = rb // 16 if wide else rb
    gx = min((words + THREADS - 1) // THREADS, MAX_X)
    gy = min(Rr, MAX_Y)
    if case.grid:
        gx, gy = case.grid
    st, err = R.run_launch(mod, 'l8_gather_rows', grid=(gx, gy, 1), block=(THREADS, 1, 1),
                           params=[p_dst, p_src, p_idx, p_bad, Rr, N, words, wide, dst_ld,
                                   src_ld, p_cur, case.stride & (2 ** 64 - 1), MODES[mode],
                                   {'gather': Rr, 'at': L, 'put': M}[mode]],
                           mem=mem, strict_undef=strict)
    note = ' (%s, grid %dx%d)' % ('wide' if wide else 'bytes', gx, gy)
    if err:
        return [err], 0.0, 0, note

    # every byte of the rows written, nothing else
    skip = [(d * dst_ld + rb, (d + 1) * dst_ld) for d in range(M - 1)]
    skip += [(d * dst_ld, d * dst_ld + rb) for d in range(M) if want_rows[d] is None]
    errs = outs.check_coverage('dst', sorted(skip))
    got = outs.read('dst')
    want = bytearray(dsize)
    for d, row in enumerate(want_rows):
        if row is not None:
            want[d * dst_ld:d * dst_ld + rb] = row

    def pos(i):
        d, c = divmod(i, dst_ld)
        what = ('src row %d' % (d - off)) if put else (
            'idx[%d] = %s' % (off + d, idx[off + d] if 0 <= off + d < L else 'outside'))
        return 'dst[%d][%d] (%s)' % (d, c, what)
    R.cmp_bytes(errs, 'dst', got, bytes(want), pos,
                skip=lambda i: i % dst_ld >= rb or want_rows[i // dst_ld] is None)
    if case.bad is not None:
        errs += outs.check_coverage('bad')
        g = struct.unpack('<I', outs.read('bad'))[0]
        w = (case.bad + nbad) & 0xffffffff
        if g != w:
            errs.append('bad: got %d want %d (%d before, %d rows invalid)' % (
                g, w, case.bad, nbad))
    return errs, st['seconds'], st['instructions'], note


def cases(quick, fuzz, seed):
    """Each mode in both paths (wide: 16-B rows, strides and bases; bytes: odd row
    lengths, strides or bases); strided (narrowed) src and dst; rows of one byte, one
    word and of more words than a block's threads (several x-blocks, the x-stride loop
    under a forced gx); permutations, repeats, the first and last rows, invalid indices
    (negatives, N, the s32 extremes) with and without a counter; at: positions past L
    and before 0 (negative cursor); put: rows past M and before 0; forced small grids
    (the row-stride loop; invalid rows counted once with several x-blocks); then --fuzz
    random ones."""
    L = [
        Case('gather', 37, 48, 50), Case('gather', 37, 23, 50, pat='rep'),
        Case('gather', 20, 1, 7, pat='ends'), Case('gather', 1, 16, 1, bad=5),
        Case('gather', 1, 5, 3, pat='bad'), Case('gather', 33, 64, 40, pat='bad', bad=7),
        Case('gather', 29, 19, 40, pat='bad', bad=None),
        Case('gather', 17, 32, 30, dpad=16, spad=48, pat='rep'),
        Case('gather', 17, 32, 30, dpad=3, spad=0, pat='ends'),
        Case('gather', 17, 32, 30, soff=8, pat='perm'),
        Case('gather', 13, 33, 30, dpad=7, spad=5, doff=3, soff=1, pat='bad'),
        Case('gather', 9, 300, 12, pat='bad', bad=1),             # bytes, gx 3
        Case('gather', 9, 300, 12, spad=20, grid=(1, 4), pat='bad'),
        Case('gather', 5, 2064, 8, pat='bad', bad=2),             # wide, gx 2
        Case('gather', 5, 2064, 8, dpad=32, grid=(1, 2), pat='rep'),
        Case('gather', 40, 16, 64, grid=(1, 3), pat='bad', bad=0),
        Case('at', 16, 48, 40, L=100, cur=3, stride=16),
        Case('at', 16, 23, 40, L=100, cur=6, stride=16, pat='rep', bad=11),  # past L
        Case('at', 16, 32, 40, L=50, cur=-1, stride=10, pat='ends'),          # before 0
        Case('at', 12, 40, 20, L=30, cur=2, stride=0, pat='bad'),
        Case('at', 7, 17, 9, L=7, cur=0, stride=7, spad=3, bad=None),
        Case('at', 9, 300, 12, L=40, cur=4, stride=9, pat='bad', grid=(2, 3)),
        Case('at', 8, 32, 10, L=20, cur=-2 ** 31, stride=2 ** 31 - 1, pat='perm'),
        Case('put', 16, 48, 64, cur=2, stride=16),
        Case('put', 16, 21, 40, cur=2, stride=16, bad=3),                     # past M
        Case('put', 10, 32, 30, cur=-1, stride=4, dpad=16, spad=16),          # before 0
        Case('put', 10, 13, 30, cur=1, stride=5, dpad=2, soff=1, doff=5, bad=None),
        Case('put', 6, 2064, 12, cur=1, stride=8, grid=(1, 2)),
        Case('put', 5, 300, 9, cur=3, stride=2, grid=(2, 2)),
        Case('put', 1, 1, 1, cur=0, stride=0),
        Case('put', 4, 16, 5, cur=2 ** 31 - 1, stride=2 ** 31 - 1),
        Case('gather', 150, 16, 200, pat='perm'), Case('gather', 130, 7, 300, pat='bad'),
    ]
    rnd = random.Random(seed)
    for _ in range(fuzz):
        mode = rnd.choice(('gather', 'gather', 'at', 'put'))
        al = rnd.random() < 0.5
        rb = 16 * rnd.randint(1, 6) if al else rnd.randint(1, 70)
        rows = rnd.randint(1, 24)
        n = rnd.randint(1, 40)
        Lx = rnd.randint(1, 60)
        stride = rnd.randint(0, 12)
        cur = rnd.randint(-2, 6)
        pad = lambda: 16 * rnd.randint(0, 2) if al else rnd.randint(0, 9)   # noqa: E731
        L.append(Case(mode, rows, rb, n, L=Lx, dpad=pad(), spad=pad(),
                      doff=0 if al else rnd.randint(0, 15),
                      soff=16 * rnd.randint(0, 1) if al else rnd.randint(0, 15),
                      pat=rnd.choice(('perm', 'rep', 'ends', 'bad')), cur=cur,
                      stride=stride,
                      bad=rnd.choice((0, 9, None)),
                      grid=(rnd.randint(1, 2), rnd.randint(1, 4)) if rnd.random() < 0.3
                      else None))
    if quick:
        L = [c for c in L if c.rows * (c.rb + 127) // 128 <= 40]
    return L


def main(argv=None):
    a, t0, mod = R.start(R.arg_parser(__doc__, 'gather.ptx', 40, generated=False), argv)
    print('ptxsim gather: %s' % a.ptx)

    def one(case, rnd):
        return run_case(mod, case, rnd, a.strict_undef)
    return R.run_cases('gather', cases(a.quick, a.fuzz, a.seed), one, a, t0)


if __name__ == '__main__':
    sys.exit(main())
