"""Decode without a table read per element: byte permutes of the table held in registers,
or arithmetic on the code's fields.

A 256-entry table read is a gather, which LLVM's cost model declines here: the table kernel
stays a scalar loop at about one element per cycle (decode float8_e4m3fn -> float32, 16M
elements, one thread: 0.41-0.52 of the streaming limit).

Where the CPU has AVX512-VBMI, :func:`plane_kernel` looks the codes up in the table itself:
a format's values have at most 7 mantissa bits, so the top 16 bits of a float32 (or float16,
bfloat16; float64 up to 4 mantissa bits) entry hold all of it, split into two 256-byte
planes in eight vector registers, and vpermi2b looks up 64 codes in 128 bytes of a plane per
instruction.  Elsewhere, for float32, :func:`decode_f32_kernel` computes the value: the
fields of a code map to float32 bits with a shift and an add (normal codes), an integer ->
float conversion and a multiply by a power of two (subnormal codes: exact, and the product
is a float32 normal, so a flush-to-zero/denormals-are-zero mode cannot change it) and three
compares for the special codes: every step is a vector instruction on 16 lanes.  Either
way the format's constants are a run-time argument, so one compiled kernel (per code and
output width) serves every format, and a format a kernel does not reproduce exactly (run
once on every code of the format and compared with the table) keeps the table kernel.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import types

from .._parallel import NO_STREAM
from ..formats import FloatFormat
from .bits import (
    as_bits,
    as_float,
    block_end,
    byte_address,
    cast_like,
    chunk_range,
    chunks,
    cpu_has,
    emit_plane_lookup,
    prefer_512,
    shl,
    span,
    stack_buffer,
    store_fence,
    stream_block,
    table_planes,
)
from .codec import _STREAM_BLOCK, STREAM_MIN_TRAFFIC, _array, dummy, lookup_kernel
from .inplace import NumbaNative
from .native import NativeKernel, element_range
from .registry import source_version

_INF32 = np.uint32(0x7F800000)
_QNAN32 = np.uint32(0x7FC00000)
_NEVER = 0xFFFFFFFF  # a code no format has: disables a special-code rule
_NPARAMS = 11


def _params(fmt: FloatFormat) -> list[int] | None:
    """The kernel's constants for ``fmt`` (see :func:`_model`), or None when the formula does
    not apply (wider than 16 bits, or subnormals below float32's normal range)."""
    if fmt.bits > 16 or fmt.mantissa_bits > 23:
        return None
    m, bias = fmt.mantissa_bits, fmt.bias
    sub_exp = 1 - bias - m  # the subnormal spacing
    if m > 0 and sub_exp < -126:
        return None
    specials = fmt.specials
    # one code (of the magnitude) with a value of its own: +Inf, or for the unsigned
    # power-of-two formats code 0 (no zero: 2**-bias, a float32 subnormal for e8m0)
    if fmt.has_inf:
        sp_code, sp_bits = fmt.inf_code, int(_INF32)
    elif specials == "unsigned":
        sp_code, sp_bits = 0, int(np.float32(2.0**-bias).view(np.uint32))
    else:
        sp_code, sp_bits = _NEVER, 0
    # with no mantissa bits the only subnormal code is zero: a scale of 1 keeps the product
    # exact without a subnormal constant
    scale = np.float32(2.0**sub_exp) if m > 0 else np.float32(1.0)
    if specials == "ieee":
        nan_lo = fmt.inf_code + 1
    elif specials == "fn" or not fmt.signed:
        nan_lo = fmt.magnitude_mask  # all ones (fn: of the magnitude)
    else:
        nan_lo = _NEVER
    nz_code = fmt.sign_mask if specials in ("fnuz", "signed_finite", "extended") else _NEVER
    return [
        fmt.magnitude_mask,
        0x80000000 if fmt.signed else 0,
        32 - fmt.bits,  # sign bit -> bit 31
        23 - m,
        ((127 - bias) << 23) & 0xFFFFFFFF,
        1 << m,  # smallest normal magnitude code (unsigned formats: 1)
        int(scale.view(np.uint32)),
        sp_code,
        sp_bits,
        nan_lo,
        nz_code,
    ]


@functools.cache
def decode_params(fmt: FloatFormat) -> np.ndarray | None:
    """The read-only constants of :func:`decode_f32_kernel` for ``fmt``, or None where the
    formula does not apply."""
    p = _params(fmt)
    if p is None:
        return None
    prm = np.array(p, np.uint32)
    prm.flags.writeable = False
    return prm


@functools.cache
def decode_f32_kernel(fmt: FloatFormat, code_dtype: np.dtype) -> NumbaNative | None:
    """Kernel decoding ``code_dtype`` codes of ``fmt`` to float32 bits by the formula (same
    call as :func:`fp8kit._kernels.codec.lookup_kernel`'s kernel; the table is not read;
    it returns the or of the codes it read, for the caller's range check: codes above the
    format's width are decoded from their low bits, never read out of bounds),
    or None where the table kernel must do it: the formula does not apply, or the kernel
    does not give the table's bits on every code of the format (checked once per format,
    by running it on all of them)."""
    from .tables import decode_table

    code_dtype = np.dtype(code_dtype)
    prm = decode_params(fmt)
    if prm is None or code_dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)):
        return None
    sig = types.uint32(_array(np.uint32, True), _array(code_dtype, True),
                       _array(np.uint32, True), _array(np.uint32, True), _array(np.uint32),
                       types.intp)  # fmt: skip
    kernel = NumbaNative(_make_formula, sig, ("decode_formula", code_dtype.str), prm)
    kernel.xo = True  # (no lut or table: small calls pass x and out alone)
    n = min(1 << fmt.bits, np.iinfo(code_dtype).max + 1)
    got = np.empty(n, np.uint32)
    kernel.serial(np.arange(n, dtype=code_dtype), dummy(np.uint32), dummy(np.uint32), got)
    if not np.array_equal(got, decode_table(fmt, np.dtype(np.float32))[:n]):
        return None
    return kernel


