#!/usr/bin/env python3
"""ptxsim_dequantize.py - FP8 -> f32 / bf16 / f16 (ptx/dequantize.ptx, l8_fp8_dequantize)
run through tools/ptxsim.py on the CPU and compared with a reference written from the
kernel's banner, runtime/fp8.h and ops/cast.c's launcher (its contract), not from its
code:

    y[i] = otype(f32(fp8 x[i]) * scale_inv)     FP8 -> f32 exact (runtime/fp8.h's formats:
                                                E4M3 NaN 0x7F / 0xFF; E5M2 +-inf 0x7C /
                                                0xFC, NaN 0x7D..0x7F), mul.rn.f32, then
                                                cvt.rn.bf16 / cvt.rn.f16 (overflow to inf)

for both formats, every output type (p_otype 0 f32, 1 bf16, 2 f16) and every one of the
256 codes (a case of n >= 256 holds each code at least once, shuffled). The launch is
the launcher's (l8_fp8_dequantize): 256 threads, nvec = n / 16 when x and y are both
16-B aligned else 0, grid = min(ceil((nvec or n) / 256), SMs x 5) (132 SMs); a case may
force a smaller grid (the grid-stride loops) or a smaller nvec (the vector part is a
permission: the kernel must be right without it). The input sits at any byte offset in
its allocation behind bytes the host never writes; y at an offset of a multiple of its
element size, between guard bytes: the test checks that the kernel wrote every byte of
y and nothing else, and compares every byte (a NaN element by NaN-ness: runtime/fp8.h
lets a kernel produce any NaN pattern).

    python3 tests/ptxsim_dequantize.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                       [--fuzz N] [--strict-undef]

--ptx defaults to ptx/dequantize.ptx (a hand-written module: the build embeds it as it
is). A simulator fault (out of bounds, misaligned, undefined value, race, deadlock)
fails the case with its location. --ptx runs a modified copy of the module (the test
must fail on a broken kernel). Exit status 0 only if every case passes.
"""

import math
import random
import struct
import sys

import ptxsim_ref as R
from ptxsim_ref import ptxsim

OTYPES = {'f32': 0, 'bf16': 1, 'f16': 2}        # p_otype (l8_dtype)
NSM, OCC_DQ, CTA_THREADS = 132, 5, 256           # the launcher's grid cap (H200)
ENTRY = 'l8_fp8_dequantize'


def out_bits(x, otype):
    """An f32 value -> the bits of an element of otype (cvt.rn; NaN: canonical)."""
    return R.f32_to_dtype_bits(x, otype)


class Case:
    def __init__(self, fmt, ot, n, in_off=0, out_off=0, sinv=1.0, grid=None, nvec=None):
        esz = R.ESIZE[ot]
        assert out_off % esz == 0
        self.fmt, self.ot, self.n, self.in_off, self.out_off = fmt, ot, n, in_off, out_off
        self.sinv = R.to_f32(sinv)
        self.grid, self.nvec = grid, nvec

    def launch(self, p_in, p_out):
        """(nvec, grid): the launcher's, or the case's (only what the buffers allow)."""
        return R.vec_launch(self.n, p_in, p_out, self.nvec, self.grid, CTA_THREADS,
                            NSM * OCC_DQ)

    def __str__(self):
        s = '%s -> %-4s n %-6d in+%-2d out+%-2d scale_inv %-10.4g' % (
            R.fmt_name(self.fmt), self.ot, self.n, self.in_off, self.out_off, self.sinv)
        if self.grid:
            s += ' grid %d' % self.grid
        if self.nvec is not None:
            s += ' nvec %d' % self.nvec
        return s


def make_codes(rnd, n):
    """n FP8 codes: each of the 256 at least once when n >= 256 (shuffled), the rest
    random bytes."""
    xs = list(range(256)) if n >= 256 else []
    xs += [rnd.getrandbits(8) for _ in range(n - len(xs))]
    rnd.shuffle(xs)
    return xs


