"""CUDA kernels: thin grid-stride loops around the CPU kernels' scalar code.

Each kernel body only indexes arrays and calls one ``@njit`` element function on the loaded
element, so that

* on a GPU, numba.cuda compiles the CPU kernels' scalar code (``encode_fast``,
  ``encode_generic``, ``round_in_place``, ...) for the device; FakeConvert's element is a
  twin of the CPU kernel's loop body (:mod:`fp8kit.cuda._scalar`);
* under the CUDA simulator, where a kernel body runs as Python, the element function still
  runs compiled (for the CPU): the body does no arithmetic on numpy scalars, whose widths
  and overflow rules differ from Numba's (a ``uint8 << 16`` is 0 in numpy).

The loaded value goes into the element function with its array's exact type, and what comes
back is only stored or used as an index.  Element functions are closures over plain
numbers, built per configuration, so branches on the configuration fold at compile time
(also keeping compile times low).  Kernels compile on first use; they are not cached on disk
(numba.cuda's cache could not be tested without a GPU).
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np
from numba import cuda, njit

from .._kernels.bits import cast_like, encode_fast, encode_generic, encode_unsigned
from .._kernels.codec import (
    LOAD_BF16,
    LOAD_DIRECT,
    LOAD_LUT,
    _params,
    check_unsigned_mode,
    mode_overflow,
    plan,
)
from .._kernels.rounding import (
    encode_mode,
    encode_unsigned_mode,
    flush_code,
    is_stochastic,
    parts,
    random_word,
)
from ..formats import FloatFormat
from ._scalar import f16_to_f32_bits, fake_element, widen_bits

_ONE32 = np.uint32(1)
_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)


@functools.cache
def encode_element(fmt: FloatFormat, in_dtype: np.dtype, saturate: bool):
    """``element(x)`` -> code, for one element of ``in_dtype`` bits, by the CPU kernel's
    plan: bfloat16 widened to float32 by a shift, float16 exactly by arithmetic (the CPU
    uses a table), and to float64 inside the element where the CPU widens the array first.
    Returns ``(element, plan)``.
    """
    in_dtype = np.dtype(in_dtype)
    pl = plan(fmt, in_dtype)
    p, q = _params(fmt, pl.source, saturate)
    load = {_F16: LOAD_LUT, _BF16: LOAD_BF16}.get(in_dtype, LOAD_DIRECT)
    widen, generic = pl.widen_first, pl.strategy == "generic"
    unsigned = pl.strategy == "unsigned"

    @njit(inline="always", error_model="numpy")
    def element(x):
        if load == LOAD_BF16:
            v = cast_like(cast_like(x, _ONE32) << 16, _ONE32)
        elif load == LOAD_LUT:
            v = f16_to_f32_bits(x)
        else:
            v = x
        if widen:
            w = widen_bits(v)
            if unsigned:
                return encode_unsigned(w, q)
            return encode_generic(w, p, q) if generic else encode_fast(w, p)
        if unsigned:
            return encode_unsigned(v, q)
        if generic:
            return encode_generic(v, p, q)
        return encode_fast(v, p)

    return element, pl


@functools.cache
def mode_element(
    fmt: FloatFormat,
    in_dtype: np.dtype,
    saturate: bool,
    mode: int,
    rbits: int,
    flush: bool = False,
    daz: bool = False,
):
    """``element(x, i, k0, k1)`` -> code in a rounding mode of :mod:`fp8kit._kernels.rounding`
    (not nearest-even), by the CPU's scalar code; ``i`` is the element's C-order index and
    (k0, k1) the Philox key of stochastic rounding: each thread computes its own element's
    random word (:func:`fp8kit._kernels.rounding.random_word`), the word the CPU's blocked
    generator gives that index.  ``flush``: subnormal results become zeros of their sign
    (``flush_subnormals``); ``daz``: inputs subnormal in their own dtype are taken as zeros
    of their sign (``flush_subnormal_inputs``), as the CPU's pre-pass
    (:func:`fp8kit._args.flush_inputs`).  Returns ``(element, plan)``."""
    in_dtype = np.dtype(in_dtype)
    pl = plan(fmt, in_dtype)
    p, q = _params(fmt, pl.source, saturate, mode)
    o = mode_overflow(p, mode)
    load = {_F16: LOAD_LUT, _BF16: LOAD_BF16}.get(in_dtype, LOAD_DIRECT)
    widen, unsigned = pl.widen_first, pl.strategy == "unsigned"
    check_unsigned_mode(fmt, mode)
    flush = bool(flush) and not unsigned
    ib = in_dtype.itemsize * 8
    ub = np.dtype(f"uint{ib}").type
    in_m = {_F16: 10, _BF16: 7}.get(in_dtype, np.finfo(in_dtype).nmant if ib > 16 else 0)
    d_abs, d_sign, d_lim = ub((1 << (ib - 1)) - 1), ub(1 << (ib - 1)), ub(1 << in_m)
    d_zero = ub(0)
    stochastic, split = is_stochastic(mode), parts(rbits)

    @njit(inline="always", error_model="numpy")
    def element(x, i, k0, k1):
        if daz:
            mag = x & d_abs
            x = (x & d_sign) if (mag != d_zero and mag < d_lim) else x
        if load == LOAD_BF16:
            v = cast_like(cast_like(x, _ONE32) << 16, _ONE32)
        elif load == LOAD_LUT:
            v = f16_to_f32_bits(x)
        else:
            v = x
        rnd = random_word(np.uint64(i), k0, k1, split) if stochastic else k0
        if widen:
            w = widen_bits(v)
            if unsigned:
                return encode_unsigned_mode(w, q, mode, rnd, rbits)
            code = encode_mode(w, p, q, o, mode, rnd, rbits)
        elif unsigned:
            return encode_unsigned_mode(v, q, mode, rnd, rbits)
        else:
            code = encode_mode(v, p, q, o, mode, rnd, rbits)
        if flush:
            return flush_code(code, p, q[5])
        return code

    return element, pl


@functools.cache
def encode_mode_kernel(
    fmt: FloatFormat,
    in_dtype: np.dtype,
    saturate: bool,
    mode: int,
    rbits: int,
    lookup: bool,
    flush: bool = False,
    daz: bool = False,
):
    """Kernel ``(x, table, out, k0, k1)``: :func:`encode_kernel` in a rounding mode (and
    the flush options, see :func:`mode_element`)."""
    element, pl = mode_element(fmt, in_dtype, saturate, mode, rbits, flush, daz)

    @cuda.jit
    def kernel(x, table, out, k0, k1):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            code = element(x[i], i, k0, k1)
            if lookup:
                out[i] = table[code]
            else:
                out[i] = code

    return kernel, pl


@functools.cache
def encode_kernel(fmt: FloatFormat, in_dtype: np.dtype, saturate: bool, lookup: bool):
    """Kernel ``(x, table, out)``: ``out[i] = code(x[i])``, or ``table[code]`` with
    ``lookup`` (round-to-format).  Returns ``(kernel, plan)``."""
    element, pl = encode_element(fmt, in_dtype, saturate)

    @cuda.jit
    def kernel(x, table, out):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            code = element(x[i])
            if lookup:
                out[i] = table[code]
            else:
                out[i] = code

    return kernel, pl


@njit(inline="always")
def _pack4(a, b, c, d):
    """Four 8-bit codes as one little-endian uint32 (a first)."""
    return (
        np.uint32(a)
        | (np.uint32(b) << np.uint32(8))
        | (np.uint32(c) << np.uint32(16))
        | (np.uint32(d) << np.uint32(24))
    )


@njit(inline="always")
def _byte(w, k):
    """Byte ``k`` (0 = lowest) of the uint32 ``w``."""
    return (w >> np.uint32(8 * k)) & np.uint32(0xFF)


@njit(inline="always")
def _pair(lo, hi):
    """Two uint32 as one little-endian uint64."""
    return np.uint64(lo) | (np.uint64(hi) << np.uint64(32))


@njit(inline="always")
def _quad16(a, b, c, d):
    """Four uint16 as one little-endian uint64."""
    return (
        np.uint64(a)
        | (np.uint64(b) << np.uint64(16))
        | (np.uint64(c) << np.uint64(32))
        | (np.uint64(d) << np.uint64(48))
    )


@functools.cache
def encode_packed_kernel(fmt: FloatFormat, in_dtype: np.dtype, saturate: bool):
    """Kernel ``(x, out4, out)``: :func:`encode_kernel` for 8-bit codes, four elements per
    thread and step, stored as one uint32.  ``out4`` is the 4-byte-aligned codes array
    ``out`` up to a multiple of 4 bytes, as uint32; the rest is stored byte by byte.

    On an H100 (268M float32 -> float8_e4m3fn) byte stores ran at 2.0 TB/s and these at
    2.9 TB/s, the device-to-device copy's rate; a step of four loads x[i..i+3] of one
    thread, which the L1 cache serves from the lines the warp's first load brought in."""
    element, _ = encode_element(fmt, in_dtype, saturate)

    @cuda.jit
    def kernel(x, out4, out):
        start, step = cuda.grid(1), cuda.gridsize(1)
        for j in range(start, out4.size, step):
            i = 4 * j
            out4[j] = _pack4(element(x[i]), element(x[i + 1]), element(x[i + 2]),
                             element(x[i + 3]))  # fmt: skip
        for i in range(4 * out4.size + start, x.size, step):
            out[i] = element(x[i])

    return kernel


