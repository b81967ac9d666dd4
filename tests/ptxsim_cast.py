#!/usr/bin/env python3
"""ptxsim_cast.py - the FP8 cast with fused amax (ptx/cast.ptx, l8_cast_fp8) run through
tools/ptxsim.py on the CPU and compared with a reference written from the kernel's
banner and ops/cast.c's launcher (its contract), not from its code:

    y[i]      = fp8(f32(x[i]) * scale)      mul.rn.f32 then cvt.rn.satfinite (E4M3 / E5M2)
    amax      = max(amax, |f32(x[i])|)      u32 max of the sign-cleared f32 bits of the
                                            UNSCALED input (NaN wins); untouched if
                                            p_amax is 0
    scale_inv = rcp.rn(scale)               one f32, if p_scale_inv is not 0

for x of bf16, f16 or f32 and n elements. The launch is the launcher's (l8_fp8_cast):
256 threads, nvec = n / 16 when x and y are both 16-B aligned else 0, grid =
min(ceil((nvec or n) / 256), SMs x 8) (132 SMs), amax zeroed first unless the case
accumulates onto an earlier value; a case may force a smaller grid (grid-stride loops), a
smaller block (the banner: any multiple of 32 up to 256) or a smaller nvec (the vector
part is a permission: the kernel must be right without it). The input sits at an offset
(a multiple of its element size) in its allocation behind bytes the host never writes;
y, amax and scale_inv between guard bytes: the test checks that the kernel wrote every
byte of y and of scale_inv and nothing else, and compares every byte. The FP8 encoder
is build/liblean8.so's l8_fp8_from_f32 where it loads, else tests/ptxsim_ref.py's.

    python3 tests/ptxsim_cast.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                 [--fuzz N] [--strict-undef]

--ptx defaults to ptx/cast.ptx (a hand-written module: the build embeds it as it is).
A simulator fault (out of bounds, misaligned, undefined value, race, deadlock) fails the
case with its location. --ptx runs a modified copy of the module (the test must fail on
a broken kernel). Exit status 0 only if every case passes.
"""

import math
import random
import struct
import sys
from fractions import Fraction

import ptxsim_ref as R
from ptxsim_ref import ptxsim

ITYPE = {'f32': 0, 'bf16': 1, 'f16': 2}         # p_itype (l8_dtype)
NSM, OCC_CAST, CTA_THREADS = 132, 8, 256         # the launcher's grid cap (H200)


def f32_bits_of(dt, h):
    """The bits of f32(x) for an element of dt (the exact widening; NaN payloads kept,
    shifted up as cvt.f32.f16 / the bf16 shift do)."""
    if dt == 'f32':
        return h
    if dt == 'bf16':
        return h << 16
    s, e, m = h >> 15, (h >> 10) & 31, h & 0x3ff
    if e == 31:
        return (s << 31) | 0x7f800000 | (m << 13)
    return R.f32_to_bits(R.f16_to_f32(h))          # exact (subnormals included)


def rcp_rn(s):
    """1 / s rounded once to the nearest f32 (ties to even): rcp.rn.f32."""
    if s == 0:
        return math.copysign(math.inf, s)
    if math.isinf(s):
        return math.copysign(0.0, s)
    q = Fraction(1) / Fraction(s)
    c = R.to_f32(1.0 / s)
    if math.isinf(c):
        return c
    b = R.f32_to_bits(c)
    best = None
    for nb in (b - 1, b, b + 1):
        v = R.bits_to_f32(nb & 0xffffffff)
        if math.isinf(v) or v != v or (v > 0) != (s > 0):
            continue
        d = abs(Fraction(v) - q)
        key = (d, nb & 1)
        if best is None or key < best[0]:
            best = (key, v)
    return best[1]


class Case:
    def __init__(self, dt, fmt, n, in_off=0, out_off=0, scale=1.0, amax='zero',
                 sinv=True, grid=None, block=CTA_THREADS, nvec=None, special=False):
        assert in_off % R.ESIZE[dt] == 0
        assert block % 32 == 0 and 32 <= block <= 256
        self.dt, self.fmt, self.n, self.in_off, self.out_off = dt, fmt, n, in_off, out_off
        self.scale = R.to_f32(scale)
        self.amax, self.sinv = amax, sinv       # amax: 'zero', 'acc' (earlier value), None
        self.grid, self.block, self.nvec, self.special = grid, block, nvec, special

    def launch(self, p_in, p_out):
        """(nvec, grid): the launcher's, or the case's (only what the buffers allow)."""
        return R.vec_launch(self.n, p_in, p_out, self.nvec, self.grid, CTA_THREADS,
                            NSM * OCC_CAST)

    def __str__(self):
        s = '%-4s %s n %-6d in+%-2d out+%-2d scale %-9.4g amax %-4s' % (
            self.dt, R.fmt_name(self.fmt), self.n, self.in_off, self.out_off, self.scale,
            self.amax or '-')
        if not self.sinv:
            s += ' no-sinv'
        if self.special:
            s += ' inf/nan'
        if self.grid:
            s += ' grid %d' % self.grid
        if self.block != CTA_THREADS:
            s += ' block %d' % self.block
        if self.nvec is not None:
            s += ' nvec %d' % self.nvec
        return s


