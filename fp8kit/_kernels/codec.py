"""Kernel factories for encode, decode and round-to-format.

Every kernel works on 1-D contiguous arrays with the signature
``kernel(x, lut, table, out, nchunks)``: a ``prange`` over ``nchunks`` contiguous chunks, each
a vectorized serial loop.  ``nchunks=1`` keeps a call on the calling thread (small arrays);
:mod:`fp8kit._parallel` picks the count.  Kernels are compiled for exactly one signature on
first use, cached on disk, and close over plain numbers only (never over other dispatchers),
so that Numba's disk cache can key them by those numbers.

The chunk loop indexes a slice from 0 (``for j in range(chunk.size)``): indexing the whole
array from ``lo`` makes Numba emit negative-index wraparound checks, which stop LLVM from
vectorizing (measured 3x slower).
"""

from __future__ import annotations

import functools
import types as pytypes
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numba import from_dtype, njit, prange, types

from ..formats import FloatFormat
from .bits import cast_like, chunk, encode_fast, encode_generic, encode_unsigned, prefer_512
from .rounding import _LO as _LO32
from .rounding import (
    _S32,
    STOCHASTIC,
    K,
    encode_mode,
    encode_stochastic_fast,
    encode_unsigned_mode,
    fill_block,
    parts,
    philox4x32_10,
    word_part,
)

# Source float layouts the kernels round from: (bits, mantissa bits, exponent bits, bias).
_SOURCES = {
    "float32": (32, 23, 8, 127),
    "float64": (64, 52, 11, 1023),
}

# How a kernel loads one input element before rounding it.
LOAD_DIRECT = 0  # the input's own bits (float32 or float64)
LOAD_BF16 = 1  # bfloat16 bits, widened exactly to float32 bits by a shift
LOAD_LUT = 2  # float16 bits, widened exactly to float32 bits through a 65,536-entry table

_CODE_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16)}
_BITS_DTYPE = {
    np.dtype(np.float64): np.dtype(np.uint64),
    np.dtype(np.float32): np.dtype(np.uint32),
    np.dtype(np.float16): np.dtype(np.uint16),
    np.dtype(ml_dtypes.bfloat16): np.dtype(np.uint16),
}
#: Output/input float dtypes the codec handles, and the unsigned dtype of their bits.
FLOAT_DTYPES = tuple(_BITS_DTYPE)


