#!/usr/bin/env python3
"""ptxsim_gemm.py - the small FP8 GEMM (build/ptx/gemm_small.ptx, the l8_gemm_small_*
entries that ops/gemm_small.c launches for l8_gemm) run through tools/ptxsim.py on the
CPU and compared with a reference written from the kernel's banner and ops/gemm.h's
contract, not from its code:

    D[m, n] = alpha * sA * sB * sum_k A[m, k] * B[n, k]  (+ beta * D[m, n])

A (M, K) and B (N, K) FP8 codes with row strides lda, ldb (bytes); D (M, N) bf16 or f32
with row stride ldd; sA, sB f32 scalars in device memory (or absent: 1). The launch is
the launcher's: grid (ceil(N / 32), ceil(M / 32)), 128 threads. The reference sums the
products exactly; the kernel sums in f32 (per mma, then over the K chunks and the
warps), so an element may differ from the exact value rounded to D's dtype by one unit
in its last place plus (K / 32 + 8) f32 roundings of the sum of |products| (times the
scale): far below what a wrong pairing of A's and B's bytes, a wrong row or a lost
chunk gives. D's bytes outside the M x N elements (the row padding up to ldd, the
guards) must stay unwritten; with beta == 0 D is not read (its old bytes are left
undefined: reading them faults).

    python3 tests/ptxsim_gemm.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                 [--fuzz N] [--strict-undef]

The bf16 entries (l8_gemm_small_bf16_bf16_bf16 / _dgelu: bf16 A, B and D, K <= 32, any
transposes, 256 threads) are held to their banner's arithmetic exactly: one f32 chain a
output, acc = fma(a_k, b_k, acc) for k = 0 .. K-1 from +0, then alpha (mul.rn) and beta
(fma) and one rounding to bf16; D must match that bit for bit.

Exit status 0 only if every case passes.
"""

from fractions import Fraction

import math
import random
import struct
import sys

import ptxsim_ref as R
from ptxsim_ref import ptxsim

THREADS = 128           # the _dgelu entries: 256
PAIRS = (('e4m3', 'e4m3'), ('e4m3', 'e5m2'), ('e5m2', 'e4m3'))


def random_code(rnd, fmt):
    """A finite code of moderate size (|x| in [2^-6, 16) or 0): sums stay far from
    overflow."""
    if rnd.random() < 0.05:
        return 0
    if fmt == 'e4m3':
        e = rnd.randint(1, 10)
        return (rnd.getrandbits(1) << 7) | (e << 3) | rnd.getrandbits(3)
    e = rnd.randint(9, 18)
    return (rnd.getrandbits(1) << 7) | (e << 2) | rnd.getrandbits(2)


def ulp(x, dt):
    """One unit in the last place of D's dtype at |x| (normal range)."""
    mb = 7 if dt == 'bf16' else 23
    e = math.frexp(abs(x))[1] if x else -125
    return 2.0 ** (max(e, -125) - 1 - mb)


def f32_exact(q):
    """The rational q rounded once to the nearest f32 (ties to even; nonzero q only)."""
    y = R.to_f32(float(q))
    best = None
    for c in (y, R.bits_to_f32(R.f32_to_bits(y) + 1), R.bits_to_f32(R.f32_to_bits(y) - 1)):
        if c != c or math.isinf(c):
            continue
        d = abs(Fraction(c) - q)
        if best is None or d < best[0] or (d == best[0] and R.f32_to_bits(c) % 2 == 0):
            best = (d, c)
    return best[1]


def fma_f32(a, b, c):
    """fma.rn.f32: a * b + c rounded once (a, b, c f32 values, finite)."""
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:                    # RN: -0 only when both terms are -0
        neg = math.copysign(1, a * b) < 0 and math.copysign(1, c) < 0
        return -0.0 if neg else 0.0
    return f32_exact(q)


def random_bf16(rnd):
    """A bf16 code of moderate size (|x| in [2^-4, 8) or 0)."""
    if rnd.random() < 0.05:
        return 0
    return (rnd.getrandbits(1) << 15) | ((127 + rnd.randint(-4, 2)) << 7) | rnd.getrandbits(7)