def run_case(mod, enc, case, rnd, strict=False):
    dt, fmt, n, scale = case.dt, case.fmt, case.n, case.scale
    isz = R.ESIZE[dt]
    xs = R.make_input(rnd, dt, n, case.special)
    if not case.special and n:
        R.plant_max(rnd, dt, xs)

    # the reference
    bits = [f32_bits_of(dt, h) for h in xs]
    want = bytes(enc(R.to_f32(R.bits_to_f32(b) * scale), fmt) for b in bits)
    am = max((b & 0x7fffffff for b in bits), default=0)
    am0 = 0
    if case.amax == 'acc':                       # an earlier value: above or below this one
        am0 = R.f32_to_bits(R.to_f32(abs(rnd.gauss(0, 1)) * 10.0 ** rnd.uniform(-3, 3)))
    am_want = max(am, am0)

    mem = ptxsim.Memory()
    a_in = mem.alloc(case.in_off + n * isz)     # the bytes before the input: never written
    p_in = a_in + case.in_off
    mem.write(p_in, R.pack_input(dt, xs))
    a_scale = mem.alloc(4)
    mem.write(a_scale, struct.pack('<f', scale))
    outs = R.Outputs(mem)
    p_out = outs.alloc('y', n, case.out_off)
    p_amax = outs.alloc('amax', 4, fill=struct.pack('<I', am0)) if case.amax else 0
    p_sinv = outs.alloc('scale_inv', 4) if case.sinv else 0
    nvec, grid = case.launch(p_in, p_out)
    st, err = R.run_launch(mod, 'l8_cast_fp8', grid=(grid, 1, 1), block=(case.block, 1, 1),
                           params=[p_in, p_out, a_scale, p_amax, p_sinv, nvec, n,
                                   ITYPE[dt], fmt], mem=mem, strict_undef=strict)
    note = ' (nvec %d, grid %d)' % (nvec, grid)
    if err:
        return [err], 0.0, 0, note
    errs = outs.check_coverage('y')
    got = outs.read('y')
    R.cmp_bytes(errs, 'y', got, want, lambda i: 'y[%d] (x %#x)' % (i, xs[i]))
    if case.amax:
        errs += outs.check_coverage('amax')
        g = struct.unpack('<I', outs.read('amax'))[0]
        if g != am_want:
            errs.append('amax: got %#010x (%g) want %#010x (%g), earlier value %#010x' % (
                g, R.bits_to_f32(g), am_want, R.bits_to_f32(am_want), am0))
    if case.sinv:
        errs += outs.check_coverage('scale_inv')
        g = outs.read('scale_inv')
        w = struct.pack('<f', rcp_rn(scale))
        if g != w:
            errs.append('scale_inv: got %s want %s (scale %r)' % (g.hex(), w.hex(), scale))
    return errs, st['seconds'], st['instructions'], note


class ZeroCase:
    """l8_amax_zero (ops/cast.c zero_amaxes): n amax words, each its own buffer, zeroed;
    `decoys` words the host never lists stay unwritten; the unused address slots past n
    hold `junk` (the launcher's are zeros; the kernel must not store through them)."""

    def __init__(self, n, decoys=2, junk=0xffffffffffffffff, block=64):
        self.n, self.decoys, self.junk, self.block = n, decoys, junk, block

    def __str__(self):
        return 'amax_zero n %-2d decoys %d junk %#x block %d' % (self.n, self.decoys, self.junk,
                                                                 self.block)


def run_zero(mod, case, rnd, strict=False):
    mem = ptxsim.Memory()
    outs = R.Outputs(mem)
    words = [outs.alloc('w%d' % i, 4, 4 * rnd.randint(0, 3)) for i in range(case.n)]
    for i in range(case.decoys):
        outs.alloc('decoy%d' % i, 4, 4 * rnd.randint(0, 3))
    order = list(range(case.n))
    rnd.shuffle(order)                       # slot k names word order[k]
    slots = [words[i] for i in order] + [case.junk] * (64 - case.n)
    st, err = R.run_launch(mod, 'l8_amax_zero', grid=(1, 1, 1), block=(case.block, 1, 1),
                           params=[struct.pack('<64Q', *slots), case.n], mem=mem,
                           strict_undef=strict)
    if err:
        return [err], 0.0, 0, ''
    errs = []
    for i in range(case.n):
        errs += outs.check_coverage('w%d' % i)
        if outs.read('w%d' % i) != bytes(4):
            errs.append('w%d: %s, not zero' % (i, outs.read('w%d' % i).hex()))
    for i in range(case.decoys):
        if outs.written('decoy%d' % i):
            errs.append('decoy%d: written, though no slot names it' % i)
    return errs, st['seconds'], st['instructions'], ''