@functools.cache
def lookup_packed_kernel(table_dtype: np.dtype):
    """Kernel ``(codes, codes4, table, out, out8)``: :func:`lookup_kernel` for 8-bit codes,
    four per thread and step, read as one uint32 (``codes4``, the 4-byte-aligned codes up to
    a multiple of 4) and stored as uint64 words (``out8``, the 8-byte-aligned values as
    uint64: one word per four 16-bit values, two per four 32-bit values, four per four
    64-bit values); the rest element by element.  On an H100 (268M codes to float32)
    byte loads with 4-byte stores ran at 2.0 TB/s, these at 2.8 TB/s."""
    size = np.dtype(table_dtype).itemsize

    @cuda.jit
    def kernel(codes, codes4, table, out, out8):
        start, step = cuda.grid(1), cuda.gridsize(1)
        for j in range(start, codes4.size, step):
            w = codes4[j]
            a, b = table[_byte(w, 0)], table[_byte(w, 1)]
            c, d = table[_byte(w, 2)], table[_byte(w, 3)]
            if size == 2:
                out8[j] = _quad16(a, b, c, d)
            elif size == 4:
                out8[2 * j] = _pair(a, b)
                out8[2 * j + 1] = _pair(c, d)
            else:
                out8[4 * j], out8[4 * j + 1], out8[4 * j + 2], out8[4 * j + 3] = a, b, c, d
        for i in range(4 * codes4.size + start, codes.size, step):
            out[i] = table[codes[i]]

    return kernel


