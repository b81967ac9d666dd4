#!/usr/bin/env python3
"""ptxsim_interleave.py - the collectives' rearrangement (ptx/interleave.ptx.in: entries
l8_interleave and l8_interleave_seg) run through tools/ptxsim.py on the CPU and compared
with a reference written from the kernel's banner and runtime/interleave.c (its
contract), not from its code. With X_w the [rows][chunk] bytes of rank w (chunk = cols x
element size):

    blocked     [world][rows][chunk]   X_0, X_1, ...: what an all-gather leaves
    interleaved [rows][world][chunk]   row r = X_0[r], X_1[r], ...: the [rows, world x cols]
                                       tensor (an all-gather along the last dimension)
    dir 0 (interleave):   src blocked     -> dst interleaved
    dir 1 (deinterleave): src interleaved -> dst blocked

The launches are the launcher's (runtime/interleave.c, cuda_interleave, transcribed): the
widest word (16/8/4/2/1 B) dividing chunk and both bases, l8_interleave_seg for chunks of
64 B and more that 16-B words do not fit, else l8_interleave; the problem cut into
sub-rectangles of ranks and rows of at most launch_words units (a case may lower it, as
l8i_interleave_set_launch_words does, to get several launches with moved bases); grid =
min(ceil(units / units a CTA), SMs x occupancy) (132 SMs). A case may force the other
entry, a narrower word (the width is a permission) or a smaller grid (grid-stride). The
source sits at an offset in an allocation that ends at the source's last 16-B granule
(the segment kernel's loads may read the rest of a granule, never past it), the bytes
around it never written; the destination between guard bytes: the test checks that the
kernels wrote every byte of it and nothing else, and compares every byte.

    python3 tests/ptxsim_interleave.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                       [--fuzz N] [--strict-undef]

A simulator fault (out of bounds, misaligned, undefined value, race, deadlock) fails the
case with its location. --ptx runs a modified copy of the module (the test must fail on
a broken kernel). Exit status 0 only if every case passes.
"""

import random
import sys

import ptxsim_ref as R
from ptxsim_ref import ptxsim

NSM = 132
IL_THREADS, IL_WORDS_PER_THREAD, IL_OCC = 256, 4, 4
IL_LAUNCH_WORDS, IL_SEG_MIN, IL_SEG_OCC = 1 << 30, 64, 8