def bits_dtype(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype with the same width as a float dtype."""
    return _BITS_DTYPE[np.dtype(dtype)]


@dataclass(frozen=True)
class Plan:
    """How to round data of one input dtype to one format."""

    source: str  # "float32" or "float64": the layout the kernel rounds from
    load: int  # LOAD_* constant
    widen_first: bool  # the API must convert the input to float64 before the kernel
    strategy: str  # "fast" or "generic"


def _src_limits(source: str) -> tuple[int, int]:
    _, _, ebits, bias = _SOURCES[source]
    return 1 - bias, (1 << ebits) - 2 - bias


def _strategy(fmt: FloatFormat, source: str) -> str | None:
    """Which rounding algorithm is exact for fmt on this source, or None if it does not fit."""
    src_emin, src_emax = _src_limits(source)
    if fmt.minexp < src_emin or fmt.maxexp - 1 > src_emax:
        return None
    # The FPU trick sees source subnormals; only use it when they all round to zero in fmt,
    # so that a flush-to-zero/denormals-are-zero mode cannot change a result.
    if fmt.minexp == src_emin or fmt.minexp - fmt.mantissa_bits - 1 >= src_emin:
        return "fast"
    return "generic"


@functools.cache
def plan(fmt: FloatFormat, in_dtype: np.dtype) -> Plan:
    """Choose source layout, load step and algorithm for rounding ``in_dtype`` data to fmt."""
    in_dtype = np.dtype(in_dtype)
    if fmt.specials == "unsigned":
        # Powers of two only: one rule on the exponent field; float32 holds every value of
        # formats with bias <= 127 (2**-127 is a float32 subnormal, handled apart).
        if in_dtype != np.float64 and fmt.bias <= 127 and fmt.maxexp <= 128:
            load = {
                np.dtype(np.float32): LOAD_DIRECT,
                np.dtype(ml_dtypes.bfloat16): LOAD_BF16,
                np.dtype(np.float16): LOAD_LUT,
            }[in_dtype]
            return Plan("float32", load, False, "unsigned")
        return Plan("float64", LOAD_DIRECT, in_dtype != np.float64, "unsigned")
    if in_dtype == np.float64:
        return Plan("float64", LOAD_DIRECT, False, _strategy(fmt, "float64") or "generic")
    load = {
        np.dtype(np.float32): LOAD_DIRECT,
        np.dtype(ml_dtypes.bfloat16): LOAD_BF16,
        np.dtype(np.float16): LOAD_LUT,
    }[in_dtype]
    if _strategy(fmt, "float32") == "fast":
        return Plan("float32", load, False, "fast")
    return Plan("float64", LOAD_DIRECT, True, _strategy(fmt, "float64") or "generic")


def _params(fmt: FloatFormat, source: str, saturate: bool):
    width, src_m, src_e, src_bias = _SOURCES[source]
    u = np.uint32 if width == 32 else np.uint64
    f = np.float32 if width == 32 else np.float64
    wmask = (1 << width) - 1
    m = fmt.mantissa_bits
    sh = src_m - m
    rebias = src_bias - fmt.bias
    src_emin, _ = _src_limits(source)
    use_magic = fmt.minexp != src_emin
    magic = f(2.0 ** (fmt.minexp - m + src_m))
    max_mag = fmt.max_code
    nan_mag = fmt.nan_code
    inf_mag = fmt.inf_code if fmt.has_inf else nan_mag
    if not fmt.has_nan:
        # No Inf, no NaN: overflow and Inf saturate whatever the flag says, and NaN gives
        # zero with the opposite sign (the sign bit as "magnitude", xor-ed with the sign):
        # what ml_dtypes (and so the ONNX reference) does for float6/float4.
        nan_mag = fmt.sign_mask
        inf_mag = max_mag
        saturate = True
    if saturate:
        ovf = max_mag
        # ONNX Cast-21, saturate=True: "+/- Inf -> +/- FLT_MAX" for E4M3FN and E5M2, but
        # "NaN" for the fnuz formats.
        inf_res = nan_mag if fmt.specials == "fnuz" else max_mag
        if fmt.specials == "finite":
            inf_res = max_mag
    else:
        ovf = inf_res = inf_mag
    p = (
        u((1 << (width - 1)) - 1),  # abs_mask
        u(1),  # one
        u(sh),
        u(((1 << (sh - 1)) - 1 - (rebias << src_m)) & wmask),  # rb: rounding bias and rebias
        u(((fmt.minexp + src_bias) << src_m) if use_magic else 0),  # min_normal
        magic,
        u(int(np.array(magic).view(u))),  # magic_bits
        bool(use_magic),
        u(((1 << src_e) - 1) << src_m),  # src_inf
        u(max_mag),
        u(ovf),
        u(inf_res),
        u(nan_mag),
        u(1 << (width - 1)),  # sign_bit
        u(width - fmt.bits),  # sign_shift
        bool(fmt.has_negative_zero),
        u(0),  # zero
    )
    q = (
        u(src_m),
        u((1 << src_m) - 1),
        u(1 << src_m),
        u(fmt.minexp + src_bias),  # biased source exponent of fmt's smallest normal
        u(src_m + 2),  # larger shifts all give zero
        u(m),
        u(sh),
    )
    if fmt.specials == "unsigned":
        rebias = src_bias - fmt.bias
        q = (
            u((1 << (width - 1)) - 1),  # abs_mask
            u(1),
            u(src_m),
            u(1 << (src_m - 1)),  # half: ties round up (away from zero), as ml_dtypes does
            u(rebias),
            u(((1 << src_e) - 1) << src_m),  # src_inf
            u(fmt.max_code),
            u(fmt.max_code if saturate else nan_mag),  # finite overflow
            u(fmt.max_code if saturate else nan_mag),  # +Inf
            u(nan_mag),
            # Below 2**(1 - bias), ml_dtypes rounds as if code 0 were a subnormal of
            # quantum 2**(1 - bias): anything above 2**-bias gives code 1.
            u(int(np.array(2.0 ** (1 - fmt.bias), f).view(u))),
            u(int(np.array(2.0**-fmt.bias, f).view(u))),
        )
    return p, q


@functools.cache
def source_version() -> int:
    """A hash of the kernel sources.  Numba's disk cache only notices edits to the file of
    the cached function itself, not to the helpers it inlines; every kernel closes over this
    number so that an edit to any kernel source invalidates the cached machine code."""
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return int.from_bytes(digest.digest()[:6], "little") + 1


def _array(dtype, readonly=False):
    return types.Array(from_dtype(np.dtype(dtype)), 1, "C", readonly=readonly)


def _signature(in_bits, lut_dtype, table_dtype, out_dtype):
    return types.void(
        _array(in_bits, readonly=True),
        _array(lut_dtype, readonly=True),
        _array(table_dtype, readonly=True),
        _array(out_dtype),
        types.intp,
    )


_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@functools.cache
def f16_lut() -> np.ndarray:
    """float16 bits -> float32 bits, exact (float16 widens to float32 without rounding)."""
    lut = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    lut.flags.writeable = False
    return lut.view(np.uint32)


_DUMMY = {}


def dummy(dtype) -> np.ndarray:
    """A one-element read-only array standing in for an unused kernel argument."""
    dtype = np.dtype(dtype)
    if dtype not in _DUMMY:
        a = np.zeros(1, dtype)
        a.flags.writeable = False
        _DUMMY[dtype] = a
    return _DUMMY[dtype]


class Kernel:
    """A serial and a parallel build of one kernel function, each compiled on first use.

    The serial build is used for small arrays and wherever threads are unsafe (a forked
    child of a process that already ran OpenMP threads); both come from the same source.
    """

    def __init__(self, make, sig):
        self._make = make
        self._sig = sig
        self._builds: dict[bool, object] = {}

    def build(self, parallel: bool):
        if parallel not in self._builds:
            # The flag is a closure variable of the function, so the two builds have distinct
            # disk-cache keys (Numba's key ignores the parallel option itself).
            func = self._make(parallel)
            try:
                built = njit(self._sig, parallel=parallel, **_JIT)(func)
            except RuntimeError as exc:  # no writable cache location (read-only install)
                if "cannot cache" not in str(exc):
                    raise
                built = njit(self._sig, parallel=parallel, **{**_JIT, "cache": False})(func)
            self._builds[parallel] = built
        return self._builds[parallel]

    def serial(self, x, lut, table, out) -> None:
        self.build(False)(x, lut, table, out, 1)


def with_globals(kernel, consts, **helpers):
    """``kernel`` with per-kernel Numba helpers visible as its globals, not closure cells.

    Numba's disk cache keys a kernel by its bytecode and the pickled values of its closure
    cells; a dispatcher in a cell pickles with a random id, so such a kernel would get a new
    key, and compile again, in every process.  ``kernel`` names each helper as a global
    (so the name must not be bound in an enclosing function), and its closure must hold
    ``consts``, everything the helpers depend on, so that the key still tells kernels apart.
    """
    assert any(c.cell_contents is consts for c in kernel.__closure__ or ())
    scope = {**kernel.__globals__, **helpers}
    func = pytypes.FunctionType(
        kernel.__code__, scope, kernel.__name__, kernel.__defaults__, kernel.__closure__
    )
    func.__qualname__ = kernel.__qualname__
    func.__module__ = kernel.__module__
    return func


@functools.cache
def encode_kernel(
    fmt: FloatFormat, in_dtype: np.dtype, saturate: bool, strategy=None, table_dtype=None
):
    """Kernel rounding ``in_dtype`` data to ``fmt`` codes.

    With ``table_dtype`` set, the kernel instead writes ``table[code]`` (a decode table of
    that dtype's bits): that is round-to-format in one pass.
    Returns ``(kernel, plan)``; ``strategy`` forces "generic" (used by tests).
    """
    pl = plan(fmt, np.dtype(in_dtype))
    strategy = strategy or pl.strategy
    p, q = _params(fmt, pl.source, saturate)
    load = pl.load
    generic = strategy == "generic"
    unsigned = strategy == "unsigned"
    lookup = table_dtype is not None
    width = _SOURCES[pl.source][0]
    in_bits = {LOAD_DIRECT: np.dtype(f"uint{width}"), LOAD_BF16: np.uint16, LOAD_LUT: np.uint16}[
        load
    ]
    out_dtype = np.dtype(table_dtype) if lookup else _CODE_DTYPES[8 if fmt.bits <= 8 else 16]
    sig = _signature(in_bits, np.uint32, out_dtype if lookup else np.uint8, out_dtype)
    version = source_version()

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # never true; see source_version
                return
            one = p[1]
            step = (x.size + nchunks - 1) // nchunks
            for c in prange(nchunks):
                xc, oc = chunk(x, c, step), chunk(out, c, step)
                for j in range(xc.size):
                    if load == LOAD_BF16:
                        v = cast_like(cast_like(xc[j], one) << 16, one)
                    elif load == LOAD_LUT:
                        v = lut[xc[j]]
                    else:
                        v = xc[j]
                    if unsigned:
                        code = encode_unsigned(v, q)
                    elif generic:
                        code = encode_generic(v, p, q)
                    else:
                        code = encode_fast(v, p)
                    if lookup:
                        oc[j] = table[code]
                    else:
                        oc[j] = code

        return kernel

    return Kernel(make, sig), pl


@functools.cache
def lookup_kernel(code_dtype: np.dtype, table_dtype: np.dtype, bf16_shift: bool = False) -> Kernel:
    """Kernel writing ``table[x[i]]``: decoding is a table lookup (256 or 65,536 entries).

    With ``bf16_shift``, bfloat16 -> float32 is computed instead (bits << 16, NaN made
    canonical): a 65,536-entry table does not stay in L1 and the gather is 1.4x slower.
    """
    sig = _signature(code_dtype, np.uint32, table_dtype, table_dtype)
    version = source_version()
    if bf16_shift:
        return Kernel(_make_bf16_to_f32, sig)

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            step = (x.size + nchunks - 1) // nchunks
            for c in prange(nchunks):
                xc, oc = chunk(x, c, step), chunk(out, c, step)
                for j in range(xc.size):
                    oc[j] = table[xc[j]]

        return kernel

    return Kernel(make, sig)


def _make_bf16_to_f32(parallel):
    version = source_version()
    one = np.uint32(1)
    abs_mask = np.uint32(0x7FFF)
    inf = np.uint32(0x7F80)
    qnan = np.uint32(0x7FC00000)
    sign = np.uint32(0x8000)

    def kernel(x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # see source_version
            return
        step = (x.size + nchunks - 1) // nchunks
        for c in prange(nchunks):
            xc, oc = chunk(x, c, step), chunk(out, c, step)
            for j in range(xc.size):
                v = cast_like(xc[j], one)
                nan = cast_like(cast_like(v & sign, one) << 16, one) | qnan
                oc[j] = nan if cast_like(v & abs_mask, one) > inf else cast_like(v << 16, one)

    return kernel


def mode_overflow(p, mode: int):
    """(overflow code of positive values, of negative values) in a rounding mode: directed
    modes stop at +-max on the side they round toward zero."""
    from .rounding import TOWARD_NEGATIVE, TOWARD_POSITIVE, TOWARD_ZERO

    u = type(p[1])
    ovf, max_mag = p[10], p[9]
    o = {
        TOWARD_ZERO: (max_mag, max_mag),
        TOWARD_POSITIVE: (ovf, max_mag),
        TOWARD_NEGATIVE: (max_mag, ovf),
    }.get(mode, (ovf, ovf))
    return (u(o[0]), u(o[1]))


def stochastic_params(fmt: FloatFormat, source: str, random_bits: int):
    """Constants of :func:`fp8kit._kernels.rounding.encode_stochastic_fast` for ``fmt`` on
    ``source`` bits, or None where it would not be exact: it needs ``random_bits`` at most
    the ``sh`` bits dropped in the normal range, the format's subnormal spacing over
    ``2**sh`` a normal source number, and every source subnormal below ``2**-random_bits`` of
    that spacing, where no rule rounds it up: so a flush-to-zero or denormals-are-zero mode
    set by another library cannot change a result."""
    width, src_m, _, src_bias = _SOURCES[source]
    u = np.uint32 if width == 32 else np.uint64
    f = np.float32 if width == 32 else np.float64
    src_emin, _ = _src_limits(source)
    m = fmt.mantissa_bits
    sh = src_m - m
    if fmt.specials == "unsigned" or _strategy(fmt, source) is None or random_bits > sh:
        return None
    use_magic = fmt.minexp != src_emin
    if use_magic and (fmt.minexp - src_m < src_emin or fmt.minexp - m - random_bits < src_emin):
        return None
    rebias = src_bias - fmt.bias
    return (
        bool(use_magic),
        f(2.0 ** (src_m - fmt.minexp) if use_magic else 1.0),  # |x| < 2**minexp -> fixed point
        u(int(np.array(f(2.0**fmt.minexp)).view(u))),  # bits of the smallest normal
        u((-(rebias << src_m)) & ((1 << width) - 1)),
        u(sh),
    )


@njit(inline="always")
def load_bits(xs, j, lut, load, one):
    """Element ``j`` of ``xs`` as the source float's bits, by the kernel's ``load`` rule."""
    if load == LOAD_BF16:
        return cast_like(cast_like(xs[j], one) << 16, one)
    if load == LOAD_LUT:
        return lut[xs[j]]
    return xs[j]


@njit(inline="always")
def store_code(os, j, table, code, lookup):
    """Store a code, or with ``lookup`` the value ``table[code]``, at ``os[j]``."""
    if lookup:
        os[j] = table[code]
    else:
        os[j] = code


@functools.cache
def encode_mode_kernel(
    fmt: FloatFormat,
    in_dtype: np.dtype,
    saturate: bool,
    mode: int,
    random_bits: int = 32,
    table_dtype=None,
):
    """:func:`encode_kernel` for the rounding modes of :mod:`fp8kit._kernels.rounding`.

    Signature ``(x, lut, table, out, key, nchunks)``: ``key[:2]`` is the Philox key of
    stochastic rounding (unused otherwise), ``key[2:4]`` the flat index of ``x[0]`` (a
    multiple of the block of 4 * K * parts(random_bits) elements; 0 but for Dask blocks);
    element ``i`` of chunk ``c`` has index ``c * step + i`` in the flat (C-order) array.
    Returns ``(kernel, plan)``.
    """
    pl = plan(fmt, np.dtype(in_dtype))
    p, q = _params(fmt, pl.source, saturate)
    o = mode_overflow(p, mode)
    load = pl.load
    unsigned = pl.strategy == "unsigned"
    stochastic = mode == STOCHASTIC
    sp = stochastic_params(fmt, pl.source, random_bits) if stochastic else None
    fast = sp is not None
    sp = sp if fast else (False,)
    lookup = table_dtype is not None
    width = _SOURCES[pl.source][0]
    in_bits = {LOAD_DIRECT: np.dtype(f"uint{width}"), LOAD_BF16: np.uint16, LOAD_LUT: np.uint16}[
        load
    ]
    out_dtype = np.dtype(table_dtype) if lookup else _CODE_DTYPES[8 if fmt.bits <= 8 else 16]
    sig = types.void(
        _array(in_bits, readonly=True),
        _array(np.uint32, readonly=True),
        _array(out_dtype if lookup else np.uint8, readonly=True),
        _array(out_dtype),
        _array(np.uint32, readonly=True),
        types.intp,
    )
    version = source_version()
    rbits = int(random_bits)
    split = parts(rbits)
    # closure constants, not locals of the kernel: a prange body receives the kernel's
    # locals as run-time arguments, and the stream loop below must unroll
    streams = 4 * split
    block = streams * K
    # LLVM unrolls the stream loop of the fused path up to 8 streams (16 did not unroll,
    # and the loop then did not vectorize: 10x slower); 8-bit words use the buffered path
    fused = streams <= 8

    def make(parallel):
        # The kernel calls module-level functions only: a kernel closing over a dispatcher
        # (such as a per-kernel inline helper) gets a new disk-cache key in every process,
        # because a dispatcher pickles with a random id, so it would compile every time.
        # The format-dependent choice (unsigned, fast) is a branch on a closure constant,
        # pruned before typing; it appears once per loop below.
        def kernel(x, lut, table, out, key, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            one = p[1]
            k0, k1 = key[0], key[1]
            n = x.size
            if not stochastic:
                step = (n + nchunks - 1) // nchunks
                for c in prange(nchunks):
                    prefer_512()  # see bits.prefer_512
                    xs, os = chunk(x, c, step), chunk(out, c, step)
                    for j in range(xs.size):
                        v = load_bits(xs, j, lut, load, one)
                        if unsigned:
                            code = encode_unsigned_mode(v, q, mode, k0, rbits)
                        else:
                            code = encode_mode(v, p, q, o, mode, k0, rbits)
                        store_code(os, j, table, code, lookup)
                return
            # stochastic: chunks of whole blocks of 4 * K * split elements (see rounding.K
            # for which element uses which bits of which Philox call); key[2:4] (low, high
            # word) is the flat index of x[0], a multiple of the block (Dask blocks)
            zero = k0 - k0
            base = ((np.uint64(key[3]) << np.uint64(32)) | np.uint64(key[2])) // np.uint64(block)
            step = ((n + nchunks - 1) // nchunks + block - 1) // block * block
            for c in prange(nchunks):
                prefer_512()  # see bits.prefer_512 (Philox's 64-bit products gain most)
                buf = np.empty((4, K), np.uint32)
                b = c * step
                hi = min(b + step, n)
                while fused and b + block <= hi:
                    # a whole block: call g's four words serve element g of each of the
                    # block's 4 * split runs, in one vectorized loop; generating and using
                    # the words together overlaps Philox's arithmetic with the memory
                    # traffic (measured 10% faster than a pass per block through a buffer)
                    xs, os = x[b : b + block], out[b : b + block]
                    first = (np.uint64(b // block) + base) * np.uint64(K)
                    for g in range(K):
                        ctr = first + np.uint64(g)
                        ws = philox4x32_10(
                            cast_like(ctr & _LO32, k0), cast_like(ctr >> _S32, k0), zero, zero,
                            k0, k1,
                        )  # fmt: skip
                        for s in range(streams):
                            j = s * K + g
                            v = load_bits(xs, j, lut, load, one)
                            rnd = word_part(ws[s // split], cast_like(s % split, k0), split)
                            if unsigned:
                                code = encode_unsigned_mode(v, q, mode, rnd, rbits)
                            elif fast:
                                code = encode_stochastic_fast(v, p, sp, o, rnd, rbits)
                            else:
                                code = encode_mode(v, p, q, o, mode, rnd, rbits)
                            store_code(os, j, table, code, lookup)
                    b += block
                while b < hi:
                    # a partial block (the array's last), or any block where the fused loop
                    # would not unroll: its words through a buffer, one pass per block
                    fill_block(buf, np.uint64(b // block) + base, k0, k1)
                    for t in range(4):
                        for h in range(split):
                            s0 = b + (t * split + h) * K
                            if s0 < hi:
                                s1 = min(s0 + K, hi)
                                xs, os, words = x[s0:s1], out[s0:s1], buf[t]
                                for j in range(xs.size):
                                    v = load_bits(xs, j, lut, load, one)
                                    rnd = word_part(words[j], cast_like(h, k0), split)
                                    if unsigned:
                                        code = encode_unsigned_mode(v, q, mode, rnd, rbits)
                                    elif fast:
                                        code = encode_stochastic_fast(v, p, sp, o, rnd, rbits)
                                    else:
                                        code = encode_mode(v, p, q, o, mode, rnd, rbits)
                                    store_code(os, j, table, code, lookup)
                    b += block

        return kernel

    return Kernel(make, sig), pl
