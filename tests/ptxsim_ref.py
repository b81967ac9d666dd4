"""ptxsim_ref.py - what the ptxsim kernel tests (tests/ptxsim_*.py) share: the scalar
conversions of their references, the FP8 encoder (build/liblean8.so's l8_fp8_from_f32
through ctypes, else one written from the formats' definition), random inputs, the
column sums of the casts' dbias, and output buffers between guard bytes.

Nothing here reads a kernel: the references are written from the kernels' banners."""

import argparse
import ctypes
import math
import os
import random
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, 'tools'))
import ptxsim  # noqa: E402

E4M3, E5M2 = 3, 4          # l8_dtype (runtime/tensor.h); p_fmt: 4 = e5m2, else e4m3
GUARD = 48                 # guard bytes on each side of an output buffer

# ---------------------------------------------------------------------------------------
# Scalars

_If = struct.Struct('<I')
_ff = struct.Struct('<f')


def bits_to_f32(b):
    return _ff.unpack(_If.pack(b))[0]


def to_f32(x):
    """A double rounded to the nearest f32 (as a Python float; overflow to inf)."""
    if x != x:
        return x
    try:
        return _ff.unpack(_ff.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def f32_to_bits(x):
    return _If.unpack(_ff.pack(x))[0]


def bf16_to_f32(h):
    return bits_to_f32(h << 16)


def f16_to_f32(h):
    return struct.unpack('<e', struct.pack('<H', h))[0]


DECODE = {'bf16': bf16_to_f32, 'f16': f16_to_f32, 'f32': bits_to_f32}
ESIZE = {'bf16': 2, 'f16': 2, 'f32': 4}


def enc16(x, dt):
    """A double -> bf16 / f16 bits, round to nearest even (f16 overflow to +-max)."""
    if dt == 'f16':
        try:
            return struct.unpack('<H', struct.pack('<e', x))[0]
        except OverflowError:
            return 0x7bff if x > 0 else 0xfbff
    b = f32_to_bits(to_f32(x))
    return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff


def f32_to_dtype_bits(x, otype):
    """An f32 value -> the bits of a dbias element: otype 0 f32, 1 bf16, 2 f16 (cvt.rn;
    NaN as the GPU's canonical 0x7fff / 0x7fffffff)."""
    if otype == 0:
        return 0x7fffffff if x != x else f32_to_bits(x)
    if x != x:
        return 0x7fff
    return enc16(x, 'bf16') if otype == 1 else f16_bits(x)


def is_nan_bits(b, otype):
    """Whether b is a NaN of dbias type otype (0 f32, 1 bf16, 2 f16)."""
    if otype == 0:
        return b & 0x7fffffff > 0x7f800000
    return b & 0x7fff > (0x7f80 if otype == 1 else 0x7c00)


def f16_bits(x):
    """f32 value -> f16 bits, round to nearest even, overflow to inf (cvt.rn.f16.f32)."""
    try:
        return struct.unpack('<H', struct.pack('<e', x))[0]
    except OverflowError:
        return 0xfc00 if x < 0 else 0x7c00


# ---------------------------------------------------------------------------------------
# FP8

def _fp8_table(mbits, bias, maxcode):
    """value -> code for every finite non-negative code of the format (by definition)."""
    tab = {}
    for code in range(maxcode + 1):
        e, m = code >> mbits, code & ((1 << mbits) - 1)
        if e == 0:
            v = m / (1 << mbits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        tab[v] = code
    return tab


_FMT = {E4M3: (3, 7, 0x7e, 448.0), E5M2: (2, 15, 0x7b, 57344.0)}
_TAB = {f: _fp8_table(*_FMT[f][:3]) for f in _FMT}


def fp8_ref(x, fmt):
    """f32 value -> FP8 byte as cvt.rn.satfinite (runtime/fp8.h): round to nearest even
    on the format's grid, overflow and inf to +-max, NaN to 0x7F, zeros keep the sign."""
    if x != x:
        return 0x7f
    mbits, bias, maxcode, maxv = _FMT[fmt]
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a == math.inf:
        return sign | maxcode
    e = max(math.frexp(a)[1] - 1, 1 - bias) if a else 1 - bias
    quantum = 2.0 ** (e - mbits)
    v = round(a / quantum) * quantum          # round() ties to even; a / quantum is exact
    if v > maxv:
        return sign | maxcode
    return sign | _TAB[fmt][v]


def load_lib():
    """build/liblean8.so's l8_fp8_from_f32(float, l8_dtype), or None."""
    path = os.path.join(ROOT, 'build', 'liblean8.so')
    try:
        lib = ctypes.CDLL(path)
        f = lib.l8_fp8_from_f32
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_float, ctypes.c_int]
    f.restype = ctypes.c_uint8
    return f


def fp8_encoder():
    """(encoder(x, fmt), its description): the library's where it loads, else fp8_ref."""
    lib = load_lib()
    if lib:
        return (lambda x, fmt: lib(x, fmt)), 'l8_fp8_from_f32 (build/liblean8.so)'
    return fp8_ref, 'the test\'s encoder (build/liblean8.so not loaded)'


def fp8_value(code, fmt):
    """The value of an FP8 code from the format's definition (runtime/fp8.h): a double,
    exact; NaN codes give NaN. fmt: E4M3 or 'e4m3', else E5M2."""
    sign = -1.0 if code & 0x80 else 1.0
    if fmt in (E4M3, 'e4m3'):
        e, m = (code >> 3) & 15, code & 7
        if e == 15 and m == 7:
            return math.nan
        v = m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    else:
        e, m = (code >> 2) & 31, code & 3
        if e == 31:
            return sign * math.inf if m == 0 else math.nan
        v = m / 4.0 * 2.0 ** -14 if e == 0 else (1 + m / 4.0) * 2.0 ** (e - 15)
    return sign * v


def fmt_name(fmt):
    return 'e5m2' if fmt == E5M2 else 'e4m3'


# ---------------------------------------------------------------------------------------
# Inputs

def make_input(rnd, dt, n, special):
    """n element bit patterns of dt ('bf16', 'f16', 'f32'): mostly random values over many
    magnitudes (some saturate once scaled, some are below the FP8 subnormals), with zeros
    of both signs, negatives, the format's extremes; inf / NaN where special. (The 16-bit
    types draw exactly as tests/ptxsim_strip.py does.)"""
    if dt == 'f32':
        return _make_f32(rnd, n, special)
    fmax = 0x7f7f if dt == 'bf16' else 0x7bff
    out = []
    for _ in range(n):
        u = rnd.random()
        if u < 0.04:
            h = rnd.choice((0x0000, 0x8000))
        elif u < 0.06:
            h = rnd.choice((fmax, fmax | 0x8000, 0x0001, 0x8001))
        elif u < 0.07 and special:
            h = rnd.choice((0x7f80, 0xff80, 0x7fc0) if dt == 'bf16' else
                           (0x7c00, 0xfc00, 0x7e00))
        else:
            x = rnd.gauss(0, 1) * 10.0 ** rnd.uniform(-4, 3.5)
            h = enc16(x, dt)
        out.append(h)
    return out


def _make_f32(rnd, n, special):
    out = []
    for _ in range(n):
        u = rnd.random()
        if u < 0.04:
            b = rnd.choice((0x00000000, 0x80000000))
        elif u < 0.06:                  # max, min subnormal, min normal
            b = rnd.choice((0x7f7fffff, 0xff7fffff, 0x00000001, 0x80000001, 0x00800000))
        elif u < 0.07 and special:
            b = rnd.choice((0x7f800000, 0xff800000, 0x7fc00000))
        else:
            b = f32_to_bits(to_f32(rnd.gauss(0, 1) * 10.0 ** rnd.uniform(-6, 4)))
        out.append(b)
    return out


def plant_max(rnd, dt, xs):
    """Make the element of largest magnitude unique and put it at a random index (each
    case then tests the amax of a different element's path): the others of that
    magnitude step one code down. Skipped (None) with inf / NaN or all zeros; else
    returns the index."""
    mask = 0x7fffffff if dt == 'f32' else 0x7fff
    inf = {'f32': 0x7f800000, 'bf16': 0x7f80, 'f16': 0x7c00}[dt]
    top = max((x & mask for x in xs), default=0)
    if top == 0 or top >= inf:
        return None
    for i, x in enumerate(xs):
        if x & mask == top:
            xs[i] = (x & ~mask) | (top - 1)
    i = rnd.randrange(len(xs))
    xs[i] = (xs[i] & ~mask) | top
    return i


def pack_input(dt, xs):
    return struct.pack('<%d%s' % (len(xs), 'I' if dt == 'f32' else 'H'), *xs)


# ---------------------------------------------------------------------------------------
# dbias: the casts' column sums, in the kernels' documented order

def dbias_partials(xs, R, C):
    """partial[tr][c] = sum_{j=0..15} (sum_{i=0..7} X[128 tr + j + 16 i][c]), every sum
    sequential from +0.0 in f32; rows past the end add +0.0, which changes no sum (one
    from +0.0 is never -0.0), so they are left out."""
    ntr = (R + 127) // 128
    part = []
    for tr in range(ntr):
        row = []
        for c in range(C):
            tot = 0.0
            for j in range(16):
                s = 0.0
                for i in range(8):
                    r = 128 * tr + j + 16 * i
                    if r < R:
                        s = to_f32(s + xs[r * C + c])
                tot = to_f32(tot + s)
            row.append(tot)
        part.append(row)
    return part


def dbias_total(part, C):
    """dbias[c] = sum_tr partial[tr][c], sequential from +0.0 (l8_dbias_reduce's)."""
    out = []
    for c in range(C):
        s = 0.0
        for row in part:
            s = to_f32(s + row[c])
        out.append(s)
    return out


def same_f32(a, b):
    """Equal f32 values, zeros by sign, any NaN equal to any NaN."""
    if a != a or b != b:
        return a != a and b != b
    return a == b and math.copysign(1, a) == math.copysign(1, b)


# ---------------------------------------------------------------------------------------
# Output buffers

class Outputs:
    """Output buffers in a ptxsim Memory, each between GUARD bytes the host never writes:
    check() finds bytes the kernel should have written and did not, bytes it wrote that it
    should not have (guards, and the `skip` ranges a buffer leaves alone), and compares
    each written byte with the expected ones."""

    def __init__(self, mem):
        self.mem = mem
        self.bufs = {}

    def alloc(self, name, size, off=0, fill=None):
        """A buffer of size bytes at byte offset off (from a 0x10000000-aligned base,
        past the front guard); fill: initial contents written by the host (e.g. an
        amax word), else never written. Returns its device address."""
        a = self.mem.alloc(GUARD + off + size + GUARD)
        self.bufs[name] = (a, GUARD + off, size)
        p = a + GUARD + off
        if fill is not None:
            self.mem.write(p, fill)
        return p

    def addr(self, name):
        a, off, _ = self.bufs[name]
        return a + off

    def read(self, name):
        a, off, size = self.bufs[name]
        return self.mem.read(a + off, size)

    def written(self, name):
        """Offsets of the bytes of a buffer's whole allocation that were written."""
        a, off, size = self.bufs[name]
        total = off + size + GUARD
        und = set(self.mem.undefined(a, total))
        return [i - off for i in range(total) if i not in und]

    def check_coverage(self, name, skip=()):
        """Errors for a buffer whose bytes must all be written except those in the
        (start, end) ranges of skip (which must stay unwritten), and no guard byte."""
        a, off, size = self.bufs[name]
        errs = []
        w = set(self.written(name))
        skipped = set()
        for s, e in skip:
            skipped.update(range(s, e))
        missing = [i for i in range(size) if i not in w and i not in skipped]
        if missing:
            errs.append('%s: %d bytes never written, first at offset %d' % (
                name, len(missing), missing[0]))
        bad = sorted(i for i in w if i < 0 or i >= size or i in skipped)
        if bad:
            errs.append('%s: %d bytes written outside what it should write (guards or '
                        'the unwritten padding), first at offsets %s' % (name, len(bad),
                                                                      bad[:8]))
        return errs


def cmp_bytes(errs, name, got, want, pos, skip=None):
    """Compare byte strings; pos(i) describes index i. skip(i): index not compared."""
    diff = [i for i in range(len(want)) if got[i] != want[i] and not (skip and skip(i))]
    if diff:
        errs.append('%s: %d bytes differ; first: %s' % (name, len(diff), ', '.join(
            '%s got %#04x want %#04x' % (pos(i), got[i], want[i]) for i in diff[:4])))


def run_launch(mod, entry, **kw):
    """mod.launch(entry, **kw); (stats, None) or (None, the simulator's error)."""
    try:
        return mod.launch(entry, **kw), None
    except ptxsim.SimError as x:
        return None, 'simulator: %s' % x


def vec_launch(n, p_in, p_out, nvec, grid, threads, ctas_max):
    """(nvec, grid) of the element-wise launchers (l8_fp8_cast, l8_fp8_dequantize): nvec = n
    / 16 when both buffers are 16-B aligned, else 0, and a CTA of threads per thread's
    worth of that (or of n), at most ctas_max; a case's nvec (no more than the buffers
    allow) and grid in their place where given."""
    v = n // 16 if p_in % 16 == 0 and p_out % 16 == 0 else 0
    if nvec is not None:
        assert nvec <= v, 'an nvec the buffers do not allow'
        v = nvec
    work = ((v or n) + threads - 1) // threads
    return v, grid or max(min(work, ctas_max), 1)


# ---------------------------------------------------------------------------------------
# The tests' driver

def arg_parser(doc, module, fuzz, generated=True):
    """The kernel tests' options: --ptx (default build/ptx/MODULE, or ptx/MODULE for a
    module not generated at build time), --quick, --only, --seed, --fuzz (default: fuzz
    random cases), --strict-undef."""
    ap = argparse.ArgumentParser(description=doc.split('\n\n')[0])
    ap.add_argument('--ptx', default=os.path.join(ROOT, 'build', 'ptx', module) if generated
                    else os.path.join(ROOT, 'ptx', module))
    ap.add_argument('--quick', action='store_true', help='only the smaller cases')
    ap.add_argument('--only', default='', help='run the cases whose name contains this')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--fuzz', type=int, default=fuzz, help='random cases after the fixed ones')
    ap.add_argument('--strict-undef', action='store_true',
                    help='fault on any operation on a register never written (ptxsim '
                         'strict_undef), even where the kernel masks the bits off')
    return ap


def start(ap, argv):
    """Parse the options, start the clock and load the module named by --ptx:
    (options, t0, ptxsim.Module)."""
    a = ap.parse_args(argv)
    t0 = time.time()
    return a, t0, ptxsim.Module(open(a.ptx).read(), a.ptx)


def run_cases(name, cases, run_one, a, t0, nc=0, fails=0):
    """Run every case whose description contains a.only: run_one(case, rnd) gives (errors,
    seconds, instructions, a note for its line), rnd seeded from a.seed and the case's
    index. Prints a line per case and the summary `ptxsim NAME: N cases, F failures`
    (nc, fails: checks already made); returns the exit status."""
    ninstr = 0
    tsim = 0.0
    for i, case in enumerate(cases):
        if a.only and a.only not in str(case):
            continue
        errs, dt, ni, note = run_one(case, random.Random(a.seed * 1000 + i))
        nc += 1
        ninstr += ni
        tsim += dt
        print('%s %s%s: %.1f s, %.2fM instructions' % ('ok  ' if not errs else 'FAIL', case,
                                                      note, dt, ni / 1e6), flush=True)
        for e in errs:
            print('     ' + e)
        fails += bool(errs)
    print('ptxsim %s: %d cases, %d failures (%.0f s; %.1fM instructions simulated at '
          '%.2fM/s)' % (name, nc, fails, time.time() - t0, ninstr / 1e6,
                        ninstr / 1e6 / max(tsim, 1e-9)))
    return 1 if fails else 0
