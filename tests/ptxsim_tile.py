#!/usr/bin/env python3
"""ptxsim_tile.py - the tile kernel (ptx/cast_transpose.ptx.in: l8_cast_transpose_{T}
and l8_cast_transpose_w_{T}, T = bf16, f16, f32), and l8_dbias_reduce after it, run
through tools/ptxsim.py on the CPU and compared with a reference written from the
kernel's banner, ops/cast.h and ops/cast.c's host reference ct_host (the contract), not
from its code:

    out [r][c]  = fp8(f32(X[r][c] * scale))      (one f32 rounding, then cvt.rn.satfinite)
    outT[c][r]  = the same byte
    row-padded out (ldo > cols, % 16, 16-B aligned): columns cols .. C16 - 1 of every
                  row 0x00, C16 = cols rounded up to 16; the columns past C16 unwritten
    row-padded outT (ldt > rows): columns rows .. R16 - 1 fp8(0 * scale), as ct_host
    amax        = max(its word's value, u32 max of the sign-cleared f32 bits of X)
    scale_inv   = f32(1 / scale)
    ws[tr][c]   = sum_{j=0..15} (sum_{i=0..7} X[128 tr + j + 16 i][c])  (each sum
                  sequential from +0.0 in f32), then l8_dbias_reduce: dbias[c] =
                  sum_tr ws[tr][c] from +0.0, cvt.rn to f32 / bf16 / f16; with one tile
                  row (DB_DIRECT, grid = the tile columns) the kernel writes dbias itself

The flags and the form are the launcher's (ops/cast.c, cast_transpose_impl: VEC_ROW,
IN_WORDS, VEC_T16, DB_DIRECT and the dbias type) unless a case forces a form (each form
must take any tile through its edge path); the grid is one CTA a tile unless a case
gives fewer. Every output sits between guard bytes the host never writes: the test
checks that the kernel wrote every byte it should and nothing else, and compares every
byte. The FP8 reference is l8_fp8_from_f32 (build/liblean8.so, ctypes) where it loads,
else the encoder of tests/ptxsim_ref.py. Before the cases (not with --only),
l8_dbias_reduce runs alone on random partials at 1, 63, 64, 65 and 130 tile rows (the
cases reach a few: these cross its batches of loads and their remainder) and 1 to 129
columns, each dbias type, against the sequential sum.

    python3 tests/ptxsim_tile.py [--ptx FILE] [--quick] [--only SUBSTR] [--seed N]
                                 [--fuzz N] [--strict-undef]

A simulator fault (out of bounds, misaligned, undefined value, race, deadlock) fails the
case with its location. --ptx runs a modified copy of the module (the test must fail on
a broken kernel). Exit status 0 only if every case passes.
"""

import random
import struct
import sys

import ptxsim_ref as R
from ptxsim_ref import ptxsim, E4M3, E5M2

VEC_ROW, VEC_T16, IN_WORDS, DB_DIRECT = 0x1, 0x2, 0x10, 0x20    # p_flags (ops/cast.c)
DB_NAMES = ('f32', 'bf16', 'f16')                               # dbias type: 0, 1, 2