def gelu_grad_cast(x, a, scale, fmt):
    """The _dgelu entries' epilogue from ops/gemm.h's contract (L8_GEMM_EPI_DGELU_CAST,
    l8_ew_gelu_bwd's arithmetic, every operation rounded to f32, exp(-z) as
    2^(z * -log2 e) rounded once, as the simulator's ex2.approx): x and a are D's and
    the activation input's bf16 values. Returns (g's bf16 bits, its FP8 code)."""
    f = R.to_f32
    k1, k2, k3 = R.bits_to_f32(0x3D372713), R.bits_to_f32(0x3FCC422A), \
        R.bits_to_f32(0x3E095D4F)
    a2 = f(a * a)
    z = f(f(f(f(a2 * a) * k1) + a) * k2)
    e = f(2.0 ** f(z * R.bits_to_f32(0xBFB8AA3B)))
    sg = f(1.0 / f(e + 1.0))
    dz = f(f(f(a2 * k3) + 1.0) * k2)
    w = f(f(f(sg * f(1.0 - sg)) * a) * dz)
    gb = R.enc16(f(x * f(sg + w)), 'bf16')
    return gb, R.fp8_ref(f(R.bf16_to_f32(gb) * scale), R.E4M3 if fmt == 'e4m3' else R.E5M2)


class Case:
    def __init__(self, ta, tb, dt, m, n, k, lda_pad=0, ldb_pad=0, ldd_pad=0, alpha=1.0,
                 beta=0.0, sa=None, sb=None, fmt='e5m2', scale=1.0, pads=(0, 0, 0),
                 amax0=0, trans=(0, 0)):
        self.ta, self.tb, self.dt = ta, tb, dt
        self.m, self.n, self.k = m, n, k
        self.lda, self.ldb = k + lda_pad, k + ldb_pad
        # the bf16 entries: op(A) = A (M, K) or A^T (A stored (K, M)); op(B) = B (K, N)
        # or B^T (B stored (N, K)); the row strides are the stored rows' (elements)
        self.trans = trans
        if ta == 'bf16':
            self.lda = (m if trans[0] else k) + lda_pad
            self.ldb = (k if trans[1] else n) + ldb_pad
        self.ldd = n + ldd_pad
        self.alpha, self.beta, self.sa, self.sb = alpha, beta, sa, sb
        # dgelu: the FP8 format and scale, row strides of a (elements), out and outT
        # (bytes) past the dense ones, and the amax word's value before the launch
        self.fmt, self.scale, self.amax0 = fmt, scale, amax0
        self.ldact, self.ldo, self.ldot = n + pads[0], n + pads[1], m + pads[2]

    def __str__(self):
        s = '%s x %s -> %-4s %3d x %3d x %4d' % (self.ta, self.tb, self.dt, self.m, self.n,
                                               self.k)
        if self.ta == 'bf16':
            s += ' %s%s' % ('NT'[self.trans[0]], 'NT'[self.trans[1]])
        dense = (self.k, self.k) if self.ta != 'bf16' else \
            (self.m if self.trans[0] else self.k, self.k if self.trans[1] else self.n)
        if (self.lda, self.ldb, self.ldd) != dense + (self.n,):
            s += ' ld %d/%d/%d' % (self.lda, self.ldb, self.ldd)
        if self.alpha != 1.0 or self.beta:
            s += ' alpha %g beta %g' % (self.alpha, self.beta)
        if self.sa is not None or self.sb is not None:
            s += ' sA %s sB %s' % (self.sa, self.sb)
        if self.dt == 'dgelu':
            s += ' %s scale %g' % (self.fmt, self.scale)
            if (self.ldact, self.ldo, self.ldot) != (self.n, self.n, self.m):
                s += ' ld a/out/outT %d/%d/%d' % (self.ldact, self.ldo, self.ldot)
        return s


