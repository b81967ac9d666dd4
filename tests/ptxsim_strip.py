#!/usr/bin/env python3
"""ptxsim_strip.py - the strip kernel (ptx/cast_transpose_strip.ptx.in, all eight entries)
run through tools/ptxsim.py on the CPU and compared with an independent pure-Python
reference written from the kernel's banner (its contract), not from its code:

    out [r][c]  = fp8(f32(X[r][c] * scale))      (one f32 rounding, then cvt.rn.satfinite)
    outT[c][r]  = the same byte
    amax        = u32 max over all elements of the sign-cleared f32 bits of X (from 0)
    scale_inv   = f32(1 / scale)
    ws[tr][c]   = sum_{j=0..15} (sum_{i=0..7} X[128 tr + j + 16 i][c])  (db entries;
                  each sum sequential from +0.0 in f32, rows past the end add nothing)
    dbias[c]    = sum over tr of ws[tr][c], sequential from +0.0 in f32, stored as f32,
                  bf16 or f16 (RNE) as p_otype says (the _cl entries, run in clusters
                  of a strip's segments)

Every output buffer sits between guard bytes that are never written by the host (the
simulator tracks written bytes): the test checks that the kernel wrote every byte of
each output and none of the guards. The FP8 conversion of the reference is the
project's host reference l8_fp8_from_f32 (build/liblean8.so, through ctypes) where it
can be loaded, else the decoder-table encoder below; before the cases, the reference
encoder, the library's and the simulator's are compared on ~520k f32 values.

    python3 tests/ptxsim_strip.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                  [--fuzz N] [--strict-undef]

The cases: fixed ones (every entry, both 16-bit inputs and FP8 formats, the offsets
each entry allows, segments of 128 to 512 rows, several per strip: the halo path), then
--fuzz random ones. Inputs are random values over many magnitudes with zeros of both
signs, negatives, values that saturate or underflow, inf / NaN in some cases. A
simulator fault (out-of-bounds, misaligned, undefined value, race, deadlock) fails the
case with its location. --ptx runs a modified copy of the module (the test must fail on
a broken kernel). Exit status 0 only if every case passes.
"""

import random
import struct
import sys
import time

import ptxsim_ref as R
from ptxsim_ref import ptxsim, E4M3, E5M2, to_f32, f32_to_bits, fp8_ref

def db_smem(dt):
    """ops/cast.c STRIP_DB_SMEM: the db entries' dynamic shared memory."""
    return 35456 + 128 * 128 * R.ESIZE[dt] + 16 * 128 * 4


# ---------------------------------------------------------------------------------------
# The encoders

def encoder_values():
    """~1M f32 bit patterns: every exponent, both signs, the mantissas around every
    rounding point of both formats (ties, either side), plus random ones."""
    rnd = random.Random(12345)
    out = []
    lows = set()
    for k in range(12, 24):
        h = 1 << (k - 1)
        lows.update({0, 1, h - 1, h, h + 1, (1 << k) - 1})
    lows = sorted(x for x in lows if x < (1 << 23))
    for s in (0, 0x80000000):
        for e in range(256):
            if 100 <= e <= 150:
                tops = range(0, 1 << 23, 1 << 17)        # 64 top patterns
            else:
                tops = range(0, 1 << 23, 1 << 21)
            for t in tops:
                for lo in lows:
                    out.append(s | (e << 23) | ((t | lo) & 0x7fffff))
    out += [rnd.getrandbits(32) for _ in range(200000)]
    return out


def check_encoders(lib):
    """Compare the reference, the library (if loaded) and the simulator on many values."""
    vals = encoder_values()
    bad = 0
    for b in vals:
        x = R.bits_to_f32(b)
        for fmt, name in ((E4M3, 'e4m3'), (E5M2, 'e5m2')):
            r = fp8_ref(x, fmt)
            s = ptxsim.fp8_from_f32_bits(b, name)
            lv = lib(x, fmt) if lib else r
            if not r == s == lv:
                bad += 1
                if bad <= 5:
                    print('  fp8 %s of %#010x: reference %#04x, simulator %#04x, library '
                          '%s' % (name, b, r, s, '%#04x' % lv if lib else '-'))
    return len(vals), bad


# ---------------------------------------------------------------------------------------
# One case