def div_magic(d):
    """(m, l) for 1 <= d < 2^31: x / d == (mulhi(x, m) + x) >> l for x < 2^31."""
    s = 0
    while (1 << s) < d:
        s += 1
    return ((1 << 32) * ((1 << s) - d) // d + 1) & 0xffffffff, s


def word_shift(chunk, a, b):
    x = chunk | a | b
    sh = 4
    while sh and x & ((1 << sh) - 1):
        sh -= 1
    return sh


class Case:
    def __init__(self, world, rows, cols, esz, dir, src_off=0, dst_off=0, kernel=None,
                 vshift=None, grid=None, words=None):
        self.world, self.rows, self.cols, self.esz, self.dir = world, rows, cols, esz, dir
        self.chunk = cols * esz
        self.src_off, self.dst_off = src_off, dst_off
        self.kernel, self.vshift, self.grid, self.words = kernel, vshift, grid, words

    def launches(self, src, dst):
        """The launcher's launches: [(entry, grid, params)], and a note."""
        world, rows, chunk, d = self.world, self.rows, self.chunk, self.dir
        vshift = word_shift(chunk, dst, src)
        seg = vshift < 4 and chunk >= IL_SEG_MIN
        if self.kernel is not None:
            seg = self.kernel == 'seg'
        if self.vshift is not None:
            assert self.vshift <= vshift, 'a word width the buffers do not allow'
            vshift = self.vshift
        cw = 1 if seg else chunk >> vshift
        limit = self.words or IL_LAUNCH_WORDS
        assert not (chunk > 16 * limit if seg else cw > limit), 'driver copies per chunk'
        ilv, blk = (dst, src) if d == 0 else (src, dst)
        irow, blk_ld = world * chunk, rows * chunk
        wpl = min(world, limit // cw)
        rpl = min(limit // (wpl * cw), rows)
        cw_m, cw_l = div_magic(cw)
        per_cta = IL_THREADS // 32 if seg else IL_THREADS * IL_WORDS_PER_THREAD
        cap = NSM * (IL_SEG_OCC if seg else IL_OCC)
        L = []
        for w0 in range(0, world, wpl):
            nw = min(world - w0, wpl)
            rw = nw * cw
            rw_m, rw_l = div_magic(rw)
            for r0 in range(0, rows, rpl):
                nr = min(rows - r0, rpl)
                n = nr * rw
                a_ilv = ilv + r0 * irow + w0 * chunk
                a_blk = blk + w0 * blk_ld + r0 * chunk
                grid = self.grid or min((n + per_cta - 1) // per_cta, cap)
                if seg:
                    L.append(('l8_interleave_seg', grid, [a_ilv, a_blk, n, rw, rw_m, rw_l,
                                                          chunk, irow, blk_ld, d]))
                else:
                    L.append(('l8_interleave', grid, [a_ilv, a_blk, n, rw, rw_m, rw_l, cw,
                                                      cw_m, cw_l, irow, blk_ld, vshift, d]))
        note = ' (%s, %d launch%s, grid %d)' % (
            'seg' if seg else '%d-B words' % (1 << vshift), len(L), 'es' if len(L) > 1
            else '', L[0][1])
        return L, note

    def __str__(self):
        s = 'w%-2d %4d rows x %4d x %dB %s src+%-2d dst+%-2d' % (
            self.world, self.rows, self.cols, self.esz, 'deint' if self.dir else 'inter',
            self.src_off, self.dst_off)
        if self.kernel:
            s += ' forced %s' % self.kernel
        if self.vshift is not None:
            s += ' vshift %d' % self.vshift
        if self.grid:
            s += ' grid %d' % self.grid
        if self.words:
            s += ' launch_words %d' % self.words
        return s


def run_case(mod, case, rnd, strict=False):
    world, rows, chunk = case.world, case.rows, case.chunk
    total = world * rows * chunk
    X = [[bytes(rnd.getrandbits(8) for _ in range(chunk)) for _ in range(rows)]
         for _ in range(world)]
    blocked = b''.join(b''.join(X[w]) for w in range(world))
    interleaved = b''.join(X[w][r] for r in range(rows) for w in range(world))
    src_b, want = (blocked, interleaved) if case.dir == 0 else (interleaved, blocked)

    mem = ptxsim.Memory()
    a_src = mem.alloc((case.src_off + total + 15) // 16 * 16)   # to its last granule
    p_src = a_src + case.src_off
    mem.write(p_src, src_b)
    outs = R.Outputs(mem)
    p_dst = outs.alloc('dst', total, case.dst_off)
    launches, note = case.launches(p_src, p_dst)
    secs = ninstr = 0
    for entry, grid, params in launches:
        st, err = R.run_launch(mod, entry, grid=(grid, 1, 1), block=(IL_THREADS, 1, 1),
                               params=params, mem=mem, strict_undef=strict)
        if err:
            return ['%s (launch %s)' % (err, params)], 0.0, 0, note
        secs += st['seconds']
        ninstr += st['instructions']
    errs = outs.check_coverage('dst')
    if case.dir == 0:
        def pos(i):
            r, j = divmod(i, world * chunk)
            return 'interleaved[r %d][w %d][%d]' % ((r,) + divmod(j, chunk))
    else:
        def pos(i):
            w, j = divmod(i, rows * chunk)
            return 'blocked[w %d][r %d][%d]' % ((w,) + divmod(j, chunk))
    R.cmp_bytes(errs, 'dst', outs.read('dst'), want, pos)
    return errs, secs, ninstr, note


def cases(quick, fuzz, seed):
    """World sizes 1 to 8, element sizes 1, 2, 4; both directions; 16-B words (aligned
    chunks of 16 B multiples), 8/4/2/1-B words (short chunks, odd bases), the segment
    kernel (long chunks at every misalignment of source and destination: heads, tails,
    the four funnel shifts, blocks past lane 31); launches cut into sub-rectangles of
    ranks and of rows; forced entries and widths; grids smaller than the work; then
    --fuzz random ones."""
    L = []
    for d in (0, 1):
        L += [
            Case(1, 1, 1, 1, d), Case(1, 5, 3, 2, d, 1, 0), Case(2, 1, 7, 1, d, 0, 3),
            Case(4, 33, 24, 2, d), Case(8, 17, 8, 4, d, 16, 32),                 # 16-B words
            Case(3, 9, 3, 4, d, 8, 4), Case(5, 7, 6, 4, d, 8, 16),               # 4-, 8-B
            Case(7, 11, 7, 2, d, 2, 6), Case(6, 13, 5, 1, d, 3, 1),              # 2-, 1-B
            Case(4, 20, 33, 2, d, 2, 0), Case(3, 9, 100, 1, d, 5, 11),           # seg
            Case(8, 5, 129, 4, d, 4, 12), Case(2, 3, 1000, 1, d, 7, 9),          # seg, nb > 32
            Case(5, 4, 700, 2, d, 6, 0), Case(2, 2, 2100, 1, d, 13, 2),          # seg, rounds
            Case(8, 40, 16, 4, d, words=200), Case(6, 9, 3, 2, d, 2, 0, words=10),
            Case(7, 6, 40, 2, d, 1, 0, words=6), Case(8, 10, 64, 1, d, 1, 1, words=5),
            Case(4, 33, 24, 2, d, kernel='seg'), Case(3, 7, 5, 1, d, 1, 2, kernel='seg'),
            Case(4, 6, 96, 1, d, 0, 0, kernel='word', vshift=0),
            Case(3, 8, 40, 2, d, 4, 2, kernel='word', vshift=1),
            Case(8, 64, 32, 2, d, grid=1), Case(8, 30, 50, 2, d, 2, 0, grid=1),
            Case(4, 100, 6, 2, d, 4, 4, grid=2),
        ]
    for so in range(16):                        # every source delta, destination heads
        L.append(Case(3, 2, 600 + so, 1, so % 2, so, 5 * so % 16))
    rnd = random.Random(seed)
    for _ in range(fuzz):
        world = rnd.choice((1, 2, 3, 4, 5, 6, 7, 8))
        esz = rnd.choice((1, 2, 4))
        while True:
            rows = rnd.randint(1, 40)
            cols = rnd.choice((rnd.randint(1, 24), rnd.randint(1, 400) // esz + 1))
            if world * rows * cols * esz <= 40000:
                break
        al = rnd.random() < 0.3
        kernel = rnd.choice((None, None, None, None, 'seg', 'word'))
        L.append(Case(world, rows, cols, esz, rnd.randint(0, 1),
                      16 * rnd.randint(0, 2) if al else esz * rnd.randint(0, 15),
                      16 * rnd.randint(0, 2) if al else rnd.randint(0, 15),
                      kernel=kernel, vshift=0 if kernel == 'word' else None,
                      grid=1 if rnd.random() < 0.2 else None,
                      words=(max(rnd.randint(1, 40), (cols * esz + 15) // 16)
                             if kernel == 'seg' else cols * esz * rnd.randint(1, 8))
                      if rnd.random() < 0.25 else None))
    if quick:
        L = [c for c in L if c.world * c.rows * c.chunk <= 8000]
    return L


def main(argv=None):
    a, t0, mod = R.start(R.arg_parser(__doc__, 'interleave.ptx', 60), argv)
    print('ptxsim interleave: %s' % a.ptx)

    def one(case, rnd):
        return run_case(mod, case, rnd, a.strict_undef)
    return R.run_cases('interleave', cases(a.quick, a.fuzz, a.seed), one, a, t0)


if __name__ == '__main__':
    sys.exit(main())