def run_case(mod, case, rnd, strict=False):
    fmt, ot, n, si = case.fmt, case.ot, case.n, case.sinv
    otype, esz = OTYPES[ot], R.ESIZE[ot]
    xs = make_codes(rnd, n)

    # the reference: the element bits of every code
    lut = []
    for c in range(256):
        v = R.fp8_value(c, fmt)
        x = R.to_f32(v * si) if v == v else math.nan
        lut.append(out_bits(x, otype))
    want_el = [lut[c] for c in xs]
    want = struct.pack('<%d%s' % (n, 'I' if esz == 4 else 'H'), *want_el)

    mem = ptxsim.Memory()
    a_in = mem.alloc(case.in_off + n)            # the bytes before the input: never written
    p_in = a_in + case.in_off
    mem.write(p_in, bytes(xs))
    a_si = mem.alloc(4)
    mem.write(a_si, struct.pack('<f', si))
    outs = R.Outputs(mem)
    p_out = outs.alloc('y', n * esz, case.out_off)
    nvec, grid = case.launch(p_in, p_out)
    st, err = R.run_launch(mod, ENTRY, grid=(grid, 1, 1), block=(CTA_THREADS, 1, 1),
                           params=[p_in, p_out, a_si, nvec, n, fmt, otype], mem=mem,
                           strict_undef=strict)
    note = ' (nvec %d, grid %d)' % (nvec, grid)
    if err:
        return [err], 0.0, 0, note
    errs = outs.check_coverage('y')
    got = outs.read('y')
    fmt_el = '<I' if esz == 4 else '<H'

    def nan_el(i):                                # a NaN element: compared by NaN-ness
        k = i // esz
        return R.is_nan_bits(want_el[k], otype) and R.is_nan_bits(
            struct.unpack_from(fmt_el, got, k * esz)[0], otype)
    R.cmp_bytes(errs, 'y', got, want,
                lambda i: 'y[%d] byte %d (code %#04x)' % (i // esz, i % esz, xs[i // esz]),
                skip=nan_el)
    return errs, st['seconds'], st['instructions'], note


def cases(quick, fuzz, seed):
    """Both formats into every output type, each with all 256 codes: scale_inv 1, a power
    of two, one that is not (the 16-bit outputs round), one that overflows bf16 / f16
    (and f32: 2^100 times 448 or 57344 fits; 2^120 does not), one that takes the outputs
    into the subnormals, a negative one and 0 (inf * 0 = NaN); odd counts (the tail
    after the vector chunks), misaligned input or output (all scalar), n = 1, grids
    smaller than the work (grid-stride), nvec withheld; then --fuzz random ones."""
    E4, E5 = R.E4M3, R.E5M2
    L = []
    for ot in ('f32', 'bf16', 'f16'):
        esz = R.ESIZE[ot]
        for fmt in (E4, E5):
            L += [Case(fmt, ot, 4099, sinv=1.0), Case(fmt, ot, 1000, 3, esz, sinv=1 / 3.0),
                  Case(fmt, ot, 777, 16, 16, sinv=2.0 ** -7),
                  Case(fmt, ot, 513, 0, 0, sinv=1e-35 if ot == 'f32' else 2.0 ** -12)]
    L += [
        Case(E4, 'f32', 1), Case(E5, 'bf16', 1, 1, 2), Case(E4, 'f16', 15),
        Case(E5, 'f32', 16), Case(E4, 'bf16', 17, 0, 0, sinv=0.7),
        Case(E4, 'f16', 300, sinv=1000.0), Case(E5, 'f16', 300, sinv=3.0),
        Case(E5, 'bf16', 300, sinv=2.0 ** 120), Case(E4, 'f32', 300, sinv=2.0 ** 120),
        Case(E5, 'f32', 300, sinv=2.0 ** 100), Case(E4, 'bf16', 256, sinv=-1.5),
        Case(E5, 'f16', 256, sinv=0.0), Case(E4, 'f32', 256, 5, 4, sinv=-0.0),
        Case(E4, 'f32', 20000, grid=3), Case(E5, 'bf16', 20000, 1, 0, grid=2),
        Case(E4, 'f16', 4096, nvec=0), Case(E5, 'f32', 4111, nvec=100, grid=2),
        Case(E4, 'bf16', 4111, nvec=255, grid=1, sinv=1e-3),
        Case(E5, 'f16', 65536 + 7, sinv=0.5), Case(E4, 'f32', 40000, 7, 8, sinv=8.0),
    ]
    rnd = random.Random(seed)
    for _ in range(fuzz):
        ot = rnd.choice(('f32', 'bf16', 'f16'))
        esz = R.ESIZE[ot]
        n = rnd.choice((rnd.randint(1, 64), rnd.randint(1, 6000), rnd.randint(1, 20000)))
        al = rnd.random() < 0.5
        L.append(Case(rnd.choice((E4, E5)), ot, n,
                      16 * rnd.randint(0, 1) if al else rnd.randint(0, 15),
                      16 * rnd.randint(0, 1) if al else esz * rnd.randint(0, 8),
                      sinv=rnd.choice((1, -1)) * 2.0 ** rnd.uniform(-30, 30),
                      grid=rnd.randint(1, 4) if rnd.random() < 0.3 else None))
    if quick:
        L = [c for c in L if c.n <= 5000]
    return L


def main(argv=None):
    a, t0, mod = R.start(R.arg_parser(__doc__, 'dequantize.ptx', 20, generated=False), argv)
    print('ptxsim dequantize: %s' % a.ptx)

    def one(case, rnd):
        return run_case(mod, case, rnd, a.strict_undef)
    return R.run_cases('dequantize', cases(a.quick, a.fuzz, a.seed), one, a, t0)


if __name__ == '__main__':
    sys.exit(main())
