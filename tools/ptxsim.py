#!/usr/bin/env python3
"""ptxsim.py - a functional PTX interpreter in pure Python (standard library only), to
test the logic of lean8's hand-written PTX kernels on a machine without a GPU.

    from ptxsim import Module, Memory
    m = Module(open('build/ptx/transpose.ptx').read())
    mem = Memory()
    a = mem.alloc(4096, fill=0)          # fill=None: uninitialized (reads are tracked)
    mem.write(a, data); mem.read(a, 16)
    st = m.launch('l8_transpose_b8', grid=(2, 1, 1), block=(256, 1, 1),
                  params=[a, b, 64, 32, 0, 64], mem=mem, dyn_smem=0)
    print(st['instructions'], st['seconds'])
    m.launch(..., grid=(gx, gy, 1), cluster=(1, gy, 1))   # thread block clusters

    python3 tools/ptxsim.py FILE.ptx [--compile]   # decode (and compile) every entry
    python3 tools/ptxsim.py --selftest             # instruction semantics and checks
    python3 tests/ptxsim_strip.py                  # kernels against references: the
    python3 tests/ptxsim_tile.py                   #   strip kernel, the tile kernel (and
    python3 tests/ptxsim_transpose.py              #   l8_dbias_reduce), the transpose

Execution model
  Every thread is its own interpreter state: a list of registers (bit patterns) and a pc.
  A CTA's threads run one after another, each until it reaches a synchronizing
  instruction (bar.sync / barrier.sync, shfl.sync, redux.sync, vote.sync, bar.warp.sync)
  or ret / exit. A barrier releases when every non-exited thread of the CTA waits at
  one (bar.sync, being .aligned, also wants them all at the same instruction); a warp
  collective executes when every lane of its membermask waits at that same instruction
  (warps: lanes 32k .. 32k + 31 of the CTA's linear thread id). Anything else is a
  deadlock or a divergent collective and raises. CTAs run one after another in
  x, y, z order (no communication between CTAs except through global memory).
  Clusters (launch(cluster=(cx, cy, cz)), which must divide the grid): the clusters
  run one after another in x, y, z order, the CTAs of one together, interleaved at
  synchronizing instructions, and they share global memory. barrier.cluster.arrive
  {.release|.relaxed} marks the thread's arrival and goes on; barrier.cluster.wait
  blocks until every non-exited thread of the cluster has arrived at the phase the
  thread last arrived at (exited threads are not waited for). Both wait for the warp's
  other non-exited lanes to reach a barrier.cluster instruction (the same one, if
  .aligned). An entry that uses barrier.cluster, mapa, getctarank or .shared::cluster
  runs in this mode even without a cluster (then a cluster of one CTA).
  Straight-line runs of instructions are compiled once into Python functions (one per
  basic block, each instruction a line of generated code), so a fault is mapped back to
  its PTX instruction through the traceback.

Checks (each raises SimError naming the entry, CTA, thread, pc and PTX line)
  - global access outside every allocation (Memory puts allocations 0x10000000 apart);
  - misaligned access: an access of N bytes in all (vector: element size x count) must
    be N-aligned;
  - shared access outside the CTA's static + dynamic shared memory;
  - use of an undefined value. Registers start undefined, and so do the bytes of shared
    memory and of Memory.alloc(fill=None) allocations until written. Undefined bits are
    tracked bit by bit through moves and bitwise operations (and, or, xor, shifts, shf,
    prmt, selp, pack / unpack, truncation: like valgrind's memcheck), so a masked-off
    garbage half-word is fine; any other use raises: arithmetic, comparison, address,
    branch or guard predicate, stored data, a shuffle's lane index...
    A predicate read before it is written raises the same way;
  - shared-memory races (race_check=True, the default): a byte written by one thread
    and read or written by another thread of the CTA with no barrier between them
    (warp collectives do not order memory). In cluster mode the check spans the
    cluster's shared memory by happens-before: bar.sync orders the threads of its CTA,
    a barrier.cluster phase orders what each thread did before its .release arrive
    (the default; not .relaxed) before what any thread does after its wait - and
    nothing else orders a CTA's accesses to another's shared memory;
  - global-memory races (race_check=True): within a launch, a byte written by one CTA
    and read or written by another CTA, the two not ordered by happens-before. In
    cluster mode that is the order above (program order; bar.sync among a CTA's
    threads; a barrier.cluster phase from what a thread did before its .release arrive
    to what any cluster thread does after its wait of that phase; transitively), so a
    write handed to another CTA of the cluster through bar.sync and another thread's
    .release arrive is ordered. Nothing orders different clusters, nor different CTAs
    of a launch without clusters but flag mode's release / acquire (below). The
    accesses of one CTA's threads to global memory
    are not checked against each other. Atomics (atom / red .global) do not race with
    each other, only with plain accesses (a plain read of a red.max target by another
    CTA races). Reads are tracked too, so a write after another CTA's read (in either
    order of the simulation) is caught. Scalar ld / st .global .relaxed / .acquire /
    .release / .volatile are morally strong: like atomics, they race with plain
    accesses only. Flag mode (an entry with ld.acquire or st.release .global, launched
    without clusters; the CTAs still run one after another): a st.release orders what
    its thread did before it, and what any thread of its CTA did before a bar.sync
    before it, before what the thread of a later ld.acquire of that address does after
    the acquire, and what any thread of that CTA does after a bar.sync after it;
    transitively (a later st.relaxed of the address ends the release's hold on it,
    atomics keep it). Fences, atom / red with .acquire / .release, and acquire / release
    in cluster mode order nothing here (in clusters only barrier.cluster does). A fault
    names the other access too (its CTA, thread, pc, line), and the
    bytes as an offset from the pointer parameter they are in and in their allocation;
  - ld.global.nc (.nc: the non-coherent path) of a byte that any thread - the reader
    included - writes or updates atomically during the launch, before or after the
    read, whatever orders them (race_check=True): PTX ISA 8.1, "the memory consistency
    model does not apply to texture (including ld.global.nc) and surface accesses", so
    nothing orders such a read after or before a write: the path is only for data that
    is read-only for the whole launch;
  - clusters: a shared::cluster address of a rank past the cluster or past that CTA's
    shared memory (mapa too), a mapped address with ld/st.shared (the CTA window); an
    access to another CTA's shared memory before any cluster phase completed (that CTA
    may not have started) or after it exited, and a CTA exiting while another CTA's
    access to its shared memory is not ordered before the exit by a cluster phase;
    barrier.cluster.arrive again before the thread knows (by its wait, or through
    bar.sync from a thread that waited) that its last phase completed, a wait with no
    arrive since the last (it would wait for itself), .aligned barrier.cluster at
    different instructions in a warp; a cluster that does not divide the grid or
    breaks .reqnctapercluster / .explicitcluster / .maxclusterrank;
  - deadlocks, divergent or inconsistent warp collectives, shuffles from lanes that do
    not take part, barriers with thread counts, blocks that break .reqntid / .maxntid,
    division by zero, `trap`, too many instructions (a runaway loop).
  Unknown opcodes, modifiers and directives raise PTXError when the Module is parsed.
  launch(strict_undef=True) makes any operation on a never-written register fault, even
  one whose result does not depend on it.

Values
  A register holds an int bit pattern of its declared width (f32 registers too: b32
  operations apply to them). Float operations unpack, compute in double and round once
  to f32 with round-to-nearest-even: exact for .rn add, sub, mul, div, rcp (the double
  has more than 2p + 2 bits), overflow gives inf, NaN results are the canonical
  0x7FFFFFFF. fma / mad.f32 round the exact result once (fractions). .ftz flushes
  subnormal inputs and results; .sat clamps to [0, 1]. cvt.rn.satfinite.{e4m3x2,e5m2x2}
  .f32 is exact (RNE, subnormals kept, overflow and inf to +-max, NaN to 0x7F);
  cvt.rn.{f16,bf16}.f32 are RNE. NaN payloads through cvt.f32.f16 / .bf16 are kept
  (not checked against hardware).

Memory
  Global: Memory allocations (write / read / undefined for the host). Shared: per CTA,
  static variables at offsets in declaration order with their alignment (module-scope
  ones only if the entry names them), the .extern array (the dynamic region,
  launch(dyn_smem=)) after them, 16-B aligned. Param: ld.param [name+off], and
  [register] for an address taken with mov.u64 %rd, name.
  Distributed shared memory: byte `off` of cluster rank r's shared memory has the
  shared::cluster address CLUSTER_BASE + (r << 24) + off (0x40000000 + ...: what mapa
  returns); a CTA's own shared::cta addresses (offsets from 0) are shared::cluster
  addresses of its own window, as on the GPU. ld / st / atom / red .shared::cluster at
  any width and vector; the special registers %cluster_ctarank, %cluster_nctarank,
  %cluster_ctaid, %cluster_nctaid, %clusterid, %nclusterid, %is_explicit_cluster (true
  when launch() was given a cluster).

Not implemented (PTXError at parse time): .func / call, .local / .const / module .global
  variables, generic addressing of shared memory (cvta.shared, mapa without
  .shared::cluster), mbarrier, f64 arithmetic,
  rounding modes other than .rn for f32 arithmetic, approximate functions (lg2,
  sin, rsqrt, sqrt, div.approx; ex2.approx(.ftz).f32 is 2^x rounded once: the GPU's
  may differ in the last bits), bar.arrive / bar.red, textures, tensor-core and async
  copy instructions. The memory model is sequential (each thread's accesses take effect
  in program order, threads interleave only at synchronizing instructions): the race
  checks stand in for everything weaker (a spin on a flag another CTA sets ends only
  if that CTA ran first: CTAs run in x, y, z order); fences are no-ops, and
  shared-memory atomics take no part in the shared-memory race check (in cluster mode
  not even against plain accesses; global atomics race with plain accesses, see
  above). Costs of the global check: per allocation a launch touches, 4-byte arrays of
  the last writer and reader of each byte (8-byte for ld.global.nc), about 5-10% of the
  run time. f32 min/max order -0.0 below +0.0 (not checked against hardware; no kernel
  here uses them).
"""

import array
import math
import re
import struct
import sys
import time
from fractions import Fraction

__all__ = ['Module', 'Memory', 'PTXError', 'SimError', 'Undef', 'fp8_from_f32_bits',
           'f32_bits', 'f32_value']


class PTXError(Exception):
    """A parse error or a construct the simulator does not implement."""


class SimError(Exception):
    """A fault found while running a kernel (the message says where)."""


class _Fault(Exception):
    """Raised by memory helpers; Module turns it into a SimError with the location."""


# ---------------------------------------------------------------------------------------
# Undefined values

class Undef:
    """A value with undefined bits: v holds the defined bits (undefined ones are 0), m the
    mask of undefined bits, o where they came from. Bitwise operators track the bits
    exactly (a defined 0 ANDed with garbage is a defined 0); everything else - arithmetic,
    comparison, truth value, indexing, packing - raises TypeError."""
    __slots__ = ('v', 'm', 'o')

    def __init__(self, v, m, o='a register never written'):
        self.v = v & ~m
        self.m = m
        self.o = o

    def __and__(self, x):
        a, am = self.v, self.m
        if type(x) is Undef:
            b, bm = x.v, x.m
        else:
            b, bm = x, 0
        m = (am & bm) | (am & b) | (bm & a)
        return Undef(a & b, m, self.o if am else x.o) if m else a & b
    __rand__ = __and__

    def __or__(self, x):
        a, am = self.v, self.m
        if type(x) is Undef:
            b, bm = x.v, x.m
        else:
            b, bm = x, 0
        m = (am | bm) & ~(a | b)
        return Undef(a | b, m, self.o if am else x.o) if m else a | b
    __ror__ = __or__

    def __xor__(self, x):
        a, am = self.v, self.m
        if type(x) is Undef:
            b, bm = x.v, x.m
        else:
            b, bm = x, 0
        m = am | bm
        return Undef(a ^ b, m, self.o if am else x.o) if m else a ^ b
    __rxor__ = __xor__

    def __lshift__(self, n):
        if type(n) is not int:
            raise TypeError('undefined shift amount')
        return Undef(self.v << n, self.m << n, self.o)

    def __rshift__(self, n):
        if type(n) is not int:
            raise TypeError('undefined shift amount')
        m = self.m >> n
        return Undef(self.v >> n, m, self.o) if m else self.v >> n

    def _bad(self, *a):
        raise TypeError('undefined value used')
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = _bad
    __hash__ = None

    def __repr__(self):
        return 'Undef(value=%#x, undefined bits=%#x, from %s)' % (self.v, self.m, self.o)


class _StrictUndef(Undef):
    """launch(strict_undef=True): a register never written, which raises at its first
    operation of any kind (only moves, selp and shuffles pass it on)."""
    __slots__ = ()

    def _bad(self, *a):
        raise TypeError('undefined value used')
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _bad
    __lshift__ = __rshift__ = _bad


class _UndefPred:
    """The value of a predicate register before it is written."""
    __slots__ = ()

    def __bool__(self):
        raise TypeError('predicate read before written')
    __eq__ = __ne__ = lambda self, x: self.__bool__()
    __hash__ = None

    def __repr__(self):
        return 'UndefPred'


UNDEF_PRED = _UndefPred()


def _undef_bytes(data, init, off, n, what):
    """The n bytes at off as an int, with the never-written bytes as undefined bits."""
    m = 0
    for i in range(n):
        if not init[off + i]:
            m |= 0xff << (8 * i)
    return Undef(int.from_bytes(data[off:off + n], 'little'), m, what)


# ---------------------------------------------------------------------------------------
# Floating point

_S_I = struct.Struct('<I')
_S_f = struct.Struct('<f')
_S_2I = struct.Struct('<2I')
_S_2f = struct.Struct('<2f')
_S_Q = struct.Struct('<Q')
_S_d = struct.Struct('<d')
QNAN = 0x7fffffff             # the canonical NaN of the GPU's f32 arithmetic


def f32_value(b):
    """f32 bit pattern -> Python float (exact)."""
    return _S_f.unpack(_S_I.pack(b))[0]


def f32_bits(x):
    """Python float -> f32 bits, rounded to nearest even; overflow -> inf, NaN -> QNAN."""
    try:
        b = _S_I.unpack(_S_f.pack(x))[0]
    except OverflowError:
        return 0x7f800000 if x > 0 else 0xff800000
    return b if (b & 0x7fffffff) <= 0x7f800000 else QNAN


def _f32_from_fraction(q):
    """An exact rational -> f32 bits, rounded once to nearest even."""
    if q == 0:
        return 0
    s = 0x80000000 if q < 0 else 0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)                      # 2^e <= q (or the subnormal range)
    scaled = q / Fraction(2) ** (e - 23)  # in [2^23, 2^24) for normals
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n & 1):
        n += 1
    return s | f32_bits(float(n) * 2.0 ** (e - 23))   # exact: n has at most 25 bits


def _fv(b):
    return _S_f.unpack(_S_I.pack(b))[0]


def _ftz(b):
    return b & 0x80000000 if (b & 0x7f800000) == 0 else b


def _fadd(a, b):
    x, y = _S_2f.unpack(_S_2I.pack(a, b))
    return f32_bits(x + y)


def _fsub(a, b):
    x, y = _S_2f.unpack(_S_2I.pack(a, b))
    return f32_bits(x - y)


def _fmul(a, b):
    x, y = _S_2f.unpack(_S_2I.pack(a, b))
    return f32_bits(x * y)


def _fdiv(a, b):
    x, y = _S_2f.unpack(_S_2I.pack(a, b))
    try:
        return f32_bits(x / y)
    except ZeroDivisionError:
        if x != x or x == 0:
            return QNAN
        neg = (a ^ b) & 0x80000000
        return 0xff800000 if neg else 0x7f800000


def _frcp(a):
    return _fdiv(0x3f800000, a)


def _fex2(a):
    """ex2.approx.f32 as 2^x rounded once to f32: the hardware's approximation may
    differ in the last bits, so no test may compare a result through it with the GPU's
    bit for bit (.ftz is applied around it by the caller)."""
    x = _fv(a)
    if x != x:
        return QNAN
    try:
        return f32_bits(2.0 ** x)
    except OverflowError:
        return 0x7f800000


def _ffma(a, b, c):
    x, y, z = _fv(a), _fv(b), _fv(c)
    if x != x or y != y or z != z or x in (_INF, -_INF) or y in (_INF, -_INF) \
            or z in (_INF, -_INF):
        return f32_bits(x * y + z)       # inf / NaN cases: double gets them right
    q = Fraction(x) * Fraction(y) + Fraction(z)
    if q == 0:                            # the sign of an exact zero result
        p = x * y
        if p == 0 and z == 0 and math.copysign(1, p) < 0 and math.copysign(1, z) < 0:
            return 0x80000000
        return 0
    return _f32_from_fraction(q)


_INF = float('inf')


def _fsat(b):
    if (b & 0x7fffffff) > 0x7f800000:
        return 0
    if b & 0x80000000:
        return 0
    return 0x3f800000 if b > 0x3f800000 else b


def _fminmax(a, b, is_max):
    x, y = _S_2f.unpack(_S_2I.pack(a, b))
    if x != x:
        return b if y == y else QNAN
    if y != y:
        return a
    if x == y:                            # -0.0 orders below +0.0
        neg = a & b & 0x80000000 if is_max else (a | b) & 0x80000000
        return a if (a & 0x80000000) == neg else b
    return a if (x > y) == is_max else b


def _fp8_encode(b, mbits, bias, maxcode):
    """f32 bits -> an FP8 byte as cvt.rn.satfinite: round to nearest even, subnormals
    exact, finite overflow and +-inf to +-max, NaN to 0x7F."""
    s = (b >> 24) & 0x80
    e = (b >> 23) & 0xff
    m = b & 0x7fffff
    if e == 0xff:
        return 0x7f if m else s | maxcode
    if e == 0:
        if m == 0:
            return s
        E, sig = -126, m                   # value = sig * 2^(E - 23)
    else:
        E, sig = e - 127, m | 0x800000
    emin = 1 - bias
    Q = (E if E > emin else emin) - mbits  # the exponent of the result's quantum
    sh = Q - (E - 23)                      # bits of sig below the quantum (> 0)
    if sh > 26:
        return s                           # below a quarter quantum: +-0
    q = sig >> sh
    rem = sig & ((1 << sh) - 1)
    half = 1 << (sh - 1)
    if rem > half or (rem == half and q & 1):
        q += 1
    if q < (1 << mbits):                   # subnormal (or zero)
        return s | q
    if q == (2 << mbits):
        q >>= 1
        Q += 1
    code = ((Q + mbits + bias) << mbits) | (q - (1 << mbits))
    return s | (code if code < maxcode else maxcode)


_E4M3 = {}
_E5M2 = {}


def _e4m3(b):
    v = _E4M3.get(b)
    if v is None:
        v = _E4M3[b] = _fp8_encode(b, 3, 7, 0x7e)
    return v


def _e5m2(b):
    v = _E5M2.get(b)
    if v is None:
        v = _E5M2[b] = _fp8_encode(b, 2, 15, 0x7b)
    return v


def fp8_from_f32_bits(b, fmt):
    """The simulator's FP8 encoder: fmt 'e4m3' or 'e5m2', b an f32 bit pattern."""
    return _e4m3(b) if fmt == 'e4m3' else _e5m2(b)


def _f16_to_f32(h):
    s = (h & 0x8000) << 16
    e = (h >> 10) & 0x1f
    m = h & 0x3ff
    if e == 0x1f:
        return s | 0x7f800000 | (m << 13)
    if e == 0:
        if m == 0:
            return s
        return s | f32_bits(m * 2.0 ** -24)
    return s | ((e + 112) << 23) | (m << 13)


_F16T = []


def _f16tab():
    if not _F16T:
        _F16T.extend(_f16_to_f32(h) for h in range(65536))
    return _F16T


_S_e = struct.Struct('<e')
_S_H = struct.Struct('<H')


def _f32_to_f16(b):
    if (b & 0x7fffffff) > 0x7f800000:
        return 0x7fff
    x = _fv(b)
    try:
        return _S_H.unpack(_S_e.pack(x))[0]
    except OverflowError:
        return 0xfc00 if b & 0x80000000 else 0x7c00


def _dq5(c):
    """An E5M2 code -> f16 bits (exact: E5M2 is f16's top byte; NaN codes -> 0x7fff)."""
    return (c << 8) & 0xffff if (c & 0x7f) <= 0x7c else 0x7fff


def _dq4(c):
    """An E4M3 code -> f16 bits (exact; 0x7f / 0xff, the NaNs, -> 0x7fff)."""
    s = (c & 0x80) << 8
    e, m = (c >> 3) & 15, c & 7
    if e == 15 and m == 7:
        return 0x7fff
    if e == 0:
        return s | _f32_to_f16(f32_bits(m * 2.0 ** -9))
    return s | ((e + 8) << 10) | (m << 7)


def _f32_to_bf16(b):
    if (b & 0x7fffffff) > 0x7f800000:
        return 0x7fff
    return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff


def _int_to_f32(v):
    """An int -> f32 bits, rounded once to nearest even."""
    if -(1 << 53) <= v <= (1 << 53):
        return f32_bits(float(v))       # exact in double, one rounding to f32
    return _f32_from_fraction(Fraction(v))