@functools.cache
def lookup_kernel():
    """Kernel ``(codes, table, out)``: ``out[i] = table[codes[i]]`` (decoding).  The tables
    are padded to 256 or 65,536 entries, so every uint8/uint16 code is in bounds."""

    @cuda.jit
    def kernel(x, table, out):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            out[i] = table[x[i]]

    return kernel


@functools.cache
def fake_kernel(
    fmt: FloatFormat,
    data_dtype: np.dtype,
    has_shift: bool,
    openvino: int,
    scale_array: bool,
    shift_array: bool,
):
    """Kernel ``(x, scale, shift, s_val, h_val, n1, n2, n3, st0, st1, st2, st3, out)``.

    x/out: data bits, C order.  An operand given as an array (``scale_array``,
    ``shift_array``) is read through its strides (in elements) of the data's shape merged
    to 4 dimensions, (n0, n1, n2, n3); one given as a value is ``s_val``/``h_val`` (bits of
    the data type) and its array argument is unused.  Scale indices come from the flat
    index: three divisions per element, none for values.
    """
    element = fake_element(fmt, data_dtype, has_shift, openvino)
    indexed = scale_array or (has_shift and shift_array)

    @cuda.jit
    def kernel(x, scale, shift, s_val, h_val, n1, n2, n3, st0, st1, st2, st3, out):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            k = 0
            if indexed:
                r = i // n3
                k = (i - r * n3) * st3
                r2 = r // n2
                k += (r - r2 * n2) * st2
                r3 = r2 // n1
                k += (r2 - r3 * n1) * st1 + r3 * st0
            s = scale[k] if scale_array else s_val
            h = shift[k] if (has_shift and shift_array) else h_val
            out[i] = element(x[i], s, h)

    return kernel


@functools.cache
def prepare_kernel(to32: bool, inf_to: float):
    """Kernel ``(x, out)`` of Cast's default before encoding: ``out[i]`` is ``x[i]`` rounded
    to float32 (``to32``: float64 data reach 16-bit and float8 types through float32, as
    ONNX Runtime) and, if ``inf_to`` is nonzero, +-Inf replaced by +-``inf_to`` (the +-max
    of a FNUZ float8 type with saturate, as ONNX's conformance suite)."""

    @njit
    def element(v):
        w = np.float32(v) if to32 else v
        if inf_to != 0.0 and math.isinf(w):  # (numba-cuda has no np.isinf)
            return -inf_to if w < 0 else inf_to
        return w

    @cuda.jit
    def kernel(x, out):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            out[i] = element(x[i])

    return kernel
