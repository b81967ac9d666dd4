#!/usr/bin/env python3
"""ptxsim_transpose.py - the byte transpose (ptx/transpose.ptx.in, l8_transpose_b8) run
through tools/ptxsim.py on the CPU and compared with a reference written from the
kernel's banner and ops/cast.h (its contract), not from its code:

    out[c][r]   = in[r][c]                       (r < rows, c < cols)
    out[c][r]   = 0x00 for rows <= r < min(R16, ldt), R16 = rows rounded up to 16
                  (a row-padded out: ldt > rows, ldt % 16 == 0, out 16-B aligned)
    out[c][r]   never written for R16 <= r < ldt

The flags are the launcher's (ops/cast.c, l8_fp8_transpose) for the shape and the
buffers' alignment unless a case forces fewer (VEC_IN, VEC_IN8, IN_WORDS, VEC_T16 are
permissions: the kernel must be right without them); the grid is one CTA a tile unless
a case gives fewer (a CTA then walks several tiles: the pipeline). The input sits at an
offset in its allocation behind bytes the host never writes, and the output between
guard bytes: the test checks that the kernel wrote every byte it should and nothing
else, and compares every byte written.

    python3 tests/ptxsim_transpose.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                      [--fuzz N] [--strict-undef]

A simulator fault (out of bounds, misaligned, undefined value, race, deadlock) fails the
case with its location. --ptx runs a modified copy of the module (the test must fail on
a broken kernel). Exit status 0 only if every case passes.
"""

import random
import sys

import ptxsim_ref as R
from ptxsim_ref import ptxsim

VEC_IN, VEC_T16, VEC_IN8, IN_WORDS = 0x1, 0x2, 0x8, 0x10     # p_flags (ops/cast.c KF_*)


class Case:
    def __init__(self, rows, cols, in_off=0, out_off=0, ldt=None, grid=None, kf=None):
        self.rows, self.cols, self.in_off, self.out_off = rows, cols, in_off, out_off
        self.ldt = ldt or rows
        self.grid, self.kf = grid, kf
        assert self.ldt == rows or (self.ldt % 16 == 0 and out_off % 16 == 0)

    def flags(self, p_in, p_out):
        """The launcher's flags, or the case's (only permissions the buffers allow)."""
        kf = 0
        if self.cols % 16 == 0 and p_in % 16 == 0:
            kf |= VEC_IN
        if self.cols % 8 == 0 and p_in % 8 == 0:
            kf |= VEC_IN8
        if p_in % 4 == 0:
            kf |= IN_WORDS
        if self.ldt % 16 == 0 and p_out % 16 == 0:
            kf |= VEC_T16
        if self.kf is not None:
            assert self.kf & ~kf == 0, 'flags the buffers do not allow'
            kf = self.kf
        return kf

    def __str__(self):
        s = '%4dx%-4d in+%-2d out+%-2d ldt %-4d' % (self.rows, self.cols, self.in_off,
                                                   self.out_off, self.ldt)
        if self.grid:
            s += ' grid %d' % self.grid
        if self.kf is not None:
            s += ' forced'
        return s