class Case:
    def __init__(self, var, dt, R, C, seg, fmt, in_off=0, out_off=0, outt_off=0,
                 no_out=False, special=False, otype=0):
        self.var, self.dt, self.R, self.C, self.seg, self.fmt = var, dt, R, C, seg, fmt
        self.in_off, self.out_off, self.outt_off = in_off, out_off, outt_off
        self.no_out, self.special, self.otype = no_out, special, otype

    @property
    def entry(self):
        if self.var == 'plain':
            return 'l8_cast_transpose_strip_%s' % self.dt
        return 'l8_cast_transpose_strip_%s_%s' % (self.var, self.dt)

    def __str__(self):
        s = '%-6s %-4s %3dx%-3d seg=%d %s in+%d out+%s outT+%d' % (
            self.var, self.dt, self.R, self.C, self.seg,
            'e5m2' if self.fmt == E5M2 else 'e4m3', self.in_off,
            '-' if self.no_out else self.out_off, self.outt_off)
        if self.var.endswith('_cl'):
            s += ' dbias %s' % ('f32', 'bf16', 'f16')[self.otype]
        if self.no_out:
            s += ' (p_out, p_amax, p_scale_inv = 0)'
        return s + (' with inf/NaN' if self.special else '')


def run_case(mod, case, rnd, fp8, strict=False):
    R_, C = case.R, case.C
    db = case.var.startswith('db')
    cl = case.var.endswith('_cl')
    n = R_ * C
    X = R.make_input(rnd, case.dt, n, case.special)
    scale = rnd.choice((1.0, 2.0, 0.5, 3.1415927, 57.25, 448.0 / 300.0, 0.0078125, 1024.0))
    scale = to_f32(scale)

    # the reference
    xs = [R.DECODE[case.dt](h) for h in X]
    cache = {}
    want = bytearray(n)
    for i, x in enumerate(xs):
        b = cache.get(X[i])               # keyed by the bits: 0.0 == -0.0
        if b is None:
            b = cache[X[i]] = fp8(to_f32(x * scale), case.fmt)
        want[i] = b
    want_t = bytearray(n)
    for r in range(R_):
        want_t[r::R_] = want[r * C:(r + 1) * C]
    want_amax = max(f32_to_bits(x) & 0x7fffffff for x in xs) if n else 0
    want_sinv = f32_to_bits(to_f32(1.0 / scale))
    ntr = (R_ + 127) // 128
    part = R.dbias_partials(xs, R_, C) if db else []
    want_ws = [v for row in part for v in row]
    want_db = [R.f32_to_dtype_bits(v, case.otype) for v in R.dbias_total(part, C)] if cl else []

    # device memory: inputs written, outputs and guards never written by the host
    mem = ptxsim.Memory()
    nin = (case.in_off + R.ESIZE[case.dt] * n + 3) // 4 * 4
    a_in = mem.alloc(nin)
    mem.write(a_in + case.in_off, R.pack_input(case.dt, X))
    o = R.Outputs(mem)
    p_out = 0 if case.no_out else o.alloc('out', n, case.out_off)
    p_outt = o.alloc('outT', n, case.outt_off)
    a_scale = mem.alloc(4)
    mem.write(a_scale, struct.pack('<f', scale))
    p_amax = p_sinv = 0
    if not case.no_out:
        p_amax = mem.alloc(4, fill=0)
        p_sinv = o.alloc('scale_inv', 4)
    p_ws = o.alloc('ws', ntr * C * 4) if db else 0
    dsz = 4 if case.otype == 0 else 2
    p_db = o.alloc('dbias', C * dsz) if cl else 0
    gx, gy = (C + 127) // 128, (R_ + case.seg - 1) // case.seg
    t0 = time.time()
    st, err = R.run_launch(mod, case.entry, grid=(gx, gy, 1), block=(512, 1, 1),
                           params=[a_in + case.in_off, p_out, p_outt, a_scale, p_amax, p_sinv,
                                   p_ws, R_, C, case.seg, case.fmt, p_db, case.otype],
                           mem=mem, dyn_smem=db_smem(case.dt) if db else 0,
                           strict_undef=strict,
                           cluster=(1, gy, 1) if cl else (1, 1, 1))
    if err:
        return [err], time.time() - t0, 0

    # compare: every byte of each output written, no guard byte; then the values
    errs = []
    for name in o.bufs:
        errs += o.check_coverage(name)

    def pos_out(i):
        r, c = divmod(i, C)
        return '[%d][%d] (x %r)' % (r, c, xs[i])

    def pos_t(i):
        c, r = divmod(i, R_)
        return '[%d][%d] (x %r)' % (c, r, xs[r * C + c])
    if not case.no_out:
        R.cmp_bytes(errs, 'out', o.read('out'), want, pos_out)
        got = struct.unpack('<I', mem.read(p_amax, 4))[0]
        if got != want_amax and not (got > 0x7f800000 and want_amax > 0x7f800000):
            errs.append('amax: got %#010x want %#010x' % (got, want_amax))
        got = struct.unpack('<I', o.read('scale_inv'))[0]
        if got != want_sinv:
            errs.append('scale_inv: got %#010x want %#010x' % (got, want_sinv))
    R.cmp_bytes(errs, 'outT', o.read('outT'), want_t, pos_t)
    if db:
        got = struct.unpack('<%df' % (ntr * C), o.read('ws'))
        diff = [i for i in range(len(want_ws)) if not R.same_f32(got[i], want_ws[i])]
        if diff:
            errs.append('ws: %d partials differ; first: %s' % (len(diff), ', '.join(
                '[%d][%d] got %r want %r' % (i // C, i % C, got[i], want_ws[i])
                for i in diff[:4])))
    if cl:
        got = struct.unpack('<%d%s' % (C, 'I' if dsz == 4 else 'H'), o.read('dbias'))
        diff = [c for c in range(C) if got[c] != want_db[c]]
        if diff:
            errs.append('dbias: %d columns differ; first: %s' % (len(diff), ', '.join(
                '[%d] got %#x want %#x' % (c, got[c], want_db[c]) for c in diff[:4])))
    return errs, time.time() - t0, st['instructions']


def cases(quick, fuzz, seed):
    """plain / db: cols % 8 == 0, input 16-B and out 8-B aligned, rows % 16 != 0;
    w / db_w: any columns, input 2-B aligned (offsets 0, 2, 4, 6), out and outT at any
    offset; segments of 128 and 256 rows, several of them (the halo path); then fuzz
    cases of random shapes, entries and offsets."""
    L = [
        Case('plain', 'bf16', 131, 136, 128, E4M3),
        Case('plain', 'f16', 257, 72, 128, E5M2, outt_off=5),
        Case('plain', 'bf16', 300, 200, 256, E5M2, in_off=16, out_off=8, outt_off=10),
        Case('plain', 'f16', 383, 136, 128, E4M3, outt_off=15, special=True),
        Case('plain', 'bf16', 7, 264, 128, E4M3, outt_off=3),
        Case('plain', 'f16', 131, 136, 128, E4M3, no_out=True),
        Case('db', 'bf16', 131, 136, 128, E4M3),
        Case('db', 'f16', 257, 72, 256, E5M2, outt_off=5),
        Case('db', 'bf16', 300, 200, 128, E4M3, outt_off=10, out_off=8),
        Case('db', 'f16', 383, 136, 256, E4M3, in_off=16, outt_off=15),
        Case('w', 'bf16', 37, 9, 128, E4M3),
        Case('w', 'f16', 129, 127, 128, E5M2, in_off=2, out_off=5, outt_off=5),
        Case('w', 'bf16', 383, 250, 256, E4M3, in_off=4, out_off=2, outt_off=10),
        Case('w', 'f16', 257, 131, 128, E4M3, in_off=6, out_off=7, outt_off=15,
             special=True),
        Case('w', 'bf16', 5, 300, 128, E5M2, in_off=2, out_off=3, outt_off=1),
        Case('db_w', 'bf16', 37, 9, 128, E5M2, in_off=6, out_off=7, outt_off=15),
        Case('db_w', 'f16', 129, 127, 128, E4M3, in_off=4, out_off=2, outt_off=10),
        Case('db_w', 'bf16', 300, 201, 128, E5M2, in_off=2, out_off=5, outt_off=5),
        Case('db_w', 'f16', 383, 250, 256, E4M3),
        Case('db', 'bf16', 1100, 48, 512, E5M2, outt_off=9),      # 4-step segments
        Case('w', 'f16', 1037, 21, 384, E4M3, in_off=2, out_off=3, outt_off=6),
        Case('plain', 'f32', 131, 136, 128, E4M3, outt_off=5, special=True),
        Case('plain', 'f32', 300, 200, 256, E5M2, in_off=16, out_off=8, outt_off=10),
        Case('w', 'f32', 129, 127, 128, E5M2, in_off=4, out_off=5, outt_off=5),
        Case('w', 'f32', 383, 250, 256, E4M3, in_off=8, out_off=2, outt_off=15,
             special=True),
        Case('w', 'f32', 37, 9, 128, E4M3, in_off=12, out_off=7, outt_off=1),
        Case('db_cl', 'bf16', 300, 200, 128, E4M3, outt_off=10, out_off=8, otype=0),
        Case('db_cl', 'f16', 1100, 48, 256, E5M2, outt_off=9, otype=1),
        Case('db_cl', 'bf16', 131, 136, 128, E4M3, otype=2),
        Case('db_w_cl', 'f16', 383, 250, 128, E4M3, in_off=2, out_off=5, outt_off=5),
        Case('db_w_cl', 'bf16', 129, 127, 128, E5M2, in_off=6, out_off=7, outt_off=15,
             otype=1),
        Case('db_w_cl', 'f16', 37, 9, 128, E4M3, in_off=4, out_off=2, outt_off=10,
             otype=2),
        Case('db', 'f32', 300, 200, 128, E4M3, outt_off=10, out_off=8),
        Case('db_w', 'f32', 129, 127, 128, E5M2, in_off=4, out_off=5, outt_off=5),
        Case('db_cl', 'f32', 383, 136, 128, E4M3, in_off=16, outt_off=15, otype=1),
        Case('db_w_cl', 'f32', 257, 131, 256, E5M2, in_off=12, out_off=3, outt_off=6,
             otype=2),
    ]
    rnd = random.Random(seed)
    for _ in range(fuzz):             # random shapes, entries, offsets
        var = rnd.choice(('plain', 'w', 'db', 'db_w', 'db_cl', 'db_w_cl'))
        dt = rnd.choice(('bf16', 'f16', 'f32'))
        w = 'w' in var
        while True:
            R = rnd.randint(1, 640)
            C = rnd.randint(1, 320) if w else 8 * rnd.randint(1, 40)
            if R % 16 and R * C <= 48000:
                break
        seg = rnd.choice((128, 256))
        if var.endswith('_cl'):           # at most 8 segments: one cluster a strip
            seg = max(seg, 128 * -(-((R + 127) // 128) // 8))
        esz = 4 if dt == 'f32' else 2
        L.append(Case(var, dt, R, C, seg, rnd.choice((E4M3, E5M2)),
                      in_off=esz * rnd.randint(0, 3) if w else rnd.choice((0, 16)),
                      out_off=rnd.randint(0, 7) if w else rnd.choice((0, 8)),
                      outt_off=rnd.randint(0, 15), no_out=rnd.random() < 0.1,
                      special=not var.startswith('db') and rnd.random() < 0.3,
                      otype=rnd.randint(0, 2)))
    if quick:
        L = [c for c in L if c.R * c.C <= 40000]
    return L


def main(argv=None):
    ap = R.arg_parser(__doc__, 'cast_transpose_strip.ptx', 30)
    ap.add_argument('--no-encoder-check', action='store_true')
    a, t0, mod = R.start(ap, argv)
    lib = R.load_lib()
    fp8, what = R.fp8_encoder()
    print('ptxsim strip: %s, FP8 reference %s' % (a.ptx, what))
    nc = fails = 0
    if not a.no_encoder_check and not a.only:
        t = time.time()
        nv, bad = check_encoders(lib)
        nc += 1
        fails += bad != 0
        print('%s fp8 encoders (reference, simulator%s) on %d f32 values: %d mismatches '
              '(%.1f s)' % ('ok  ' if not bad else 'FAIL', ', library' if lib else '', nv,
                            bad, time.time() - t))

    def one(case, rnd):
        return run_case(mod, case, rnd, fp8, a.strict_undef) + ('',)
    return R.run_cases('strip', cases(a.quick, a.fuzz, a.seed), one, a, t0, nc, fails)


if __name__ == '__main__':
    sys.exit(main())
