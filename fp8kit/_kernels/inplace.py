"""round_to, nearest-even, as one native kernel that rounds the bits in place: no codes and
no decode table.  float32 and float64 data on their own bits; bfloat16 and float16 data
widened to float32 (exact) and narrowed back (exact: see :func:`_narrows`).

The general kernel (:func:`fp8kit._kernels.codec.encode_kernel` with a ``table_dtype``)
computes each element's code into a buffer and then looks the code's value up in the decode
table (or its byte planes); it is Numba-lowered, so its first call in a process pays Numba's
set-up (0.3 s here) on top of its compile.  Here the bits round to the format's precision
directly, as FakeConvert's kernel does on float32 bits
(:func:`fp8kit._kernels.encode16._fake_body`): nearest-even by an integer add on the bits
(the carry out of the mantissa bumps the exponent), the FPU below the format's smallest
normal (adding a power of two whose step is the format's subnormal step; not where that
normal is the type's own, whose subnormals the integer add rounds), then the overflow, Inf,
NaN and zero rules as the format's decode table gives them.  Those rules are read once per
format from the scalar oracle (:func:`fp8kit._reference.encode_value`) and the decode
table, as a value and a sign rule per class (:func:`round_params`); formats whose rules do
not fit that form (the unsigned ones), or whose subnormals reach the data type's, keep the
general kernel.  No AVX-512 instruction is required (LLVM splits the vectors for the CPU at
hand).  In cache, float32 -> float8_e4m3fn, one thread: 0.14 ns an element, where the
byte-lane codes then planes it replaced took 0.195; float64 0.28 against 0.43 (the Numba
kernel).
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .._parallel import NO_STREAM
from .._reference import encode_value
from ..formats import FloatFormat
from .bits import (
    LOAD_BF16,
    LOAD_DIRECT,
    LOAD_LUT,
    as_bits,
    as_float,
    block_end,
    byte_address,
    cast_like,
    chunk_range,
    load_bits,
    prefer_512,
    shr,
    span,
    stack_buffer,
    store_fence,
    stream_block,
)
from .codec import _STREAM_BLOCK, STREAM_MIN_TRAFFIC, NumbaNative, _array
from .registry import source_version
from .tables import decode_table

# (mantissa bits, smallest normal exponent) of the data types
_TYPES = {32: (23, -126), 64: (52, -1022)}

# Layout of round_params' array: the rounding's constants, then each class's result (its
# magnitude, and which of the input's sign bit is xor-ed into it: 0 or the sign bit).
(_HALF, _ODD_BIT, _KEEP, _FLIP, _MIN_NORMAL, _MAGIC, _MAX, _ZERO_SIGN, _OVF, _OVF_SIGN, _INF_R,
 _INF_SIGN, _NAN, _NAN_SIGN, _ONE, _N) = range(16)  # fmt: skip

#: Elements a vector, by data width: two AVX-512 registers (one measured no faster).
LANES = {32: 32, 64: 16}
#: Elements from which the kernel writes with non-temporal stores, by the data's width.
STREAM_MIN = {
    16: STREAM_MIN_TRAFFIC // 4,
    32: STREAM_MIN_TRAFFIC // 8,
    64: STREAM_MIN_TRAFFIC // 16,
}


def _bits(value: float, width: int) -> int:
    return int(np.array(value, f"f{width // 8}").view(f"u{width // 8}"))


#: The 16-bit data types, rounded as float32 (widened exactly, narrowed exactly: only
#: formats whose values the type holds).
_NARROW = {np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(np.float16): "float16"}


@functools.cache
def round_params(fmt: FloatFormat, dtype: np.dtype, saturate) -> np.ndarray | None:
    """The constants of :func:`round_kernel` for ``fmt``, float32, float64, bfloat16 or
    float16 data (``dtype``) and ``saturate``, or None where its rules do not fit the
    kernel's form (unsigned formats, or a class whose negative result is not its positive
    one with the sign bit kept or flipped) or ``fmt`` reaches beyond ``dtype``.  16-bit data
    round as float32 (their values widened exactly), for formats whose every value the
    16-bit type holds."""
    dtype = np.dtype(dtype)
    if dtype in _NARROW:
        wide = round_params(fmt, np.dtype(np.float32), saturate)
        return wide if wide is not None and _narrows(fmt, dtype) else None
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    width = dtype.itemsize * 8
    src_m, src_emin = _TYPES[width]
    sign_bit = 1 << (width - 1)
    if not fmt.signed or fmt.specials == "unsigned":
        return None
    # Every subnormal of the data type must round to zero (a flush-to-zero or
    # denormals-are-zero mode set by another library then changes no result: the FPU step
    # sees them), as for the general kernel's FPU path (codec._strategy), unless fmt's
    # smallest normal is the type's (then its subnormals are the type's, fewer bits of
    # them: the integer rounding alone, no FPU step); and fmt's values must be the type's
    shared = fmt.minexp == src_emin
    if (fmt.minexp - fmt.mantissa_bits - 1 < src_emin and not shared) or (
        fmt.maxexp - 1 > -src_emin + 1
    ):
        return None
    m = fmt.mantissa_bits
    sh = src_m - m
    table = decode_table(fmt, dtype)

    def result(x: float) -> int:
        return int(table[encode_value(x, fmt, saturate=saturate)])

    def rule(x: float) -> tuple[int, int] | None:
        pos, neg = result(x), result(-x)
        return (pos, pos ^ neg) if pos ^ neg in (0, sign_bit) else None

    # (a finite value of the type beyond fmt's largest: its largest, or 4 x fmt's)
    big = min(fmt.max * 4.0, float(np.finfo(dtype).max))
    zero, ovf, inf, nan = (rule(x) for x in (0.0, big, math.inf, math.nan))
    if None in (zero, ovf, inf, nan) or zero[0] != 0:
        return None
    # every other result is the value rounded, with the input's sign
    for x in (fmt.smallest_subnormal, fmt.smallest_normal, fmt.max):
        if result(x) != _bits(x, width) or result(-x) != _bits(x, width) | sign_bit:
            return None
    words = [0] * _N
    words[_HALF] = (1 << (sh - 1)) - 1
    words[_ODD_BIT] = 1 << sh
    words[_KEEP] = ((1 << width) - 1) ^ ((1 << sh) - 1)
    # no mantissa bits (P3109's precision 1): the tie goes to the even code, whose parity
    # is the exponent's in fmt's bias, not the type's (their biases are both odd)
    words[_FLIP] = (fmt.minexp & 1) << src_m if m == 0 else 0
    words[_MIN_NORMAL] = 0 if shared else _bits(2.0**fmt.minexp, width)  # (0: no FPU step)
    words[_MAGIC] = _bits(2.0 ** (fmt.minexp - m + src_m), width)
    words[_MAX] = _bits(fmt.max, width)
    words[_ZERO_SIGN] = zero[1]
    words[_OVF], words[_OVF_SIGN] = ovf
    words[_INF_R], words[_INF_SIGN] = inf
    words[_NAN], words[_NAN_SIGN] = nan
    words[_ONE] = 1
    out = np.array(words, f"u{width // 8}")
    out.flags.writeable = False
    return out


def _narrows(fmt: FloatFormat, dtype: np.dtype) -> bool:
    """Whether the float32 kernel's results narrow to the 16-bit ``dtype`` as its decode
    table has them: every result is a code's value in float32 (its decode table), so each
    entry narrowed as the kernel narrows it (bfloat16: the top 16 bits, exact only where
    the low ones are zero; float16: the hardware conversion, nearest-even) must be the
    16-bit table's entry."""
    n = 1 << fmt.bits
    t32 = decode_table(fmt, np.dtype(np.float32))[:n]
    t16 = decode_table(fmt, dtype)[:n]
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return not np.any(t32 & 0xFFFF) and np.array_equal((t32 >> 16).astype(np.uint16), t16)
    with np.errstate(over="ignore", invalid="ignore"):
        narrowed = t32.view(np.float32).astype(np.float16).view(np.uint16)
    return np.array_equal(narrowed, t16)