def run_case(mod, case, rnd, strict=False):
    rows, cols, ldt = case.rows, case.cols, case.ldt
    n = rows * cols
    X = bytes(rnd.getrandbits(8) for _ in range(n))
    r16 = min((rows + 15) // 16 * 16, ldt)

    # the reference: every byte of out up to R16 of each row; the rest never written
    want = bytearray(cols * ldt)
    for r in range(rows):
        want[r:cols * ldt:ldt] = X[r * cols:(r + 1) * cols]
    skip = [(c * ldt + r16, (c + 1) * ldt) for c in range(cols)] if r16 < ldt else []

    mem = ptxsim.Memory()
    a_in = mem.alloc(case.in_off + n)           # the bytes before the input: never written
    p_in = a_in + case.in_off
    mem.write(p_in, X)
    outs = R.Outputs(mem)
    p_out = outs.alloc('out', cols * ldt, case.out_off)
    kf = case.flags(p_in, p_out)
    tiles = ((rows + 127) // 128) * ((cols + 127) // 128)
    grid = case.grid or max(tiles, 1)
    st, err = R.run_launch(mod, 'l8_transpose_b8', grid=(grid, 1, 1), block=(256, 1, 1),
                           params=[p_in, p_out, rows, cols, kf, ldt], mem=mem,
                           strict_undef=strict)
    if err:
        return [err], 0.0, 0, kf
    errs = outs.check_coverage('out', skip)
    pad = set()
    for s, e in skip:
        pad.update(range(s, e))
    R.cmp_bytes(errs, 'out', outs.read('out'), want,
                lambda i: '[%d][%d]' % divmod(i, ldt), skip=pad.__contains__)
    return errs, st['seconds'], st['instructions'], kf


def cases(quick, fuzz, seed):
    """Odd shapes at odd offsets (byte loads), 4-, 8- and 16-B aligned inputs (IN_WORDS,
    VEC_IN8, VEC_IN), 16-B aligned outputs (VEC_T16) dense and row-padded, grids of fewer
    CTAs than tiles (the pipeline), flags withheld; then --fuzz random ones."""
    L = [
        Case(1, 1, 1, 3), Case(7, 9, 2, 5), Case(129, 127, 3, 0), Case(131, 257, 1, 7),
        Case(300, 200, 0, 0),
        Case(1, 1, 0, 0, ldt=16), Case(7, 9, 4, 16, ldt=16), Case(129, 127, 3, 0, ldt=144),
        Case(131, 257, 4, 0, ldt=144), Case(300, 200, 0, 16, ldt=304),
        Case(300, 256, 0, 0, ldt=304),
        Case(128, 128), Case(256, 256, grid=3), Case(256, 256, kf=0),
        Case(256, 256, kf=VEC_IN8 | VEC_T16), Case(257, 272, 8, 0),
        Case(200, 300, 4, 0), Case(150, 160, 8, 0), Case(257, 72, 1, 3),
        Case(17, 1000, 0, 0), Case(1000, 17, 2, 0), Case(384, 136, 4, 0, grid=2),
        Case(300, 200, 0, 0, grid=1), Case(144, 400, 16, 16, ldt=144, grid=3),
        Case(640, 384, 0, 0, grid=5), Case(1023, 129, 1, 0, ldt=1024),
    ]
    rnd = random.Random(seed)
    for _ in range(fuzz):
        while True:
            rows, cols = rnd.randint(1, 520), rnd.randint(1, 520)
            if rows * cols <= 80000:
                break
        pad = rnd.random() < 0.3
        ldt = (rows + 15) // 16 * 16 + 16 * rnd.randint(0, 2) if pad else None
        tiles = ((rows + 127) // 128) * ((cols + 127) // 128)
        L.append(Case(rows, cols, rnd.choice((0, 0, 1, 2, 3, 4, 8, 12)),
                      16 * rnd.randint(0, 2) if pad else rnd.randint(0, 15), ldt=ldt,
                      grid=rnd.randint(1, tiles) if rnd.random() < 0.25 else None))
    if quick:
        L = [c for c in L if c.rows * c.cols <= 40000]
    return L


def main(argv=None):
    a, t0, mod = R.start(R.arg_parser(__doc__, 'transpose.ptx', 40), argv)
    print('ptxsim transpose: %s' % a.ptx)

    def one(case, rnd):
        errs, dt, ni, kf = run_case(mod, case, rnd, a.strict_undef)
        return errs, dt, ni, ' (flags %#04x)' % kf
    return R.run_cases('transpose', cases(a.quick, a.fuzz, a.seed), one, a, t0)


if __name__ == '__main__':
    sys.exit(main())