class Case:
    def __init__(self, form, dt, rows, cols, fmt, in_off=0, out_off=0, outt_off=0,
                 ldo=None, ldt=None, db=None, no_out=False, no_outt=False, grid=None,
                 special=False, amax0=0, no_meta=False, scale=None):
        self.form, self.dt, self.rows, self.cols, self.fmt = form, dt, rows, cols, fmt
        self.in_off, self.out_off, self.outt_off = in_off, out_off, outt_off
        self.ldo, self.ldt = ldo or cols, ldt or rows
        self.db, self.no_out, self.no_outt, self.grid = db, no_out, no_outt, grid
        self.special, self.amax0, self.no_meta, self.scale = special, amax0, no_meta, scale
        # the padded layouts (ops/cast.h): % 16 strides, 16-B aligned (GUARD is)
        assert self.ldt == rows or (self.ldt % 16 == 0 and outt_off % 16 == 0)
        assert self.ldo == cols or (self.ldo % 16 == 0 and out_off % 16 == 0 and
                                    not no_outt)

    def flags(self, p_in, p_out, p_outt):
        """ops/cast.c's flags (ct_prepare, cast_transpose_impl) and the entry's form."""
        kf = 0
        if self.cols % 8 == 0 and p_in % 16 == 0 and (not p_out or p_out % 8 == 0):
            kf |= VEC_ROW
        if p_in % 4 == 0:
            kf |= IN_WORDS
        if self.ldt % 16 == 0 and p_outt and p_outt % 16 == 0:
            kf |= VEC_T16
        if self.db is not None and (self.rows + 127) // 128 <= 1:
            kf |= DB_DIRECT | self.db << 6
        form = self.form or ('v' if kf & VEC_ROW else 'w')
        return kf, form

    def __str__(self):
        s = '%-2s %-4s %4dx%-4d %s in+%d out+%s outT+%s' % (
            self.form or '', self.dt, self.rows, self.cols, R.fmt_name(self.fmt),
            self.in_off, '-' if self.no_out else self.out_off,
            '-' if self.no_outt else self.outt_off)
        if self.ldo != self.cols:
            s += ' ldo %d' % self.ldo
        if self.ldt != self.rows:
            s += ' ldt %d' % self.ldt
        if self.db is not None:
            s += ' dbias %s' % DB_NAMES[self.db]
        if self.grid:
            s += ' grid %d' % self.grid
        if self.no_meta:
            s += ' (p_amax, p_scale_inv = 0)'
        if self.amax0:
            s += ' amax from %#x' % self.amax0
        if self.scale is not None:
            s += ' scale %g' % self.scale
        return s + (' with inf/NaN' if self.special else '')


