"""round_to of float64 data, nearest-even, as one native kernel that rounds the bits in
place: no codes and no decode table.

The general kernel (:func:`fp8kit._kernels.codec.encode_kernel` with a ``table_dtype``)
computes each element's code into a buffer and then looks the code's float64 value up in
the decode table's eight byte planes; it is Numba-lowered, so its first call in a process
pays Numba's set-up (0.3 s here) on top of its compile.  Here the float64 bits round to the
format's precision directly, as FakeConvert's kernel does on float32 bits
(:func:`fp8kit._kernels.encode16._fake_body`): nearest-even by an integer add on the bits
(the carry out of the mantissa bumps the exponent), the FPU below the format's smallest
normal (adding a power of two whose step is the format's subnormal step), then the
overflow, Inf, NaN and zero rules as the format's decode table gives them.  Those rules are
read once per format from the scalar oracle (:func:`fp8kit._reference.encode_value`) and
the decode table, as a value and a sign rule per class (:func:`round64_params`); formats
whose rules do not fit that form (the unsigned ones) keep the general kernel.
"""

from __future__ import annotations

import functools
import math
import sys

import numpy as np
from llvmlite import ir
from numba import types

from .._reference import encode_value
from ..formats import FloatFormat
from .bits import splat, vector_blocks
from .codec import STREAM_MIN_TRAFFIC
from .native import NativeKernel, typed_pointer
from .tables import decode_table

_SIGN = 1 << 63
_ABS = _SIGN - 1
_INF = 0x7FF << 52
_ONES = (1 << 64) - 1

# Layout of round64_params' array: the rounding's constants, then each class's result
# (its magnitude, and which of the input's sign bit is xor-ed into it: 0 or the sign bit).
(_HALF, _ODD_BIT, _KEEP, _FLIP, _MIN_NORMAL, _MAGIC, _MAX, _ZERO_SIGN, _OVF, _OVF_SIGN, _INF_R,
 _INF_SIGN, _NAN, _NAN_SIGN, _N) = range(15)  # fmt: skip

#: Elements a vector: two AVX-512 registers (one register a block measured no faster).
LANES = 16
#: Elements from which the kernel writes with non-temporal stores (16 bytes an element).
STREAM_MIN = STREAM_MIN_TRAFFIC // 16


def _bits(value: float) -> int:
    return int(np.array(value, np.float64).view(np.uint64))


@functools.cache
def round64_params(fmt: FloatFormat, saturate) -> np.ndarray | None:
    """The constants of :func:`round64_kernel` for ``fmt`` and ``saturate``, or None where
    its rules do not fit the kernel's form (unsigned formats, or a class whose negative
    result is not its positive one with the sign bit kept or flipped)."""
    if not fmt.signed or fmt.specials == "unsigned":
        return None
    # Every float64 subnormal must round to zero (a flush-to-zero or denormals-are-zero mode
    # set by another library then changes no result: the FPU step sees them), as for the
    # general kernel's FPU path (codec._strategy)
    if fmt.minexp - fmt.mantissa_bits - 1 < -1022:
        return None
    m = fmt.mantissa_bits
    sh = 52 - m
    table = decode_table(fmt, np.dtype(np.float64))

    def result(x: float) -> int:
        return int(table[encode_value(x, fmt, saturate=saturate)])

    def rule(x: float) -> tuple[int, int] | None:
        pos, neg = result(x), result(-x)
        return (pos, pos ^ neg) if pos ^ neg in (0, _SIGN) else None

    big = fmt.max * 4.0 if fmt.max < sys.float_info.max / 4 else sys.float_info.max
    zero, ovf, inf, nan = (rule(x) for x in (0.0, big, math.inf, math.nan))
    if None in (zero, ovf, inf, nan) or zero[0] != 0:
        return None
    # every other result is the value rounded, with the input's sign
    for x in (fmt.smallest_subnormal, fmt.smallest_normal, fmt.max):
        if result(x) != _bits(x) or result(-x) != _bits(x) | _SIGN:
            return None
    words = [0] * _N
    words[_HALF] = (1 << (sh - 1)) - 1
    words[_ODD_BIT] = 1 << sh
    words[_KEEP] = _ONES ^ ((1 << sh) - 1)
    # no mantissa bits (P3109's precision 1): the tie goes to the even code, whose parity
    # is the exponent's in fmt's bias, not float64's
    words[_FLIP] = (fmt.minexp & 1) << 52 if m == 0 else 0
    words[_MIN_NORMAL] = _bits(2.0**fmt.minexp)
    words[_MAGIC] = _bits(2.0 ** (fmt.minexp - m + 52))
    words[_MAX] = _bits(fmt.max)
    words[_ZERO_SIGN] = zero[1]
    words[_OVF], words[_OVF_SIGN] = ovf
    words[_INF_R], words[_INF_SIGN] = inf
    words[_NAN], words[_NAN_SIGN] = nan
    out = np.array(words, np.uint64)
    out.flags.writeable = False
    return out