def cases(quick, fuzz, seed):
    """Every input type with both formats; odd counts (the scalar tail after the vector
    chunks), misaligned input or output (all scalar), n = 0, amax zeroed / accumulated /
    absent, scale_inv absent; scales that saturate, push values into the subnormals,
    are not powers of two; inf / NaN inputs; grids smaller than the work (grid-stride),
    blocks of 1, 3 and 5 warps (the CTA max over fewer warps), nvec withheld; then
    --fuzz random ones."""
    E4, E5 = R.E4M3, R.E5M2
    L = []
    for dt in ('bf16', 'f16', 'f32'):
        isz = R.ESIZE[dt]
        for fmt in (E4, E5):
            L += [Case(dt, fmt, 4099, scale=1.0), Case(dt, fmt, 1000, isz, 3, scale=2.5),
                  Case(dt, fmt, 777, 0, 0, scale=0.75, special=True, amax='acc')]
    L += [
        Case('bf16', E4, 0), Case('f32', E5, 0, amax='acc'), Case('f16', E4, 1, 2, 1),
        Case('bf16', E5, 15), Case('f32', E4, 16), Case('f16', E5, 17),
        Case('bf16', E4, 33, 16, 16, scale=448.0), Case('f32', E5, 50, 4, 0, scale=1e-3),
        Case('bf16', E4, 2048, scale=1 / 1024.0), Case('f16', E5, 2048, scale=65536.0),
        Case('f32', E4, 3000, 16, 5, scale=3.7, amax='acc'),
        Case('bf16', E5, 5000, 0, 8, scale=0.3, sinv=False),
        Case('f16', E4, 5000, 8, 0, amax=None),
        Case('f32', E5, 4100, amax=None, sinv=False),
        Case('bf16', E4, 20000, grid=3), Case('f32', E5, 20000, 4, 0, grid=2),
        Case('f16', E4, 9000, block=96), Case('bf16', E5, 9001, 2, 0, block=32, grid=2),
        Case('f32', E4, 8000, block=160, grid=3, amax='acc'),
        Case('bf16', E4, 4096, nvec=0), Case('f16', E5, 4111, nvec=100, grid=2),
        Case('f32', E4, 4111, nvec=255, grid=1, block=64, special=True),
        Case('bf16', E4, 65536 + 7, scale=0.5), Case('f16', E5, 40000, 6, 0, scale=8.0),
        Case('f32', E4, 30001, 16, 16, scale=1.5, special=True, amax='acc'),
    ]
    rnd = random.Random(seed)
    for _ in range(fuzz):
        dt = rnd.choice(('bf16', 'f16', 'f32'))
        isz = R.ESIZE[dt]
        n = rnd.choice((rnd.randint(0, 64), rnd.randint(1, 6000), rnd.randint(1, 20000)))
        al = rnd.random() < 0.5
        L.append(Case(dt, rnd.choice((E4, E5)), n,
                      16 * rnd.randint(0, 1) if al else isz * rnd.randint(0, 8),
                      16 * rnd.randint(0, 1) if al else rnd.randint(0, 15),
                      scale=2.0 ** rnd.uniform(-12, 12), special=rnd.random() < 0.2,
                      amax=rnd.choice(('zero', 'zero', 'acc', None)),
                      sinv=rnd.random() < 0.8,
                      grid=rnd.randint(1, 4) if rnd.random() < 0.3 else None,
                      block=32 * rnd.randint(1, 8) if rnd.random() < 0.3 else CTA_THREADS))
    if quick:
        L = [c for c in L if c.n <= 5000]
    # l8_amax_zero: one word (a single cast), a few, all 64 slots (L8_CAST_MANY_MAX); unused
    # slots of junk or of zeros (the launcher's); a block of only as many threads as words
    L += [ZeroCase(1), ZeroCase(3, junk=0), ZeroCase(17, decoys=4), ZeroCase(64, decoys=1),
          ZeroCase(5, block=5)]
    return L


def main(argv=None):
    a, t0, mod = R.start(R.arg_parser(__doc__, 'cast.ptx', 40, generated=False), argv)
    enc, what = R.fp8_encoder()
    print('ptxsim cast: %s; FP8 encoder: %s' % (a.ptx, what))

    def one(case, rnd):
        if isinstance(case, ZeroCase):
            return run_zero(mod, case, rnd, a.strict_undef)
        return run_case(mod, enc, case, rnd, a.strict_undef)
    return R.run_cases('cast', cases(a.quick, a.fuzz, a.seed), one, a, t0)


if __name__ == '__main__':
    sys.exit(main())