def _make_formula(parallel):
    """:func:`decode_f32_kernel`'s kernel: codes to float32 bits by the fields' formula with
    :func:`decode_params`' constants ``prm``; it returns the or of the codes it read."""
    version = source_version()
    one = np.uint32(1)
    qnan = _QNAN32

    def kernel(prm, x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # see source_version
            return one
        nchunks, c_first, c_stop = chunk_range(nchunks)
        mag_mask, sign_bit, sign_shift, sh, adj, min_norm = (
            prm[0],
            prm[1],
            prm[2],
            prm[3],
            prm[4],
            prm[5],
        )  # noqa: E501
        scale, sp_code, sp_bits, nan_lo, nz_code = as_float(prm[6]), prm[7], prm[8], prm[9], prm[10]
        seen = cast_like(one - one, one)  # (the type of the or below: see native._retyped)
        step = (x.size + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            prefer_512()
            xc, oc = chunks(x, out, c, step)
            for j in range(xc.size):
                v = cast_like(xc[j], one)
                seen = cast_like(seen | v, one)
                a = cast_like(v & mag_mask, one)
                norm = cast_like(shl(a, sh, one) + adj, one)
                # (subnormal codes: exact, and the product a float32 normal)
                r = as_bits(np.float32(a) * scale) if a < min_norm else norm
                r = sp_bits if a == sp_code else r
                r = qnan if a >= nan_lo else r
                r = qnan if v == nz_code else r
                oc[j] = r | (shl(v, sign_shift, one) & sign_bit)
        return seen

    return kernel


@functools.cache
def bf16_widen_kernel() -> NumbaNative:
    """Kernel decoding bfloat16 codes to float32 bits: the bits shifted up 16, a NaN the
    canonical quiet NaN of its sign (the decode table's bits); it reads no lut or table
    (small calls pass x and out alone)."""
    sig = types.void(_array(np.uint16, True), _array(np.uint32, True),
                     _array(np.uint32, True), _array(np.uint32), types.intp)  # fmt: skip
    kernel = NumbaNative(_make_bf16_widen, sig, ("decode_bf16_widen",))
    kernel.xo = True
    return kernel


def _make_bf16_widen(parallel):
    version = source_version()
    one = np.uint32(1)
    abs_mask, inf, sign = np.uint32(0x7FFF), np.uint32(0x7F80), np.uint32(0x8000)
    qnan = _QNAN32
    # (large outputs streamed: into a caller's out only, see fp8kit._parallel.NO_STREAM;
    # measured 3.7-4.0 against 10.0 ms for 16M elements there, one thread)
    stream_min = _stream_min(16, 32)
    block = _STREAM_BLOCK

    def kernel(x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # see source_version
            return
        stream = (x.size >= stream_min) & ((nchunks & NO_STREAM) == 0)
        nchunks, c_first, c_stop = chunk_range(nchunks)
        stream = stream and byte_address(out, 0) % 4 == 0
        sbuf = stack_buffer(block, np.uint32)
        step = (x.size + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            prefer_512()
            # (streamed: whole blocks on line boundaries of out through a stack buffer, the
            # partial blocks at both ends in place, as codec.encode_kernel's)
            b0 = c * step
            hi = b0 + step
            hi = hi if hi < x.size else x.size
            while b0 < hi:
                b1 = block_end(out, b0, hi, stream, block)
                full = stream and b1 - b0 == block
                xs = span(x, b0, b1)
                os = sbuf if full else span(out, b0, b1)
                for j in range(xs.size):
                    v = cast_like(xs[j], one)
                    nan = cast_like(shl(v & sign, 16, one) | qnan, one)
                    os[j] = nan if cast_like(v & abs_mask, one) > inf else shl(v, 16, one)
                if full:
                    stream_block(out, b0, sbuf, block)
                b0 = b1
            if stream:
                store_fence()

    return kernel


@functools.cache
def lookup_native_kernel(code_dtype: np.dtype, table_dtype: np.dtype) -> NumbaNative:
    """Kernel writing ``table[x[i]]`` (the decode table of any format and output dtype;
    uint8 or uint16 codes): :func:`fp8kit._kernels.codec.lookup_kernel`'s Numba kernel,
    counted native."""
    k = lookup_kernel(np.dtype(code_dtype), np.dtype(table_dtype))
    return NumbaNative(k._make, k._sig, k._key, k._params)


# ---------------------------------------------------------------- byte-plane table kernel


@functools.cache
def format_planes(fmt: FloatFormat, dtype: np.dtype) -> np.ndarray | None:
    """The byte planes (:func:`fp8kit._kernels.bits.table_planes`) of ``fmt``'s decode
    table to ``dtype``, or None where the CPU has no VBMI, the format is wider than 8 bits
    or the table does not fit them: the constants of :func:`plane_kernel` and of the
    round-to kernels' lookups (:func:`fp8kit._kernels.codec.encode_kernel` with
    ``planes``)."""
    from .tables import decode_table

    if fmt.bits > 8 or not cpu_has("avx512vbmi"):
        return None
    return table_planes(decode_table(fmt, np.dtype(dtype)))


@functools.cache
def plane_kernel(fmt: FloatFormat, dtype: np.dtype) -> NativeKernel | None:
    """Kernel decoding uint8 codes of ``fmt`` to ``dtype`` (float16, bfloat16, float32,
    float64) bits by byte permutes: the table's two byte planes (:func:`format_planes`) sit
    in eight vector registers and AVX512-VBMI's vpermi2b looks up 64 codes in 128 of their
    bytes per instruction (four per plane pair and block).  The same call and return value
    as :func:`decode_f32_kernel`'s (the or of the codes read).  About 7 vector
    instructions per 16 float32 outputs where the formula takes 20: decode float8_e4m3fn
    -> float32 measured 0.072 against 0.166 ns per element in cache (1M codes, one
    thread).  None where :func:`format_planes` is; checked once per format and dtype on
    every code against the table, like the formula kernel."""
    from .tables import decode_table

    prm = format_planes(fmt, np.dtype(dtype))
    if prm is None:
        return None
    table = decode_table(fmt, np.dtype(dtype))
    bits_dt = table.dtype
    width = bits_dt.itemsize * 8
    kernel = NativeKernel(("decode_planes", width), _plane_native(width), prm)
    n = 1 << fmt.bits
    got = np.empty(n, bits_dt)
    kernel.serial(np.arange(n, dtype=np.uint8), dummy(np.uint32), table, got)
    if not np.array_equal(got, table[:n]):
        return None
    return kernel


def _stream_min(in_bits: int, out_bits: int) -> int:
    """Elements from which a decode of ``in_bits`` codes to ``out_bits`` values writes whole
    cache lines with non-temporal stores."""
    return STREAM_MIN_TRAFFIC // ((in_bits + out_bits) // 8)


def _plane_native(width: int):
    """The emitter of :func:`plane_kernel`'s native kernel (see
    :func:`fp8kit._kernels.native.native_address`): codes to ``width``-bit table entries."""

    def emit(context, builder, args):
        intp = context.get_value_type(types.intp)
        # (large outputs streamed)
        x_at, out_at, n, stream = element_range(builder, args, 8, width, _stream_min(8, width))
        return emit_plane_lookup(builder, intp, width, args[0], x_at, out_at, n, stream=stream)

    return emit