@intrinsic
def single_to_half_bits(typingctx, bits):
    """float32 bits (uint32) -> float16 bits (uint16), the hardware conversion
    (nearest-even; exact for the values a float16 holds).  Numba has no float16 on the
    CPU."""
    if bits != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        f = builder.fptrunc(builder.bitcast(args[0], ir.FloatType()), ir.HalfType())
        return builder.bitcast(f, ir.IntType(16))

    return types.uint16(bits), codegen


def _make_round(width: int, flip: bool, need_inf: bool, need_zero: bool, signs: bool, data: str):
    """:func:`round_kernel`'s kernel: the float32 or float64 (``width``) bits of x rounded
    to ``out`` with :func:`round_params`' constants ``prm`` (``lut`` and ``table`` unused);
    ``data`` "bfloat16" or "float16": the data are that type's bits, widened to float32
    (exact) and the results narrowed back (exact: see :func:`_narrows`).  The flags drop
    what most formats do not need (each class costs a compare and two selects of the ~16
    vector operations an element): ``flip``, the tie rule of formats without mantissa
    bits; ``need_inf``, Inf's own result (else the overflow's, which the rounded Inf
    takes); ``need_zero``, a zero's own sign rule (else the input's sign); ``signs``, a
    sign rule of overflow, Inf or NaN other than the input's sign (fnuz: an unsigned
    NaN)."""
    version = source_version()
    ut = np.uint32 if width == 32 else np.uint64
    src_m = _TYPES[width][0]
    one = ut(1)
    sign_bit = ut(1 << (width - 1))
    abs_mask = ut((1 << (width - 1)) - 1)
    inf_bits = ut(((1 << (width - 1 - src_m)) - 1) << src_m)
    bf16, f16 = data == "bfloat16", data == "float16"
    load = LOAD_BF16 if bf16 else (LOAD_LUT if f16 else LOAD_DIRECT)
    data_bytes = 2 if data else width // 8
    stream_min = STREAM_MIN[data_bytes * 8]
    block = _STREAM_BLOCK
    dtype = np.uint16 if data else ut
    zero16 = np.uint16(0)

    def make(parallel):
        def kernel(prm, x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            # (large outputs streamed: into a caller's out only, see _parallel.NO_STREAM)
            stream = (x.size >= stream_min) & ((nchunks & NO_STREAM) == 0)
            nchunks, c_first, c_stop = chunk_range(nchunks)
            stream = stream and byte_address(out, 0) % data_bytes == 0
            half, odd_bit, keep, flip_bit, min_normal = prm[0], prm[1], prm[2], prm[3], prm[4]
            magic, top, zero_sign, ovf, ovf_sign = as_float(prm[5]), prm[6], prm[7], prm[8], prm[9]
            inf_r, inf_sign, nan_r, nan_sign, ones = prm[10], prm[11], prm[12], prm[13], prm[14]
            zero = one - one
            sbuf = stack_buffer(block, dtype)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()
                # (streamed: whole blocks on line boundaries of out through a stack
                # buffer, the partial blocks at both ends in place, as codec.encode_kernel's)
                b0 = c * step
                hi = b0 + step
                hi = hi if hi < x.size else x.size
                while b0 < hi:
                    b1 = block_end(out, b0, hi, stream, block)
                    full = stream and b1 - b0 == block
                    xs = span(x, b0, b1)
                    os = sbuf if full else span(out, b0, b1)
                    for j in range(xs.size):
                        v = load_bits(xs, j, lut, load, one)  # (16-bit data widened)
                        a = cast_like(v & abs_mask, one)
                        # nearest-even: half an ulp less one, plus the kept bits' lowest (a
                        # run-time 1: LLVM then keeps the masked add)
                        o = cast_like(a ^ flip_bit, one) if flip else a
                        r = cast_like(a + half, one)
                        r = cast_like(r + ones, one) if (o & odd_bit) != zero else r
                        r = cast_like(r & keep, one)
                        sub = as_bits((as_float(a) + magic) - magic)
                        r = sub if a < min_normal else r
                        sign = sign_bit
                        if need_zero:
                            sign = zero_sign if r == zero else sign
                        over = r > top
                        r = ovf if over else r
                        if signs:
                            sign = ovf_sign if over else sign
                        if need_inf:
                            inf = a == inf_bits
                            r = inf_r if inf else r
                            if signs:
                                sign = inf_sign if inf else sign
                        nan = a > inf_bits
                        r = nan_r if nan else r
                        if signs:
                            sign = nan_sign if nan else sign
                        r = cast_like(r ^ (v & sign), one)
                        if bf16:
                            os[j] = cast_like(shr(r, 16, one), zero16)
                        elif f16:
                            os[j] = single_to_half_bits(r)
                        else:
                            os[j] = r
                    if full:
                        stream_block(out, b0, sbuf, block)
                    b0 = b1
                if stream:
                    store_fence()

        return kernel

    return make


@functools.cache
def round_kernel(fmt: FloatFormat, dtype: np.dtype, saturate) -> NumbaNative | None:
    """Kernel rounding float32, float64, bfloat16 or float16 (``dtype``) bits to the bits of
    ``fmt``'s nearest-even values in the same type (round-to-format), with
    :func:`fp8kit._kernels.codec.encode_kernel`'s call with ``table_dtype`` (its ``lut``
    and ``table`` unused); None where :func:`round_params` is.  One compiled function per
    type serves every format that needs no optional step (the float8, float6 and float4
    formats and the IEEE 16-bit ones: each saturation), another the fnuz ones."""
    params = round_params(fmt, dtype, saturate)
    if params is None:
        return None
    width = params.itemsize * 8
    sign_bit = 1 << (width - 1)
    flags = (
        bool(params[_FLIP]),
        (params[_INF_R], params[_INF_SIGN]) != (params[_OVF], params[_OVF_SIGN]),
        int(params[_ZERO_SIGN]) != sign_bit,
        any(int(params[k]) != sign_bit for k in (_OVF_SIGN, _INF_SIGN, _NAN_SIGN)),
        _NARROW.get(np.dtype(dtype), ""),
    )
    data = np.dtype(f"u{np.dtype(dtype).itemsize}")
    sig = types.void(_array(params.dtype, True), _array(data, True), _array(np.uint32, True),
                     _array(data, True), _array(data), types.intp)  # fmt: skip
    kernel = NumbaNative(_make_round(width, *flags), sig, ("round_in_place", width) + flags, params)
    kernel.xo = True  # (no lut or table: small calls pass x and out alone)
    return kernel
