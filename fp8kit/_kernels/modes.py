"""encode in the deterministic rounding modes (and nearest-even with ``flush_subnormals``)
as a Numba kernel run as native code (:class:`fp8kit._kernels.inplace.NumbaNative`):
:func:`fp8kit._kernels.rounding.encode_mode_kind`'s integer-only path (its deterministic
branch) and :func:`fp8kit._kernels.rounding.flush_code`, the mode compiled in (its masks
fold away).

The Numba kernel of :func:`fp8kit._kernels.codec.encode_mode_kernel` reads the mode at run
time and takes a key and an offset; this one computes the same codes from the same
parameter array (:func:`fp8kit._kernels.codec.pack_params`) for every format but the
unsigned power-of-two ones (float8_e8m0fnu: a path of its own).  Subnormal results come
from the integer path, never the FPU: no flush-to-zero mode can change them.  round_to in
these modes (:func:`round_mode_kernel`) looks the codes up in the decode table's byte
planes in the same pass, where the CPU has AVX512-VBMI and the values fit the planes;
elsewhere it keeps the Numba kernel (codes, then values).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numba import types

from ..formats import FloatFormat
from .bits import (
    _hardware_half,
    as_bits,
    as_float,
    cast_like,
    chunk_range,
    chunks,
    half_to_single_bits,
    load_bits,
    plane_lookup,
    prefer_512,
    shl,
    shr,
    span,
    stack_buffer,
)
from .codec import (
    _LOOKUP_BLOCK,
    LOAD_BF16,
    LOAD_DIRECT,
    LOAD_LUT,
    _array,
    _params,
    codes16_kind,
    load_o,
    load_p,
    load_q,
    mode_overflow,
    mode_plan,
    pack_params,
)
from .inplace import NumbaNative, single_to_half_bits
from .registry import source_version
from .rounding import KIND_DET, encode_mode_kind, flush_code, mode_kind, mode_masks

_DATA = {
    np.dtype(np.float32): 32,
    np.dtype(np.float64): 64,
    np.dtype(ml_dtypes.bfloat16): 16,
    np.dtype(np.float16): 16,
}


@functools.cache
def mode_kernel(fmt: FloatFormat, dtype: np.dtype, saturate, mode: int, flush: bool):
    """Kernel rounding ``dtype`` data to ``fmt`` codes in the deterministic ``mode`` (with
    ``flush``, subnormal results become zeros of their sign), with
    :func:`fp8kit._kernels.codec.encode_mode_kernel`'s call (its ``key`` and ``offset``
    arguments are not read: the caller passes only x, lut, table, out) and codes; None
    for float8_e8m0fnu (unsigned), the stochastic modes, or data the API widens to float64
    first (P3109's precision-1 formats of odd bias in the modes a tie's parity decides:
    the Numba kernel)."""
    dtype = np.dtype(dtype)
    if dtype not in _DATA or mode_kind(mode) != KIND_DET:
        return None
    pl = mode_plan(fmt, dtype, mode)
    if pl.strategy == "unsigned" or pl.widen_first:
        return None
    p, q = _params(fmt, pl.source, saturate, mode)
    o = mode_overflow(p, mode)
    params = pack_params(p, q, o, None, mode)
    width = 32 if pl.source == "float32" else 64
    data_bits = _DATA[dtype] if pl.load != LOAD_DIRECT else width
    half = pl.load == LOAD_LUT
    assert pl.load in (LOAD_DIRECT, LOAD_BF16, LOAD_LUT)
    code_bits = 8 if fmt.bits <= 8 else 16
    flags = (data_bits, width, code_bits, half, int(mode), bool(p[15]), bool(flush))
    sig = _sig(flags, np.uint8, code_bits)
    kernel = NumbaNative(_make_mode(*flags, use_magic=bool(p[7])), sig, ("encode_mode",) + flags,
                         params)  # fmt: skip
    kernel.xo = True  # (no lut or table: small calls pass x and out alone)
    kernel._use_magic = bool(p[7])
    return kernel


@functools.cache
def round_mode_kernel(fmt: FloatFormat, dtype: np.dtype, saturate, mode: int, flush: bool):
    """Kernel of round_to in the deterministic ``mode`` (with ``flush``, subnormal results
    become zeros of their sign): :func:`mode_kernel`'s codes, looked up in registers in the
    byte planes of ``fmt``'s decode table to ``dtype`` (its ``table`` argument:
    :func:`fp8kit._kernels.decode.format_planes`), one pass, with
    :func:`fp8kit._kernels.codec.encode_mode_kernel`'s call with ``table_dtype`` and
    ``planes``; None where :func:`mode_kernel` is, for formats wider than 8 bits, or
    where there are no planes (no AVX512-VBMI; float64 values of more than 4 mantissa bits).
    bfloat16 and float16 (16-bit codes) take no table: their values are the codes widened
    in the kernel (float32 and float64 data, the format's own dtype), or for data of the
    other 16-bit dtype rounded to it (nearest-even, as the decode table).
    The Numba kernel it stands for compiled in 0.3-0.7 s on a first call."""
    from .decode import format_planes

    dtype = np.dtype(dtype)
    codes = mode_kernel(fmt, dtype, saturate, mode, flush)
    if codes is None:
        return None
    if fmt.bits > 8:
        values16 = codes16_kind(fmt)
        if not values16:
            return None  # (a user's 16-bit format: no dtype of its own to widen from)
        if values16 == 1 and dtype == np.float16 and not _hardware_half():
            return None  # (float32 -> float16 would call a function the JIT lacks)
        flags = codes._key[1:] + (dtype.itemsize * 8, values16)
        out = dtype.itemsize * 8
        kernel = NumbaNative(_make_mode(*flags, use_magic=codes._use_magic),
                             _sig(flags, f"u{out // 8}", out), ("round_mode",) + flags,
                             codes._params)  # fmt: skip
        kernel.xo = True  # (no table: small calls pass x and out alone)
        return kernel
    if format_planes(fmt, dtype) is None:
        return None
    flags = codes._key[1:] + (dtype.itemsize * 8,)
    out = dtype.itemsize * 8
    kernel = NumbaNative(_make_mode(*flags, use_magic=codes._use_magic),
                         _sig(flags, np.uint8, out), ("round_mode",) + flags,
                         codes._params)  # fmt: skip
    kernel.planes = True
    return kernel


def _sig(flags: tuple, table, out_bits: int):
    """The signature of a kernel of :func:`_make_mode`'s ``flags`` (``table``: the dtype of
    its table argument; ``out_bits``: the width of what it writes)."""
    data_bits, width = flags[0], flags[1]
    return types.void(_array(f"u{width // 8}", True), _array(f"u{data_bits // 8}", True),
                      _array(np.uint32, True), _array(table, True),
                      _array(f"u{out_bits // 8}"), types.intp)  # fmt: skip


def _make_mode(
    data_bits, width, code_bits, half, mode, neg_zero, flush, out_bits=0, values16=0,
    use_magic=False,
):  # fmt: skip
    """The make function of :func:`mode_kernel`'s kernel (codes of ``code_bits``) or, with
    ``out_bits``, of :func:`round_mode_kernel`'s (the codes' values, ``out_bits`` wide, from
    the decode table's byte planes at the ``table`` argument; with ``values16`` 1 or 2,
    bfloat16's or float16's codes as values of the data's type: the codes themselves,
    widened exactly, or rounded to the other 16-bit type to nearest-even as the decode
    tables).  16-bit data: bfloat16 (float32's top half) or float16 (``half``: widened
    exactly), read as float32 bits."""
    version = source_version()
    load = (LOAD_LUT if half else LOAD_BF16) if data_bits == 16 else LOAD_DIRECT
    one32 = np.uint32(1)
    rnd = np.uint32(0)
    planes = bool(out_bits) and not values16
    code_type = np.uint8 if code_bits == 8 else np.uint16
    bf16_codes = values16 == 1
    to = {32: "float32", 64: "float64"}.get(out_bits, "float16" if half else "bfloat16")
    same = to == ("bfloat16" if bf16_codes else "float16")
    odd_add = np.uint32(0x7FFF)

    def make(parallel):
        def kernel(prm, x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            p = load_p(prm, use_magic, neg_zero)
            q = load_q(prm)
            o = load_o(prm)
            one = p[1]
            mm = mode_masks(mode, one)  # (the mode compiled in: they fold away)
            buf = stack_buffer(_LOOKUP_BLOCK, code_type)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()
                xc, oc = chunks(x, out, c, step)
                # (planes: codes of a block into a buffer, then their values)
                blk = _LOOKUP_BLOCK if planes else (xc.size if xc.size > 1 else 1)
                for b0 in range(0, xc.size, blk):
                    xs, os = span(xc, b0, b0 + blk), span(oc, b0, b0 + blk)
                    for j in range(xs.size):
                        v = load_bits(xs, j, lut, load, one32)  # (16-bit data widened)
                        code = encode_mode_kind(v, p, q, o, mode, KIND_DET, mm, rnd, 0)
                        if flush:  # (in code's type: see fp8kit._kernels.native._retyped)
                            code = cast_like(flush_code(code, p, q[5]), code)
                        if planes:
                            buf[j] = code
                        elif values16:
                            c16 = cast_like(code, np.uint16(0))
                            if same:
                                os[j] = c16
                            else:
                                if bf16_codes:
                                    b32 = shl(c16, 16, one32)
                                else:
                                    b32 = half_to_single_bits(c16)
                                if to == "float32":
                                    os[j] = b32
                                elif to == "float64":
                                    os[j] = as_bits(np.float64(as_float(b32)))
                                elif to == "float16":
                                    os[j] = single_to_half_bits(b32)
                                else:  # (float16 codes to bfloat16: nearest-even)
                                    odd = shr(b32, 16, one32) & one32
                                    up = cast_like(cast_like(b32 + odd_add, one32) + odd, one32)
                                    os[j] = cast_like(shr(up, 16, one32), np.uint16(0))
                        else:
                            os[j] = code
                    if planes:
                        plane_lookup(table, buf, os, xs.size)

        return kernel

    return make