def _f32_to_int(b, mode, lo, hi):
    x = _fv(b)
    if x != x:
        return 0
    if x in (_INF, -_INF):
        return hi if x > 0 else lo
    if mode == 'rni':
        v = round(x)                     # Python rounds half to even
    elif mode == 'rmi':
        v = int(x // 1)
    elif mode == 'rpi':
        v = -int((-x) // 1)
    else:
        v = int(x)
    return lo if v < lo else hi if v > hi else v


def _f32_round_int(b, mode):
    x = _fv(b)
    if x != x or x in (_INF, -_INF) or abs(x) >= 2.0 ** 23:
        return b if x == x else QNAN
    v = _f32_to_int(b, mode, -(1 << 30), 1 << 30)
    r = f32_bits(float(v))
    return r | (b & 0x80000000) if v == 0 else r


# ---------------------------------------------------------------------------------------
# Memory

_SLOT = 28            # allocations are 1 << _SLOT bytes apart (0x10000000)


class Memory:
    """Device-like global memory: allocations at distinct addresses 0x10000000 apart (and
    at least one empty slot between two), so a stray access lands outside all of them."""

    def __init__(self):
        self.slots = {}
        self.next = 1
        self.allocs = []

    def alloc(self, nbytes, fill=None):
        """A new allocation of nbytes; fill: a byte value, or None for uninitialized
        (reading a byte never written then gives an undefined value). Returns its
        address (a multiple of 0x10000000)."""
        nslots = (nbytes >> _SLOT) + 2
        base = self.next << _SLOT
        self.next += nslots
        if fill is None:
            data, init = bytearray(nbytes), bytearray(nbytes)
        else:
            data, init = bytearray([fill & 0xff]) * nbytes, None
        rec = (base, nbytes, data, init)
        for k in range(nslots - 1):
            self.slots[(base >> _SLOT) + k] = rec
        self.allocs.append(rec)
        return base

    def _find(self, addr, n):
        rec = self.slots.get(addr >> _SLOT)
        if rec is None or addr - rec[0] + n > rec[1] or n < 0:
            raise SimError('host access [%#x, %#x) is outside every allocation'
                           % (addr, addr + n))
        return rec, addr - rec[0]

    def write(self, addr, data):
        (base, size, buf, init), off = self._find(addr, len(data))
        buf[off:off + len(data)] = data
        if init is not None:
            init[off:off + len(data)] = b'\x01' * len(data)

    def read(self, addr, n):
        """n bytes at addr (bytes never written read as 0: see undefined())."""
        (base, size, buf, init), off = self._find(addr, n)
        return bytes(buf[off:off + n])

    def undefined(self, addr, n):
        """Offsets (from addr) of the bytes of [addr, addr + n) never written."""
        (base, size, buf, init), off = self._find(addr, n)
        if init is None:
            return []
        return [i for i in range(n) if not init[off + i]]

    def where(self, addr):
        """A description of addr relative to the nearest allocation."""
        best = None
        for base, size, _, _ in self.allocs:
            d = 0 if base <= addr < base + size else min(abs(addr - base),
                                                         abs(addr - (base + size)))
            if best is None or d < best[0]:
                best = (d, base, size)
        if best is None:
            return 'no allocations'
        _, base, size = best
        return 'nearest allocation [%#x, %#x) (%d bytes), offset %d' % (
            base, base + size, size, addr - base)


PARAM_BASE = 0x7e0000000000   # param-space addresses (mov.u64 %rd, param_name)


def _param_loader(pb):
    def ldp(addr, n, k):
        off = addr - PARAM_BASE
        if off < 0 or off + n * k > len(pb) or addr & (n * k - 1):
            raise _Fault('ld.param of %d bytes at %#x is misaligned or outside the %d '
                         'bytes of parameters' % (n * k, addr, len(pb)))
        return _vstruct(n, k).unpack_from(pb, off)
    return ldp


_VEC = {}


def _vstruct(n, k):
    s = _VEC.get((n, k))
    if s is None:
        s = _VEC[(n, k)] = struct.Struct('<%d%s' % (k, {1: 'B', 2: 'H', 4: 'I', 8: 'Q'}[n]))
    return s


def _global_helpers(mem):
    """The generated code's global-memory accessors, bound to mem. Each takes the thread's
    linear id t and the instruction's pc k last (used by the race check, _GRace)."""
    slots = mem.slots

    def fault(addr, n, what):
        if type(addr) is not int:
            raise TypeError('undefined address')
        rec = slots.get(addr >> _SLOT)
        if rec is not None and 0 <= addr - rec[0] < rec[1] and addr & (n - 1):
            raise _Fault('misaligned global %s of %d bytes at %#x' % (what, n, addr))
        raise _Fault('global %s of %d bytes at %#x is outside every allocation (%s)'
                     % (what, n, addr, mem.where(addr)))

    def find(addr, n, what):
        rec = slots.get(addr >> _SLOT)
        if rec is None or addr & (n - 1):
            fault(addr, n, what)
        off = addr - rec[0]
        if off + n > rec[1]:
            fault(addr, n, what)
        return rec, off

    def load(rec, off, n, addr):
        data, init = rec[2], rec[3]
        if init is not None and init.find(0, off, off + n) >= 0:
            return _undef_bytes(data, init, off, n, 'global memory never written (%#x)'
                                % addr)
        return int.from_bytes(data[off:off + n], 'little')

    def loadv(rec, off, n, k, addr):
        data, init = rec[2], rec[3]
        if init is not None and init.find(0, off, off + n * k) >= 0:
            return tuple(load(rec, off + n * i, n, addr + n * i) for i in range(k))
        return _vstruct(n, k).unpack_from(data, off)

    def store(rec, off, n, v):
        rec[2][off:off + n] = int.to_bytes(v, n, 'little')
        if rec[3] is not None:
            rec[3][off:off + n] = b'\x01' * n

    def storev(rec, off, n, vals):
        k = len(vals)
        _vstruct(n, k).pack_into(rec[2], off, *vals)
        if rec[3] is not None:
            rec[3][off:off + n * k] = b'\x01' * (n * k)

    def atomic(rec, off, n, fn, b, c, addr):
        old = load(rec, off, n, addr)
        if type(old) is Undef:
            raise TypeError('atomic on undefined memory')
        store(rec, off, n, fn(old, b, c))
        return old

    def ldg(addr, n, t=0, k=0):
        rec, off = find(addr, n, 'load')
        return load(rec, off, n, addr)

    def ldgv(addr, n, k, t=0, pc=0):
        rec, off = find(addr, n * k, 'load')
        return loadv(rec, off, n, k, addr)

    def stg(addr, n, v, t=0, k=0):
        rec, off = find(addr, n, 'store')
        store(rec, off, n, v)

    def stgv(addr, n, vals, t=0, k=0):
        rec, off = find(addr, n * len(vals), 'store')
        storev(rec, off, n, vals)

    def atomg(addr, n, fn, b, c=None, t=0, k=0):
        rec, off = find(addr, n, 'atomic')
        return atomic(rec, off, n, fn, b, c, addr)

    def ldgs(addr, n, t, k, acq):
        return ldg(addr, n)

    def stgs(addr, n, v, t, k, rel):
        stg(addr, n, v)

    return {'LDG': ldg, 'LDGV': ldgv, 'LDGN': ldg, 'LDGNV': ldgv, 'STG': stg, 'STGV': stgv,
            'ATOMG': atomg, 'LDGS': ldgs, 'STGS': stgs,
            '_raw': (find, load, loadv, store, storev, atomic)}


class _Shared:
    """One CTA's shared memory, with written-byte tracking and the race check."""

    def __init__(self, size, race):
        self.size = size
        self.data = bytearray(size)
        self.init = bytearray(size)
        self.race = race
        if race:
            self.neg = array.array('h', [-1]) * size
            self.wr = array.array('h', self.neg)
            self.rd = array.array('h', self.neg)

    def barrier(self):
        if self.race:
            self.wr[:] = self.neg
            self.rd[:] = self.neg

    def helpers(self):
        size, data, init, race = self.size, self.data, self.init, self.race
        wr, rd = (self.wr, self.rd) if race else (None, None)

        def check(a, n, what):
            if type(a) is not int:
                raise TypeError('undefined address')
            if a < 0 or a + n > size:
                raise _Fault('shared %s of %d bytes at %#x is outside the CTA\'s %d bytes '
                             'of shared memory' % (what, n, a, size))
            raise _Fault('misaligned shared %s of %d bytes at %#x' % (what, n, a))

        def race_fault(kind, a, n, t, other):
            raise _Fault('shared-memory race: thread %d %s bytes [%#x, %#x) that thread %d '
                         '%s since the last barrier' % (t, kind[0], a, a + n, other,
                                                        kind[1]))

        def on_read(a, n, t):
            w = wr[a:a + n]
            if w.count(-1) + w.count(t) != n:
                race_fault(('reads', 'wrote'), a, n, t,
                           [x for x in w if x not in (-1, t)][0])
            r = rd[a:a + n]
            if r.count(t) != n:
                if r.count(-1) == n:
                    rd[a:a + n] = array.array('h', [t]) * n
                else:
                    for i in range(a, a + n):
                        rd[i] = t if rd[i] in (-1, t) else -2

        def on_write(a, n, t):
            w = wr[a:a + n]
            if w.count(-1) + w.count(t) != n:
                race_fault(('writes', 'wrote'), a, n, t,
                           [x for x in w if x not in (-1, t)][0])
            r = rd[a:a + n]
            if r.count(-1) + r.count(t) != n:
                o = [x for x in r if x not in (-1, t)][0]
                race_fault(('writes', 'read'), a, n, t, o if o >= 0 else 'several')
            wr[a:a + n] = array.array('h', [t]) * n

        def lds(a, n, t):
            if a & (n - 1) or a < 0 or a + n > size:
                check(a, n, 'load')
            if race:
                on_read(a, n, t)
            if init.find(0, a, a + n) >= 0:
                return _undef_bytes(data, init, a, n, 'shared memory never written (%#x)' % a)
            return int.from_bytes(data[a:a + n], 'little')

        def ldsv(a, n, k, t):
            nk = n * k
            if a & (nk - 1) or a < 0 or a + nk > size:
                check(a, nk, 'load')
            if race:
                on_read(a, nk, t)
            if init.find(0, a, a + nk) >= 0:
                return tuple(_undef_bytes(data, init, a + n * i, n, 'shared memory never '
                                          'written (%#x)' % (a + n * i)) if
                             init.find(0, a + n * i, a + n * i + n) >= 0 else
                             int.from_bytes(data[a + n * i:a + n * i + n], 'little')
                             for i in range(k))
            return _vstruct(n, k).unpack_from(data, a)

        def sts(a, n, v, t):
            if a & (n - 1) or a < 0 or a + n > size:
                check(a, n, 'store')
            b = int.to_bytes(v, n, 'little')
            if race:
                on_write(a, n, t)
            data[a:a + n] = b
            init[a:a + n] = b'\x01' * n

        def stsv(a, n, vals, t):
            nk = n * len(vals)
            if a & (nk - 1) or a < 0 or a + nk > size:
                check(a, nk, 'store')
            b = _vstruct(n, len(vals)).pack(*vals)
            if race:
                on_write(a, nk, t)
            data[a:a + nk] = b
            init[a:a + nk] = b'\x01' * nk

        def atoms(a, n, fn, b, c, t):
            old = lds(a, n, t)
            if type(old) is Undef:
                raise TypeError('atomic on undefined memory')
            if race:      # an atomic orders against other atomics, not plain accesses
                pass
            data[a:a + n] = int.to_bytes(fn(old, b, c), n, 'little')
            return old

        return {'LDS': lds, 'LDSV': ldsv, 'STS': sts, 'STSV': stsv, 'ATOMS': atoms}


# ---------------------------------------------------------------------------------------
# Parsing

_TOKEN = re.compile(r'''
    (?P<nl>\n) | [ \t\r\f\v]+ | //[^\n]* | /\*.*?\*/
  | (?P<num>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+U?|0[bB][01]+U?
           |\d+\.\d*(?:[eE][+-]?\d+)?|\d+U?)
  | (?P<id>[%.]?[A-Za-z_$][\w$]*(?:\.[\w$]+(?:::[\w$]+)*)*)
  | (?P<str>"[^"\n]*")
  | (?P<p>[{}()\[\],;:@!+\-|<>=])
  | (?P<bad>.)
''', re.S | re.X)

_WIDTH = {'pred': 1, 'b8': 8, 'u8': 8, 's8': 8, 'b16': 16, 'u16': 16, 's16': 16, 'f16': 16,
          'bf16': 16, 'b32': 32, 'u32': 32, 's32': 32, 'f32': 32, 'f16x2': 32, 'bf16x2': 32,
          'b64': 64, 'u64': 64, 's64': 64, 'f64': 64, 'e4m3x2': 16, 'e5m2x2': 16}

_SPECIAL = ['%tid.x', '%tid.y', '%tid.z', '%ntid.x', '%ntid.y', '%ntid.z',
            '%ctaid.x', '%ctaid.y', '%ctaid.z', '%nctaid.x', '%nctaid.y', '%nctaid.z',
            '%laneid', '%warpid', '%nwarpid',
            # clusters (launch(cluster=)): the CTA's place in its cluster, the cluster's
            # in the grid
            '%cluster_ctarank', '%cluster_nctarank',
            '%cluster_ctaid.x', '%cluster_ctaid.y', '%cluster_ctaid.z',
            '%cluster_nctaid.x', '%cluster_nctaid.y', '%cluster_nctaid.z',
            '%clusterid.x', '%clusterid.y', '%clusterid.z',
            '%nclusterid.x', '%nclusterid.y', '%nclusterid.z', '%is_explicit_cluster']
_SPECIAL_PRED = {'%is_explicit_cluster'}     # a predicate; the others are 32-bit
_R_TID = 0                        # regs[0]: the CTA-linear thread id
_R_SPECIAL = {n: i + 1 for i, n in enumerate(_SPECIAL)}
_R_FIRST = len(_SPECIAL) + 1


def _tokenize(text):
    toks = []
    line = 1
    for mt in _TOKEN.finditer(text):
        k = mt.lastgroup
        if k is None:
            line += mt.group().count('\n')
            continue
        if k == 'nl':
            line += 1
        elif k == 'bad':
            raise PTXError('line %d: unexpected character %r' % (line, mt.group()))
        else:
            toks.append((mt.group(), line))
    return toks


def _parse_int(tok):
    t = tok.rstrip('U')
    if t[:2] in ('0x', '0X'):
        return int(t[2:], 16)
    if t[:2] in ('0b', '0B'):
        return int(t[2:], 2)
    if len(t) > 1 and t[0] == '0' and t.isdigit():
        return int(t, 8)
    return int(t)


class _Var:
    def __init__(self, name, align, esize, count, extern):
        self.name, self.align, self.esize = name, align, esize
        self.count, self.extern = count, extern


class _Ins:
    __slots__ = ('idx', 'line', 'text', 'guard', 'op', 'mods', 'ops', 'srcs', 'sync')

    def __init__(self, line, text, guard, op, ops):
        self.line, self.text, self.guard, self.ops = line, text, guard, ops
        parts = op.split('.')
        self.op, self.mods = parts[0], parts[1:]
        self.srcs = []
        self.sync = None


class Entry:
    """A parsed .entry: parameters, registers, shared variables, instructions."""

    def __init__(self, name, line):
        self.name, self.line = name, line
        self.params = []          # (name, size, align, offset, type)
        self.psize = 0
        self.regs = {}            # name -> (index, width)
        self.nregs = _R_FIRST
        self.shared = []          # function-scope .shared variables
        self.ins = []
        self.labels = {}
        self.reqntid = self.maxntid = None
        self.reqnctapercluster = self.maxclusterrank = None
        self.explicitcluster = False
        self.uses_cluster = False  # barrier.cluster, mapa, getctarank, .shared::cluster
        self.uses_flags = False    # ld.acquire / st.release .global (release / acquire)
        self.code = None          # compiled lazily


class Module:
    """A parsed PTX module. Every instruction of every entry is decoded (and checked
    against what the simulator implements) here; an entry is compiled at its first
    launch."""

    def __init__(self, text, name='<ptx>'):
        self.name = name
        self.entries = {}
        self.mshared = []         # module-scope .shared variables
        self.instructions = 0     # executed by the last launch
        toks = _tokenize(text)
        self._parse(toks)
        for e in self.entries.values():
            _Codegen(self, e).generate()

    # -- module level
    def _parse(self, toks):
        i, n = 0, len(toks)
        while i < n:
            t, line = toks[i]
            if t == '.version' or t == '.address_size':
                i += 2
            elif t == '.target':
                i += 2
                while i < n and toks[i][0] == ',':
                    i += 2
            elif t in ('.visible', '.extern', '.weak', '.entry', '.shared', '.func',
                       '.global', '.const', '.local'):
                j = i
                quals = []
                while toks[j][0] in ('.visible', '.extern', '.weak'):
                    quals.append(toks[j][0])
                    j += 1
                kw = toks[j][0]
                if kw == '.entry':
                    i = self._parse_entry(toks, j + 1)
                elif kw == '.shared':
                    stmt, i = self._statement(toks, j)
                    self.mshared.append(self._var(stmt, '.extern' in quals, line))
                else:
                    raise PTXError('line %d: %s is not supported' % (line, kw))
            elif t in ('.file', '.section'):
                raise PTXError('line %d: %s is not supported' % (line, t))
            else:
                raise PTXError('line %d: unexpected %r at module level' % (line, t))

    @staticmethod
    def _statement(toks, i):
        """Tokens from i to the next ';' (exclusive); returns (tokens, index after)."""
        j = i
        while toks[j][0] != ';':
            j += 1
            if j >= len(toks):
                raise PTXError('line %d: missing ;' % toks[i][1])
        return toks[i:j], j + 1

    @staticmethod
    def _var(stmt, extern, line):
        """A .shared declaration: .shared [.align N] .type name[dims] (no initializer)."""
        k = 1
        align = None
        if stmt[k][0] == '.align':
            align = _parse_int(stmt[k + 1][0])
            k += 2
        ty = stmt[k][0][1:]
        if ty not in _WIDTH or ty == 'pred':
            raise PTXError('line %d: bad .shared type %r' % (line, ty))
        esize = max(1, _WIDTH[ty] // 8)
        name = stmt[k + 1][0]
        count = 1
        k += 2
        while k < len(stmt) and stmt[k][0] == '[':
            if stmt[k + 1][0] == ']':
                if not extern:
                    raise PTXError('line %d: unsized .shared array %s' % (line, name))
                count = 0
                k += 2
            else:
                count *= _parse_int(stmt[k + 1][0])
                k += 3
        if k != len(stmt):
            raise PTXError('line %d: unsupported .shared declaration (initializer?)' % line)
        return _Var(name, align or esize, esize, count, extern)

    def _parse_entry(self, toks, i):
        name, line = toks[i]
        e = Entry(name, line)
        if name in self.entries:
            raise PTXError('line %d: entry %s defined twice' % (line, name))
        i += 1
        if toks[i][0] == '(':
            i += 1
            while toks[i][0] != ')':
                if toks[i][0] == ',':
                    i += 1
                    continue
                if toks[i][0] != '.param':
                    raise PTXError('line %d: expected .param' % toks[i][1])
                i += 1
                align = None
                if toks[i][0] == '.align':
                    align = _parse_int(toks[i + 1][0])
                    i += 2
                ty = toks[i][0][1:]
                if ty not in _WIDTH or ty == 'pred':
                    raise PTXError('line %d: bad .param type' % toks[i][1])
                pname = toks[i + 1][0]
                i += 2
                size = max(1, _WIDTH[ty] // 8)
                if toks[i][0] == '[':
                    size *= _parse_int(toks[i + 1][0])
                    i += 3
                al = align or max(1, _WIDTH[ty] // 8)
                off = (e.psize + al - 1) // al * al
                e.params.append((pname, size, al, off, ty))
                e.psize = off + size
            i += 1
        while toks[i][0] != '{':                  # performance directives
            d, dl = toks[i]
            if d in ('.reqntid', '.maxntid', '.reqnctapercluster'):
                dims = [_parse_int(toks[i + 1][0])]
                i += 2
                while toks[i][0] == ',':
                    dims.append(_parse_int(toks[i + 1][0]))
                    i += 2
                dims += [1] * (3 - len(dims))
                setattr(e, d[1:], tuple(dims))
            elif d in ('.minnctapersm', '.maxnreg', '.maxnctapersm'):
                i += 2
            elif d == '.maxclusterrank':
                e.maxclusterrank = _parse_int(toks[i + 1][0])
                i += 2
            elif d == '.explicitcluster':
                e.explicitcluster = True
                i += 1
            elif d == '.pragma':
                i += 3 if toks[i + 2][0] == ';' else 2
            else:
                raise PTXError('line %d: unsupported entry directive %r' % (dl, d))
        i += 1
        depth = 1
        while True:
            t, tl = toks[i]
            if t == '{':
                depth += 1
                i += 1
            elif t == '}':
                depth -= 1
                i += 1
                if depth == 0:
                    break
            elif i + 1 < len(toks) and toks[i + 1][0] == ':' and not t.startswith('.'):
                if t in e.labels:
                    raise PTXError('line %d: label %s defined twice' % (tl, t))
                e.labels[t] = len(e.ins)
                i += 2
            else:
                stmt, i = self._statement(toks, i)
                self._body_statement(e, stmt)
        self.entries[name] = e
        return i

    def _body_statement(self, e, stmt):
        t, line = stmt[0]
        if t == '.reg':
            ty = stmt[1][0][1:]
            k = 2
            vec = 1
            if ty in ('v2', 'v4'):
                raise PTXError('line %d: vector registers are not supported' % line)
            if ty not in _WIDTH:
                raise PTXError('line %d: bad register type %r' % (line, ty))
            w = _WIDTH[ty]
            while k < len(stmt):
                nm = stmt[k][0]
                if stmt[k][0] == ',':
                    k += 1
                    continue
                if k + 1 < len(stmt) and stmt[k + 1][0] == '<':
                    cnt = _parse_int(stmt[k + 2][0])
                    names = ['%s%d' % (nm, j) for j in range(cnt)]
                    k += 4
                else:
                    names = [nm]
                    k += 1
                for x in names:
                    if x in e.regs:
                        raise PTXError('line %d: register %s declared twice' % (line, x))
                    e.regs[x] = (e.nregs, w)
                    e.nregs += vec
            return
        if t == '.shared':
            e.shared.append(self._var(stmt, False, line))
            return
        if t in ('.pragma', '.loc'):
            return
        if t.startswith('.'):
            raise PTXError('line %d: unsupported directive %s' % (line, t))
        # an instruction: [@[!]%p] opcode operands
        guard = None
        k = 0
        if t == '@':
            neg = stmt[1][0] == '!'
            k = 2 if neg else 1
            guard = (stmt[k][0], neg)
            k += 1
        op = stmt[k][0]
        ops = self._operands(stmt[k + 1:], line)
        text = ' '.join(x for x, _ in stmt)
        text = re.sub(r' ([,\];})|])', r'\1', text)
        text = re.sub(r'([\[{(]) ', r'\1', text)
        e.ins.append(_Ins(line, text.replace('@ ', '@').replace('! ', '!'), guard, op, ops))

    @staticmethod
    def _operands(toks, line):
        """Split operand tokens at top-level commas and classify each operand."""
        groups, cur, depth = [], [], 0
        for t, _ in toks:
            if t in ('[', '{'):
                depth += 1
            elif t in (']', '}'):
                depth -= 1
            if t == ',' and depth == 0:
                groups.append(cur)
                cur = []
            else:
                cur.append(t)
        if cur:
            groups.append(cur)
        return [Module._operand(g, line) for g in groups]

    @staticmethod
    def _operand(g, line):
        if not g:
            raise PTXError('line %d: empty operand' % line)
        if g[0] == '[':
            if g[-1] != ']':
                raise PTXError('line %d: bad address operand' % line)
            inner = g[1:-1]
            base, off = None, 0
            k = 0
            if inner and (inner[0].startswith('%') or inner[0][0].isalpha()
                          or inner[0][0] in '_$'):
                base = ('r', inner[0]) if inner[0].startswith('%') else ('sym', inner[0])
                k = 1
            sign = 1
            while k < len(inner):
                x = inner[k]
                if x == '+':
                    sign = 1
                elif x == '-':
                    sign = -sign
                else:
                    off += sign * _parse_int(x)
                    sign = 1
                k += 1
            return ('mem', base, off)
        if g[0] == '{':
            parts = [p for p in g[1:-1] if p != ',']
            return ('vec', [('sink',) if p == '_' else ('r', p) for p in parts])
        if g[0] == '!':
            return ('not', ('r', g[1]))
        if len(g) == 3 and g[1] == '|':
            return ('pair', ('r', g[0]), ('r', g[2]))
        if len(g) == 3 and g[1] in '+-' and not g[0].startswith('%') and g[2][0].isdigit():
            off = _parse_int(g[2])                     # a variable's address + offset
            return ('symoff', g[0], off if g[1] == '+' else -off)
        if g[0] == '-' or g[0][0].isdigit():
            neg = g[0] == '-'
            tok = g[1] if neg else g[0]
            if len(g) != (2 if neg else 1):
                raise PTXError('line %d: bad immediate %s' % (line, ''.join(g)))
            if tok[:2] in ('0f', '0F'):
                v = int(tok[2:], 16)
                return ('imm', 'f32b', (v ^ 0x80000000) if neg else v)
            if tok[:2] in ('0d', '0D'):
                v = int(tok[2:], 16)
                return ('imm', 'f64b', (v ^ (1 << 63)) if neg else v)
            if '.' in tok:
                return ('imm', 'fdec', -float(tok) if neg else float(tok))
            v = _parse_int(tok)
            return ('imm', 'i', -v if neg else v)
        if len(g) != 1:
            raise PTXError('line %d: bad operand %s' % (line, ' '.join(g)))
        if g[0] == '_':
            return ('sink',)
        if g[0].startswith('%'):
            return ('r', g[0])
        return ('sym', g[0])

    # -- running
    def launch(self, entry, grid=(1, 1, 1), block=(1, 1, 1), params=(), mem=None,
               dyn_smem=0, race_check=True, strict_undef=False,
               max_instructions=2 * 10 ** 9, cluster=None):
        """Run entry over grid x block. params: one value per declared parameter (int, a
        float for .f32 / .f64, bytes for .b8 arrays). race_check: the shared- and
        global-memory race checks (and ld.global.nc of memory written in the launch);
        strict_undef: any operation on a register never written raises, even a
        bitwise one whose result does not depend on it (by default undefined bits are
        tracked and only a use that depends on them raises). cluster: the cluster shape
        (cx, cy, cz), which must divide the grid (None: the entry's .reqnctapercluster,
        else (1, 1, 1) with %is_explicit_cluster false). Returns a dict of statistics
        (instructions, seconds, ctas, clusters). Raises SimError on the first fault."""
        if entry not in self.entries:
            raise SimError('no entry %r in %s (entries: %s)' % (
                entry, self.name, ', '.join(sorted(self.entries))))
        e = self.entries[entry]
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        nthr = block[0] * block[1] * block[2]
        if min(grid) < 1 or min(block) < 1 or nthr > 1024:
            raise SimError('%s: bad launch shape grid %s block %s' % (entry, grid, block))
        if e.reqntid and e.reqntid != block:
            raise SimError('%s: block %s but .reqntid %s' % (entry, block, e.reqntid))
        if e.maxntid and nthr > e.maxntid[0] * e.maxntid[1] * e.maxntid[2]:
            raise SimError('%s: block %s exceeds .maxntid %s' % (entry, block, e.maxntid))
        if cluster is None and e.reqnctapercluster:
            cluster = e.reqnctapercluster      # as a launch without cluster attributes
        explicit = cluster is not None
        cluster = tuple(cluster or ()) + (1,) * (3 - len(cluster or ()))
        ncl = cluster[0] * cluster[1] * cluster[2]
        if min(cluster) < 1 or any(g % c for g, c in zip(grid, cluster)):
            raise SimError('%s: cluster %s does not divide grid %s' % (entry, cluster, grid))
        if ncl > 16:
            raise SimError('%s: cluster %s has %d CTAs: at most 16 (8 portable)'
                           % (entry, cluster, ncl))
        if e.reqnctapercluster and e.reqnctapercluster != cluster:
            raise SimError('%s: cluster %s but .reqnctapercluster %s'
                           % (entry, cluster, e.reqnctapercluster))
        if e.explicitcluster and not explicit:
            raise SimError('%s: .explicitcluster, but launched without a cluster' % entry)
        if e.maxclusterrank and ncl > e.maxclusterrank:
            raise SimError('%s: cluster %s exceeds .maxclusterrank %d'
                           % (entry, cluster, e.maxclusterrank))
        if mem is None:
            mem = Memory()
        if e.code is None:
            _Codegen(self, e).compile()
        ns = e.code['ns']
        gh = _global_helpers(mem)
        raw = gh.pop('_raw')
        ns.update(gh)
        ns['PB'] = pb = self._pack_params(e, params)
        ns['LDP'] = _param_loader(pb)
        ssize = e.code['static_smem'] + dyn_smem
        if ssize > 232448:
            raise SimError('%s: %d bytes of shared memory (static %d + dynamic %d) exceed '
                           'the 227 KiB a CTA can have' % (entry, ssize,
                                                          e.code['static_smem'], dyn_smem))
        run = _Runner(self, e, mem, grid, block, ssize, race_check, max_instructions,
                      cluster, explicit)
        run.strict = strict_undef
        run.grace = _GRace(run, raw) if race_check else None
        t0 = time.time()
        run.run()
        dt = time.time() - t0
        self.instructions = run.count
        return {'instructions': run.count, 'seconds': dt,
                'ctas': grid[0] * grid[1] * grid[2],
                'clusters': grid[0] * grid[1] * grid[2] // ncl}

    @staticmethod
    def _pack_params(e, params):
        params = list(params)
        if len(params) != len(e.params):
            raise SimError('%s takes %d parameters (%s), got %d' % (
                e.name, len(e.params), ', '.join(p[0] for p in e.params), len(params)))
        buf = bytearray(e.psize)
        for (pname, size, al, off, ty), v in zip(e.params, params):
            if isinstance(v, (bytes, bytearray)):
                if len(v) > size:
                    raise SimError('parameter %s: %d bytes for %d' % (pname, len(v), size))
                buf[off:off + len(v)] = v
            elif ty == 'f32' and isinstance(v, float):
                buf[off:off + 4] = _S_f.pack(v)
            elif ty == 'f64' and isinstance(v, float):
                buf[off:off + 8] = _S_d.pack(v)
            elif isinstance(v, int):
                buf[off:off + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, 'little')
            else:
                raise SimError('parameter %s: cannot pass %r' % (pname, v))
        return bytes(buf)


# ---------------------------------------------------------------------------------------
# Code generation: each instruction becomes a line of Python operating on r (the
# thread's register list); straight-line runs become one function per basic block.

_M = {w: (1 << w) - 1 for w in (1, 8, 16, 32, 64, 128)}
_CACHE_MODS = {'ca', 'cg', 'cs', 'lu', 'cv', 'wb', 'wt', 'nc', 'weak', 'volatile',
               'relaxed', 'acquire', 'release', 'cta', 'gpu', 'sys', 'cluster', 'aligned',
               'sync', 'uni', 'L1::evict_normal', 'L1::evict_unchanged', 'L1::evict_first',
               'L1::evict_last', 'L1::no_allocate', 'L2::evict_first', 'L2::evict_last',
               'L2::evict_normal', 'L2::64B', 'L2::128B', 'L2::256B', 'L2::cache_hint'}
_SYNC_OPS = {'bar', 'barrier', 'shfl', 'redux', 'vote', 'mma', 'ret', 'exit'}
_NOPS = {'griddepcontrol', 'prefetch', 'prefetchu', 'membar', 'fence', 'nanosleep',
         'pmevent'}


def _sx(e, w):
    """Python expression: the bit pattern e (width w) as a signed int."""
    s = 1 << (w - 1)
    return '((%s ^ %d) - %d)' % (e, s, s)


class _Codegen:
    def __init__(self, mod, e):
        self.mod, self.e = mod, e

    # -- operands
    def fail(self, ins, msg):
        raise PTXError('%s line %d: %s: `%s`' % (self.e.name, ins.line, msg, ins.text))

    def reg(self, ins, op, write=False):
        if op[0] != 'r':
            self.fail(ins, 'expected a register, got %s' % (op,))
        nm = op[1]
        if nm in _R_SPECIAL:
            if write:
                self.fail(ins, 'cannot write %s' % nm)
            return _R_SPECIAL[nm], 1 if nm in _SPECIAL_PRED else 32
        if nm not in self.e.regs:
            self.fail(ins, 'undeclared register %s' % nm)
        if not write:
            ins.srcs.append(nm)
        return self.e.regs[nm]

    def dst(self, ins, op, w=None):
        """Target expression of a destination register (None for the sink _)."""
        if op[0] == 'sink':
            return None
        idx, rw = self.reg(ins, op, True)
        if w is not None and rw < w and not (rw == 1 or w == 1):
            self.fail(ins, 'register %s (%d bits) too narrow for %d bits' % (op[1], rw, w))
        return 'r[%d]' % idx

    def src(self, ins, op, w, ty='b'):
        """Expression of a source operand as a bit pattern of width w."""
        if op[0] == 'r':
            idx, rw = self.reg(ins, op)
            if rw == 1 and w != 1:
                self.fail(ins, 'predicate %s used as a value' % op[1])
            if rw > w:
                return '(r[%d] & %d)' % (idx, _M[w])
            return 'r[%d]' % idx
        if op[0] == 'imm':
            return str(self.imm(ins, op, w, ty))
        if op[0] == 'sym':
            return str(self.symaddr(ins, op[1]))
        if op[0] == 'symoff':
            return str(self.symaddr(ins, op[1]) + op[2])
        self.fail(ins, 'bad source operand %s' % (op,))

    def imm(self, ins, op, w, ty):
        kind, v = op[1], op[2]
        if kind == 'i':
            return v & _M[w]
        if kind == 'f32b':
            if ty == 'f' and w == 64:
                return _S_Q.unpack(_S_d.pack(_fv(v)))[0]
            return v & _M[w]
        if kind == 'f64b':
            if ty == 'f' and w == 32:
                return f32_bits(_S_d.unpack(_S_Q.pack(v))[0])
            return v & _M[w]
        if ty == 'f' and w == 32:
            return f32_bits(v)
        if ty == 'f' and w == 64:
            return _S_Q.unpack(_S_d.pack(v))[0]
        self.fail(ins, 'float literal for an integer operand')

    def pred(self, ins, op):
        """Expression of a predicate source (%p or !%p)."""
        if op[0] == 'not':
            return '(not %s)' % self.pred(ins, op[1])
        if op[0] == 'imm' and op[1] == 'i':
            return 'True' if op[2] else 'False'
        idx, rw = self.reg(ins, op)
        if rw != 1:
            self.fail(ins, '%s is not a predicate' % op[1])
        return 'r[%d]' % idx

    def symaddr(self, ins, name):
        """A .shared variable's offset, or a kernel parameter's param-space address."""
        if name in self.smem:
            return self.smem[name]
        for p in self.e.params:
            if p[0] == name:
                return PARAM_BASE + p[3]
        self.fail(ins, 'unknown symbol %s (only .shared variables and parameters have '
                  'addresses)' % name)

    def addr(self, ins, op, space):
        """Expression of the address of a [base+off] operand."""
        if op[0] != 'mem':
            self.fail(ins, 'expected an address operand')
        base, off = op[1], op[2]
        if base is None:
            return str(off & _M[64])
        if base[0] == 'sym':
            if space == 'param':
                self.fail(ins, 'param symbol in a non-param access')
            return str(self.symaddr(ins, base[1]) + off)
        e = self.src(ins, base, 64)
        if off:
            return '(%s + %d)' % (e, off) if off > 0 else '(%s - %d)' % (e, -off)
        return e

    # -- module entry
    def layout(self):
        """Static shared variables in declaration order (module-scope ones that the entry
        names first), then the .extern one(s) at the dynamic region."""
        e = self.e
        used = set()
        for ins in e.ins:
            for op in ins.ops:
                if op[0] in ('sym', 'symoff'):
                    used.add(op[1])
                elif op[0] == 'mem' and op[1] is not None and op[1][0] == 'sym':
                    used.add(op[1][1])
        smem, off, externs = {}, 0, []
        for v in [v for v in self.mod.mshared if v.name in used] + e.shared:
            if v.extern:
                externs.append(v)
                continue
            off = (off + v.align - 1) // v.align * v.align
            smem[v.name] = off
            off += v.esize * v.count
        static = off
        for v in externs:
            al = max(16, v.align)
            smem[v.name] = (static + al - 1) // al * al
        dyn_base = max([smem[v.name] for v in externs], default=static)
        self.smem = smem
        return dyn_base

    def generate(self):
        e = self.e
        self.static_smem = self.layout()
        e.ins.append(_Ins(e.ins[-1].line if e.ins else e.line, 'ret (end of entry)', None,
                          'ret', []))
        for lab, k in e.labels.items():
            if k >= len(e.ins):
                raise PTXError('%s: label %s at the end' % (e.name, lab))
        self.bodies = []
        for k, ins in enumerate(e.ins):
            ins.idx = k
            self.bodies.append(self.gen(ins))
        e.gen = self

    def compile(self):
        e = self.e
        g = e.gen
        n = len(e.ins)
        sync = [ins.sync is not None for ins in e.ins]
        leaders = {0}
        for k, ins in enumerate(e.ins):
            kind = g.bodies[k][0]
            if kind in ('bra', 'sync'):
                leaders.add(k + 1)
            if kind == 'bra':
                leaders.add(g.bodies[k][2])
            if sync[k]:
                leaders.add(k)
        leaders = sorted(x for x in leaders if x < n)
        nxt = {}
        for a, b in zip(leaders, leaders[1:] + [n]):
            nxt[a] = b

        def target(k):
            return ~k if sync[k] else k

        src = []
        linemap = []
        funcs = []
        for a in leaders:
            if sync[a]:
                continue
            b = nxt[a]
            src.append('def B%d(r):' % a)
            linemap.append(a)
            term = None
            for k in range(a, b):
                kind, lines = g.bodies[k][0], g.bodies[k][1]
                guard = e.ins[k].guard
                ind = '    '
                if kind == 'bra':
                    tgt = target(g.bodies[k][2])
                    if guard:
                        src.append(ind + 'if %s%s: return %d' % (
                            'not ' if guard[1] else '', g.guard_expr(e.ins[k]), tgt))
                        linemap.append(k)
                    else:
                        term = tgt
                    break
                if guard and lines:
                    src.append(ind + 'if %s%s:' % ('not ' if guard[1] else '',
                                                   g.guard_expr(e.ins[k])))
                    linemap.append(k)
                    ind += '    '
                for ln in lines:
                    src.append(ind + ln)
                    linemap.append(k)
                if guard and not lines:
                    src.append(ind + 'if %s%s: pass' % ('not ' if guard[1] else '',
                                                       g.guard_expr(e.ins[k])))
                    linemap.append(k)
            if term is None:
                term = target(b) if b < n else ~(n - 1)
            src.append('    return %d' % term)
            linemap.append(b - 1)
            funcs.append(a)
        fname = '<ptxsim %s>' % e.name
        code = compile('\n'.join(src) + '\n', fname, 'exec')
        ns = dict(_NS_STATIC)
        exec(code, ns)
        blk = [None] * n
        blen = [0] * n
        for a in funcs:
            blk[a] = ns['B%d' % a]
            blen[a] = nxt[a] - a
        e.code = {'ns': ns, 'blk': blk, 'blen': blen, 'fname': fname,
                  'linemap': linemap, 'static_smem': g.static_smem, 'src': src}

    def guard_expr(self, ins):
        idx, rw = self.reg(ins, ('r', ins.guard[0]))
        if rw != 1:
            self.fail(ins, 'guard %s is not a predicate' % ins.guard[0])
        return 'r[%d]' % idx

    # -- instructions
    def gen(self, ins):
        """(kind, python lines[, branch target]) for one instruction."""
        if ins.guard:
            self.guard_expr(ins)
        fn = getattr(self, 'g_' + ins.op, None)
        if fn is None:
            self.fail(ins, 'unknown or unsupported opcode %r' % ins.op)
        res = fn(ins, ins.mods)
        if ins.sync is not None:
            return ('sync', [])
        if isinstance(res, tuple):
            return res
        return ('op', res)

    def nargs(self, ins, *ns):
        if len(ins.ops) not in ns:
            self.fail(ins, 'wrong number of operands')

    def itype(self, ins, mods, allowed=None):
        """The instruction's type (its last modifier) and width."""
        ty = mods[-1] if mods else None
        if ty not in _WIDTH or (allowed is not None and ty not in allowed):
            self.fail(ins, 'unsupported type .%s' % ty)
        return ty, _WIDTH[ty]

    def only(self, ins, mods, allowed):
        for m in mods:
            if m not in allowed:
                self.fail(ins, 'unsupported modifier .%s' % m)

    # float helpers
    def fop(self, ins, mods, fn, nsrc):
        """f32 arithmetic: .rn only (the default), .ftz, .sat."""
        self.only(ins, mods[:-1], {'rn', 'ftz', 'sat'})
        self.nargs(ins, nsrc + 1)
        ftz = 'ftz' in mods
        args = [self.src(ins, op, 32, 'f') for op in ins.ops[1:]]
        if ftz:
            args = ['_ftz(%s)' % a for a in args]
        e = '%s(%s)' % (fn, ', '.join(args))
        if ftz:
            e = '_ftz(%s)' % e
        if 'sat' in mods:
            e = '_fsat(%s)' % e
        return ['%s = %s' % (self.dst(ins, ins.ops[0], 32), e)]

    def g_add(self, ins, mods):
        return self.addsub(ins, mods, '+', '_fadd')

    def g_sub(self, ins, mods):
        return self.addsub(ins, mods, '-', '_fsub')

    def addsub(self, ins, mods, op, ffn):
        ty, w = self.itype(ins, mods)
        if ty == 'f32':
            return self.fop(ins, mods, ffn, 2)
        if ty[0] not in 'usb' or ty == 'b8':
            self.fail(ins, 'unsupported type')
        self.only(ins, mods[:-1], {'sat'} if ty == 's32' else set())
        self.nargs(ins, 3)
        d = self.dst(ins, ins.ops[0], w)
        a, b = self.src(ins, ins.ops[1], w), self.src(ins, ins.ops[2], w)
        if 'sat' in mods:
            return ['_v = %s %s %s; %s = min(max(_v, -2147483648), 2147483647) & %d'
                    % (_sx(a, 32), op, _sx(b, 32), d, _M[32])]
        return ['%s = (%s %s %s) & %d' % (d, a, op, b, _M[w])]

    def g_mul(self, ins, mods):
        ty, w = self.itype(ins, mods)
        if ty == 'f32':
            return self.fop(ins, mods, '_fmul', 2)
        self.nargs(ins, 3)
        mode = mods[0] if len(mods) == 2 else None
        if mode not in ('lo', 'hi', 'wide') or ty[0] not in 'us':
            self.fail(ins, 'unsupported mul form')
        a, b = self.src(ins, ins.ops[1], w), self.src(ins, ins.ops[2], w)
        if ty[0] == 's':
            a, b = _sx(a, w), _sx(b, w)
        if mode == 'lo':
            e = '(%s * %s) & %d' % (a, b, _M[w])
            d = self.dst(ins, ins.ops[0], w)
        elif mode == 'hi':
            e = '((%s * %s) >> %d) & %d' % (a, b, w, _M[w])
            d = self.dst(ins, ins.ops[0], w)
        else:
            e = '(%s * %s) & %d' % (a, b, _M[2 * w])
            d = self.dst(ins, ins.ops[0], 2 * w)
        return ['%s = %s' % (d, e)]

    def g_mad(self, ins, mods):
        ty, w = self.itype(ins, mods)
        if ty == 'f32':
            if 'rn' not in mods:
                self.fail(ins, 'mad.f32 needs .rn')
            return self.fop(ins, mods, '_ffma', 3)
        self.nargs(ins, 4)
        mode = mods[0] if len(mods) == 2 else None
        if mode not in ('lo', 'hi', 'wide') or ty[0] not in 'us':
            self.fail(ins, 'unsupported mad form')
        a, b = self.src(ins, ins.ops[1], w), self.src(ins, ins.ops[2], w)
        cw = 2 * w if mode == 'wide' else w
        c = self.src(ins, ins.ops[3], cw)
        if ty[0] == 's':
            a, b = _sx(a, w), _sx(b, w)
        if mode == 'lo':
            e = '(%s * %s + %s) & %d' % (a, b, c, _M[w])
        elif mode == 'hi':
            e = '(((%s * %s) >> %d) + %s) & %d' % (a, b, w, c, _M[w])
        else:
            e = '(%s * %s + %s) & %d' % (a, b, c, _M[cw])
        return ['%s = %s' % (self.dst(ins, ins.ops[0], cw), e)]

    def g_fma(self, ins, mods):
        self.itype(ins, mods, {'f32'})
        if 'rn' not in mods:
            self.fail(ins, 'fma.f32 needs .rn')
        return self.fop(ins, mods, '_ffma', 3)

    def g_div(self, ins, mods):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 3)
        if ty == 'f32':
            if 'rn' not in mods:
                self.fail(ins, 'only div.rn.f32 is implemented')
            return self.fop(ins, mods, '_fdiv', 2)
        return self.divrem(ins, ty, w, 'div')

    def g_rem(self, ins, mods):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 3)
        return self.divrem(ins, ty, w, 'rem')

    def divrem(self, ins, ty, w, kind):
        if ty[0] not in 'us':
            self.fail(ins, 'unsupported type')
        a, b = self.src(ins, ins.ops[1], w), self.src(ins, ins.ops[2], w)
        d = self.dst(ins, ins.ops[0], w)
        if ty[0] == 'u':
            e = '_a // _b' if kind == 'div' else '_a % _b'
            return ['_a = %s; _b = %s; _zdiv(_b); %s = %s' % (a, b, d, e)]
        e = '_q' if kind == 'div' else '_a - _q * _b'
        return ['_a = %s; _b = %s; _zdiv(_b); _q = abs(_a) // abs(_b); '
                '_q = _q if (_a < 0) == (_b < 0) else -_q; %s = (%s) & %d'
                % (_sx(a, w), _sx(b, w), d, e, _M[w])]

    def g_rcp(self, ins, mods):
        self.itype(ins, mods, {'f32'})
        if 'rn' not in mods:
            self.fail(ins, 'only rcp.rn.f32 is implemented')
        return self.fop(ins, mods, '_frcp', 1)

    def g_ex2(self, ins, mods):
        self.itype(ins, mods, {'f32'})
        if 'approx' not in mods:
            self.fail(ins, 'only ex2.approx(.ftz).f32 is implemented')
        self.only(ins, mods[:-1], {'approx', 'ftz'})
        self.nargs(ins, 2)
        a = self.src(ins, ins.ops[1], 32, 'f')
        e = '_ftz(_fex2(_ftz(%s)))' % a if 'ftz' in mods else '_fex2(%s)' % a
        return ['%s = %s' % (self.dst(ins, ins.ops[0], 32), e)]

    def g_neg(self, ins, mods):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 2)
        a, d = self.src(ins, ins.ops[1], w, 'f'), self.dst(ins, ins.ops[0], w)
        if ty == 'f32':
            self.only(ins, mods[:-1], {'ftz'})
            e = '%s ^ 2147483648' % a
            return ['%s = %s' % (d, '_ftz(%s)' % e if 'ftz' in mods else e)]
        return ['%s = (-%s) & %d' % (d, a, _M[w])]

    def g_abs(self, ins, mods):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 2)
        a, d = self.src(ins, ins.ops[1], w, 'f'), self.dst(ins, ins.ops[0], w)
        if ty == 'f32':
            self.only(ins, mods[:-1], {'ftz'})
            e = '%s & 2147483647' % a
            return ['%s = %s' % (d, '_ftz(%s)' % e if 'ftz' in mods else e)]
        return ['%s = abs(%s) & %d' % (d, _sx(a, w), _M[w])]

    def minmax(self, ins, mods, is_max):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 3)
        d = self.dst(ins, ins.ops[0], w)
        if ty == 'f32':
            self.only(ins, mods[:-1], {'ftz'})
            a, b = (self.src(ins, o, 32, 'f') for o in ins.ops[1:])
            if 'ftz' in mods:
                a, b = '_ftz(%s)' % a, '_ftz(%s)' % b
            return ['%s = _fminmax(%s, %s, %s)' % (d, a, b, is_max)]
        self.only(ins, mods[:-1], {'relu'} if ty == 's32' else set())
        a, b = (self.src(ins, o, w) for o in ins.ops[1:])
        fn = 'max' if is_max else 'min'
        if ty[0] == 'u':
            return ['%s = %s(%s, %s)' % (d, fn, a, b)]
        if ty[0] != 's':
            self.fail(ins, 'unsupported type')
        e = '%s(%s, %s)' % (fn, _sx(a, w), _sx(b, w))
        if 'relu' in mods:
            e = 'max(%s, 0)' % e
        return ['%s = %s & %d' % (d, e, _M[w])]

    def g_min(self, ins, mods):
        return self.minmax(ins, mods, False)

    def g_max(self, ins, mods):
        return self.minmax(ins, mods, True)

    def logic(self, ins, mods, op):
        ty, w = self.itype(ins, mods, {'pred', 'b16', 'b32', 'b64'})
        self.only(ins, mods[:-1], set())
        self.nargs(ins, 3)
        if ty == 'pred':
            a, b = self.pred(ins, ins.ops[1]), self.pred(ins, ins.ops[2])
            d = self.dst(ins, ins.ops[0])
            if op == '&':
                return ['%s = True if (%s and %s) else False' % (d, a, b)]
            if op == '|':
                return ['%s = True if (%s or %s) else False' % (d, a, b)]
            return ['%s = bool(%s) != bool(%s)' % (d, a, b)]
        a, b = self.src(ins, ins.ops[1], w), self.src(ins, ins.ops[2], w)
        return ['%s = %s %s %s' % (self.dst(ins, ins.ops[0], w), a, op, b)]

    def g_and(self, ins, mods):
        return self.logic(ins, mods, '&')

    def g_or(self, ins, mods):
        return self.logic(ins, mods, '|')

    def g_xor(self, ins, mods):
        return self.logic(ins, mods, '^')

    def g_not(self, ins, mods):
        ty, w = self.itype(ins, mods, {'pred', 'b16', 'b32', 'b64'})
        self.nargs(ins, 2)
        if ty == 'pred':
            return ['%s = not %s' % (self.dst(ins, ins.ops[0]), self.pred(ins, ins.ops[1]))]
        return ['%s = %s ^ %d' % (self.dst(ins, ins.ops[0], w),
                                  self.src(ins, ins.ops[1], w), _M[w])]

    def g_cnot(self, ins, mods):
        ty, w = self.itype(ins, mods, {'b16', 'b32', 'b64'})
        self.nargs(ins, 2)
        return ['%s = 1 if %s == 0 else 0' % (self.dst(ins, ins.ops[0], w),
                                              self.src(ins, ins.ops[1], w))]

    def g_popc(self, ins, mods):
        ty, w = self.itype(ins, mods, {'b32', 'b64'})
        self.nargs(ins, 2)
        return ['%s = bin(%s).count("1")' % (self.dst(ins, ins.ops[0], 32),
                                             self.src(ins, ins.ops[1], w))]

    def g_clz(self, ins, mods):
        ty, w = self.itype(ins, mods, {'b32', 'b64'})
        self.nargs(ins, 2)
        return ['%s = %d - int.bit_length(%s)' % (self.dst(ins, ins.ops[0], 32), w,
                                                  self.src(ins, ins.ops[1], w))]

    def g_brev(self, ins, mods):
        ty, w = self.itype(ins, mods, {'b32', 'b64'})
        self.nargs(ins, 2)
        return ["%s = int(format(%s, '0%db')[::-1], 2)" % (
            self.dst(ins, ins.ops[0], w), self.src(ins, ins.ops[1], w), w)]

    def shift(self, ins, mods, left):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 3)
        if ty[0] not in 'bus' or ty == 'b8' or (left and ty[0] == 's'):
            self.fail(ins, 'unsupported type')
        d = self.dst(ins, ins.ops[0], w)
        a = self.src(ins, ins.ops[1], w)
        bop = ins.ops[2]
        arith = not left and ty[0] == 's'
        if bop[0] == 'imm':
            n = self.imm(ins, bop, 32, 'b')
            if left:
                return ['%s = %s' % (d, '0' if n >= w else '(%s << %d) & %d' % (a, n, _M[w]))]
            if arith:
                return ['%s = (%s >> %d) & %d' % (d, _sx(a, w), min(n, w - 1), _M[w])]
            return ['%s = %s' % (d, '0' if n >= w else '%s >> %d' % (a, n))]
        b = self.src(ins, bop, 32)
        if left:
            return ['_n = %s; %s = (%s << (_n if _n < %d else %d)) & %d'
                    % (b, d, a, w, w, _M[w])]
        if arith:
            return ['_n = %s; %s = (%s >> (_n if _n < %d else %d)) & %d'
                    % (b, d, _sx(a, w), w, w, _M[w])]
        return ['_n = %s; %s = %s >> (_n if _n < %d else %d)' % (b, d, a, w, w)]

    def g_shl(self, ins, mods):
        return self.shift(ins, mods, True)

    def g_shr(self, ins, mods):
        return self.shift(ins, mods, False)

    def g_shf(self, ins, mods):
        if len(mods) != 3 or mods[0] not in ('l', 'r') or mods[1] not in ('clamp', 'wrap') \
                or mods[2] != 'b32':
            self.fail(ins, 'unsupported shf form')
        self.nargs(ins, 4)
        d = self.dst(ins, ins.ops[0], 32)
        a, b = self.src(ins, ins.ops[1], 32), self.src(ins, ins.ops[2], 32)
        cop = ins.ops[3]
        if cop[0] == 'imm':
            c = self.imm(ins, cop, 32, 'b')
            n = str(min(c, 32) if mods[1] == 'clamp' else c & 31)
            pre = ''
        else:
            c = self.src(ins, cop, 32)
            pre = '_n = %s; ' % c
            n = '(_n if _n < 32 else 32)' if mods[1] == 'clamp' else '(_n & 31)'
        if mods[0] == 'r':
            return ['%s%s = (((%s << 32) | %s) >> %s) & 4294967295' % (pre, d, b, a, n)]
        return ['%s%s = ((((%s << 32) | %s) << %s) >> 32) & 4294967295' % (pre, d, b, a, n)]

    def g_prmt(self, ins, mods):
        if mods != ['b32']:
            self.fail(ins, 'only the default prmt.b32 mode is implemented')
        self.nargs(ins, 4)
        d = self.dst(ins, ins.ops[0], 32)
        a, b = self.src(ins, ins.ops[1], 32), self.src(ins, ins.ops[2], 32)
        cop = ins.ops[3]
        if cop[0] != 'imm':
            return ['%s = _prmt(%s, %s, %s)' % (d, a, b, self.src(ins, cop, 32))]
        c = self.imm(ins, cop, 32, 'b')
        parts = []
        for i in range(4):
            sel = (c >> (4 * i)) & 0xf
            if sel & 8:
                parts.append('(%d if (_t >> %d) & 1 else 0)' % (0xff << (8 * i),
                                                                  8 * (sel & 7) + 7))
            else:
                sh = 8 * (sel & 7) - 8 * i
                byte = '(_t & %d)' % (0xff << (8 * (sel & 7)))
                parts.append('(%s >> %d)' % (byte, sh) if sh > 0 else
                             '(%s << %d)' % (byte, -sh) if sh < 0 else byte)
        return ['_t = (%s << 32) | %s; %s = %s' % (b, a, d, ' | '.join(parts))]

    def g_selp(self, ins, mods):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 4)
        d = self.dst(ins, ins.ops[0], w)
        a, b = self.src(ins, ins.ops[1], w, 'f'), self.src(ins, ins.ops[2], w, 'f')
        return ['%s = %s if %s else %s' % (d, a, self.pred(ins, ins.ops[3]), b)]

    def g_setp(self, ins, mods):
        ty, w = self.itype(ins, mods)
        m = mods[:-1]
        if m and m[-1] == 'ftz':
            m = m[:-1]
        if not m or len(m) > 2:
            self.fail(ins, 'bad setp form')
        cmp_, boolop = m[0], (m[1] if len(m) == 2 else None)
        if boolop not in (None, 'and', 'or', 'xor'):
            self.fail(ins, 'bad setp boolean op')
        self.nargs(ins, 4 if boolop else 3)
        out = ins.ops[0]
        p, q = (out[1], out[2]) if out[0] == 'pair' else (out, ('sink',))
        pd, qd = self.dst(ins, p), self.dst(ins, q)
        a, b = self.src(ins, ins.ops[1], w, 'f'), self.src(ins, ins.ops[2], w, 'f')
        pre = ''
        if ty in ('f32', 'f64'):
            if ty == 'f64':
                self.fail(ins, 'f64 compares are not implemented')
            pre = '_x, _y = _S_2f.unpack(_S_2I.pack(%s, %s)); ' % (a, b)
            fc = {'eq': '_x == _y', 'ne': '(_x != _y and _x == _x and _y == _y)',
                  'lt': '_x < _y', 'le': '_x <= _y', 'gt': '_x > _y', 'ge': '_x >= _y',
                  'equ': '(_x == _y or _x != _x or _y != _y)', 'neu': '_x != _y',
                  'ltu': 'not (_x >= _y)', 'leu': 'not (_x > _y)',
                  'gtu': 'not (_x <= _y)', 'geu': 'not (_x < _y)',
                  'num': '(_x == _x and _y == _y)', 'nan': '(_x != _x or _y != _y)'}
            if cmp_ not in fc:
                self.fail(ins, 'bad float compare')
            c = fc[cmp_]
        else:
            if ty[0] == 's':
                a, b = _sx(a, w), _sx(b, w)
            ops = {'eq': '==', 'ne': '!=', 'lt': '<', 'le': '<=', 'gt': '>', 'ge': '>=',
                   'lo': '<', 'ls': '<=', 'hi': '>', 'hs': '>='}
            if cmp_ not in ops or (ty[0] == 'b' and cmp_ not in ('eq', 'ne')) or \
                    (ty[0] == 's' and cmp_ in ('lo', 'ls', 'hi', 'hs')):
                self.fail(ins, 'bad integer compare')
            c = '%s %s %s' % (a, ops[cmp_], b)
        if boolop:
            cexp = self.pred(ins, ins.ops[3])
            comb = {'and': 'True if (%s and %s) else False',
                    'or': 'True if (%s or %s) else False',
                    'xor': '(%s) != bool(%s)'}[boolop]
            lines = pre + '_c = %s; ' % c
            if qd:
                lines += '_d = %s; ' % cexp
                cexp = '_d'
            if pd:
                lines += '%s = %s; ' % (pd, comb % ('_c', cexp))
            if qd:
                lines += '%s = %s; ' % (qd, comb % ('not _c', cexp))
            return [lines.rstrip('; ')]
        lines = pre + '_c = %s; ' % c
        if pd:
            lines += '%s = _c; ' % pd
        if qd:
            lines += '%s = not _c; ' % qd
        return [lines.rstrip('; ')]

    def g_mov(self, ins, mods):
        ty, w = self.itype(ins, mods)
        self.nargs(ins, 2)
        d, s = ins.ops
        if ty == 'pred':
            return ['%s = %s' % (self.dst(ins, d), self.pred(ins, s))]
        if s[0] == 'vec':              # pack: element 0 in the low bits
            ew = w // len(s[1])
            parts = []
            for i, x in enumerate(s[1]):
                e = self.src(ins, x, ew)
                parts.append(e if i == 0 else '(%s << %d)' % (e, ew * i))
            return ['%s = %s' % (self.dst(ins, d, w), ' | '.join(parts))]
        if d[0] == 'vec':              # unpack
            ew = w // len(d[1])
            e = self.src(ins, s, w)
            out = ['_v = %s' % e]
            for i, x in enumerate(d[1]):
                t = self.dst(ins, x, ew)
                if t:
                    out.append('%s = (_v >> %d) & %d' % (t, ew * i, _M[ew]) if i else
                               '%s = _v & %d' % (t, _M[ew]))
            return ['; '.join(out)]
        return ['%s = %s' % (self.dst(ins, d, w), self.src(ins, s, w, 'f'))]

    def g_cvt(self, ins, mods):
        if len(mods) < 2:
            self.fail(ins, 'bad cvt')
        dt, at = mods[-2], mods[-1]
        m = set(mods[:-2])
        if dt not in _WIDTH or at not in _WIDTH:
            self.fail(ins, 'bad cvt types')
        dw, aw = _WIDTH[dt], _WIDTH[at]
        if dt == 'f16x2' and at in ('e4m3x2', 'e5m2x2'):
            self.nargs(ins, 2)
            fn = '_dq4' if at == 'e4m3x2' else '_dq5'
            a = self.src(ins, ins.ops[1], 16)
            return ['%s = (%s((%s) >> 8) << 16) | %s((%s) & 255)' % (
                self.dst(ins, ins.ops[0], 32), fn, a, fn, a)]
        if dt in ('f16x2', 'bf16x2') and at == 'f32' and len(ins.ops) == 3:
            fn = '_f32_to_f16' if dt == 'f16x2' else '_f32_to_bf16'
            a, b = self.src(ins, ins.ops[1], 32), self.src(ins, ins.ops[2], 32)
            return ['%s = (%s(%s) << 16) | %s(%s)' % (self.dst(ins, ins.ops[0], 32),
                                                     fn, a, fn, b)]
        if dt in ('e4m3x2', 'e5m2x2'):
            if at != 'f32' or m != {'rn', 'satfinite'}:
                self.fail(ins, 'only cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 is implemented')
            self.nargs(ins, 3)
            fn = '_e4m3' if dt == 'e4m3x2' else '_e5m2'
            a, b = self.src(ins, ins.ops[1], 32), self.src(ins, ins.ops[2], 32)
            return ['%s = (%s(%s) << 8) | %s(%s)' % (self.dst(ins, ins.ops[0], 16),
                                                    fn, a, fn, b)]
        self.nargs(ins, 2)
        d = self.dst(ins, ins.ops[0], dw)
        a = self.src(ins, ins.ops[1], aw)
        isint = lambda t: t[0] in 'usb'     # noqa: E731
        if isint(dt) and isint(at):
            self.only(ins, m, {'sat'})
            v = _sx(a, aw) if at[0] == 's' else a
            if 'sat' in m:
                lo, hi = ((-(1 << (dw - 1)), (1 << (dw - 1)) - 1) if dt[0] == 's'
                          else (0, _M[dw]))
                return ['%s = min(max(%s, %d), %d) & %d' % (d, v, lo, hi, _M[dw])]
            return ['%s = %s & %d' % (d, v, _M[dw])]
        if dt == 'f32' and at == 'f16':
            self.only(ins, m, {'ftz'})
            e = '_F16T[%s]' % a
            return ['%s = %s' % (d, '_ftz(%s)' % e if 'ftz' in m else e)]
        if dt == 'f32' and at == 'bf16':
            self.only(ins, m, set())
            return ['%s = %s << 16' % (d, a)]
        if dt == 'f16' and at == 'f32':
            self.only(ins, m, {'rn'})
            if 'rn' not in m:
                self.fail(ins, 'cvt.f16.f32 needs .rn')
            return ['%s = _f32_to_f16(%s)' % (d, a)]
        if dt == 'bf16' and at == 'f32':
            self.only(ins, m, {'rn'})
            if 'rn' not in m:
                self.fail(ins, 'cvt.bf16.f32 needs .rn')
            return ['%s = _f32_to_bf16(%s)' % (d, a)]
        if dt == 'f32' and isint(at):
            self.only(ins, m, {'rn'})
            v = _sx(a, aw) if at[0] == 's' else a
            return ['%s = _int_to_f32(%s)' % (d, v)]
        if isint(dt) and at == 'f32':
            rm = m & {'rni', 'rzi', 'rmi', 'rpi'}
            self.only(ins, m, {'rni', 'rzi', 'rmi', 'rpi', 'ftz', 'sat'})
            if len(rm) != 1:
                self.fail(ins, 'cvt to int needs one of .rni .rzi .rmi .rpi')
            lo, hi = ((-(1 << (dw - 1)), (1 << (dw - 1)) - 1) if dt[0] == 's'
                      else (0, _M[dw]))
            src = '_ftz(%s)' % a if 'ftz' in m else a
            return ['%s = _f32_to_int(%s, %r, %d, %d) & %d' % (d, src, rm.pop(), lo, hi,
                                                              _M[dw])]
        if dt == 'f32' and at == 'f32':
            rm = m & {'rni', 'rzi', 'rmi', 'rpi'}
            self.only(ins, m, {'rni', 'rzi', 'rmi', 'rpi', 'ftz', 'sat'})
            e = '_ftz(%s)' % a if 'ftz' in m else a
            if rm:
                e = '_f32_round_int(%s, %r)' % (e, rm.pop())
            if 'sat' in m:
                e = '_fsat(%s)' % e
            return ['%s = %s' % (d, e)]
        self.fail(ins, 'cvt.%s.%s is not implemented' % (dt, at))

    def g_cvta(self, ins, mods):
        if mods not in (['to', 'global', 'u64'], ['global', 'u64']):
            self.fail(ins, 'only cvta(.to).global.u64 is implemented')
        self.nargs(ins, 2)
        return ['%s = %s' % (self.dst(ins, ins.ops[0], 64), self.src(ins, ins.ops[1], 64))]

    def space(self, ins, mods):
        sp = None
        vec = 1
        rest = []
        for x in mods[:-1]:
            if x in ('global', 'shared', 'param', 'shared::cta'):
                sp = 'shared' if x.startswith('shared') else x
            elif x == 'shared::cluster':          # distributed shared memory
                sp = 'cluster'
                self.e.uses_cluster = True
            elif x in ('v2', 'v4', 'v8'):
                vec = int(x[1])
            elif x in ('const', 'local', 'tex'):
                self.fail(ins, 'state space .%s is not supported' % x)
            elif x in _CACHE_MODS:
                pass
            else:
                rest.append(x)
        return sp or 'global', vec, rest

    def strong(self, ins, mods, vec, sync, what):
        """Whether a global ld / st is morally strong (.relaxed, .volatile or sync:
        .acquire for loads, .release for stores); scalar only. sync marks the entry as
        one using flags (_GRace's flag mode)."""
        if not {'relaxed', 'volatile', sync} & set(mods):
            return False
        if vec != 1:
            self.fail(ins, 'vector .relaxed / .%s / .volatile %s are not implemented'
                      % (sync, what))
        self.e.uses_flags |= sync in mods
        return True

    def g_ld(self, ins, mods):
        ty, w = self.itype(ins, mods)
        sp, vec, rest = self.space(ins, mods)
        if rest:
            self.fail(ins, 'unsupported modifier .%s' % rest[0])
        self.nargs(ins, 2)
        n = max(1, w // 8)
        d, aop = ins.ops
        if sp == 'param' and aop[0] == 'mem' and aop[1] is not None and aop[1][0] == 'r':
            a = self.addr(ins, aop, sp)       # a param-space address in a register
            if vec == 1:
                return ['%s = LDP(%s, %d, 1)[0]' % (self.dst(ins, d, w), a, n)]
            if d[0] != 'vec' or len(d[1]) != vec:
                self.fail(ins, 'vector load needs %d destinations' % vec)
            ds = [self.dst(ins, x, w) or '_' for x in d[1]]
            return ['%s = LDP(%s, %d, %d)' % (', '.join(ds), a, n, vec)]
        if sp == 'param':
            if aop[0] != 'mem' or aop[1] is None or aop[1][0] != 'sym' or vec != 1:
                self.fail(ins, 'ld.param wants [param_name(+offset)] or [register]')
            p = [x for x in self.e.params if x[0] == aop[1][1]]
            if not p:
                self.fail(ins, 'unknown parameter %s' % aop[1][1])
            off = p[0][3] + aop[2]
            if aop[2] < 0 or aop[2] + n > p[0][1]:
                self.fail(ins, 'ld.param outside parameter %s' % p[0][0])
            v = 'int.from_bytes(PB[%d:%d], "little")' % (off, off + n)
            if ty[0] == 's' and w < 32:
                v = _sx(v, w)
            return ['%s = %s' % (self.dst(ins, d, w), v)]
        a = self.addr(ins, aop, sp)
        fn = {'global': 'LDG', 'shared': 'LDS', 'cluster': 'LDC'}[sp]
        if sp == 'global' and 'nc' in mods:
            fn = 'LDGN'                 # the non-coherent path (ld.global.nc)
        tid = ', r[0]' if sp != 'global' else ', r[0], %d' % ins.idx
        if sp == 'global' and self.strong(ins, mods, vec, 'acquire', 'loads'):
            fn, tid = 'LDGS', tid + ', %d' % ('acquire' in mods)
        if vec == 1:
            dd = self.dst(ins, d, w)
            idx, rw = self.reg(ins, d, True)
            v = '%s(%s, %d%s)' % (fn, a, n, tid)
            if ty[0] == 's' and w < rw:
                v = '%s & %d' % (_sx(v, w), _M[rw])
            return ['%s = %s' % (dd, v)]
        if d[0] != 'vec' or len(d[1]) != vec:
            self.fail(ins, 'vector load needs %d destinations' % vec)
        if ty[0] == 's' and w < 32:
            self.fail(ins, 'signed sub-word vector loads are not implemented')
        ds = [self.dst(ins, x, w) or '_' for x in d[1]]
        return ['%s = %sV(%s, %d, %d%s)' % (', '.join(ds), fn, a, n, vec, tid)]

    def g_st(self, ins, mods):
        ty, w = self.itype(ins, mods)
        sp, vec, rest = self.space(ins, mods)
        if rest:
            self.fail(ins, 'unsupported modifier .%s' % rest[0])
        if sp == 'param':
            self.fail(ins, 'st.param is not supported')
        self.nargs(ins, 2)
        n = max(1, w // 8)
        aop, s = ins.ops
        a = self.addr(ins, aop, sp)
        fn = {'global': 'STG', 'shared': 'STS', 'cluster': 'STC'}[sp]
        tid = ', r[0]' if sp != 'global' else ', r[0], %d' % ins.idx
        if sp == 'global' and self.strong(ins, mods, vec, 'release', 'stores'):
            fn, tid = 'STGS', tid + ', %d' % ('release' in mods)
        if vec == 1:
            return ['%s(%s, %d, %s%s)' % (fn, a, n, self.src(ins, s, w, 'f'), tid)]
        if s[0] != 'vec' or len(s[1]) != vec:
            self.fail(ins, 'vector store needs %d sources' % vec)
        vals = ', '.join(self.src(ins, x, w, 'f') for x in s[1])
        return ['%sV(%s, %d, (%s,)%s)' % (fn, a, n, vals, tid)]

    def atomic(self, ins, mods, has_dst):
        ty, w = self.itype(ins, mods)
        sp = 'global'
        op = None
        for x in mods[:-1]:
            if x in ('global', 'shared', 'shared::cta'):
                sp = 'shared' if x.startswith('shared') else x
            elif x == 'shared::cluster':
                sp = 'cluster'
                self.e.uses_cluster = True
            elif x in ('add', 'min', 'max', 'and', 'or', 'xor', 'exch', 'cas', 'inc',
                       'dec'):
                op = x
            elif x not in _CACHE_MODS:
                self.fail(ins, 'unsupported modifier .%s' % x)
        if op is None:
            self.fail(ins, 'missing atomic operation')
        nsrc = 2 if op == 'cas' else 1
        self.nargs(ins, nsrc + (2 if has_dst else 1))
        ops = ins.ops[1:] if has_dst else ins.ops
        a = self.addr(ins, ops[0], sp)
        b = self.src(ins, ops[1], w, 'f')
        c = self.src(ins, ops[2], w, 'f') if op == 'cas' else 'None'
        key = (op, ty)
        if key not in _ATOM_FN:
            fn = _atom_fn(op, ty, w)
            if fn is None:
                self.fail(ins, 'atomic .%s.%s is not implemented' % (op, ty))
            _ATOM_FN[key] = fn
        call = ('ATOMG(%s, %d, _ATOM_FN[%r], %s, %s, r[0], %d)' % (a, w // 8, key, b, c,
                                                               ins.idx) if
                sp == 'global' else
                '%s(%s, %d, _ATOM_FN[%r], %s, %s, r[0])' % (
                    'ATOMS' if sp == 'shared' else 'ATOMC', a, w // 8, key, b, c))
        if has_dst:
            return ['%s = %s' % (self.dst(ins, ins.ops[0], w), call)]
        return [call]

    def g_atom(self, ins, mods):
        return self.atomic(ins, mods, True)

    def g_red(self, ins, mods):
        return self.atomic(ins, mods, False)

    # control flow
    def g_bra(self, ins, mods):
        self.only(ins, mods, {'uni'})
        self.nargs(ins, 1)
        if ins.ops[0][0] != 'sym' or ins.ops[0][1] not in self.e.labels:
            self.fail(ins, 'unknown label')
        return ('bra', [], self.e.labels[ins.ops[0][1]])

    def g_ret(self, ins, mods):
        self.only(ins, mods, {'uni'})
        ins.sync = ('exit',)

    def g_exit(self, ins, mods):
        self.only(ins, mods, set())
        ins.sync = ('exit',)

    def g_trap(self, ins, mods):
        return ['_trap()']

    def opnd(self, ins, op, w=32):
        """A pre-resolved operand for the scheduler: ('r', index) or ('i', value)."""
        if op[0] == 'imm':
            return ('i', self.imm(ins, op, w, 'b'))
        idx, rw = self.reg(ins, op)
        return ('r', idx)

    def g_bar(self, ins, mods):
        if ins.op == 'barrier' and mods and mods[0] == 'cluster':
            return self.cluster_barrier(ins, mods)
        if mods and mods[0] == 'warp':
            if mods != ['warp', 'sync']:
                self.fail(ins, 'bad bar.warp form')
            self.nargs(ins, 1)
            ins.sync = ('warp', self.opnd(ins, ins.ops[0]))
            return
        m = [x for x in mods if x != 'cta']
        if m not in (['sync'], ['sync', 'aligned']) and not (ins.op == 'bar' and m == []):
            self.fail(ins, 'only bar.sync / barrier.sync are implemented')
        self.nargs(ins, 1, 2)
        ins.sync = ('bar', self.opnd(ins, ins.ops[0]),
                    self.opnd(ins, ins.ops[1]) if len(ins.ops) == 2 else None,
                    ins.op == 'bar' or 'aligned' in m)

    g_barrier = g_bar

    def cluster_barrier(self, ins, mods):
        """barrier.cluster.arrive{.release|.relaxed}{.aligned},
        barrier.cluster.wait{.acquire}{.aligned}: split-phase, run by _Cluster."""
        self.nargs(ins, 0)
        self.e.uses_cluster = True
        m = mods[1:]
        aligned = bool(m) and m[-1] == 'aligned'
        if aligned:
            m = m[:-1]
        if m in (['arrive'], ['arrive', 'release'], ['arrive', 'relaxed']):
            ins.sync = ('carrive', m != ['arrive', 'relaxed'], aligned)
        elif m in (['wait'], ['wait', 'acquire']):
            ins.sync = ('cwait', True, aligned)
        else:
            self.fail(ins, 'bad barrier.cluster form')

    def g_mapa(self, ins, mods):
        """mapa.shared::cluster.{u32,u64} d, a, rank: a's offset in CTA rank's window."""
        if len(mods) != 2 or mods[0] != 'shared::cluster' or mods[1] not in ('u32', 'u64'):
            self.fail(ins, 'only mapa.shared::cluster.{u32,u64} is implemented (no generic '
                      'addresses)')
        self.nargs(ins, 3)
        self.e.uses_cluster = True
        w = _WIDTH[mods[1]]
        return ['%s = MAPA(%s, %s)' % (self.dst(ins, ins.ops[0], w),
                                       self.src(ins, ins.ops[1], w),
                                       self.src(ins, ins.ops[2], 32))]

    def g_getctarank(self, ins, mods):
        """getctarank.shared::cluster.{u32,u64} d, a: the rank of the CTA a points into."""
        if len(mods) != 2 or mods[0] != 'shared::cluster' or mods[1] not in ('u32', 'u64'):
            self.fail(ins, 'only getctarank.shared::cluster.{u32,u64} is implemented')
        self.nargs(ins, 2)
        self.e.uses_cluster = True
        return ['%s = CTARANK(%s)' % (self.dst(ins, ins.ops[0], 32),
                                      self.src(ins, ins.ops[1], _WIDTH[mods[1]]))]

    def g_shfl(self, ins, mods):
        if len(mods) != 3 or mods[0] != 'sync' or mods[1] not in ('up', 'down', 'bfly',
                                                                  'idx') or mods[2] != 'b32':
            self.fail(ins, 'only shfl.sync.{up,down,bfly,idx}.b32 is implemented')
        self.nargs(ins, 5)
        out = ins.ops[0]
        d, p = (out[1], out[2]) if out[0] == 'pair' else (out, ('sink',))
        di = self.reg(ins, d, True)[0] if d[0] != 'sink' else None
        pi = self.reg(ins, p, True)[0] if p[0] != 'sink' else None
        ins.sync = ('shfl', mods[1], di, pi, self.opnd(ins, ins.ops[1]),
                    self.opnd(ins, ins.ops[2]), self.opnd(ins, ins.ops[3]),
                    self.opnd(ins, ins.ops[4]))

    def g_redux(self, ins, mods):
        if len(mods) != 3 or mods[0] != 'sync' or (mods[1], mods[2]) not in {
                ('add', 'u32'), ('add', 's32'), ('min', 'u32'), ('min', 's32'),
                ('max', 'u32'), ('max', 's32'), ('and', 'b32'), ('or', 'b32'),
                ('xor', 'b32')}:
            self.fail(ins, 'unsupported redux form')
        self.nargs(ins, 3)
        ins.sync = ('redux', mods[1], mods[2], self.reg(ins, ins.ops[0], True)[0],
                    self.opnd(ins, ins.ops[1]), self.opnd(ins, ins.ops[2]))

    def g_mma(self, ins, mods):
        """mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32 d, a, b, c: a
        warp collective of all 32 lanes (Warp.mma)."""
        if (len(mods) != 9 or mods[:6] != ['sync', 'aligned', 'm16n8k32', 'row', 'col', 'f32']
                or mods[6] not in ('e4m3', 'e5m2') or mods[7] not in ('e4m3', 'e5m2')
                or mods[8] != 'f32'):
            self.fail(ins, 'only mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.'
                      '{e4m3,e5m2}.f32 is implemented')
        self.nargs(ins, 4)
        vecs = []
        for op, n in zip(ins.ops, (4, 4, 2, 4)):
            if op[0] != 'vec' or len(op[1]) != n:
                self.fail(ins, 'mma operands: {4 regs}, {4 regs}, {2 regs}, {4 regs}')
            vecs.append(op[1])
        d = [self.reg(ins, r, True)[0] for r in vecs[0]]
        src = [[self.reg(ins, r)[0] for r in v] for v in vecs[1:]]
        ins.sync = ('mma', mods[6], mods[7], d, src[0], src[1], src[2], ('i', 0xffffffff))

    def g_vote(self, ins, mods):
        if len(mods) != 3 or mods[0] != 'sync' or (mods[1], mods[2]) not in {
                ('all', 'pred'), ('any', 'pred'), ('uni', 'pred'), ('ballot', 'b32')}:
            self.fail(ins, 'unsupported vote form')
        self.nargs(ins, 3)
        a = ins.ops[1]
        neg = a[0] == 'not'
        ai = self.reg(ins, a[1] if neg else a)[0]
        ins.sync = ('vote', mods[1], self.reg(ins, ins.ops[0], True)[0], ai, neg,
                    self.opnd(ins, ins.ops[2]))

    def nop(self, ins, mods):
        if ins.op == 'prefetch' or ins.op == 'prefetchu':
            for op in ins.ops:
                if op[0] == 'mem' and op[1] is not None and op[1][0] == 'r':
                    self.reg(ins, op[1])
        return []


for _n in _NOPS:
    setattr(_Codegen, 'g_' + _n, _Codegen.nop)


def _zdiv(b):
    if b == 0:
        raise _Fault('integer division by zero')


def _trap():
    raise _Fault('trap executed')


def _prmt(a, b, c):
    t = (b << 32) | a
    d = 0
    for i in range(4):
        sel = (c >> (4 * i)) & 0xf
        byte = (t >> (8 * (sel & 7))) & 0xff
        if sel & 8:
            byte = 0xff if byte & 0x80 else 0
        d |= byte << (8 * i)
    return d


_ATOM_FN = {}


def _atom_fn(op, ty, w):
    m = _M[w]
    s = ty[0] == 's'

    def sx(x):
        return (x ^ (1 << (w - 1))) - (1 << (w - 1)) if s else x
    if ty == 'f32':
        if op == 'add':
            return lambda o, b, c: _fadd(o, b)
        if op == 'exch':
            return lambda o, b, c: b
        return None
    if op == 'add' and ty[0] in 'us':
        return lambda o, b, c: (o + b) & m
    if op in ('min', 'max') and ty[0] in 'us':
        f = min if op == 'min' else max
        return lambda o, b, c: f(sx(o), sx(b)) & m
    if op in ('and', 'or', 'xor') and ty[0] == 'b':
        return {'and': lambda o, b, c: o & b, 'or': lambda o, b, c: o | b,
                'xor': lambda o, b, c: o ^ b}[op]
    if op == 'exch' and ty[0] == 'b':
        return lambda o, b, c: b
    if op == 'cas' and ty[0] == 'b':
        return lambda o, b, c: c if o == b else o
    if op == 'inc' and ty == 'u32':
        return lambda o, b, c: 0 if o >= b else o + 1
    if op == 'dec' and ty == 'u32':
        return lambda o, b, c: b if o == 0 or o > b else o - 1
    return None


_NS_STATIC = {'_fadd': _fadd, '_fsub': _fsub, '_fmul': _fmul, '_fdiv': _fdiv, '_frcp': _frcp,
              '_fex2': _fex2,
              '_ffma': _ffma, '_ftz': _ftz, '_fsat': _fsat, '_fminmax': _fminmax,
              '_e4m3': _e4m3, '_e5m2': _e5m2, '_F16T': None, '_f32_to_f16': _f32_to_f16,
              '_f32_to_bf16': _f32_to_bf16, '_dq4': _dq4, '_dq5': _dq5,
              '_int_to_f32': _int_to_f32,
              '_f32_to_int': _f32_to_int, '_f32_round_int': _f32_round_int,
              '_S_2f': _S_2f, '_S_2I': _S_2I, '_zdiv': _zdiv, '_trap': _trap,
              '_prmt': _prmt, '_ATOM_FN': _ATOM_FN}


# ---------------------------------------------------------------------------------------
# Running: the per-CTA scheduler

class _Thread:
    __slots__ = ('regs', 'pc', 'tid', 'state', 'cta', 'gtid', 'vc', 'arr', 'wtd', 'fseg', 'fq',
                 'fk')

    def __init__(self, regs, tid, cta):
        self.regs, self.tid, self.pc, self.state, self.cta = regs, tid, 0, 'run', cta
        self.arr = self.wtd = 0      # barrier.cluster: the last phase arrived at, waited for


class _CTA:
    """A CTA of a launch: its threads, its shared memory, the scheduler's lists. A thread's
    state: 'run', 'wait' (stopped at a synchronizing instruction), 'cwait' (blocked in
    barrier.cluster.wait), 'done'."""

    def __init__(self, cid, rank):
        self.cid, self.rank = cid, rank
        self.threads, self.runnable, self.bar = [], [], []
        self.coll, self.cbar = {}, {}    # pending warp collectives, barrier.cluster warps
        self.live = 0
        self.nbar = 0                    # bar.sync completions (cluster and flag mode)
        self.sh = self.helpers = self.seg = None
        self.lin = 0                     # flag mode: the linear CTA index


# Distributed shared memory: the shared::cluster address of byte `off` of cluster rank r's
# shared memory is CLUSTER_BASE + (r << 24) + off (what mapa returns). A CTA's own
# shared::cta addresses (offsets from 0) are shared::cluster addresses of its own window
# too, as on the GPU. Anything else - a rank past the cluster, an offset past the CTA's
# shared memory, a mapped address with ld.shared::cta - faults.
CLUSTER_BASE = 0x40000000
_CL_SHIFT = 24


class _CShared:
    """One CTA's shared memory in cluster mode: written-byte tracking and, for the race
    check, the segment (see _Cluster) of each byte's last write and of its reads since."""

    def __init__(self, size, race, rank):
        self.size, self.rank, self.race = size, rank, race
        self.data = bytearray(size)
        self.init = bytearray(size)
        if race:
            self.wr = array.array('i', [-1]) * size
            self.rd = array.array('i', [-1]) * size      # -2: several, in rds
            self.rds = {}
        self.remote = {}      # segment of another CTA's thread -> (address, bytes, what)
        self.exited = False


class _Cluster:
    """The CTAs of one cluster, run together: barrier.cluster, distributed shared memory,
    and happens-before for the shared-memory race check.

    barrier.cluster (PTX ISA): arrive marks the thread's arrival at the open phase and goes
    on; wait blocks until every non-exited thread of the cluster has arrived at the phase
    the thread last arrived at. Both wait for the non-exited lanes of the warp (here: all
    of them must be at barrier.cluster instructions, the same one if .aligned). A thread
    arrives once a phase: arriving again before it knows (by a wait, or from another
    thread through bar.sync) that its last phase completed faults, and so does a wait
    with no arrive since the last one (it would wait for itself).

    Happens-before: a thread's run is cut into segments at each bar.sync, release arrive
    and wait. Each segment has a vector clock: per CTA of the cluster the last bar.sync
    it knows of, and the last cluster phase. bar.sync joins the clocks of the CTA's
    threads; a release arrive adds the thread's clock to its phase's, which a wait joins.
    An access of segment x happens before segment s when s knows the first bar.sync of
    x's CTA, or the first phase x's thread arrived at with .release, after x (a .relaxed
    arrive orders nothing). Two accesses to a byte, one a write, by threads of the cluster
    that this does not order are a race; so is a CTA exiting before the accesses of
    other CTAs to its shared memory happen before it, and an access to another CTA's
    shared memory before any cluster phase completed (that CTA may not have started)."""

    def __init__(self, run, ctas, nthr, ncta):
        self.run, self.ctas, self.nthr = run, ctas, nthr
        self.phase = 1          # the open phase
        self.narr = 0           # live threads that arrived at it
        self.live = ncta * nthr
        self.node = {}          # phase -> the clock joined from its release arrivals
        self.waiters = []
        self.log = [[] for _ in range(ncta * nthr)]    # per thread: ('b', i), ('r', p)
        self.seg_thr, self.seg_pos, self.seg_vc = [], [], []
        self.hbc = {}
        self.vc0 = (0,) * (ncta + 1)

    # -- segments and happens-before
    def newseg(self, th):
        s = len(self.seg_thr)
        self.seg_thr.append(th.gtid)
        self.seg_pos.append(len(self.log[th.gtid]))
        self.seg_vc.append(th.vc)
        th.cta.seg[th.tid] = s

    def released(self, x):
        """(rank, i, p): segment x's thread's first bar.sync i and first release arrive p
        after x (None: none yet)."""
        g = self.seg_thr[x]
        bi = pi = None
        for kind, v in self.log[g][self.seg_pos[x]:]:
            if kind == 'b':
                bi = v if bi is None else bi
            elif pi is None:
                pi = v
            if bi is not None and pi is not None:
                break
        return g // self.nthr, bi, pi

    @staticmethod
    def knows(vc, rel):
        rank, bi, pi = rel
        return (bi is not None and vc[rank] >= bi) or (pi is not None and vc[-1] >= pi)

    def hb(self, x, s):
        """Whether segment x happens before segment s (or is of the same thread). A
        result, once false, stays false: s's clock is fixed."""
        key = (x, s)
        v = self.hbc.get(key)
        if v is None:
            v = self.hbc[key] = (self.seg_thr[x] == self.seg_thr[s] or
                                 self.knows(self.seg_vc[s], self.released(x)))
        return v

    def who(self, s):
        g = self.seg_thr[s]
        return 'thread %d of cluster rank %d' % (g % self.nthr, g // self.nthr)

    # -- barriers
    def bar(self, c, ths):
        """bar.sync completed in CTA c by threads ths (all its live ones)."""
        c.nbar += 1
        vcs = {th.vc for th in ths}
        vc = vcs.pop() if len(vcs) == 1 else tuple(map(max, *vcs))
        vc = vc[:c.rank] + (c.nbar,) + vc[c.rank + 1:]
        for th in ths:
            th.vc = vc
            self.log[th.gtid].append(('b', c.nbar))
            self.newseg(th)

    def arrive(self, th, release):
        if th.arr and th.vc[-1] < th.arr:
            raise SimError('%s: barrier.cluster.arrive again before the thread knows that '
                           'phase %d, which it arrived at, completed (no barrier.cluster.wait '
                           'since): a thread must arrive only once before the barrier '
                           'completes (PTX ISA, barrier.cluster)'
                           % (self.run.where(th, th.pc), th.arr))
        p = th.arr = self.phase
        self.narr += 1
        if release:
            old = self.node.get(p)
            self.node[p] = th.vc if old is None or old == th.vc else tuple(
                map(max, old, th.vc))
            self.log[th.gtid].append(('r', p))
            self.newseg(th)

    def wait(self, th):
        """Returns whether the wait is over; else the thread blocks."""
        if th.arr <= th.wtd:
            raise SimError('%s: barrier.cluster.wait without a barrier.cluster.arrive since '
                           'the thread\'s last wait: it would wait for its own arrival'
                           % self.run.where(th, th.pc))
        if th.arr < self.phase:
            self.end_wait(th)
            return True
        self.waiters.append(th)
        return False

    def end_wait(self, th):
        p = th.wtd = th.arr
        vc = th.vc
        node = self.node.get(p)
        if node is not None and node != vc:
            vc = tuple(map(max, vc, node))
        if vc[-1] < p:
            vc = vc[:-1] + (p,)
        th.vc = vc
        self.newseg(th)

    def exit(self, th):
        self.live -= 1
        if th.arr == self.phase:
            self.narr -= 1

    def complete(self):
        """Complete the open phase while every live thread has arrived at it; the threads
        whose wait that ends go on."""
        while self.live and self.narr == self.live:
            p = self.phase
            self.phase += 1
            self.narr = 0
            still = []
            for th in self.waiters:
                if th.arr == p:
                    self.end_wait(th)
                    th.pc += 1
                    th.state = 'run'
                    th.cta.runnable.append(th)
                else:
                    still.append(th)
            self.waiters = still

    def cta_exited(self, c):
        """CTA c's last thread exited: every access of another CTA to its shared memory
        must happen before the exit of one of its threads."""
        finals = {th.vc for th in c.threads}
        for s, (a, n, what) in sorted(c.sh.remote.items()):
            rel = self.released(s)
            if not any(self.knows(vc, rel) for vc in finals):
                raise SimError(
                    '%s: CTA %s (cluster rank %d) exited, but the %s of its shared memory '
                    '[%#x, %#x) by %s is not ordered before that by a barrier.cluster phase '
                    '(that thread arriving with .release after the access, a thread of this '
                    'CTA waiting before its exit): the CTA\'s shared memory may be gone '
                    'while the access is in flight' % (self.run.e.name, c.cid, c.rank, what,
                                                       a, a + n, self.who(s)))
        c.sh.exited = True

    # -- shared memory
    def helpers(self, c):
        """The generated code's shared-memory accessors for the threads of CTA c: .shared
        (its own window) and .shared::cluster (any CTA's), mapa and getctarank."""
        ctas, own, seg, hb, ncta = self.ctas, c.sh, c.seg, self.hb, len(self.ctas)
        seg_vc, who = self.seg_vc, self.who

        def race_fault(sh, a, n, s, x, kind):
            raise _Fault('shared-memory race: %s %s bytes [%#x, %#x) of cluster rank %d\'s '
                         'shared memory that %s %s, with no barrier ordering them'
                         % (who(s), kind[0], a, a + n, sh.rank, who(x), kind[1]))

        def race(sh, a, n, s, write):
            wr, rd = sh.wr, sh.rd
            w = wr[a:a + n]
            if w.count(-1) + w.count(s) != n:
                for x in set(w):
                    if x >= 0 and x != s and not hb(x, s):
                        race_fault(sh, a, n, s, x, ('writes' if write else 'reads', 'wrote'))
            r = rd[a:a + n]
            if r.count(s) == n:
                pass
            elif write:
                if r.count(-1) + r.count(s) != n:
                    for i in range(a, a + n):
                        x = rd[i]
                        for y in (sh.rds.pop(i) if x == -2 else (x,)):
                            if y >= 0 and y != s and not hb(y, s):
                                race_fault(sh, a, n, s, y, ('writes', 'read'))
                rd[a:a + n] = array.array('i', [-1]) * n     # ordered before this write
            elif r.count(-1) == n:
                rd[a:a + n] = array.array('i', [s]) * n
            else:
                for i in range(a, a + n):
                    x = rd[i]
                    if x == -2:
                        st = {y for y in sh.rds[i] if not hb(y, s)}
                        st.add(s)
                        if len(st) == 1:
                            rd[i] = s
                            del sh.rds[i]
                        else:
                            sh.rds[i] = st
                    elif x == -1 or hb(x, s):
                        rd[i] = s
                    else:                        # concurrent reads: keep both
                        rd[i] = -2
                        sh.rds[i] = {x, s}
            if write:
                wr[a:a + n] = array.array('i', [s]) * n

        def local(a, n, what):
            if type(a) is not int:
                raise TypeError('undefined address')
            if a < 0 or a + n > own.size:
                raise _Fault('shared %s of %d bytes at %#x is outside the CTA\'s %d bytes of '
                             'shared memory%s' % (what, n, a, own.size, ' (a shared::cluster '
                                                  'address: mapa\'s result wants '
                                                  'ld/st.shared::cluster)' if
                                                  a >= CLUSTER_BASE else ''))
            if a & (n - 1):
                raise _Fault('misaligned shared %s of %d bytes at %#x' % (what, n, a))
            return own, a

        def decode(a, what):
            """(shared memory, offset) of a shared::cluster address."""
            if type(a) is not int:
                raise TypeError('undefined address')
            if a < CLUSTER_BASE:
                return own, a
            r = (a - CLUSTER_BASE) >> _CL_SHIFT
            if r >= ncta:
                raise _Fault('%s: shared::cluster address %#x is in the window of CTA rank %d, '
                             'but the cluster has %d CTAs' % (what, a, r, ncta))
            return ctas[r].sh, (a - CLUSTER_BASE) & ((1 << _CL_SHIFT) - 1)

        def remote(a, n, t, what):
            sh, off = decode(a, 'shared::cluster %s of %d bytes' % (what, n))
            if off < 0 or off + n > sh.size:
                raise _Fault('shared::cluster %s of %d bytes at %#x is outside the %d bytes '
                             'of shared memory of cluster rank %d' % (what, n, a, sh.size,
                                                                     sh.rank))
            if off & (n - 1):
                raise _Fault('misaligned shared::cluster %s of %d bytes at %#x'
                             % (what, n, a))
            if sh is not own:
                s = seg[t]
                if sh.exited:
                    raise _Fault('shared::cluster %s of %d bytes at %#x: cluster rank %d '
                                 'has exited (its shared memory is gone)'
                                 % (what, n, a, sh.rank))
                if seg_vc[s][-1] < 1:
                    raise _Fault('shared::cluster %s of %d bytes at %#x, in cluster rank '
                                 '%d, before any barrier.cluster phase completed: that CTA '
                                 'may not have started (arrive and wait first)'
                                 % (what, n, a, sh.rank))
                if s not in sh.remote:
                    sh.remote[s] = (off, n, what)
            return sh, off

        def load(sh, a, n, t):
            if sh.race:
                race(sh, a, n, seg[t], False)
            return load_raw(sh, a, n)

        def loadv(sh, a, n, k, t):
            if sh.race:
                race(sh, a, n * k, seg[t], False)
            if sh.init.find(0, a, a + n * k) >= 0:
                return tuple(load_raw(sh, a + n * i, n) for i in range(k))
            return _vstruct(n, k).unpack_from(sh.data, a)

        def load_raw(sh, a, n):
            if sh.init.find(0, a, a + n) >= 0:
                return _undef_bytes(sh.data, sh.init, a, n, 'shared memory never written '
                                    '(%#x of cluster rank %d)' % (a, sh.rank))
            return int.from_bytes(sh.data[a:a + n], 'little')

        def store(sh, a, b, t):
            n = len(b)
            if sh.race:
                race(sh, a, n, seg[t], True)
            sh.data[a:a + n] = b
            sh.init[a:a + n] = b'\x01' * n

        def atomic(sh, a, n, fn, b, c):        # atomics take no part in the race check
            old = load_raw(sh, a, n)
            if type(old) is Undef:
                raise TypeError('atomic on undefined memory')
            sh.data[a:a + n] = int.to_bytes(fn(old, b, c), n, 'little')
            return old

        def mapa(a, b):
            if type(b) is not int:
                raise TypeError('undefined rank')
            sh, off = decode(a, 'mapa')
            if b >= ncta:
                raise _Fault('mapa to CTA rank %d, but the cluster has %d CTAs' % (b, ncta))
            if off > sh.size:
                raise _Fault('mapa of %#x: not an address in the %d bytes of shared memory '
                             'of cluster rank %d' % (a, sh.size, sh.rank))
            return CLUSTER_BASE + (b << _CL_SHIFT) + off

        def ctarank(a):
            return decode(a, 'getctarank')[0].rank

        return {
            'LDS': lambda a, n, t: load(*local(a, n, 'load'), n, t),
            'LDSV': lambda a, n, k, t: loadv(*local(a, n * k, 'load'), n, k, t),
            'STS': lambda a, n, v, t: store(*local(a, n, 'store'),
                                            int.to_bytes(v, n, 'little'), t),
            'STSV': lambda a, n, vals, t: store(*local(a, n * len(vals), 'store'),
                                                _vstruct(n, len(vals)).pack(*vals), t),
            'ATOMS': lambda a, n, fn, b, c, t: atomic(*local(a, n, 'atomic'), n, fn, b, c),
            'LDC': lambda a, n, t: load(*remote(a, n, t, 'load'), n, t),
            'LDCV': lambda a, n, k, t: loadv(*remote(a, n * k, t, 'load'), n, k, t),
            'STC': lambda a, n, v, t: store(*remote(a, n, t, 'store'),
                                            int.to_bytes(v, n, 'little'), t),
            'STCV': lambda a, n, vals, t: store(*remote(a, n * len(vals), t, 'store'),
                                                _vstruct(n, len(vals)).pack(*vals), t),
            'ATOMC': lambda a, n, fn, b, c, t: atomic(*remote(a, n, t, 'atomic'), n, fn, b,
                                                      c),
            'MAPA': mapa, 'CTARANK': ctarank}


_NC_WHY = ('the memory consistency model does not apply to ld.global.nc (PTX ISA 8.1, '
           '"Scope and applicability of the model"): the non-coherent path is only for data '
           'that no thread writes during the launch, and no barrier orders it')


class _GRace:
    """The global-memory race check of one launch (launch(race_check=True)).

    Two accesses to a global byte by different CTAs, at least one of them a write, race
    unless happens-before orders them: in cluster mode _Cluster's (program order, bar.sync
    in a CTA, a barrier.cluster phase from a .release arrive to a wait); nothing orders
    different clusters, nor the CTAs of a launch without clusters but, in flag mode, a
    st.release read by an ld.acquire (the module docstring). Flag mode's ids are
    segments of a thread's run, cut at bar.sync, st.release and ld.acquire, each with
    its CTA's epoch (bar.syncs completed), its thread's releases so far and its
    knowledge: per earlier CTA, the highest epoch and per-thread release count released
    to it (fjoin). Accesses of one CTA are
    not checked against each other. Atomics (atom / red .global) do not race with each
    other, only with plain accesses. ld.global.nc of a byte that any thread writes during
    the launch (before or after, ordered or not) faults: PTX ISA 8.1, the memory model does
    not apply to it.

    Per allocation the launch touches (lazily, state()): wr / wx, per byte the id of the
    last plain write and (thread << 20 | pc) of it; rd / rx the same of its reader (-2:
    several, in rds: byte -> {id: info}); nc, id << 30 | info of a read through
    ld.global.nc; at, byte -> {id: info} of atomic accesses. An id is, without clusters,
    the CTA's linear index; in cluster mode the access's segment (see _Cluster) numbered
    through the launch: base + the cluster's own number, so an id below the running
    cluster's base is of an earlier cluster. Readers are kept while a later access could
    race with them: a read or write by s drops the readers of s's CTA that happen before
    s (s stands for them), and a reader set that grows large (prune()) the readers of
    earlier clusters but one (they race with every later access alike)."""

    def __init__(self, run, raw):
        self.run, self.raw = run, raw
        self.st = {}           # allocation base -> [wr, wx, rd, rx, rds, nc, at]
        self.cls = []          # cluster mode: (base, cids, seg_thr, nthr) per cluster
        self.base = 0          # cluster mode: the running cluster's first id
        # flag mode (see _GRace's docstring): the segments (CTA, thread, epoch, release
        # count, knowledge) and, per address, the knowledge its last st.release handed on
        self.flags = not run.cmode and run.e.uses_flags
        self.fseg, self.frel = [], {}

    # -- flag mode: release / acquire between the CTAs of a launch without clusters
    @staticmethod
    def fjoin(a, b):
        """The union of two knowledges: per CTA, the highest released epoch and, per
        thread, the highest released release count."""
        if not a or a is b:
            return b
        if not b:
            return a
        k = dict(a)
        for cta, (e, qm) in b.items():
            old = k.get(cta)
            if old is None:
                k[cta] = (e, qm)
            else:
                q2 = dict(old[1])
                for t, q in qm.items():
                    if q > q2.get(t, -1):
                        q2[t] = q
                k[cta] = (max(old[0], e), q2)
        return k

    def fnew(self, th):
        """A new segment of th's run (its id: th.fseg)."""
        th.fseg = len(self.fseg)
        self.fseg.append((th.cta.lin, th.tid, th.cta.nbar, th.fq, th.fk))

    def fbar(self, c, ths):
        """bar.sync completed in CTA c by ths: a new epoch; their knowledges join."""
        c.nbar += 1
        k = None
        for th in ths:
            k = self.fjoin(k, th.fk)
        for th in ths:
            th.fk = k
            self.fnew(th)

    def frelease(self, th, key):
        c = th.cta
        self.frel[key] = self.fjoin(th.fk, {c.lin: (c.nbar, {th.tid: th.fq})})
        th.fq += 1
        self.fnew(th)

    def facquire(self, th, key):
        k = self.frel.get(key)
        if k:
            th.fk = self.fjoin(th.fk, k)
            self.fnew(th)

    def state(self, rec):
        st = self.st[rec[0]] = [None, None, None, None, {}, None, None]
        return st

    @staticmethod
    def arrays(st, i, size):
        a = array.array('i', [-1]) * size
        st[i], st[i + 1] = a, array.array('i', a)
        return a

    # -- reports
    def who(self, x, xi):
        run = self.run
        t, pc = xi >> 20, xi & 0xfffff
        bx, by, _ = run.block
        if self.flags:
            x = self.fseg[x][0]
        if run.cmode:
            for base, cids, seg_thr, nthr in reversed(self.cls):
                if x >= base:
                    g = seg_thr[x - base]
                    cta = '%s (cluster rank %d)' % (cids[g // nthr], g // nthr)
                    break
        else:
            gx, gy, _ = run.grid
            cta = '(%d, %d, %d)' % (x % gx, x // gx % gy, x // (gx * gy))
        ins = run.e.ins[pc]
        return ('thread (%d, %d, %d) [linear %d] of CTA %s (pc %d, line %d `%s`)'
                % (t % bx, t // bx % by, t // (bx * by), t, cta, pc, ins.line, ins.text))

    def buf(self, addr):
        """Where addr is: the pointer parameter it is an offset from, the allocation."""
        run = self.run
        rec = run.mem.slots[addr >> _SLOT]
        base, size = rec[0], rec[1]
        pb, best = run.ns['PB'], None
        for pname, psize, _, off, _ in run.e.params:
            if psize == 8:
                v = int.from_bytes(pb[off:off + 8], 'little')
                if base <= v <= addr and (best is None or v > best[1]):
                    best = (pname, v)
        return '%soffset %d of the %d-byte allocation at %#x' % (
            '%s+%d: ' % (best[0], addr - best[1]) if best else '', addr - base, size, base)

    def fault(self, kind, addr, n, x, xi, why=None):
        if why is None:
            if self.flags:
                why = ('no st.release / ld.acquire orders them (the first before a '
                       'st.release in its thread or its CTA\'s bar.sync before it, the '
                       'second after the ld.acquire that read what it stored, or after a '
                       'bar.sync after that)')
            elif not self.run.cmode:
                why = 'nothing orders different CTAs of a launch without clusters'
            elif x < self.base:
                why = 'nothing orders the CTAs of different clusters'
            else:
                why = ('no barrier.cluster phase orders them (the first thread arriving with '
                       '.release after its access, the second waiting before its own)')
        raise _Fault('%s: this thread %s bytes [%#x, %#x) (%s) that %s %s; %s' % (
            'global-memory race' if why is not _NC_WHY else 'ld.global.nc of global memory '
            'written in the launch', kind[0], addr, addr + n, self.buf(addr),
            self.who(x, xi), kind[1], why))

    # -- the generated code's accessors for the threads of CTA c
    def helpers(self, c, cl):
        find, load, loadv, store, storev, atomic = self.raw
        gst, newst, arrays, fault, run = self.st, self.state, self.arrays, self.fault, self.run
        A = array.array
        flags = self.flags
        if cl is None and flags:
            gx, gy, _ = run.grid
            c.lin = c.cid[0] + gx * (c.cid[1] + gy * c.cid[2])
            fseg, threads = self.fseg, c.threads
            for th in threads:
                th.fq, th.fk = 0, {}
                self.fnew(th)

            def sid(t):
                return threads[t].fseg

            def ok(x, s):          # x happens before s, or the same CTA's
                if x == s:
                    return True
                cx, tx, ex, qx, _ = fseg[x]
                cs, _, _, _, ks = fseg[s]
                if cx == cs:
                    return True
                k = ks.get(cx)
                return k is not None and (ex < k[0] or qx <= k[1].get(tx, -1))

            def covered(y, s):     # y happens before s in s's CTA
                if y == s:
                    return True
                cy, ty, ey, _, _ = fseg[y]
                cs, ts, es, _, _ = fseg[s]
                return cy == cs and (ey < es or ty == ts)

            def earlier(y):
                return False
        elif cl is None:
            gx, gy, _ = run.grid
            me = c.cid[0] + gx * (c.cid[1] + gy * c.cid[2])

            def sid(t):
                return me

            def ok(x, s):          # no race between x and s: same CTA (here: equal)
                return x == s
            covered = ok           # s's conflicts include y's (same CTA, y before s)

            def earlier(y):        # unordered with all that runs from now on
                return y != me
        else:
            base, seg, seg_thr, nthr, hb = cl.gbase, c.seg, cl.seg_thr, cl.nthr, cl.hb

            def sid(t):
                return base + seg[t]

            def ok(x, s):
                if x == s:
                    return True
                if x < base:
                    return False
                x -= base
                s -= base
                return seg_thr[x] // nthr == seg_thr[s] // nthr or hb(x, s)

            def covered(y, s):
                if y == s:
                    return True
                if y < base:
                    return False
                y -= base
                s -= base
                return seg_thr[y] // nthr == seg_thr[s] // nthr and hb(y, s)

            def earlier(y):
                return y < base
        rlim = {}

        def prune(d, s, i):
            keep, old = {}, None
            for y, yi in d.items():
                if y == s or not covered(y, s):
                    if not earlier(y):
                        keep[y] = yi
                    elif old is None:
                        old = keep[y] = yi
            rlim[i] = max(16, 2 * len(keep))
            return keep

        def check_at(at, off, n, s, addr, kind):
            for i in range(off, off + n):
                d = at.get(i)
                if d:
                    for y, yi in d.items():
                        if not ok(y, s):
                            fault(kind, addr, n, y, yi)

        def check_wr(st, off, n, s, addr, what):
            """s's access (`what`: 'reads', 'writes'...) against the plain writes before."""
            w = st[0][off:off + n]
            if w.count(-1) + w.count(s) != n:
                for i in range(n):
                    x = w[i]
                    if x != -1 and not ok(x, s):
                        fault((what, 'wrote'), addr, n, x, st[1][off + i])

        def on_read(st, rec, off, n, s, xi, addr):
            if st[0] is not None:
                check_wr(st, off, n, s, addr, 'reads')
            if st[6]:
                check_at(st[6], off, n, s, addr, ('reads', 'updated atomically'))
            rd = st[2]
            if rd is None:
                rd = arrays(st, 2, rec[1])
            r = rd[off:off + n]
            if r.count(s) == n:
                return
            if r.count(-1) == n:
                rd[off:off + n] = A('i', [s]) * n
                st[3][off:off + n] = A('i', [xi]) * n
                return
            rx, rds = st[3], st[4]
            for i in range(off, off + n):
                y = rd[i]
                if y == -2:
                    d = rds[i]
                    if s not in d:
                        d[s] = xi
                        if len(d) > rlim.get(i, 16):
                            rds[i] = prune(d, s, i)
                elif y == -1 or covered(y, s):
                    rd[i], rx[i] = s, xi
                else:
                    rd[i] = -2
                    rds[i] = {y: rx[i], s: xi}

        def on_write(st, rec, off, n, s, xi, addr, what, atom=False):
            wr = st[0]
            if wr is None:
                wr = arrays(st, 0, rec[1])
            else:
                check_wr(st, off, n, s, addr, what)
            rd = st[2]
            if rd is not None:
                r = rd[off:off + n]
                if r.count(-1) + r.count(s) == n:
                    if r.count(s) and not atom:      # s stands for its own reads
                        rd[off:off + n] = A('i', [-1]) * n
                else:
                    rx, rds = st[3], st[4]
                    for i in range(off, off + n):
                        y = rd[i]
                        d = rds[i] if y == -2 else {y: rx[i]} if y != -1 else {}
                        for yy, yi in d.items():
                            if not ok(yy, s):
                                fault((what, 'read'), addr, n, yy, yi)
                        if atom:              # later atomics are not checked against it
                            continue
                        d = {yy: yi for yy, yi in d.items() if not covered(yy, s)}
                        if len(d) > 1:
                            rds[i] = d
                        else:
                            rds.pop(i, None)
                            rd[i], rx[i] = next(iter(d.items())) if d else (-1, -1)
            nc = st[5]
            if nc is not None and nc[off:off + n].count(-1) != n:
                for i in range(off, off + n):
                    if nc[i] != -1:
                        fault((what, 'read through ld.global.nc'), addr, n, nc[i] >> 30,
                              nc[i] & 0x3fffffff, _NC_WHY)
            if not atom:
                if st[6]:
                    check_at(st[6], off, n, s, addr, (what, 'updated atomically'))
                wr[off:off + n] = A('i', [s]) * n
                st[1][off:off + n] = A('i', [xi]) * n

        def on_nc(st, rec, off, n, s, xi, addr):
            wr = st[0]
            if wr is not None and wr[off:off + n].count(-1) != n:
                for i in range(off, off + n):
                    if wr[i] != -1:
                        fault(('reads through ld.global.nc', 'wrote'), addr, n, wr[i],
                              st[1][i], _NC_WHY)
            at = st[6]
            if at:
                for i in range(off, off + n):
                    for y, yi in at.get(i, {}).items():
                        fault(('reads through ld.global.nc', 'updated atomically'), addr, n,
                              y, yi, _NC_WHY)
            nc = st[5]
            if nc is None:
                nc = st[5] = A('q', [-1]) * rec[1]
            if nc[off:off + n].count(-1):
                nc[off:off + n] = A('q', [s << 30 | xi]) * n

        def ldg(addr, n, t, k):
            rec, off = find(addr, n, 'load')
            on_read(gst.get(rec[0]) or newst(rec), rec, off, n, sid(t), t << 20 | k, addr)
            return load(rec, off, n, addr)

        def ldgv(addr, n, k, t, pc):
            rec, off = find(addr, n * k, 'load')
            on_read(gst.get(rec[0]) or newst(rec), rec, off, n * k, sid(t), t << 20 | pc,
                    addr)
            return loadv(rec, off, n, k, addr)

        def ldgn(addr, n, t, k):
            rec, off = find(addr, n, 'load')
            st = gst.get(rec[0]) or newst(rec)
            nc = st[5]
            if nc is None or st[0] is not None or st[6]:
                on_nc(st, rec, off, n, sid(t), t << 20 | k, addr)
            elif n == 1:                # the fast path: nothing written in the allocation
                if nc[off] == -1:
                    nc[off] = sid(t) << 30 | t << 20 | k
            elif nc[off:off + n].count(-1):
                nc[off:off + n] = A('q', [sid(t) << 30 | t << 20 | k]) * n
            return load(rec, off, n, addr)

        def ldgnv(addr, n, k, t, pc):
            nk = n * k
            rec, off = find(addr, nk, 'load')
            st = gst.get(rec[0]) or newst(rec)
            nc = st[5]
            if nc is None or st[0] is not None or st[6]:
                on_nc(st, rec, off, nk, sid(t), t << 20 | pc, addr)
            elif nc[off:off + nk].count(-1):
                nc[off:off + nk] = A('q', [sid(t) << 30 | t << 20 | pc]) * nk
            return loadv(rec, off, n, k, addr)

        def stg(addr, n, v, t, k):
            rec, off = find(addr, n, 'store')
            st = gst.get(rec[0]) or newst(rec)
            wr = st[0]
            if n == 1 and wr is not None and st[2] is None and st[5] is None and not st[6]:
                s = sid(t)                # the fast path: a byte of a written allocation
                if wr[off] in (-1, s):    # that nobody reads
                    wr[off] = s
                    st[1][off] = t << 20 | k
                    store(rec, off, n, v)
                    return
            on_write(st, rec, off, n, sid(t), t << 20 | k, addr, 'writes')
            store(rec, off, n, v)

        def stgv(addr, n, vals, t, k):
            nk = n * len(vals)
            rec, off = find(addr, nk, 'store')
            on_write(gst.get(rec[0]) or newst(rec), rec, off, nk, sid(t), t << 20 | k, addr,
                     'writes')
            storev(rec, off, n, vals)

        def strong(st, off, n, s, xi):
            """An atomic or otherwise morally strong access, recorded in st[6]: these do
            not race with each other, only with plain ones."""
            at = st[6]
            if at is None:
                at = st[6] = {}
            for i in range(off, off + n):
                d = at.get(i)
                if d is None:
                    at[i] = {s: xi}
                elif s not in d:
                    d[s] = xi

        def atomg(addr, n, fn, b, c, t, k):
            rec, off = find(addr, n, 'atomic')
            st = gst.get(rec[0]) or newst(rec)
            s, xi = sid(t), t << 20 | k
            on_write(st, rec, off, n, s, xi, addr, 'atomically updates', True)
            strong(st, off, n, s, xi)
            return atomic(rec, off, n, fn, b, c, addr)

        def ldgs(addr, n, t, k, acq):
            rec, off = find(addr, n, 'load')
            st = gst.get(rec[0]) or newst(rec)
            s, xi = sid(t), t << 20 | k
            if st[0] is not None:
                check_wr(st, off, n, s, addr, 'reads')
            strong(st, off, n, s, xi)
            v = load(rec, off, n, addr)
            if acq and flags:
                self.facquire(c.threads[t], addr)
            return v

        def stgs(addr, n, v, t, k, rel):
            rec, off = find(addr, n, 'store')
            st = gst.get(rec[0]) or newst(rec)
            s, xi = sid(t), t << 20 | k
            on_write(st, rec, off, n, s, xi, addr, 'writes', True)
            strong(st, off, n, s, xi)
            store(rec, off, n, v)
            if flags and rel:
                self.frelease(c.threads[t], addr)
            elif flags:           # a relaxed store ends the release's hold on the address
                self.frel.pop(addr, None)

        return {'LDGS': ldgs, 'STGS': stgs,
                'LDG': ldg, 'LDGV': ldgv, 'LDGN': ldgn, 'LDGNV': ldgnv, 'STG': stg,
                'STGV': stgv, 'ATOMG': atomg}


class _Runner:
    def __init__(self, mod, e, mem, grid, block, ssize, race, maxins, cluster, explicit):
        self.mod, self.e, self.mem = mod, e, mem
        self.grid, self.block, self.ssize, self.race = grid, block, ssize, race
        self.cluster, self.explicit = cluster, explicit
        self.cmode = e.uses_cluster or cluster != (1, 1, 1)
        self.maxins = maxins
        self.count = 0
        code = e.code
        self.blk, self.blen, self.ns = code['blk'], code['blen'], code['ns']
        if any(ins.op == 'cvt' and 'f16' in ins.mods for ins in e.ins):
            self.ns['_F16T'] = _f16tab()
        self.cur = None
        self.grace = None            # the global-memory race check (_GRace)

    def run(self):
        """Clusters one after another (x fastest; without clusters, CTAs), the CTAs of a
        cluster together."""
        gx, gy, gz = self.grid
        cx, cy, cz = self.cluster
        for kz in range(gz // cz):
            for ky in range(gy // cy):
                for kx in range(gx // cx):
                    self.group([(kx * cx + x, ky * cy + y, kz * cz + z) for z in range(cz)
                                for y in range(cy) for x in range(cx)], (kx, ky, kz))

    def where(self, th, pc):
        ins = self.e.ins[pc]
        bx, by, bz = self.block
        t = th.tid
        cta = str(th.cta.cid)
        if self.cmode:
            cta += ' (cluster rank %d)' % th.cta.rank
        return ('%s: CTA %s, thread (%d, %d, %d) [linear %d, warp %d, lane %d], pc %d, '
                'line %d `%s`' % (self.e.name, cta, t % bx, t // bx % by,
                                  t // (bx * by), t, t // 32, t % 32, pc, ins.line,
                                  ins.text))

    def make_cta(self, cid, rank, clid, cl):
        e = self.e
        bx, by, bz = self.block
        nthr = bx * by * bz
        c = _CTA(cid, rank)
        tmpl = [UNDEF_PRED] * e.nregs
        cls = _StrictUndef if self.strict else Undef
        for nm, (idx, w) in e.regs.items():
            if w != 1:
                tmpl[idx] = cls(0, _M[w])
        cdim = self.cluster
        vals = (list(self.block) + list(cid) + list(self.grid) +
                [rank, cdim[0] * cdim[1] * cdim[2]] + [cid[k] % cdim[k] for k in range(3)] +
                list(cdim) + list(clid) + [self.grid[k] // cdim[k] for k in range(3)] +
                [self.explicit])
        for k, v in zip(_SPECIAL[3:12] + _SPECIAL[15:], vals):
            tmpl[_R_SPECIAL[k]] = v
        tmpl[_R_SPECIAL['%nwarpid']] = (nthr + 31) // 32
        if cl:
            c.sh = _CShared(self.ssize, self.race, rank)
            c.seg = [0] * nthr
        else:
            c.sh = _Shared(self.ssize, self.race)
        for t in range(nthr):
            r = list(tmpl)
            r[0] = t
            r[1], r[2], r[3] = t % bx, t // bx % by, t // (bx * by)
            r[_R_SPECIAL['%laneid']] = t & 31
            r[_R_SPECIAL['%warpid']] = t >> 5
            th = _Thread(r, t, c)
            if cl:
                th.gtid, th.vc = rank * nthr + t, cl.vc0
                cl.newseg(th)
            c.threads.append(th)
        c.live = nthr
        c.runnable = list(c.threads)
        return c

    def enter(self, c):
        """Make c the CTA whose threads run (the generated code's shared-memory helpers)."""
        if self.cur is not c:
            self.cur, self.threads, self.cta_id, self.sh = c, c.threads, c.cid, c.sh
            self.ns.update(c.helpers)

    def group(self, cids, clid):
        """Run the CTAs cids (one cluster) to completion."""
        bx, by, bz = self.block
        nthr = bx * by * bz
        ctas = []
        cl = self.cl = _Cluster(self, ctas, nthr, len(cids)) if self.cmode else None
        for rank, cid in enumerate(cids):
            ctas.append(self.make_cta(cid, rank, clid, cl))
        for c in ctas:
            c.helpers = cl.helpers(c) if cl else c.sh.helpers()
        gr = self.grace
        if gr:
            if cl:
                cl.gbase = gr.base
                gr.cls.append((gr.base, cids, cl.seg_thr, nthr))
            for c in ctas:
                c.helpers.update(gr.helpers(c, cl))
        self.cur = None
        self.schedule(ctas, cl)
        if gr and cl:
            gr.base += len(cl.seg_thr)

    def schedule(self, ctas, cl):
        """Run the CTAs of one cluster, interleaved at synchronizing instructions."""
        while True:
            for c in ctas:
                if c.runnable:
                    self.enter(c)
                    self.step(c)
            for c in ctas:
                if c.live:
                    self.enter(c)
                    self.settle(c, cl)
            if cl:
                cl.complete()
            if any(c.runnable for c in ctas):
                continue
            done = True
            for c in ctas:             # a bar.sync completes once all live threads wait
                if c.live:
                    done = False
                    if len(c.bar) == c.live:
                        self.enter(c)
                        self.barrier(c.bar)
                        if self.grace and self.grace.flags:
                            self.grace.fbar(c, c.bar)
                        for th in c.bar:
                            th.pc += 1
                            th.state = 'run'
                        c.runnable, c.bar = c.bar, []
            if any(c.runnable for c in ctas):
                continue
            if done:
                return
            raise self.deadlock(ctas, cl)

    def step(self, c):
        """Run each runnable thread of c up to its next synchronizing instruction."""
        blk, blen = self.blk, self.blen
        for th in c.runnable:
            r = th.regs
            pc = th.pc
            if blk[pc] is None:             # resumed at another sync instruction
                pc = ~pc
            n = 0
            lim = self.maxins - self.count
            try:
                while pc >= 0 and n < lim:
                    n += blen[pc]
                    pc = blk[pc](r)
            except Exception as x:
                raise self.diagnose(x, th, pc) from None
            self.count += n
            if pc >= 0:
                raise SimError('%s: more than %d instructions (a runaway loop?)'
                               % (self.where(th, pc), self.maxins))
            th.pc = ~pc
            th.state = 'wait'
        c.runnable = []

    def settle(self, c, cl):
        """The stopped threads of c: predicated-off syncs go on, ret / exit finish, warp
        collectives and barrier.cluster run once their warp is there; bar.sync waiters
        are collected in c.bar."""
        e = self.e
        ins_list = e.ins
        runnable, bar, coll, cbar = c.runnable, [], {}, {}
        for th in c.threads:
            if th.state != 'wait':
                continue
            ins = ins_list[th.pc]
            if ins.guard:
                try:
                    g = bool(th.regs[e.regs[ins.guard[0]][0]])
                except TypeError as x:
                    raise self.diagnose(x, th, th.pc) from None
                if g == ins.guard[1]:              # predicated off: a no-op
                    self.count += 1
                    th.pc += 1
                    th.state = 'run'
                    runnable.append(th)
                    continue
            kind = ins.sync[0]
            if kind == 'exit':
                self.count += 1
                th.state = 'done'
                c.live -= 1
                if cl:
                    cl.exit(th)
            elif kind == 'bar':
                bar.append(th)
            elif kind in ('carrive', 'cwait'):
                cbar.setdefault(th.tid >> 5, []).append(th)
            else:
                coll.setdefault((th.tid >> 5, th.pc), []).append(th)
        c.coll = {}
        for (w, pc), group in sorted(coll.items()):
            if self.collective(w, pc, group):
                for th in group:
                    th.pc += 1
                    th.state = 'run'
                    runnable.append(th)
            else:
                c.coll[(w, pc)] = group
        c.cbar = {}
        for w, group in sorted(cbar.items()):
            if not self.cluster_warp(c, w, group, cl):
                c.cbar[w] = group
        c.bar = bar
        if c.live == 0 and cl:
            cl.cta_exited(c)

    def cluster_warp(self, c, w, group, cl):
        """Run barrier.cluster for the lanes of warp w waiting at one (group) once every
        non-exited lane is at one (or blocked in a wait); returns whether it ran."""
        need = [th for th in c.threads[32 * w:32 * w + 32] if th.state != 'done']
        blocked = [th for th in need if th.state == 'cwait']
        if len(group) + len(blocked) != len(need):
            return False
        ins_list = self.e.ins
        pcs = sorted({th.pc for th in group + blocked})
        if len(pcs) > 1 and any(ins_list[p].sync[2] for p in pcs):
            raise SimError('%s: barrier.cluster .aligned reached at different instructions by '
                           'the lanes of warp %d: lines %s' % (
                               self.where(group[0], group[0].pc), w,
                               ', '.join(str(ins_list[p].line) for p in pcs)))
        for th in group:
            kind, release, _ = ins_list[th.pc].sync
            self.count += 1
            if kind == 'carrive':
                cl.arrive(th, release)
            elif not cl.wait(th):
                th.state = 'cwait'
                continue
            th.pc += 1
            th.state = 'run'
            c.runnable.append(th)
        return True

    def barrier(self, ths):
        pcs = sorted({th.pc for th in ths})
        ids = set()
        for th in ths:
            ins = self.e.ins[th.pc]
            _, a, b, aligned = ins.sync
            try:
                bid = self.val(th, a)
                cnt = self.val(th, b) if b else None
            except TypeError as x:
                raise self.diagnose(x, th, th.pc) from None
            ids.add(bid)
            if cnt is not None and cnt != len(self.threads):
                raise SimError('%s: barrier thread count %d (the CTA has %d threads): '
                               'partial barriers are not implemented'
                               % (self.where(th, th.pc), cnt, len(self.threads)))
            if aligned and len(pcs) > 1:
                raise SimError('%s: bar.sync (aligned) reached at different instructions by '
                               'the CTA\'s threads: lines %s' % (
                                   self.where(th, th.pc),
                                   ', '.join(str(self.e.ins[p].line) for p in pcs)))
        if len(ids) > 1:
            raise SimError('%s: threads wait at different barriers %s' % (
                self.where(ths[0], ths[0].pc), sorted(ids)))
        self.count += len(ths)
        if self.cl:
            self.cl.bar(self.cur, ths)
        else:
            self.sh.barrier()

    @staticmethod
    def val(th, op):
        if op[0] == 'i':
            return op[1]
        v = th.regs[op[1]]
        if type(v) is not int:
            raise TypeError('undefined operand')
        return v

    def collective(self, w, pc, group):
        """Run the warp collective at pc for group (waiting there) if every lane of its
        membermask is in group; returns whether it ran."""
        ins = self.e.ins[pc]
        s = ins.sync
        lanes = {th.tid & 31: th for th in group}
        masks = set()
        for th in group:
            try:
                masks.add(self.val(th, s[-1]) & 0xffffffff)
            except TypeError as x:
                raise self.diagnose(x, th, pc) from None
        if len(masks) != 1:
            raise SimError('%s: lanes of warp %d execute it with different membermasks %s'
                           % (self.where(group[0], pc), w, sorted(hex(m) for m in masks)))
        mask = masks.pop()
        for ln, th in lanes.items():
            if not mask >> ln & 1:
                raise SimError('%s: the executing thread is not in membermask %#x'
                               % (self.where(th, pc), mask))
        want = [ln for ln in range(32) if mask >> ln & 1]
        nthr = len(self.threads)
        for ln in want:
            if 32 * w + ln >= nthr:
                raise SimError('%s: membermask %#x names lane %d, which the CTA does not '
                               'have' % (self.where(group[0], pc), mask, ln))
            if ln not in lanes:
                other = self.threads[32 * w + ln]
                if other.state == 'done':
                    raise SimError('%s: membermask %#x names lane %d, which has exited'
                                   % (self.where(group[0], pc), mask, ln))
                return False
        kind = s[0]
        try:
            if kind == 'shfl':
                self.shfl(s, lanes, mask, pc)
            elif kind == 'redux':
                self.redux(s, lanes)
            elif kind == 'vote':
                self.vote(s, lanes)
            elif kind == 'mma':
                self.mma(s, lanes)
        except TypeError as x:
            raise self.diagnose(x, group[0], pc) from None
        self.count += len(group)
        return True

    def shfl(self, s, lanes, mask, pc):
        _, mode, di, pi, a, b, c, _m = s
        vals = {ln: (self.val(th, a) if a[0] == 'i' else th.regs[a[1]])
                for ln, th in lanes.items()}
        out = {}
        for ln, th in lanes.items():
            bv = self.val(th, b) & 31
            cv = self.val(th, c)
            clamp, seg = cv & 31, (cv >> 8) & 31
            maxl = (ln & seg) | (clamp & ~seg)
            minl = ln & seg
            if mode == 'up':
                j = ln - bv
                ok = j >= maxl
            elif mode == 'down':
                j = ln + bv
                ok = j <= maxl
            elif mode == 'bfly':
                j = ln ^ bv
                ok = j <= maxl
            else:
                j = minl | (bv & ~seg & 31)
                ok = j <= maxl
            if not ok:
                j = ln
            if j not in lanes:
                raise SimError('%s: shfl.sync reads lane %d, which does not take part '
                               '(membermask %#x)' % (self.where(th, pc), j, mask))
            out[ln] = (vals[j], ok)
        for ln, th in lanes.items():
            v, ok = out[ln]
            if di is not None:
                th.regs[di] = v
            if pi is not None:
                th.regs[pi] = ok

    def redux(self, s, lanes):
        _, op, ty, di, a, _m = s
        vs = []
        for th in lanes.values():
            v = self.val(th, a)
            vs.append((v ^ 0x80000000) - 0x80000000 if ty == 's32' else v)
        if op == 'add':
            res = sum(vs)
        elif op == 'min':
            res = min(vs)
        elif op == 'max':
            res = max(vs)
        else:
            res = 0 if op != 'and' else 0xffffffff
            for v in vs:
                res = res & v if op == 'and' else res | v if op == 'or' else res ^ v
        for th in lanes.values():
            th.regs[di] = res & 0xffffffff

    @staticmethod
    def _fp8_val(c, fmt):
        """An FP8 code -> Python float (exact); NaN codes -> nan."""
        h = _dq4(c) if fmt == 'e4m3' else _dq5(c)
        return f32_value(_f16_to_f32(h))

    def mma(self, s, lanes):
        """m16n8k32, 8-bit inputs (PTX ISA, the m16n8k32 fragments of .e4m3 / .e5m2):
        lane (g = lane / 4, t = lane % 4): a0 = A[g][4t..4t+3], a1 = A[g+8][4t..],
        a2 = A[g][16+4t..], a3 = A[g+8][16+4t..] (byte i of a word: k + i); b0 =
        B[4t..4t+3][g], b1 = B[16+4t..][g]; c0, c1 = C[g][2t, 2t+1], c2, c3 =
        C[g+8][2t, 2t+1]. D = A.B + C: the exact products summed exactly with C,
        rounded once to f32 (the hardware's own order and intermediate rounding
        are not modelled: compare with a tolerance)."""
        _, ta, tb, d, a, b, c, _m = s
        A = [[0.0] * 32 for _ in range(16)]
        B = [[0.0] * 8 for _ in range(32)]
        C = [[0.0] * 8 for _ in range(16)]
        for ln, th in lanes.items():
            g, t = ln >> 2, ln & 3
            av = [th.regs[i] for i in a]
            bv = [th.regs[i] for i in b]
            cv = [th.regs[i] for i in c]
            for v in av + bv + cv:
                if type(v) is not int:
                    raise TypeError('undefined operand')
            for w, (row, k0) in enumerate(((g, 4 * t), (g + 8, 4 * t), (g, 16 + 4 * t),
                                           (g + 8, 16 + 4 * t))):
                for i in range(4):
                    A[row][k0 + i] = self._fp8_val(av[w] >> (8 * i) & 0xff, ta)
            for w, k0 in enumerate((4 * t, 16 + 4 * t)):
                for i in range(4):
                    B[k0 + i][g] = self._fp8_val(bv[w] >> (8 * i) & 0xff, tb)
            for w, (row, col) in enumerate(((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t),
                                            (g + 8, 2 * t + 1))):
                C[row][col] = f32_value(cv[w])
        out = {}
        for ln in lanes:
            g, t = ln >> 2, ln & 3
            vals = []
            for row, col in ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)):
                terms = [A[row][k] * B[k][col] for k in range(32)] + [C[row][col]]
                if any(x != x for x in terms) or (any(x == float('inf') for x in terms) and
                                                  any(x == -float('inf') for x in terms)):
                    vals.append(QNAN)
                else:
                    vals.append(f32_bits(math.fsum(terms)))
            out[ln] = vals
        for ln, th in lanes.items():
            for i, v in zip(d, out[ln]):
                th.regs[i] = v

    def vote(self, s, lanes):
        _, mode, di, ai, neg, _m = s
        ps = {}
        for ln, th in lanes.items():
            p = bool(th.regs[ai])
            ps[ln] = p != neg
        if mode == 'ballot':
            res = sum(1 << ln for ln, p in ps.items() if p)
        elif mode == 'all':
            res = all(ps.values())
        elif mode == 'any':
            res = any(ps.values())
        else:
            res = len(set(ps.values())) == 1
        for th in lanes.values():
            th.regs[di] = res

    def deadlock(self, ctas, cl):
        lines = []
        ins_list = self.e.ins
        for c in ctas:
            if not c.live:
                continue
            pre = '  CTA %s (cluster rank %d): ' % (c.cid, c.rank) if cl else '  '
            for (w, pc), g in sorted(c.coll.items()):
                ins = ins_list[pc]
                lines.append(pre + 'warp %d lanes %s wait at pc %d line %d `%s`' % (
                    w, _ranges(th.tid & 31 for th in g), pc, ins.line, ins.text))
            for what, ths in (('wait at the barrier', c.bar),
                              ('wait at barrier.cluster for the other lanes of their warp',
                               [th for g in c.cbar.values() for th in g]),
                              ('are blocked in barrier.cluster.wait',
                               [th for th in c.threads if th.state == 'cwait'])):
                pcs = {}
                for th in ths:
                    pcs.setdefault(th.pc, []).append(th.tid)
                for pc, ts in sorted(pcs.items()):
                    ins = ins_list[pc]
                    lines.append(pre + 'threads %s %s at pc %d line %d `%s`' % (
                        _ranges(ts), what, pc, ins.line, ins.text))
            done = [th.tid for th in c.threads if th.state == 'done']
            if done:
                lines.append(pre + 'threads %s have exited' % _ranges(done))
        if cl:
            lines.append('  barrier.cluster phase %d: %d of the %d live threads of the '
                         'cluster have arrived' % (cl.phase, cl.narr, cl.live))
            where = 'cluster of CTAs %s' % ', '.join(str(c.cid) for c in ctas)
        else:
            where = 'CTA %s' % (ctas[0].cid,)
        return SimError('%s: deadlock or divergent collective in %s (%d threads live):\n%s'
                        % (self.e.name, where, sum(c.live for c in ctas), '\n'.join(lines)))

    def diagnose(self, x, th, pc):
        """A SimError for exception x raised in th's block starting at pc (or in the
        collective at pc): finds the instruction from the traceback."""
        if isinstance(x, SimError):
            return x
        code = self.e.code
        k = None
        tb = x.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == code['fname']:
                k = code['linemap'][tb.tb_lineno - 1]
            tb = tb.tb_next
        if k is None:
            k = pc if pc >= 0 else ~pc
        ins = self.e.ins[k]
        where = self.where(th, k)
        if isinstance(x, _Fault):
            return SimError('%s: %s' % (where, x))
        bad = []
        for nm in dict.fromkeys(ins.srcs):
            v = th.regs[self.e.regs[nm][0]] if nm in self.e.regs else 0
            if isinstance(v, Undef):
                bad.append('%s has undefined bits %#x (%s)' % (nm, v.m, v.o))
            elif v is UNDEF_PRED:
                bad.append('predicate %s read before written' % nm)
        if ins.guard and th.regs[self.e.regs[ins.guard[0]][0]] is UNDEF_PRED:
            bad.append('guard predicate %s read before written' % ins.guard[0])
        if bad:
            return SimError('%s: use of an undefined value: %s' % (where, '; '.join(bad)))
        if isinstance(x, TypeError) and 'undefined' in str(x):
            return SimError('%s: use of an undefined value (%s)' % (where, x))
        return SimError('%s: internal simulator error: %s: %s' % (where, type(x).__name__, x))


def _ranges(xs):
    xs = sorted(xs)
    out = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else '%d-%d' % (xs[i], xs[j]))
        i = j + 1
    return ','.join(out)


_HDR = '.version 8.0\n.target sm_90\n.address_size 64\n'

_SEM = _HDR + r"""
.visible .entry t_sem(.param .u64 p_out)
{
    .reg .pred %p<4>;
    .reg .b16 %h<2>;
    .reg .b32 %r<8>, %lane, %v, %never;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>, %o;
    ld.param.u64 %o, [p_out];
    mov.u32 %lane, %laneid;
    mad.lo.u32 %v, %lane, 3, 7;
    mul.wide.u32 %rd1, %lane, 128;
    add.u64 %o, %o, %rd1;
    shfl.sync.down.b32 %r1|%p1, %v, 1, 0x101f, -1;
    selp.b32 %r2, 1, 0, %p1;
    st.global.v2.b32 [%o], {%r1, %r2};
    shfl.sync.up.b32 %r1, %v, 2, 0, -1;         st.global.u32 [%o+8], %r1;
    shfl.sync.bfly.b32 %r1, %v, 1, 0x1f, -1;     st.global.u32 [%o+12], %r1;
    sub.u32 %r3, 31, %lane;
    shfl.sync.idx.b32 %r1, %v, %r3, 0x1f, -1;    st.global.u32 [%o+16], %r1;
    shfl.sync.down.b32 %r1, %v, 4, 0x181f, -1;   st.global.u32 [%o+20], %r1;
    shfl.sync.idx.b32 %r1, %v, 3, 0x181f, -1;    st.global.u32 [%o+24], %r1;
    xor.b32 %r3, %v, 0x55;
    redux.sync.max.u32 %r1, %r3, -1;             st.global.u32 [%o+28], %r1;
    rem.u32 %r3, %lane, 3;
    setp.eq.u32 %p2, %r3, 0;
    vote.sync.ballot.b32 %r1, %p2, -1;           st.global.u32 [%o+32], %r1;
    prmt.b32 %r1, 0x44332211, 0x88776655, 0x5140; st.global.u32 [%o+36], %r1;
    prmt.b32 %r1, 0xF0, 0, 0x0008;               st.global.u32 [%o+40], %r1;
    shf.r.clamp.b32 %r1, 0x11111111, 0x22222222, 40; st.global.u32 [%o+44], %r1;
    shf.l.wrap.b32 %r1, 0x11111111, 0x22222222, 36;  st.global.u32 [%o+48], %r1;
    mul.hi.u32 %r1, 0xFFFFFFFF, 16;              st.global.u32 [%o+52], %r1;
    div.s32 %r1, -7, 2;                          st.global.u32 [%o+56], %r1;
    mov.f32 %f1, 0f3F800000;
    mov.f32 %f2, 0f44600000;
    cvt.rn.satfinite.e4m3x2.f32 %h0, %f1, %f2;
    cvt.u32.u16 %r1, %h0;                        st.global.u32 [%o+60], %r1;
    rem.s32 %r1, -7, 2;                          st.global.u32 [%o+64], %r1;
    setp.ge.or.u32 %p3, %lane, 30, %p1;
    selp.b32 %r1, 1, 0, %p3;                     st.global.u32 [%o+68], %r1;
    add.rn.f32 %f3, %f1, 0f33800000;             st.global.f32 [%o+72], %f3;
    add.rn.f32 %f3, %f1, 0f33800001;             st.global.f32 [%o+76], %f3;
    mul.rn.f32 %f3, 0f7F7FFFFF, 0f40000000;      st.global.f32 [%o+80], %f3;
    rcp.rn.f32 %f3, 0f40400000;                  st.global.f32 [%o+84], %f3;
    mov.b32 {%h0, %h1}, 0xAABBCCDD;
    mov.b32 %r1, {%h1, %h0};                     st.global.u32 [%o+88], %r1;
    mov.b16 %h0, 0x3C00;
    cvt.f32.f16 %f3, %h0;                        st.global.f32 [%o+92], %f3;
    mov.b32 %r4, -3;
    mul.wide.s32 %rd2, %r4, 5;                   st.global.u64 [%o+96], %rd2;
    min.s32 %r1, -5, 3;                          st.global.u32 [%o+104], %r1;
    max.u32 %r1, 0xFFFFFFFB, 3;                  st.global.u32 [%o+108], %r1;
    and.b32 %r1, %never, 0;                      st.global.u32 [%o+112], %r1;
    shr.s32 %r1, 0x80000000, 4;                  st.global.u32 [%o+116], %r1;
    cvt.rn.bf16.f32 %h0, 0f3F818000;
    cvt.rn.f16.f32 %h1, 0f477FF000;
    mov.b32 %r1, {%h0, %h1};                     st.global.u32 [%o+120], %r1;
    setp.lt.s32 %p1|%p2, -1, 0;
    selp.b32 %r1, 2, 0, %p1;
    selp.b32 %r2, 1, 0, %p2;
    or.b32 %r1, %r1, %r2;                        st.global.u32 [%o+124], %r1;
    ret;
}
"""


_SEM2 = _HDR + r"""
.visible .entry t_sem2(.param .u64 p_out, .param .u64 p_cnt)
{
    .reg .pred %p<4>;
    .reg .b16 %h<2>;
    .reg .b32 %r<8>, %lane;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>, %o, %cnt;
    .shared .align 16 .b8 s[512];
    ld.param.u64 %o, [p_out];
    ld.param.u64 %cnt, [p_cnt];
    mov.u32 %lane, %laneid;
    mul.wide.u32 %rd1, %lane, 160;
    add.u64 %o, %o, %rd1;
    mov.f32 %f1, 0f7FC00000;
    setp.lt.f32 %p1, 0f3FC00000, %f1;  selp.b32 %r1, 1, 0, %p1; st.global.u32 [%o], %r1;
    setp.ltu.f32 %p1, 0f3FC00000, %f1; selp.b32 %r1, 1, 0, %p1; st.global.u32 [%o+4], %r1;
    setp.ne.f32 %p1, %f1, %f1;         selp.b32 %r1, 1, 0, %p1; st.global.u32 [%o+8], %r1;
    setp.neu.f32 %p1, %f1, %f1;        selp.b32 %r1, 1, 0, %p1; st.global.u32 [%o+12], %r1;
    fma.rn.f32 %f2, 0f3F800001, 0f3F7FFFFF, 0fBF800000; st.global.f32 [%o+16], %f2;
    div.rn.f32 %f2, 0f3F800000, 0f40400000;            st.global.f32 [%o+20], %f2;
    cvt.rzi.s32.f32 %r1, 0fC02CCCCD;   st.global.u32 [%o+24], %r1;
    cvt.rni.s32.f32 %r1, 0f40200000;   st.global.u32 [%o+28], %r1;
    cvt.rmi.s32.f32 %r1, 0fC0200000;   st.global.u32 [%o+32], %r1;
    mov.b32 %r2, -16777217;
    cvt.rn.f32.s32 %f2, %r2;           st.global.f32 [%o+36], %f2;
    cvt.rni.f32.f32 %f2, 0f40200000;   st.global.f32 [%o+40], %f2;
    cvt.rzi.u32.f32 %r1, 0fBF800000;   st.global.u32 [%o+44], %r1;
    cvt.rzi.s32.f32 %r1, 0f4F32D05E;   st.global.u32 [%o+48], %r1;
    min.f32 %f2, %f1, 0f40000000;      st.global.f32 [%o+52], %f2;
    max.f32 %f2, 0f80000000, 0f00000000; st.global.f32 [%o+56], %f2;
    abs.f32 %f2, 0fC0400000;           st.global.f32 [%o+60], %f2;
    neg.f32 %f2, 0f40400000;           st.global.f32 [%o+64], %f2;
    popc.b32 %r1, 0xF0F0;              st.global.u32 [%o+68], %r1;
    clz.b32 %r1, 0x00010000;           st.global.u32 [%o+72], %r1;
    brev.b32 %r1, 1;                   st.global.u32 [%o+76], %r1;
    cnot.b32 %r1, 0;                   st.global.u32 [%o+80], %r1;
    not.b32 %r1, 0x0F0F0F0F;           st.global.u32 [%o+84], %r1;
    setp.lt.u32 %p1, %lane, 32;
    vote.sync.all.pred %p2, %p1, -1;   selp.b32 %r1, 1, 0, %p2; st.global.u32 [%o+88], %r1;
    setp.eq.u32 %p1, %lane, 5;
    vote.sync.any.pred %p2, %p1, -1;   selp.b32 %r1, 1, 0, %p2; st.global.u32 [%o+92], %r1;
    setp.lt.u32 %p1, %lane, 16;
    vote.sync.uni.pred %p2, %p1, -1;   selp.b32 %r1, 1, 0, %p2; st.global.u32 [%o+96], %r1;
    sub.u32 %r2, %lane, 16;
    redux.sync.add.s32 %r1, %r2, -1;   st.global.u32 [%o+100], %r1;
    redux.sync.min.s32 %r1, %r2, -1;   st.global.u32 [%o+104], %r1;
    red.global.add.u32 [%cnt], 1;
    atom.global.max.u32 %r1, [%cnt+4], %lane;
    bar.warp.sync -1;
    mov.u32 %r1, 7;                    st.global.u32 [%o+108], %r1;
    bar.sync 0;
    mad.wide.u32 %rd2, 0xFFFFFFFF, 2, 1; st.global.u64 [%o+112], %rd2;
    mov.b32 %r2, -2;
    mul.hi.s32 %r1, %r2, 0x40000000;  st.global.u32 [%o+124], %r1;
    mov.u32 %r3, s;
    shl.b32 %r4, %lane, 4;
    add.u32 %r3, %r3, %r4;
    st.shared.u32 [%r3], %lane;
    ld.shared.v4.u32 {%r1, %r4, %r5, %r6}, [%r3];
    and.b32 %r4, %r4, 0;
    add.u32 %r1, %r1, %r4;             st.global.u32 [%o+128], %r1;
    setp.eq.u32 %p1, %lane, 3;
    mov.pred %p2, %p1;
    xor.pred %p3, %p1, %p2;            selp.b32 %r1, 1, 0, %p3; st.global.u32 [%o+132], %r1;
    selp.f32 %f2, 1.5, 0f40000000, %p1; st.global.f32 [%o+136], %f2;
    mov.u32 %r2, 70;
    mov.b64 %rd2, 1;
    shl.b64 %rd2, %rd2, %r2;
    cvt.u32.u64 %r1, %rd2;             st.global.u32 [%o+140], %r1;
    mov.u32 %r2, 40;
    shr.s32 %r1, 0x80000000, %r2;      st.global.u32 [%o+144], %r1;
    cvt.s32.s8 %r1, 0x80;              st.global.u32 [%o+148], %r1;
    cvt.sat.u16.u32 %h0, 70000;
    cvt.u32.u16 %r1, %h0;              st.global.u32 [%o+152], %r1;
    st.global.u8 [%o+156], 0xF0;
    ld.global.s8 %r1, [%o+156];        st.global.u32 [%o+156], %r1;
    ret;
}
"""


def _sem2_expect(lane):
    w = [0, 1, 0, 1, 0x337ffffe, 0x3eaaaaab, 0xfffffffe, 2, 0xfffffffd, 0xcb800000,
         0x40000000, 0, 0x7fffffff, 0x40000000, 0, 0x40400000, 0xc0400000, 8, 15,
         0x80000000, 1, 0xf0f0f0f0, 1, 1, 0, 0xfffffff0, 0xfffffff0, 7, 0xffffffff, 1, 0,
         0xffffffff, lane, 0, 0x3fc00000 if lane == 3 else 0x40000000, 0, 0xffffffff,
         0xffffff80, 0xffff, 0xfffffff0]
    w[30] = None                     # word 30 is not written
    return w


def _sem_expect(lane):
    v = [3 * ln + 7 for ln in range(32)]
    w = [0] * 32
    down = lane + 1 <= (lane & 16 | 15)
    w[0], w[1] = (v[lane + 1], 1) if down else (v[lane], 0)
    w[2] = v[lane - 2] if lane >= 2 else v[lane]
    w[3] = v[lane ^ 1]
    w[4] = v[31 - lane]
    w[5] = v[lane + 4] if lane % 8 < 4 else v[lane]
    w[6] = v[(lane & 0x18) + 3]
    w[7] = max(x ^ 0x55 for x in v)
    w[8] = sum(1 << ln for ln in range(32) if ln % 3 == 0)
    w[9], w[10], w[11], w[12] = 0x66225511, 0xF0F0F0FF, 0x22222222, 0x22222221
    w[13], w[14], w[15], w[16] = 0xF, 0xFFFFFFFD, 0x387E, 0xFFFFFFFF
    w[17] = 1 if (lane >= 30 or down) else 0
    w[18], w[19], w[20], w[21] = 0x3F800000, 0x3F800001, 0x7F800000, 0x3EAAAAAB
    w[22], w[23], w[24], w[25] = 0xCCDDAABB, 0x3F800000, 0xFFFFFFF1, 0xFFFFFFFF
    w[26], w[27], w[28], w[29] = 0xFFFFFFFB, 0xFFFFFFFB, 0, 0xF8000000
    w[30], w[31] = 0x7C003F82, 2
    return w


_CHECKS = [
    ('outside every allocation', 1, 'ld.global.u32 %r1, [%rd1+16]; st.global.u32 [%rd1], %r1;'),
    ('misaligned global load', 1, 'ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1+4];'),
    ('outside the CTA', 1, 'mov.u32 %r1, s; ld.shared.u32 %r2, [%r1+64];'),
    ('undefined', 1, 'add.u32 %r2, %r1, 1; st.global.u32 [%rd1], %r2;'),
    ('read before written', 1, '@%p1 bra L; L: ret;'),
    ('race', 2, 'mov.u32 %r1, %tid.x; setp.eq.u32 %p1, %r1, 0; mov.u32 %r2, s;'
                '@%p1 st.shared.u32 [%r2], %r1; @!%p1 ld.shared.u32 %r3, [%r2];'),
    (None, 2, 'mov.u32 %r1, %tid.x; setp.eq.u32 %p1, %r1, 0; mov.u32 %r2, s;'
              '@%p1 st.shared.u32 [%r2], %r1; bar.sync 0; @!%p1 ld.shared.u32 %r3, [%r2];'
              '@!%p1 st.global.u32 [%rd1], %r3;'),
    ('deadlock', 32, 'mov.u32 %r1, %tid.x; setp.eq.u32 %p1, %r1, 0; @%p1 bra B;'
                     'shfl.sync.idx.b32 %r2, %r1, 0, 0x1f, -1; ret; B: bar.sync 0; ret;'),
    ('exited', 32, 'mov.u32 %r1, %tid.x; setp.eq.u32 %p1, %r1, 0; @%p1 ret;'
                   'shfl.sync.idx.b32 %r2, %r1, 0, 0x1f, -1;'),
    ('does not take part', 32, 'mov.u32 %r1, %tid.x; setp.lt.u32 %p1, %r1, 16; @!%p1 ret;'
                               'shfl.sync.idx.b32 %r2, %r1, 20, 0x1f, 0xffff;'),
    ('division by zero', 1, 'mov.u32 %r1, 0; div.u32 %r2, 5, %r1;'),
]


_CL = _HDR + r"""
.visible .entry t_cl(.param .u64 p_out, .param .u64 p_flag)
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>, %rk, %n, %tx, %a, %b, %nb, %v<4>;
    .reg .b64 %rd<4>, %o, %fl;
    .shared .align 16 .b8 s[256];
    .shared .align 4 .b32 cnt;
    ld.param.u64 %o, [p_out];
    ld.param.u64 %fl, [p_flag];
    mov.u32 %tx, %tid.x;
    mov.u32 %rk, %cluster_ctarank;
    mov.u32 %n, %cluster_nctarank;
    mov.u32 %r1, %ctaid.y;
    mov.u32 %r2, %ctaid.x;
    mad.lo.u32 %r1, %r1, 4, %r2;
    mad.lo.u32 %r1, %r1, 32, %tx;
    mul.wide.u32 %rd1, %r1, 128;
    add.u64 %o, %o, %rd1;                      // this thread's 32 output words
    st.global.u32 [%o], %rk;
    st.global.u32 [%o+4], %n;
    mov.u32 %r2, %cluster_ctaid.x;   st.global.u32 [%o+8], %r2;
    mov.u32 %r2, %cluster_ctaid.y;   st.global.u32 [%o+12], %r2;
    mov.u32 %r2, %cluster_ctaid.z;   st.global.u32 [%o+16], %r2;
    mov.u32 %r2, %cluster_nctaid.x;  st.global.u32 [%o+20], %r2;
    mov.u32 %r2, %cluster_nctaid.y;  st.global.u32 [%o+24], %r2;
    mov.u32 %r2, %cluster_nctaid.z;  st.global.u32 [%o+28], %r2;
    mov.u32 %r2, %clusterid.x;       st.global.u32 [%o+32], %r2;
    mov.u32 %r2, %clusterid.y;       st.global.u32 [%o+36], %r2;
    mov.u32 %r2, %nclusterid.x;      st.global.u32 [%o+40], %r2;
    mov.u32 %r2, %nclusterid.y;      st.global.u32 [%o+44], %r2;
    mov.pred %p2, %is_explicit_cluster;
    selp.b32 %r2, 1, 0, %p2;         st.global.u32 [%o+48], %r2;
    // own shared memory: word tx = 1000 rank + tx; rank 0 thread 0 a global flag
    shl.b32 %a, %tx, 2;
    mov.u32 %r2, s;
    add.u32 %a, %a, %r2;
    mad.lo.u32 %r3, %rk, 1000, %tx;
    st.shared.u32 [%a], %r3;
    setp.eq.u32 %p1, %tx, 0;
    @%p1 st.shared.u32 [cnt], 0;
    mov.u32 %r4, %clusterid.x;
    mul.wide.u32 %rd2, %r4, 4;
    add.u64 %fl, %fl, %rd2;
    setp.eq.and.u32 %p3, %rk, 0, %p1;
    add.u32 %r4, %r4, 77;
    @%p3 st.global.u32 [%fl], %r4;
    barrier.cluster.arrive.aligned;
    barrier.cluster.wait.aligned;
    ld.global.u32 %r4, [%fl];        st.global.u32 [%o+52], %r4;
    // the next rank's words, through mapa, at several widths
    add.u32 %nb, %rk, 1;
    rem.u32 %nb, %nb, %n;
    mapa.shared::cluster.u32 %b, %a, %nb;
    ld.shared::cluster.u32 %r5, [%b];            st.global.u32 [%o+56], %r5;
    and.b32 %r6, %tx, 7;
    shl.b32 %r6, %r6, 4;
    add.u32 %r6, %r6, %r2;
    mapa.shared::cluster.u32 %r6, %r6, %nb;
    ld.shared::cluster.v4.u32 {%v0, %v1, %v2, %v3}, [%r6];
    st.global.v4.u32 [%o+64], {%v0, %v1, %v2, %v3};
    and.b32 %r6, %tx, 15;
    shl.b32 %r6, %r6, 3;
    add.u32 %r6, %r6, %r2;
    mapa.shared::cluster.u32 %r6, %r6, %nb;
    ld.shared::cluster.v2.u32 {%v0, %v1}, [%r6];
    st.global.v2.u32 [%o+80], {%v0, %v1};
    add.u32 %r6, %tx, %r2;
    mapa.shared::cluster.u32 %r6, %r6, %nb;
    ld.shared::cluster.u8 %r7, [%r6];            st.global.u32 [%o+88], %r7;
    getctarank.shared::cluster.u32 %r7, %b;      st.global.u32 [%o+92], %r7;
    cvt.u64.u32 %rd2, %a;
    mapa.shared::cluster.u64 %rd3, %rd2, %nb;
    ld.shared::cluster.u32 %r7, [%rd3];          st.global.u32 [%o+96], %r7;
    mapa.shared::cluster.u32 %r7, s+4, %rk;
    ld.shared::cluster.u32 %r7, [%r7];           st.global.u32 [%o+100], %r7;
    // every thread adds 1 to rank 0's counter, and stores a word into the next rank
    mapa.shared::cluster.u32 %r8, cnt, 0;
    red.shared::cluster.add.u32 [%r8], 1;
    add.u32 %r9, %r3, 500;
    st.shared::cluster.u32 [%b+128], %r9;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    ld.shared.u32 %r10, [%a+128];                st.global.u32 [%o+104], %r10;
    mov.u32 %r11, 0;
    @%p1 ld.shared.u32 %r11, [cnt];              st.global.u32 [%o+108], %r11;
    ret;
}
"""


def _cl_expect(cid, tx):
    """t_cl's 28 words of thread tx of CTA cid (grid (4, 2), clusters (2, 2))."""
    cx, cy = cid[0] % 2, cid[1] % 2
    rk, n = cx + 2 * cy, 4
    nb, pv = (rk + 1) % n, (rk - 1) % n
    w = [rk, n, cx, cy, 0, 2, 2, 1, cid[0] // 2, cid[1] // 2, 2, 1, 1, 77 + cid[0] // 2,
         1000 * nb + tx, 0]
    w += [1000 * nb + 4 * (tx % 8) + i for i in range(4)]
    w += [1000 * nb + 2 * (tx % 16) + i for i in range(2)]
    w += [((1000 * nb + tx // 4) >> (8 * (tx % 4))) & 0xff, nb, 1000 * nb + tx,
          1000 * rk + 1, 1000 * pv + tx + 500, 32 * n if rk == 0 and tx == 0 else 0]
    w[15] = None                        # word 15 is not written
    return w


# (what the error says or None, block x, grid, cluster, body). The body runs after
# %tx = %tid.x, %rk = %cluster_ctarank, %s = s (64 bytes), %rd1 = p, %p3 = (%tx == 0).
_CL_CHECKS = [
    (None, 64, (2, 1, 1), (2, 1, 1),                 # a release / acquire phase orders
     'barrier.cluster.arrive; barrier.cluster.wait; setp.eq.u32 %p1, %rk, 0;'
     'mapa.shared::cluster.u32 %r2, %s, 1; and.pred %p2, %p1, %p3;'
     '@%p2 st.shared::cluster.u32 [%r2], %tx; barrier.cluster.arrive; barrier.cluster.wait;'
     '@%p1 ret; ld.shared.u32 %r1, [%s]; @%p3 st.global.u32 [%rd1], %r1;'),
    ('race', 64, (2, 1, 1), (2, 1, 1),                 # the same without the second phase
     'barrier.cluster.arrive; barrier.cluster.wait; setp.eq.u32 %p1, %rk, 0; @%p1 bra W;'
     'ld.shared.u32 %r1, [%s]; bra E; W: mapa.shared::cluster.u32 %r2, %s, 1;'
     '@%p3 st.shared::cluster.u32 [%r2], %tx; E: barrier.cluster.arrive; barrier.cluster.wait;'),
    ('race', 64, (2, 1, 1), (2, 1, 1),                 # bar.sync does not order DSMEM
     'barrier.cluster.arrive; barrier.cluster.wait; setp.eq.u32 %p1, %rk, 0;'
     'mapa.shared::cluster.u32 %r2, %s, 1; and.pred %p1, %p1, %p3;'
     '@%p1 st.shared::cluster.u32 [%r2], %tx; bar.sync 0; setp.eq.u32 %p1, %rk, 0;'
     '@!%p1 ld.shared.u32 %r1, [%s]; barrier.cluster.arrive; barrier.cluster.wait;'),
    ('race', 64, (2, 1, 1), (2, 1, 1),                 # nor does a .relaxed arrive
     'barrier.cluster.arrive; barrier.cluster.wait; setp.eq.u32 %p1, %rk, 0;'
     'mapa.shared::cluster.u32 %r2, %s, 1; and.pred %p2, %p1, %p3;'
     '@%p2 st.shared::cluster.u32 [%r2], %tx; barrier.cluster.arrive.relaxed;'
     'barrier.cluster.wait; @!%p1 ld.shared.u32 %r1, [%s];'
     'barrier.cluster.arrive; barrier.cluster.wait;'),
    (None, 64, (1, 1, 1), (1, 1, 1),                   # a phase orders a CTA's threads
     'setp.eq.u32 %p1, %tx, 0; @%p1 st.shared.u32 [%s], %tx; barrier.cluster.arrive;'
     'barrier.cluster.wait; setp.eq.u32 %p2, %tx, 32; @%p2 ld.shared.u32 %r1, [%s];'
     '@%p2 st.global.u32 [%rd1], %r1;'),
    ('race', 64, (1, 1, 1), (1, 1, 1),                 # not what comes after the arrive
     'setp.eq.u32 %p1, %tx, 0; barrier.cluster.arrive; @%p1 st.shared.u32 [%s], %tx;'
     'barrier.cluster.wait; setp.eq.u32 %p2, %tx, 32; @%p2 ld.shared.u32 %r1, [%s];'),
    ('arrive again', 32, (2, 1, 1), (2, 1, 1),
     'barrier.cluster.arrive; barrier.cluster.arrive; barrier.cluster.wait;'),
    (None, 64, (2, 1, 1), (2, 1, 1),                   # arrive again, knowing (bar.sync)
     'barrier.cluster.arrive; setp.lt.u32 %p1, %tx, 32; @%p1 barrier.cluster.wait.aligned;'
     'bar.sync 0; barrier.cluster.arrive; barrier.cluster.wait;'),
    ('without a barrier.cluster.arrive', 32, (2, 1, 1), (2, 1, 1),
     'barrier.cluster.arrive; barrier.cluster.wait; barrier.cluster.wait;'),
    (None, 64, (2, 1, 1), (2, 1, 1),                   # exited threads are not waited for
     'setp.ge.u32 %p1, %tx, 32; @%p1 ret; barrier.cluster.arrive; barrier.cluster.wait;'),
    ('different instructions', 32, (2, 1, 1), (2, 1, 1),
     'setp.eq.u32 %p1, %tx, 0; @%p1 bra A; barrier.cluster.arrive.aligned; bra B;'
     'A: barrier.cluster.arrive.aligned; B: barrier.cluster.wait.aligned;'),
    ('deadlock', 64, (2, 1, 1), (2, 1, 1),
     'setp.lt.u32 %p1, %tx, 32; @%p1 bra A; bar.sync 0; ret;'
     'A: barrier.cluster.arrive.aligned; barrier.cluster.wait.aligned;'),
    ('but the cluster has 2 CTAs', 32, (2, 1, 1), (2, 1, 1),
     'mapa.shared::cluster.u32 %r2, %s, 2;'),
    ('outside the 64 bytes of shared memory of cluster rank 1', 32, (2, 1, 1), (2, 1, 1),
     'barrier.cluster.arrive; barrier.cluster.wait; mapa.shared::cluster.u32 %r2, %s, 1;'
     'ld.shared::cluster.u32 %r1, [%r2+64];'),
    ('misaligned shared::cluster', 32, (2, 1, 1), (2, 1, 1),
     'barrier.cluster.arrive; barrier.cluster.wait; mapa.shared::cluster.u32 %r2, %s, 1;'
     'ld.shared::cluster.u32 %r1, [%r2+2];'),
    ('ld/st.shared::cluster', 32, (2, 1, 1), (2, 1, 1),
     'mapa.shared::cluster.u32 %r2, %s, 1; ld.shared.u32 %r1, [%r2];'),
    ('may not have started', 32, (2, 1, 1), (2, 1, 1),
     'mapa.shared::cluster.u32 %r2, %s, 1; setp.eq.u32 %p1, %rk, 0;'
     'and.pred %p1, %p1, %p3; @%p1 st.shared::cluster.u32 [%r2], %tx;'
     'barrier.cluster.arrive; barrier.cluster.wait;'),
    ('is not ordered before that', 32, (2, 1, 1), (2, 1, 1),   # no phase after the store
     'barrier.cluster.arrive; barrier.cluster.wait; mapa.shared::cluster.u32 %r2, %s, 1;'
     'setp.eq.u32 %p1, %rk, 0; and.pred %p1, %p1, %p3; @%p1 st.shared::cluster.u32 [%r2], %tx;'),
    ('has exited', 32, (2, 1, 1), (2, 1, 1),
     'setp.eq.u32 %p1, %rk, 1; @%p1 ret; barrier.cluster.arrive; barrier.cluster.wait;'
     'mapa.shared::cluster.u32 %r2, %s, 1; ld.shared::cluster.u32 %r1, [%r2];'),
    ('undefined', 32, (2, 1, 1), (2, 1, 1),             # never-written remote bytes
     'barrier.cluster.arrive; barrier.cluster.wait; mapa.shared::cluster.u32 %r2, %s, 1;'
     'ld.shared::cluster.u32 %r1, [%r2]; add.u32 %r1, %r1, 1; st.global.u32 [%rd1], %r1;'
     'barrier.cluster.arrive; barrier.cluster.wait;'),
    ('does not divide', 32, (3, 1, 1), (2, 1, 1), ''),
]


def _cl_selftest():
    """Clusters: special registers, DSMEM at each width, mapa / getctarank, red, the
    global memory between a cluster's CTAs, and each of the checks."""
    fails = 0
    m = Module(_CL)
    mem = Memory()
    out, flag = mem.alloc(8 * 32 * 128), mem.alloc(8)
    m.launch('t_cl', grid=(4, 2, 1), block=(32, 1, 1), cluster=(2, 2, 1),
             params=[out, flag], mem=mem)
    for cy in range(2):
        for cx in range(4):
            for tx in range(32):
                a = out + ((4 * cy + cx) * 32 + tx) * 128
                got = struct.unpack('<28I', mem.read(a, 112))
                want = _cl_expect((cx, cy), tx)
                for k in range(28):
                    if want[k] is not None and got[k] != want[k]:
                        fails += 1
                        print('clusters: CTA (%d, %d) thread %d word %d: got %#x want %#x'
                              % (cx, cy, tx, k, got[k], want[k]))
    # .reqnctapercluster: the cluster of a launch without one, an error against another
    src = _HDR + ('.visible .entry t(.param .u64 p) .reqnctapercluster 2, 1, 1\n{\n'
                  ' .reg .b32 %r<2>;\n .reg .b64 %rd<2>;\n ld.param.u64 %rd1, [p];\n'
                  ' mov.u32 %r0, %ctaid.x;\n mul.wide.u32 %rd0, %r0, 4;\n'
                  ' add.u64 %rd1, %rd1, %rd0;\n'
                  ' mov.u32 %r1, %cluster_nctarank;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n')
    mem = Memory()
    a = mem.alloc(16)
    m = Module(src)
    m.launch('t', grid=(2, 1, 1), params=[a], mem=mem)
    try:
        m.launch('t', grid=(4, 1, 1), params=[a], mem=mem, cluster=(4, 1, 1))
        got = None
    except SimError as x:
        got = str(x)
    if mem.read(a, 8) != b'\x02\0\0\0' * 2 or not got or '.reqnctapercluster' not in got:
        fails += 1
        print('.reqnctapercluster: %r, %r' % (mem.read(a, 8), got))
    for k, (want, nthr, grid, cluster, body) in enumerate(_CL_CHECKS):
        src = _HDR + ('.visible .entry t(.param .u64 p)\n{\n .reg .pred %p<4>;\n'
                      ' .reg .b32 %r<8>, %tx, %rk, %s;\n .reg .b64 %rd<4>;\n'
                      ' .shared .align 4 .b8 s[64];\n ld.param.u64 %rd1, [p];\n'
                      ' mov.u32 %tx, %tid.x; mov.u32 %rk, %cluster_ctarank; mov.u32 %s, s;\n'
                      ' setp.eq.u32 %p3, %tx, 0;\n'
                      + body.replace(';', ';\n') + '\n ret;\n}\n')
        mem = Memory()
        a = mem.alloc(16)
        try:
            Module(src).launch('t', grid=grid, block=(nthr, 1, 1), cluster=cluster,
                               params=[a], mem=mem)
            got = None
        except SimError as x:
            got = str(x)
        if (want is None) != (got is None) or (want and want not in got):
            fails += 1
            print('cluster check %d: want %r, got %r' % (k, want, got))
    return fails


# Global-memory races: (what the error says or None, block x, grid, cluster, body), run as
# _CL_CHECKS bodies (%tx, %rk, %s, %rd1 = p: 64 bytes of zeros, %p3 = (%tx == 0)) after
# %c = %ctaid.x, %p0 = (%c == 0) and %p3, %p1 = (%c == 1) and %p3.
_G_CHECKS = [
    ('different CTAs of a launch without clusters', 32, (2, 1, 1), None,   # RAW
     '@%p0 st.global.u32 [%rd1], %tx; @%p1 ld.global.u32 %r2, [%rd1];'),
    ('read; nothing orders different CTAs', 32, (2, 1, 1), None,          # WAR
     '@%p0 ld.global.u32 %r2, [%rd1+4]; @%p1 st.global.u8 [%rd1+5], %tx;'),
    ('wrote; nothing orders different CTAs', 32, (2, 1, 1), None,         # WAW
     '@%p0 st.global.v2.u32 [%rd1+8], {%tx, %tx}; @%p1 st.global.u16 [%rd1+14], %tx;'),
    (None, 64, (2, 1, 1), None,          # a CTA's own threads, bar.sync; other bytes
     'mul.wide.u32 %rd2, %c, 4; add.u64 %rd2, %rd1, %rd2; @%p3 st.global.u32 [%rd2], %tx;'
     'bar.sync 0; setp.eq.u32 %p2, %tx, 33; @%p2 ld.global.u32 %r2, [%rd2];'
     '@%p2 st.global.u32 [%rd2+8], %r2; ld.global.u32 %r2, [%rd1+32];'),
    ('no barrier.cluster phase orders them', 32, (2, 1, 1), (2, 1, 1),     # no phase
     '@%p0 st.global.u32 [%rd1], %tx; @%p1 ld.global.u32 %r2, [%rd1];'),
    (None, 32, (2, 1, 1), (2, 1, 1),                  # a phase orders them (release)
     '@%p0 st.global.u32 [%rd1], %tx; barrier.cluster.arrive; barrier.cluster.wait;'
     '@%p1 ld.global.u32 %r2, [%rd1]; @%p1 st.global.u32 [%rd1+4], %r2;'),
    ('no barrier.cluster phase orders them', 32, (2, 1, 1), (2, 1, 1),     # .relaxed
     '@%p0 st.global.u32 [%rd1], %tx; barrier.cluster.arrive.relaxed.aligned;'
     'barrier.cluster.wait.aligned; @%p1 ld.global.u32 %r2, [%rd1];'),
    (None, 32, (2, 1, 1), (2, 1, 1),                  # WAR ordered by a phase
     '@%p1 ld.global.u32 %r2, [%rd1]; barrier.cluster.arrive.release;'
     'barrier.cluster.wait.acquire; @%p0 st.global.u32 [%rd1], %tx;'),
    ('wrote; nothing orders different CTAs', 32, (2, 1, 1), None,         # bytes
     '@%p0 st.global.u8 [%rd1+20], %tx; @%p1 st.global.u8 [%rd1+20], %c;'),
    (None, 64, (2, 1, 1), (2, 1, 1),     # 64 readers, a phase, a write by another CTA
     'setp.eq.u32 %p2, %rk, 0; @%p2 ld.global.u32 %r2, [%rd1+24]; barrier.cluster.arrive;'
     'barrier.cluster.wait; setp.eq.and.u32 %p2, %rk, 1, %p3;'
     '@%p2 st.global.u32 [%rd1+24], %tx;'),
    ('read; no barrier.cluster phase orders them', 64, (2, 1, 1), (2, 1, 1),  # after
     'barrier.cluster.arrive; setp.eq.u32 %p2, %rk, 0;'     # the arrive: not ordered
     '@%p2 ld.global.u32 %r2, [%rd1+24]; barrier.cluster.wait;'
     'setp.eq.and.u32 %p2, %rk, 1, %p3; @%p2 st.global.u32 [%rd1+24], %tx;'),
    ('different clusters', 32, (4, 1, 1), (2, 1, 1),  # nothing orders clusters
     '@%p0 st.global.u32 [%rd1], %tx; barrier.cluster.arrive; barrier.cluster.wait;'
     'setp.eq.u32 %p2, %c, 2; @%p2 ld.global.u32 %r2, [%rd1];'),
    (None, 64, (2, 1, 1), (2, 1, 1),     # bar.sync, then another thread's release
     '@%p0 st.global.u32 [%rd1], %tx; bar.sync 0; @%p3 bra R; barrier.cluster.arrive;'
     'bra W; R: barrier.cluster.arrive.relaxed; W: barrier.cluster.wait;'
     'setp.eq.u32 %p2, %tx, 40; setp.eq.and.u32 %p2, %c, 1, %p2;'
     '@%p2 ld.global.u32 %r2, [%rd1];'),
    ('no barrier.cluster phase orders them', 64, (2, 1, 1), (2, 1, 1),     # no bar.sync
     '@%p0 st.global.u32 [%rd1], %tx; @%p3 bra R; barrier.cluster.arrive;'
     'bra W; R: barrier.cluster.arrive.relaxed; W: barrier.cluster.wait;'
     'setp.eq.u32 %p2, %tx, 40; setp.eq.and.u32 %p2, %c, 1, %p2;'
     '@%p2 ld.global.u32 %r2, [%rd1];'),
    ('reads through ld.global.nc', 32, (1, 1, 1), None,   # written in the launch: even
     '@%p3 st.global.u32 [%rd1], %tx; bar.sync 0; @%p3 ld.global.nc.u32 %r2, [%rd1];'),
    ('read through ld.global.nc', 32, (1, 1, 1), None,    # and after it
     '@%p3 ld.global.nc.v2.u32 {%r2, %r3}, [%rd1+8]; bar.sync 0;'
     'setp.eq.u32 %p2, %tx, 5; @%p2 st.global.u8 [%rd1+12], %tx;'),
    (None, 32, (2, 1, 1), (2, 1, 1),     # nc of data no thread writes: fine
     'ld.global.nc.u32 %r2, [%rd1+16]; barrier.cluster.arrive; barrier.cluster.wait;'
     'ld.global.nc.v4.u32 {%r2, %r3, %r4, %r5}, [%rd1+16];'),
    (None, 32, (2, 1, 1), None,          # atomics do not race with each other
     'red.global.add.u32 [%rd1], 1; atom.global.max.u32 %r2, [%rd1+4], %tx;'),
    ('updated atomically', 32, (2, 1, 1), None,           # but with plain accesses
     '@%p0 red.global.add.u32 [%rd1], 1; @%p1 ld.global.u32 %r2, [%rd1];'),
    ('read; nothing orders', 32, (2, 1, 1), None,
     '@%p0 ld.global.u32 %r2, [%rd1]; @%p1 red.global.add.u32 [%rd1], 1;'),
    (None, 32, (2, 1, 1), None,          # strong accesses do not race with each other
     '@%p0 st.relaxed.gpu.global.u32 [%rd1], %tx; @%p1 ld.relaxed.gpu.global.u32 %r2, [%rd1];'
     '@%p1 st.volatile.global.u32 [%rd1], %tx;'),
    ('updated atomically', 32, (2, 1, 1), None,           # but with plain accesses
     '@%p0 st.relaxed.gpu.global.u32 [%rd1], %tx; @%p1 ld.global.u32 %r2, [%rd1];'),
    (None, 64, (2, 1, 1), None,          # st.release / ld.acquire order them (flag mode)
     '@%p0 st.global.u32 [%rd1+8], %tx; @%p0 st.release.gpu.global.u32 [%rd1], %tx;'
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1]; @%p1 ld.global.u32 %r3, [%rd1+8];'
     '@%p1 st.global.u32 [%rd1+8], %r3;'),
    ('no st.release / ld.acquire orders them', 64, (2, 1, 1), None,    # after the release
     '@%p0 st.release.gpu.global.u32 [%rd1], %tx; @%p0 st.global.u32 [%rd1+8], %tx;'
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1]; @%p1 ld.global.u32 %r3, [%rd1+8];'),
    ('no st.release / ld.acquire orders them', 64, (2, 1, 1), None,    # .relaxed store
     '@%p0 st.global.u32 [%rd1+8], %tx; @%p0 st.relaxed.gpu.global.u32 [%rd1], %tx;'
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1]; @%p1 ld.global.u32 %r3, [%rd1+8];'),
    ('no st.release / ld.acquire orders them', 64, (2, 1, 1), None,    # .relaxed load
     '@%p0 st.global.u32 [%rd1+8], %tx; @%p0 st.release.gpu.global.u32 [%rd1], %tx;'
     '@%p1 ld.relaxed.gpu.global.u32 %r2, [%rd1]; @%p1 ld.global.u32 %r3, [%rd1+8];'),
    ('no st.release / ld.acquire orders them', 64, (2, 1, 1), None,    # another address
     '@%p0 st.global.u32 [%rd1+8], %tx; @%p0 st.release.gpu.global.u32 [%rd1], %tx;'
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1+4]; @%p1 ld.global.u32 %r3, [%rd1+8];'),
    (None, 64, (2, 1, 1), None,          # another thread's write, bar.sync, the release;
     'setp.eq.u32 %p2, %tx, 33; setp.eq.and.u32 %p2, %c, 0, %p2;'    # the acquire,
     '@%p2 st.global.u32 [%rd1+8], %tx; bar.sync 0;'                  # bar.sync, another
     '@%p0 st.release.gpu.global.u32 [%rd1], %tx;'                    # thread's read
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1]; bar.sync 0;'
     'setp.eq.u32 %p2, %tx, 40; setp.eq.and.u32 %p2, %c, 1, %p2;'
     '@%p2 ld.global.u32 %r3, [%rd1+8];'),
    ('no st.release / ld.acquire orders them', 64, (2, 1, 1), None,    # no bar.sync
     'setp.eq.u32 %p2, %tx, 33; setp.eq.and.u32 %p2, %c, 0, %p2;'    # before the release
     '@%p2 st.global.u32 [%rd1+8], %tx;'
     '@%p0 st.release.gpu.global.u32 [%rd1], %tx; bar.sync 0;'
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1]; bar.sync 0;'
     'setp.eq.u32 %p2, %tx, 40; setp.eq.and.u32 %p2, %c, 1, %p2;'
     '@%p2 ld.global.u32 %r3, [%rd1+8];'),
    ('no st.release / ld.acquire orders them', 64, (2, 1, 1), None,    # nor after the
     'setp.eq.u32 %p2, %tx, 33; setp.eq.and.u32 %p2, %c, 0, %p2;'    # acquire
     '@%p2 st.global.u32 [%rd1+8], %tx; bar.sync 0;'
     '@%p0 st.release.gpu.global.u32 [%rd1], %tx;'
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1];'
     'setp.eq.u32 %p2, %tx, 40; setp.eq.and.u32 %p2, %c, 1, %p2;'
     '@%p2 ld.global.u32 %r3, [%rd1+8]; bar.sync 0;'),
    (None, 32, (3, 1, 1), None,          # transitively: CTA 0 -> 1 -> 2
     '@%p0 st.global.u32 [%rd1+8], %tx; @%p0 st.release.gpu.global.u32 [%rd1], %tx;'
     '@%p1 ld.acquire.gpu.global.u32 %r2, [%rd1];'
     '@%p1 st.release.gpu.global.u32 [%rd1+4], %tx;'
     'setp.eq.u32 %p2, %c, 2; and.pred %p2, %p2, %p3;'
     '@%p2 ld.acquire.gpu.global.u32 %r2, [%rd1+4]; @%p2 st.global.u32 [%rd1+8], %tx;'),
]


def _g_selftest():
    """The global-memory race check, each of _G_CHECKS."""
    fails = 0
    for k, (want, nthr, grid, cluster, body) in enumerate(_G_CHECKS):
        src = _HDR + ('.visible .entry t(.param .u64 p)\n{\n .reg .pred %p<4>;\n'
                      ' .reg .b32 %r<8>, %tx, %rk, %s, %c;\n .reg .b64 %rd<4>;\n'
                      ' .shared .align 4 .b8 s[64];\n ld.param.u64 %rd1, [p];\n'
                      ' mov.u32 %tx, %tid.x; mov.u32 %rk, %cluster_ctarank; mov.u32 %s, s;\n'
                      ' setp.eq.u32 %p3, %tx, 0; mov.u32 %c, %ctaid.x;\n'
                      ' setp.eq.and.u32 %p0, %c, 0, %p3; setp.eq.and.u32 %p1, %c, 1, %p3;\n'
                      + body.replace(';', ';\n') + '\n ret;\n}\n')
        mem = Memory()
        a = mem.alloc(64, fill=0)
        try:
            Module(src).launch('t', grid=grid, block=(nthr, 1, 1), cluster=cluster,
                               params=[a], mem=mem)
            got = None
        except SimError as x:
            got = str(x)
        if (want is None) != (got is None) or (want and want not in got):
            fails += 1
            print('global race check %d: want %r, got %r' % (k, want, got))
    return fails


def _selftest():
    """Instruction semantics against hand-computed values, and each check."""
    fails = 0
    m = Module(_SEM)
    mem = Memory()
    out = mem.alloc(32 * 128)
    m.launch('t_sem', grid=(1, 1, 1), block=(32, 1, 1), params=[out], mem=mem)
    for lane in range(32):
        got = struct.unpack('<32I', mem.read(out + 128 * lane, 128))
        want = _sem_expect(lane)
        for k in range(32):
            if got[k] != want[k]:
                fails += 1
                print('semantics: lane %d word %d: got %#x want %#x' % (lane, k, got[k],
                                                                      want[k]))
    m = Module(_SEM2)
    mem = Memory()
    out, cnt = mem.alloc(32 * 160), mem.alloc(8, fill=0)
    m.launch('t_sem2', grid=(1, 1, 1), block=(32, 1, 1), params=[out, cnt], mem=mem)
    for lane in range(32):
        got = struct.unpack('<40I', mem.read(out + 160 * lane, 160))
        want = _sem2_expect(lane)
        for k in range(40):
            if want[k] is not None and got[k] != want[k]:
                fails += 1
                print('semantics 2: lane %d word %d: got %#x want %#x' % (lane, k, got[k],
                                                                        want[k]))
    if struct.unpack('<2I', mem.read(cnt, 8)) != (32, 31):
        fails += 1
        print('atomics: got %s want (32, 31)' % (struct.unpack('<2I', mem.read(cnt, 8)),))
    for k, (want, nthr, body) in enumerate(_CHECKS):
        src = _HDR + ('.visible .entry t(.param .u64 p)\n{\n .reg .pred %p<4>;\n'
                      ' .reg .b32 %r<8>;\n .reg .b64 %rd<4>;\n .shared .align 4 .b8 s[64];\n'
                      ' ld.param.u64 %rd1, [p];\n' + body.replace(';', ';\n') + '\n ret;\n}\n')
        mem = Memory()
        a = mem.alloc(16)
        try:
            Module(src).launch('t', block=(nthr, 1, 1), params=[a], mem=mem)
            got = None
        except SimError as x:
            got = str(x)
        if (want is None) != (got is None) or (want and want not in got):
            fails += 1
            print('check %d: want %r, got %r' % (k, want, got))
    try:
        Module(_HDR + '.visible .entry t()\n{\n .reg .b32 %r<2>;\n frob.b32 %r1, %r0;\n}\n')
        fails += 1
        print('parse: an unknown opcode was accepted')
    except PTXError as x:
        if 'frob' not in str(x):
            fails += 1
            print('parse: %s' % x)
    fails += _cl_selftest()
    fails += _g_selftest()
    print('ptxsim self-test: %d failures' % fails)
    return 1 if fails else 0


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(
        description='Parse PTX modules with the ptxsim interpreter: every instruction of '
                    'every entry is decoded, so an unsupported one is reported. Kernels '
                    'are run from Python (see the module docstring and tests/ptxsim_*.py).')
    ap.add_argument('files', nargs='*', help='.ptx files')
    ap.add_argument('--selftest', action='store_true',
                    help='run the built-in tests of instruction semantics and checks')
    ap.add_argument('--compile', action='store_true',
                    help='also compile every entry to Python')
    a = ap.parse_args(argv)
    rc = _selftest() if a.selftest else 0
    for f in a.files:
        try:
            m = Module(open(f).read(), f)
        except PTXError as x:
            print('%s: %s' % (f, x))
            rc = 1
            continue
        for name, e in m.entries.items():
            if a.compile:
                _Codegen(m, e).compile()
            print('%s: %s: %d instructions, %d registers, %d B static shared' % (
                f, name, len(e.ins) - 1, e.nregs - _R_FIRST, e.gen.static_smem))
    return rc


if __name__ == '__main__':
    sys.exit(main())
