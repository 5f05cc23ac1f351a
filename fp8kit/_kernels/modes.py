"""encode in the deterministic rounding modes (and nearest-even with ``flush_subnormals``)
as a native kernel: :func:`fp8kit._kernels.rounding.encode_mode_kind`'s integer-only path
(its deterministic branch), :func:`fp8kit._kernels.bits._finish_with` and
:func:`fp8kit._kernels.rounding.flush_code`, written out in LLVM vector code.

The Numba kernel of :func:`fp8kit._kernels.codec.encode_mode_kernel` pays Numba's set-up
(0.3 s here) on a first call; this one computes the same codes from the same parameter
array (:func:`fp8kit._kernels.codec.pack_params`), the mode compiled in (its masks fold
away), for every format but the unsigned power-of-two ones (float8_e8m0fnu: a path of its
own).  Subnormal results come from the integer path, never the FPU: no flush-to-zero mode
can change them.  round_to in these modes (:func:`round_mode_kernel`) looks the codes up
in the decode table's byte planes in the same pass, where the CPU has AVX512-VBMI and the
values fit the planes; elsewhere it keeps the Numba kernel (codes, then values).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import types

from ..formats import FloatFormat
from .bits import (
    _hardware_half,
    flush_subnormal_codes,
    load_planes,
    plane_values,
    splat,
    values_of_16_bit_codes,
    vector_blocks,
    widen_half,
)
from .codec import (
    _O,
    _P,
    _Q,
    LOAD_BF16,
    LOAD_DIRECT,
    LOAD_LUT,
    _params,
    codes16_kind,
    mode_overflow,
    mode_plan,
    pack_params,
)
from .native import NativeKernel, typed_pointer
from .rounding import (
    KIND_DET,
    NEAREST_AWAY,
    NEAREST_EVEN,
    NEAREST_ZERO,
    TO_ODD,
    TOWARD_NEGATIVE,
    TOWARD_POSITIVE,
    mode_kind,
)

_DATA = {
    np.dtype(np.float32): 32,
    np.dtype(np.float64): 64,
    np.dtype(ml_dtypes.bfloat16): 16,
    np.dtype(np.float16): 16,
}
#: Elements a vector (one cache line of 8-bit codes).
LANES = 64


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
    kernel = NativeKernel(("encode_mode",) + flags, _mode_emitter(*flags), params)
    kernel.xo = True  # (no lut or table: small calls pass x and out alone)
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
        kernel = NativeKernel(("round_mode",) + flags, _mode_emitter(*flags), codes._params)
        kernel.xo = True  # (no table: small calls pass x and out alone)
        return kernel
    if format_planes(fmt, dtype) is None:
        return None
    flags = codes._key[1:] + (dtype.itemsize * 8,)
    kernel = NativeKernel(("round_mode",) + flags, _mode_emitter(*flags), codes._params)
    kernel.planes = True
    return kernel


def _masks(mode: int) -> tuple[bool, ...]:
    """:func:`fp8kit._kernels.rounding.mode_masks` of a mode known when compiling: (half,
    kept bit, one, positive side, negative side, odd)."""
    nearest = mode in (NEAREST_EVEN, NEAREST_AWAY, NEAREST_ZERO)
    return (nearest, mode == NEAREST_EVEN, mode == NEAREST_AWAY, mode == TOWARD_POSITIVE,
            mode == TOWARD_NEGATIVE, mode == TO_ODD)  # fmt: skip


def _code_body(builder, intp, prm, data_bits, width, half, mode, neg_zero, flush, lanes=LANES):
    """``body(v)``: the codes (``<lanes x i{width}>``) of the data bits ``v``
    (``<lanes x i{data_bits}>``) in the deterministic ``mode``, from the parameter array at
    ``prm`` (:func:`mode_kernel`'s); its loop-invariant constants are emitted here."""
    half_m, lsb_m, one_m, pos_m, neg_m, odd_m = _masks(mode)
    iw = ir.IntType(width)
    vt = ir.VectorType(iw, lanes)
    words = builder.bitcast(prm, iw.as_pointer())

    def word(k):
        return splat(builder, builder.load(builder.gep(words, [ir.Constant(intp, k)])), vt)

    (abs_mask, _, _, _, _, _, _, _, src_inf, max_mag, nominal_ovf, inf_res, nan_mag,
     sign_bit, sign_shift, _, _) = (word(_P + k) for k in range(17))  # fmt: skip
    src_m, mant_mask, hidden, emin_field, cap, m_bits, base_sh = (word(_Q + k) for k in range(7))
    o_pos, o_neg = word(_O), word(_O + 1)
    zero = ir.Constant(vt, [0] * lanes)
    one = ir.Constant(vt, [1] * lanes)
    s = builder.lshr(sign_bit, sign_shift)  # (the code's sign, or-ed in)
    # (loop-invariant: no -0, the rule of bits._finish_with)
    keep = builder.select(builder.icmp_unsigned("!=", s, zero), abs_mask, zero)
    no_s = builder.icmp_unsigned("==", s, zero)
    neg_inf_nan = builder.and_(no_s, builder.icmp_unsigned("!=", nominal_ovf, max_mag))

    def umax(u, v):
        return builder.select(builder.icmp_unsigned(">", u, v), u, v)

    def umin(u, v):
        return builder.select(builder.icmp_unsigned("<", u, v), u, v)

    def body(v):
        if data_bits == 16:  # (bfloat16: float32's top half; float16: exact widening)
            v = widen_half(builder, v) if half else builder.shl(
                builder.zext(v, vt), ir.Constant(vt, [16] * lanes)
            )  # fmt: skip
        a = builder.and_(v, abs_mask)
        negative = builder.icmp_unsigned(">", v, abs_mask)
        e = builder.lshr(a, src_m)
        normal = builder.icmp_unsigned("!=", e, zero)
        m = builder.or_(builder.and_(a, mant_mask), builder.select(normal, hidden, zero))
        ee = umax(e, one)
        extra = builder.select(builder.icmp_unsigned("<", ee, emin_field),
                               builder.sub(emin_field, ee), zero)  # fmt: skip
        sh_full = builder.add(base_sh, extra)
        sh = umin(sh_full, cap)
        k = builder.select(builder.icmp_unsigned(">", ee, emin_field),
                           builder.sub(ee, emin_field), zero)  # fmt: skip
        kshift = builder.shl(k, m_bits)
        parity = builder.and_(builder.add(kshift, builder.lshr(m, sh)), one)
        # _det_round: what is added below the kept bits
        ones = builder.sub(builder.shl(one, sh), one)
        inc = zero
        if half_m:
            inc = builder.add(inc, builder.lshr(ones, one))
        if lsb_m:
            inc = builder.add(inc, parity)
        if one_m:
            inc = builder.add(inc, one)
        side = zero
        if pos_m:
            side = builder.select(negative, zero, ones)
        if neg_m:
            side = builder.select(negative, ones, zero)
        if odd_m:
            even = builder.icmp_unsigned("==", parity, zero)
            side = builder.or_(side, builder.select(even, ones, zero))
        inc = builder.add(inc, side)
        r = builder.lshr(builder.add(m, inc), sh)
        code = builder.add(kshift, r)
        # _finish_with
        ovf = builder.select(negative, o_neg, o_pos)
        mag = umin(code, ovf)
        mag = builder.select(builder.icmp_unsigned("==", a, src_inf), inf_res, mag)
        nan = builder.icmp_unsigned(">", a, src_inf)
        if neg_zero:
            mag = builder.select(nan, nan_mag, mag)
            out_code = builder.xor(mag, builder.lshr(builder.and_(v, sign_bit), sign_shift))
        else:
            signed = builder.and_(negative, builder.icmp_unsigned("!=", mag, zero))
            mag = builder.select(signed, builder.or_(builder.and_(mag, keep), s), mag)
            neg_inf = builder.and_(
                builder.and_(neg_inf_nan, builder.icmp_unsigned("==", a, src_inf)), negative
            )
            out_code = builder.select(builder.or_(nan, neg_inf), nan_mag, mag)
        if flush:  # rounding.flush_code
            out_code = flush_subnormal_codes(builder, out_code, s, builder.shl(one, m_bits),
                                             neg_zero)  # fmt: skip
        return out_code

    return body


def _mode_emitter(data_bits, width, code_bits, half, mode, neg_zero, flush, out_bits=0, values16=0):
    """The emitter of :func:`mode_kernel`'s native function (codes of ``code_bits``) or,
    with ``out_bits``, of :func:`round_mode_kernel`'s (the codes' values, ``out_bits``
    wide, from the decode table's byte planes at the ``table`` argument; with
    ``values16`` 1 or 2, bfloat16's or float16's codes as values of the data's type:
    :func:`fp8kit._kernels.bits.values_of_16_bit_codes`)."""

    def emit(context, builder, args):
        prm, _, table, x, out, first, stop, total = args
        intp = context.get_value_type(types.intp)
        code = _code_body(builder, intp, prm, data_bits, width, half, mode, neg_zero, flush)
        vcode = ir.VectorType(ir.IntType(code_bits), LANES)
        if values16:
            vout = ir.VectorType(ir.IntType(out_bits), LANES)
            to = {32: "float32", 64: "float64"}.get(out_bits, "float16" if half else "bfloat16")

            def body(v):
                return values_of_16_bit_codes(builder, builder.trunc(code(v), vcode),
                                              values16 == 1, to)  # fmt: skip

        elif out_bits:
            planes = load_planes(builder, table, intp)
            vout = ir.VectorType(ir.IntType(out_bits), LANES)

            def body(v):
                return plane_values(builder, planes, builder.trunc(code(v), vcode), out_bits)

        else:
            vout = vcode

            def body(v):
                return builder.trunc(code(v), vcode)

        x_at = typed_pointer(builder, x, data_bits, first)
        out_at = typed_pointer(builder, out, out_bits or code_bits, first)
        vin = ir.VectorType(ir.IntType(data_bits), LANES)
        vector_blocks(builder, intp, builder.sub(stop, first), x_at, out_at, vin, vout, body)
        return ir.Constant(ir.IntType(32), 0)

    return emit