def launch_reduce(mod, mem, p_ws, p_db, ntr, cols, otype, strict=False):
    """l8_dbias_reduce as ops/cast.c launches it: 64 threads a CTA, one column each."""
    return R.run_launch(mod, 'l8_dbias_reduce', grid=((cols + 63) // 64, 1, 1),
                        block=(64, 1, 1), params=[p_ws, p_db, ntr, cols, otype], mem=mem,
                        strict_undef=strict)


def run_case(mod, case, rnd, fp8, strict=False):
    rows, cols, dt, ldo, ldt = case.rows, case.cols, case.dt, case.ldo, case.ldt
    n = rows * cols
    X = R.make_input(rnd, dt, n, case.special)
    R.plant_max(rnd, dt, X)               # amax then depends on one random element
    scale = rnd.choice((1.0, 2.0, 0.5, 3.1415927, 57.25, 448.0 / 300.0, 0.0078125, 1024.0))
    scale = R.to_f32(case.scale if case.scale is not None else scale)
    xs = [R.DECODE[dt](h) for h in X]

    # the reference
    cache = {}
    q = bytearray(n)
    for i, x in enumerate(xs):
        b = cache.get(X[i])               # keyed by the bits: 0.0 == -0.0
        if b is None:
            b = cache[X[i]] = fp8(R.to_f32(x * scale), case.fmt)
        q[i] = b
    c16 = min((cols + 15) // 16 * 16, ldo)
    r16 = min((rows + 15) // 16 * 16, ldt)
    want_out = bytearray(rows * ldo)
    for r in range(rows):
        want_out[r * ldo:r * ldo + cols] = q[r * cols:(r + 1) * cols]   # pad: 0x00
    want_t = bytearray([fp8(R.to_f32(0.0 * scale), case.fmt)]) * (cols * ldt)
    for r in range(rows):
        want_t[r:cols * ldt:ldt] = q[r * cols:(r + 1) * cols]
    want_amax = max([case.amax0] + [R.f32_to_bits(x) & 0x7fffffff for x in xs])
    ntr, ntc = (rows + 127) // 128, (cols + 127) // 128
    part = R.dbias_partials(xs, rows, cols) if case.db is not None else None

    # device memory: the input behind bytes never written, outputs between guards
    mem = ptxsim.Memory()
    esz = R.ESIZE[dt]
    a_in = mem.alloc((case.in_off + esz * n + 3) // 4 * 4)    # word loads' last bytes
    p_in = a_in + case.in_off
    mem.write(p_in, R.pack_input(dt, X))
    o = R.Outputs(mem)
    p_out = 0 if case.no_out else o.alloc('out', rows * ldo, case.out_off)
    p_outt = 0 if case.no_outt else o.alloc('outT', cols * ldt, case.outt_off)
    a_scale = mem.alloc(4)
    mem.write(a_scale, struct.pack('<f', scale))
    p_amax = p_sinv = 0
    if not case.no_meta:
        p_amax = mem.alloc(4)
        mem.write(p_amax, struct.pack('<I', case.amax0))
        p_sinv = o.alloc('scale_inv', 4)
    kf, form = case.flags(p_in, p_out, p_outt)
    direct = bool(kf & DB_DIRECT)
    dsz = 4 if case.db == 0 else 2
    p_db = o.alloc('dbias', dsz * cols) if case.db is not None and cols else 0
    p_ws = o.alloc('ws', 4 * ntr * cols) if case.db is not None and not direct and n else 0
    grid = max(ntc, 1) if direct else case.grid or max(ntr * ntc, 1)
    entry = 'l8_cast_transpose_%s%s' % ('w_' if form == 'w' else '', dt)
    st, err = R.run_launch(mod, entry, grid=(grid, 1, 1), block=(256, 1, 1),
                           params=[p_in, p_out, p_outt, a_scale, p_amax, p_sinv,
                                   p_db if direct else p_ws, rows, cols, kf, case.fmt, ldt,
                                   ldo], mem=mem, strict_undef=strict)
    info = (entry, kf, grid)
    if err:
        return [err], 0.0, 0, info
    sec, ni = st['seconds'], st['instructions']
    if p_ws and cols:
        st, err = launch_reduce(mod, mem, p_ws, p_db, ntr, cols, case.db, strict)
        if err:
            return ['l8_dbias_reduce: ' + err], sec, ni, info
        sec, ni = sec + st['seconds'], ni + st['instructions']

    # compare
    errs = []

    def row_skip(ld, n_rows, end):       # the padding past R16 / C16: never written
        return [(k * ld + end, (k + 1) * ld) for k in range(n_rows)] if end < ld else []
    xdesc = (lambda i: R.bits_to_f32(X[i])) if dt == 'f32' else (lambda i: xs[i])

    def check_padded(name, want, ld, n_rows, n_cols, end, x_index):
        """A [n_rows][ld] output: every byte below end written and compared (x_index(r, c):
        the input element of its row r, column c < n_cols), the rest of each row never."""
        skip = row_skip(ld, n_rows, end)
        errs.extend(o.check_coverage(name, skip))
        pad = {i for s, e in skip for i in range(s, e)}
        R.cmp_bytes(errs, name, o.read(name), want,
                    lambda i: '[%d][%d] (x %r)' % (i // ld, i % ld, xdesc(
                        x_index(i // ld, i % ld)) if i % ld < n_cols else 'pad'),
                    skip=pad.__contains__)
    if not case.no_out:
        check_padded('out', want_out, ldo, rows, cols, c16, lambda r, c: r * cols + c)
    if not case.no_outt:
        check_padded('outT', want_t, ldt, cols, rows, r16, lambda r, c: c * cols + r)
    if not case.no_meta:
        got = struct.unpack('<I', mem.read(p_amax, 4))[0]
        if got != want_amax and not (got > 0x7f800000 and want_amax > 0x7f800000):
            errs.append('amax: got %#010x want %#010x' % (got, want_amax))
        errs += o.check_coverage('scale_inv')
        got = struct.unpack('<I', o.read('scale_inv'))[0]
        if got != R.f32_to_bits(R.to_f32(1.0 / scale)):
            errs.append('scale_inv: got %#010x want %#010x' % (
                got, R.f32_to_bits(R.to_f32(1.0 / scale))))
    if p_ws:
        errs += o.check_coverage('ws')
        got = struct.unpack('<%df' % (ntr * cols), o.read('ws'))
        diff = [(tr, c) for tr in range(ntr) for c in range(cols)
                if not R.same_f32(got[tr * cols + c], part[tr][c])]
        if diff:
            errs.append('ws: %d partials differ; first: %s' % (len(diff), ', '.join(
                '[%d][%d] got %r want %r' % (tr, c, got[tr * cols + c], part[tr][c])
                for tr, c in diff[:4])))
    if p_db:
        errs += o.check_coverage('dbias')
        tot = R.dbias_total(part, cols)
        got = struct.unpack('<%d%s' % (cols, 'I' if dsz == 4 else 'H'), o.read('dbias'))
        want = [R.f32_to_dtype_bits(v, case.db) for v in tot]
        diff = [c for c in range(cols) if got[c] != want[c] and not (
            R.is_nan_bits(got[c], case.db) and R.is_nan_bits(want[c], case.db))]
        if diff:
            errs.append('dbias: %d columns differ; first: %s' % (len(diff), ', '.join(
                '[%d] got %#x want %#x (%r)' % (c, got[c], want[c], tot[c])
                for c in diff[:4])))
    return errs, sec, ni, info


def cases(quick, fuzz, seed):
    """Both forms and the three input types; odd shapes at odd offsets (the edge path, IN_
    WORDS' funnel shifts, OUT_SEG's 8-B blocks), aligned ones (VEC_ROW, VEC_T16),
    row-padded out / outT, no out, no outT (the split's cast), no amax / scale_inv, dbias
    of each type through l8_dbias_reduce and DB_DIRECT, grids of fewer CTAs than tiles,
    the forms forced onto each other's shapes, inf / NaN; then --fuzz random ones."""
    L = [
        Case(None, 'bf16', 131, 136, E4M3),
        Case(None, 'f16', 257, 72, E5M2, outt_off=5, db=0),
        Case(None, 'f32', 160, 200, E4M3, db=1),
        Case(None, 'bf16', 300, 200, E5M2, ldo=208, ldt=304, db=2),
        Case(None, 'f16', 128, 128, E4M3, db=0),                      # DB_DIRECT
        Case(None, 'f32', 100, 64, E5M2, out_off=8, outt_off=16, db=1),
        Case(None, 'bf16', 7, 8, E4M3, ldt=16, ldo=16),
        Case(None, 'bf16', 300, 200, E4M3, grid=2, db=0),
        Case(None, 'f16', 131, 136, E5M2, no_out=True, amax0=0x3f800000),
        Case(None, 'bf16', 257, 72, E4M3, no_outt=True, db=1),        # the split's cast
        Case(None, 'f32', 129, 64, E4M3, ldt=144, scale=-2.0),
        Case(None, 'bf16', 1, 1, E4M3, 2, 3, 1),
        Case(None, 'f16', 7, 9, E5M2, 6, 7, 15, db=0),
        Case(None, 'f32', 129, 127, E4M3, 4, 5, 7, db=1),
        Case(None, 'bf16', 131, 257, E5M2, 2, 16, 0, ldo=272, ldt=144),
        Case(None, 'f16', 300, 200, E4M3, 4, 0, 0, db=2),
        Case(None, 'f32', 37, 9, E5M2, 0, 3, 11, special=True),
        Case(None, 'bf16', 300, 201, E4M3, 2, 1, 0, grid=3, db=0),
        Case(None, 'f16', 1, 300, E5M2, 0, 0, 0, no_meta=True),
        Case(None, 'bf16', 300, 1, E4M3, 2, 0, 5, db=2),
        Case(None, 'f16', 383, 136, E4M3, 0, 0, 15, special=True),
        Case('v', 'bf16', 131, 136, E5M2, 4, 0, 0),                   # v without VEC_ROW
        Case('w', 'f32', 160, 200, E4M3, db=0),                       # w on VEC_ROW's shape
        Case('w', 'bf16', 129, 127, E4M3, 0, 16, 0, ldo=128, ldt=144),
        Case(None, 'f16', 200, 40, E4M3, 0, 0, 3, db=2, special=True),
        Case(None, 'bf16', 2100, 24, E5M2, 0, 0, 0, db=0, grid=5),   # 17 partial rows
        Case(None, 'f32', 2049, 9, E4M3, 4, 1, 2, db=1),
        Case(None, 'bf16', 131, 257, E4M3, 0, 5, 3),                  # IN_WORDS interior
        Case(None, 'f16', 257, 131, E5M2, 4, 3, 0, db=0),             # tiles, OUT_SEG
        Case(None, 'f32', 200, 129, E4M3, 4, 1, 9, db=2),
        Case(None, 'bf16', 0, 5, E4M3, db=1), Case(None, 'f32', 5, 0, E5M2),  # empty
    ]
    rnd = random.Random(seed)
    for _ in range(fuzz):
        dt = rnd.choice(('bf16', 'f16', 'f32'))
        while True:
            rows, cols = rnd.randint(1, 400), rnd.randint(1, 300)
            if rnd.random() < 0.4:
                cols = 8 * ((cols + 7) // 8)
            if rows * cols <= 40000:
                break
        pad = rnd.random() < 0.25
        no_outt = not pad and rnd.random() < 0.1
        ldt = (rows + 15) // 16 * 16 + 16 * rnd.randint(0, 1) if pad else None
        ldo = (cols + 15) // 16 * 16 + 16 * rnd.randint(0, 1) if pad else None
        esz = 4 if dt == 'f32' else 2
        tiles = ((rows + 127) // 128) * ((cols + 127) // 128)
        db = rnd.choice((None, 0, 1, 2))
        L.append(Case(None, dt, rows, cols, rnd.choice((E4M3, E5M2)),
                      in_off=esz * rnd.choice((0, 0, 1, 2, 4, 8)),
                      out_off=16 * rnd.randint(0, 1) if pad else rnd.randint(0, 15),
                      outt_off=16 * rnd.randint(0, 1) if pad else rnd.randint(0, 15),
                      ldo=ldo, ldt=ldt, db=db, no_outt=no_outt,
                      no_out=not pad and rnd.random() < 0.1,
                      grid=rnd.randint(1, tiles) if rnd.random() < 0.2 else None,
                      special=db is None and rnd.random() < 0.3))
    if quick:
        L = [c for c in L if c.rows * c.cols <= 20000]
    return L


def reduce_checks(mod, seed):
    """l8_dbias_reduce alone, at tile-row counts across its batches of loads and their
    remainder (1, 63, 64, 65, 130) and column counts around its 64-thread CTAs, every
    output type, against dbias_total (the sequential f32 sum). Returns (checks, failures)."""
    nc = fails = 0
    rnd = random.Random(seed)
    for ntr in (1, 63, 64, 65, 130):
        for cols, otype in ((1, 0), (70, 1), (129, 2), (64, 0)):
            mem = ptxsim.Memory()
            part = [[R.to_f32(rnd.choice((1, -1)) * rnd.random() * 2.0 ** rnd.randint(-20, 20))
                     for _ in range(cols)] for _ in range(ntr)]
            ws = mem.alloc(4 * ntr * cols)
            mem.write(ws, struct.pack('<%df' % (ntr * cols), *[v for row in part for v in row]))
            esz = 4 if otype == 0 else 2
            db = mem.alloc(esz * cols)
            err = launch_reduce(mod, mem, ws, db, ntr, cols, otype)[1]
            want = [R.f32_to_dtype_bits(x, otype) for x in R.dbias_total(part, cols)]
            got = None if err else list(struct.unpack('<%d%s' % (cols, 'I' if esz == 4 else 'H'),
                                                      mem.read(db, esz * cols)))
            ok = got == want
            nc += 1
            fails += not ok
            print('%s l8_dbias_reduce %3d tile rows x %3d columns, dbias %s' % (
                'ok  ' if ok else 'FAIL', ntr, cols, ('f32', 'bf16', 'f16')[otype]))
            if not ok:
                print('     ' + (err or 'first difference at column %d' % next(
                    i for i in range(cols) if got[i] != want[i])))
    return nc, fails


def main(argv=None):
    a, t0, mod = R.start(R.arg_parser(__doc__, 'cast_transpose.ptx', 50), argv)
    fp8, desc = R.fp8_encoder()
    print('ptxsim tile: %s, FP8 reference %s' % (a.ptx, desc))

    def one(case, rnd):
        errs, dt, ni, (entry, kf, grid) = run_case(mod, case, rnd, fp8, a.strict_undef)
        return errs, dt, ni, ' [%s flags %#x grid %d]' % (
            entry[len('l8_cast_transpose_'):], kf, grid)
    nc, fails = reduce_checks(mod, a.seed) if not a.only else (0, 0)
    return R.run_cases('tile', cases(a.quick, a.fuzz, a.seed), one, a, t0, nc, fails)


if __name__ == '__main__':
    sys.exit(main())