def run_case(mod, c, rnd, strict=False):
    if c.ta == 'bf16':
        return run_case_bf16(mod, c, rnd, strict)
    dgelu = c.dt == 'dgelu'
    dt = 'bf16' if dgelu else c.dt                # D's dtype
    esz = R.ESIZE[dt]
    A = [[random_code(rnd, c.ta) for _ in range(c.k)] for _ in range(c.m)]
    B = [[random_code(rnd, c.tb) for _ in range(c.k)] for _ in range(c.n)]
    enc = (lambda x: R.enc16(x, 'bf16')) if dt == 'bf16' else R.f32_to_bits
    dec = R.DECODE[dt]
    old = None
    if c.beta:
        old = [[enc(rnd.uniform(-4, 4)) for _ in range(c.n)] for _ in range(c.m)]

    mem = ptxsim.Memory()

    def matrix(rows, ld, data):
        p = mem.alloc(max(rows * ld, 16))
        buf = bytearray(rows * ld)
        for r, row in enumerate(data):
            buf[r * ld:r * ld + len(row)] = bytes(row)
        mem.write(p, bytes(buf))
        return p
    pa = matrix(c.m, c.lda, A)
    pb = matrix(c.n, c.ldb, B)

    def scalar(v):
        if v is None:
            return 0
        p = mem.alloc(16)
        mem.write(p, struct.pack('<f', v))
        return p
    psa, psb = scalar(c.sa), scalar(c.sb)

    outs = R.Outputs(mem)
    dbytes = ((c.m - 1) * c.ldd + c.n) * esz
    pd = outs.alloc('d', dbytes)
    if old is not None:                           # the old D, where beta reads it
        for r in range(c.m):
            fmt = '<%d%s' % (c.n, 'H' if esz == 2 else 'I')
            mem.write(pd + r * c.ldd * esz, struct.pack(fmt, *old[r]))
    params = [pd, pa, pb, psa, psb, c.m, c.n, c.k, c.lda, c.ldb, c.ldd * esz,
              R.f32_to_bits(c.alpha), R.f32_to_bits(c.beta)]
    act = dgelu_params(c, rnd, mem, outs, scalar, params) if dgelu else None
    block = (2 * THREADS if dgelu else THREADS, 1, 1)
    errs, got, st = launch(mod, c, mem, outs, params, block, old is not None, strict)
    if st is None:
        return errs, 0.0, 0, ''
    scale = R.to_f32(R.to_f32(c.alpha * (1.0 if c.sa is None else c.sa)) *
                     (1.0 if c.sb is None else c.sb))
    bad = []
    av = [[R.fp8_value(x, c.ta) for x in row] for row in A]
    bv = [[R.fp8_value(x, c.tb) for x in row] for row in B]
    for r in range(c.m):
        for n in range(c.n):
            prods = [x * y for x, y in zip(av[r], bv[n])]
            exact = math.fsum(prods) * scale
            mag = math.fsum(abs(p) for p in prods) * abs(scale)
            if old is not None:
                o = dec(old[r][n])
                exact += c.beta * o
                mag += abs(c.beta * o)
            want = R.to_f32(exact)
            off = (r * c.ldd + n) * esz
            g = dec(struct.unpack_from('<H' if esz == 2 else '<I', got, off)[0])
            tol = ulp(want, dt) + (c.k / 32 + 8) * 2.0 ** -24 * mag
            if not abs(g - exact) <= tol:
                bad.append((r, n, g, exact, tol))
    if bad:
        errs.append('d: %d of %d elements off; first %s' % (len(bad), c.m * c.n, ', '.join(
            '[%d, %d] got %.6g want %.6g (tol %.2g)' % b for b in bad[:3])))
    if dgelu:
        errs += check_dgelu(c, outs, got, act)
    return errs, st['seconds'], st['instructions'], ''


def dgelu_params(c, rnd, mem, outs, scalar, params):
    """The _dgelu entries' inputs and outputs (a in [-4, 4), bf16), their parameters
    appended to params; returns a's codes."""
    act = [[R.enc16(rnd.uniform(-4, 4), 'bf16') for _ in range(c.n)] for _ in range(c.m)]
    pact = mem.alloc(max(c.m * c.ldact * 2, 16))
    for r in range(c.m):
        mem.write(pact + r * c.ldact * 2, struct.pack('<%dH' % c.n, *act[r]))
    pout = outs.alloc('out', (c.m - 1) * c.ldo + c.n)
    poutt = outs.alloc('outT', (c.n - 1) * c.ldot + c.m)
    pscale = scalar(c.scale)
    pamax = outs.alloc('amax', 4, fill=struct.pack('<I', c.amax0))
    psinv = outs.alloc('scale_inv', 4)
    params += [pact, c.ldact * 2, pout, c.ldo, poutt, c.ldot, pscale, pamax, psinv,
               3 if c.fmt == 'e4m3' else 4]
    return act