def _round64_emitter(flip: bool, need_inf: bool, need_zero: bool):
    """The emitter of the native function (:data:`fp8kit._kernels.native.FUNCTION_TYPE`)
    rounding the float64 bits ``x[first:stop]`` to ``out`` with :func:`round64_params`'
    constants ``prm`` (``lut`` and ``table`` unused), ``LANES`` elements a vector.  The
    flags drop what most formats do not need (each class costs a compare and two blends of
    the ~16 vector operations a register): ``flip``, the tie rule of formats without
    mantissa bits; ``need_inf``, Inf's own result (else the overflow's, which the rounded
    Inf takes); ``need_zero``, a zero's own sign rule (else the input's sign)."""

    def emit(context, builder, args):
        prm, _, _, x, out, first, stop, total = args
        intp = context.get_value_type(types.intp)
        i64 = ir.IntType(64)
        vt = ir.VectorType(i64, LANES)
        vf = ir.VectorType(ir.DoubleType(), LANES)
        words = builder.bitcast(prm, i64.as_pointer())
        w = [splat(builder, builder.load(builder.gep(words, [ir.Constant(intp, k)])), vt)
             for k in range(_N)]  # fmt: skip
        magic = builder.bitcast(w[_MAGIC], vf)

        def k(value):
            return ir.Constant(vt, [value] * LANES)

        def body(v):
            a = builder.and_(v, k(_ABS))
            # nearest-even: half an ulp less one, plus the kept bits' lowest (a test under
            # mask and a masked add)
            odd = builder.xor(a, w[_FLIP]) if flip else a
            odd = builder.icmp_unsigned("!=", builder.and_(odd, w[_ODD_BIT]), k(0))
            r = builder.add(a, w[_HALF])
            r = builder.and_(builder.select(odd, builder.add(r, k(1)), r), w[_KEEP])
            sub = builder.fsub(builder.fadd(builder.bitcast(a, vf), magic), magic)
            small = builder.icmp_unsigned("<", a, w[_MIN_NORMAL])
            r = builder.select(small, builder.bitcast(sub, vt), r)
            sign = k(_SIGN)
            if need_zero:
                sign = builder.select(builder.icmp_unsigned("==", r, k(0)), w[_ZERO_SIGN], sign)
            over = builder.icmp_unsigned(">", r, w[_MAX])
            r, sign = builder.select(over, w[_OVF], r), builder.select(over, w[_OVF_SIGN], sign)
            if need_inf:
                inf = builder.icmp_unsigned("==", a, k(_INF))
                r = builder.select(inf, w[_INF_R], r)
                sign = builder.select(inf, w[_INF_SIGN], sign)
            nan = builder.icmp_unsigned(">", a, k(_INF))
            r, sign = builder.select(nan, w[_NAN], r), builder.select(nan, w[_NAN_SIGN], sign)
            return builder.xor(r, builder.and_(v, sign))

        stream = builder.icmp_signed(">=", total, ir.Constant(intp, STREAM_MIN))
        x_at = typed_pointer(builder, x, 64, first)
        out_at = typed_pointer(builder, out, 64, first)
        n = builder.sub(stop, first)
        vector_blocks(builder, intp, n, x_at, out_at, vt, vt, body, stream=stream)
        return ir.Constant(ir.IntType(32), 0)

    return emit


@functools.cache
def round64_kernel(fmt: FloatFormat, saturate) -> NativeKernel | None:
    """Kernel rounding float64 bits to the float64 bits of ``fmt``'s nearest-even values
    (round-to-format), with :func:`fp8kit._kernels.codec.encode_kernel`'s call with
    ``table_dtype`` (its ``lut`` and ``table`` unused); None where
    :func:`round64_params` is.  One compiled function serves every format."""
    params = round64_params(fmt, saturate)
    if params is None:
        return None
    flags = (
        bool(params[_FLIP]),
        (params[_INF_R], params[_INF_SIGN]) != (params[_OVF], params[_OVF_SIGN]),
        params[_ZERO_SIGN] != _SIGN,
    )
    kernel = NativeKernel(("round64",) + flags, _round64_emitter(*flags), params)
    kernel.planes = False
    return kernel