def launch(mod, c, mem, outs, params, block, beta, strict):
    """Run c's entry on its grid; (errors, D's bytes, stats), stats None when the launch
    failed. Without beta, D's bytes outside the M x N elements must stay unwritten."""
    esz = 4 if c.dt == 'f32' else 2
    grid = ((c.n + 31) // 32, (c.m + 31) // 32, 1)
    entry = 'l8_gemm_small_%s_%s_%s' % (c.ta, c.tb, c.dt)
    st, err = R.run_launch(mod, entry, grid=grid, block=block, params=params, mem=mem,
                           strict_undef=strict)
    if err:
        return [err], None, None
    errs = []
    if not beta:                                  # exactly the M x N elements written
        pad = [((r * c.ldd + c.n) * esz, ((r + 1) * c.ldd) * esz) for r in range(c.m - 1)]
        errs += outs.check_coverage('d', skip=[p for p in pad if p[0] < p[1]])
    return errs, outs.read('d'), st


def run_case_bf16(mod, c, rnd, strict=False):
    """A bf16 entry's case: D against the banner's chain bit for bit, then the _dgelu
    outputs as for the FP8 entries."""
    ta, tb = c.trans
    A = [[random_bf16(rnd) for _ in range(c.k)] for _ in range(c.m)]    # op(A) (M, K)
    B = [[random_bf16(rnd) for _ in range(c.n)] for _ in range(c.k)]    # op(B) (K, N)
    old = None
    if c.beta:
        old = [[R.enc16(rnd.uniform(-4, 4), 'bf16') for _ in range(c.n)] for _ in range(c.m)]
    mem = ptxsim.Memory()

    def stored(mat, rows, cols, trans, ld):
        """mat (rows x cols) as stored: transposed when trans, ld elements a row."""
        srows = cols if trans else rows
        p = mem.alloc(max(srows * ld * 2, 16))
        buf = bytearray(srows * ld * 2)
        for i in range(rows):
            for j in range(cols):
                at = (j * ld + i) if trans else (i * ld + j)
                struct.pack_into('<H', buf, 2 * at, mat[i][j])
        mem.write(p, bytes(buf))
        return p
    pa = stored(A, c.m, c.k, ta, c.lda)
    pb = stored(B, c.k, c.n, tb, c.ldb)

    def scalar(v):
        p = mem.alloc(16)
        mem.write(p, struct.pack('<f', v))
        return p
    outs = R.Outputs(mem)
    pd = outs.alloc('d', ((c.m - 1) * c.ldd + c.n) * 2)
    if old is not None:
        for r in range(c.m):
            mem.write(pd + r * c.ldd * 2, struct.pack('<%dH' % c.n, *old[r]))
    sar, sak = (2, 2 * c.lda) if ta else (2 * c.lda, 2)
    sbk, sbn = (2, 2 * c.ldb) if tb else (2 * c.ldb, 2)
    params = [pd, pa, pb, c.m, c.n, c.k, sar, sak, sbk, sbn, c.ldd * 2,
              R.f32_to_bits(c.alpha), R.f32_to_bits(c.beta)]
    act = dgelu_params(c, rnd, mem, outs, scalar, params) if c.dt == 'dgelu' else None
    errs, got, st = launch(mod, c, mem, outs, params, (256, 1, 1), old is not None, strict)
    if st is None:
        return errs, 0.0, 0, ''
    av = [[R.bf16_to_f32(x) for x in row] for row in A]
    bv = [[R.bf16_to_f32(x) for x in row] for row in B]
    alpha, beta = R.to_f32(c.alpha), R.to_f32(c.beta)
    bad = []
    for r in range(c.m):
        for n in range(c.n):
            acc = 0.0
            for k in range(c.k):
                acc = fma_f32(av[r][k], bv[k][n], acc)
            t = R.to_f32(acc * alpha)
            if old is not None:
                t = fma_f32(beta, R.bf16_to_f32(old[r][n]), t)
            want = R.enc16(t, 'bf16')
            g = struct.unpack_from('<H', got, (r * c.ldd + n) * 2)[0]
            if g != want:
                bad.append((r, n, g, want))
    if bad:
        errs.append('d: %d of %d elements off; first %s' % (len(bad), c.m * c.n, ', '.join(
            '[%d, %d] got %#06x want %#06x' % b for b in bad[:3])))
    if act is not None:
        errs += check_dgelu(c, outs, got, act)
    return errs, st['seconds'], st['instructions'], ''


def check_dgelu(c, outs, got, act):
    """The _dgelu outputs against gelu_grad_cast of the kernel's own D: out and outT
    byte for byte (each M x N byte written once, the row padding never), the amax word
    (max of its old value and |g|'s bits), scale_inv = 1 / scale."""
    errs = []
    pad = [(r * c.ldo + c.n, (r + 1) * c.ldo) for r in range(c.m - 1)]
    errs += outs.check_coverage('out', skip=[p for p in pad if p[0] < p[1]])
    pad = [(r * c.ldot + c.m, (r + 1) * c.ldot) for r in range(c.n - 1)]
    errs += outs.check_coverage('outT', skip=[p for p in pad if p[0] < p[1]])
    out, outt = outs.read('out'), outs.read('outT')
    amax, bad = c.amax0, []
    for r in range(c.m):
        for n in range(c.n):
            x = R.bf16_to_f32(struct.unpack_from('<H', got, (r * c.ldd + n) * 2)[0])
            gb, q = gelu_grad_cast(x, R.bf16_to_f32(act[r][n]), c.scale, c.fmt)
            amax = max(amax, (gb << 16) & 0x7fffffff)
            o, t = out[r * c.ldo + n], outt[n * c.ldot + r]
            if o != q or t != q:
                bad.append((r, n, o, t, q))
    if bad:
        errs.append('FP8: %d of %d elements off; first %s' % (len(bad), c.m * c.n, ', '.join(
            '[%d, %d] out %#x outT %#x want %#x' % b for b in bad[:3])))
    g = struct.unpack('<I', outs.read('amax'))[0]
    if g != amax:
        errs.append('amax %#x, want %#x' % (g, amax))
    g = struct.unpack('<f', outs.read('scale_inv'))[0]
    if g != R.to_f32(1.0 / c.scale):
        errs.append('scale_inv %r, want %r' % (g, R.to_f32(1.0 / c.scale)))
    return errs


def cases(quick, fuzz, seed):
    """Every entry (3 input pairs x 2 D dtypes) at one whole tile and one chunk; tails in
    M (not a multiple of 32, or of 8), in N (a multiple of 8, not of 32) and in K (a
    chunk of 16, 32 or 48 bytes past the last 64); K spanning more than 8 chunks (a warp
    loops twice) or fewer than 4 (warps without a chunk); several CTAs; padded row
    strides; alpha, sA, sB; beta with f32 and bf16 D."""
    L = []
    for dt in ('bf16', 'f32'):
        for ta, tb in PAIRS:
            L.append(Case(ta, tb, dt, 32, 32, 64))
    L += [
        Case('e5m2', 'e4m3', 'bf16', 40, 24, 208, sa=0.5, sb=3.0),
        Case('e4m3', 'e4m3', 'bf16', 17, 40, 16, alpha=-0.25),
        Case('e4m3', 'e5m2', 'f32', 33, 48, 528, lda_pad=16, ldb_pad=32, ldd_pad=4,
             beta=1.0),
        Case('e4m3', 'e4m3', 'f32', 64, 64, 96, sa=2.0 ** -5, beta=0.5),
        Case('e5m2', 'e4m3', 'bf16', 48, 16, 176, ldd_pad=8, beta=-1.0, sb=0.125),
        Case('e4m3', 'e4m3', 'bf16', 70, 72, 48, ldd_pad=24),
        Case('e4m3', 'e4m3', 'bf16', 40, 32, 592, alpha=0.5),
    ]
    # the _dgelu entries: every pair, both formats; a tail in N and several CTAs; M a
    # multiple of 8, not of 32; padded strides; alpha, sA, beta; a saturating scale and
    # an amax word above every |g|
    for ta, tb in PAIRS:
        L.append(Case(ta, tb, 'dgelu', 32, 32, 64))
    L += [
        Case('e5m2', 'e4m3', 'dgelu', 64, 40, 128, fmt='e4m3', scale=2.0, sb=0.5),
        Case('e5m2', 'e4m3', 'dgelu', 24, 48, 96, pads=(8, 8, 8), ldd_pad=8, alpha=0.5,
             beta=1.0),
        Case('e4m3', 'e4m3', 'dgelu', 40, 16, 32, scale=4096.0, amax0=0x7f000000),
    ]
    # the bf16 entries: every transpose pair; tails in M and N (N % 4 == 0) and several
    # CTAs; K of 1, of 10 (lean8-train's head), 31 and 32 (warps without a k, all four
    # staging rounds); padded strides; alpha, beta; the _dgelu entry with both formats,
    # pads, beta, a saturating scale and a high amax word
    L += [
        Case('bf16', 'bf16', 'bf16', 32, 32, 10),
        Case('bf16', 'bf16', 'bf16', 37, 44, 7, trans=(0, 1), alpha=-0.5),
        Case('bf16', 'bf16', 'bf16', 33, 40, 32, trans=(1, 0), lda_pad=3, ldb_pad=5,
             ldd_pad=4),
        Case('bf16', 'bf16', 'bf16', 20, 68, 31, trans=(1, 1), beta=1.0, ldd_pad=8),
        Case('bf16', 'bf16', 'bf16', 5, 4, 1, beta=-0.5, alpha=2.0),
        Case('bf16', 'bf16', 'dgelu', 32, 32, 10),
        Case('bf16', 'bf16', 'dgelu', 40, 48, 10, fmt='e4m3', pads=(8, 8, 8), ldd_pad=4,
             beta=1.0, ldb_pad=2),
        Case('bf16', 'bf16', 'dgelu', 24, 16, 32, scale=4096.0, amax0=0x7f000000,
             trans=(1, 1)),
    ]
    if not quick:
        L.append(Case('e4m3', 'e4m3', 'bf16', 64, 64, 1024))
    rnd = random.Random(seed)
    for _ in range(fuzz):
        if rnd.random() < 0.25:               # a bf16 entry
            dt = rnd.choice(('bf16', 'dgelu'))
            L.append(Case('bf16', 'bf16', dt, 8 * rnd.randint(1, 6) if dt == 'dgelu'
                          else rnd.randint(1, 48), 4 * rnd.randint(1, 12), rnd.randint(1, 32),
                          lda_pad=rnd.randint(0, 3), ldb_pad=rnd.randint(0, 3),
                          ldd_pad=4 * rnd.randint(0, 2), alpha=rnd.choice((1.0, 0.5, -2.0)),
                          beta=rnd.choice((0.0, 0.0, 1.0)), trans=(rnd.randint(0, 1),
                                                                   rnd.randint(0, 1)),
                          fmt=rnd.choice(('e4m3', 'e5m2')), scale=rnd.choice((1.0, 64.0))))
            continue
        ta, tb = rnd.choice(PAIRS)
        dt = rnd.choice(('bf16', 'f32', 'dgelu'))
        L.append(Case(ta, tb, dt, 8 * rnd.randint(1, 6) if dt == 'dgelu' else rnd.randint(1, 48),
                      8 * rnd.randint(1, 6), 16 * rnd.randint(1, 20),
                      lda_pad=16 * rnd.randint(0, 2), ldb_pad=16 * rnd.randint(0, 2),
                      ldd_pad=8 * rnd.randint(0, 2),
                      alpha=rnd.choice((1.0, 0.5, -2.0)),
                      beta=rnd.choice((0.0, 0.0, 1.0)),
                      sa=rnd.choice((None, 0.25)), sb=rnd.choice((None, 4.0)),
                      fmt=rnd.choice(('e4m3', 'e5m2')), scale=rnd.choice((1.0, 64.0))))
    return L


def main(argv=None):
    a, t0, mod = R.start(R.arg_parser(__doc__, 'gemm_small.ptx', 3), argv)
    print('ptxsim gemm_small: %s' % a.ptx)

    def one(case, rnd):
        return run_case(mod, case, rnd, a.strict_undef)
    return R.run_cases('gemm_small', cases(a.quick, a.fuzz, a.seed), one, a, t0)


if __name__ == '__main__':
    sys.exit(main())
