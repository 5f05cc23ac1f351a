"""Encode bfloat16 and float16 input on 16-bit lanes: 32 elements per 512-bit vector.

The float32 kernels widen 16-bit input to float32 bits and round on 16 lanes: the same
~20 vector operations per 16 elements as float32 input for half the bytes (bfloat16 ->
float8_e4m3fn measured 0.36-0.38 of the streaming limit on one thread).  Here the rounding
stays on the input's own bits.  There is no 16-bit FPU add on the CPUs this targets (no
AVX512-FP16): results below the format's smallest normal are rounded by the FPU trick of
:func:`fp8kit._kernels.bits.encode_fast` on the value widened to float32 (exact), which a
flush-to-zero mode cannot change (the kernel is only used where every source subnormal
rounds to zero, and the sum is a float32 normal).  Nearest-even only; the
overflow, Inf, NaN and sign rules are those of :func:`fp8kit._kernels.bits._finish_with`,
with the same constants (from :func:`fp8kit._kernels.codec._params`).  One compiled kernel
serves every format (constants at run time) per 16-bit input dtype.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numba import types

from ..formats import FloatFormat, get_format
from .bits import (
    as_bits,
    as_float,
    cast_like,
    chunk_range,
    chunks,
    fma,
    half_to_single_bits,
    prefer_512,
    shl,
    shr,
)
from .codec import Kernel, _array, _params, plan, source_version

# 16-bit source layouts: (mantissa bits, exponent bits, bias)
_SOURCES16 = {
    np.dtype(ml_dtypes.bfloat16): (7, 8, 127),
    np.dtype(np.float16): (10, 5, 15),
}


def _fits(fmt: FloatFormat, in_dtype: np.dtype) -> bool:
    """Whether the 16-bit kernel rounds ``in_dtype`` to fmt exactly as the float32 path does:
    fmt's range within the source's normal range, the source's subnormals all rounding to
    zero (so the integer path never sees them as normals), at least one mantissa bit (ties
    by the kept bit's parity) and a sign rule of the fast path."""
    src_m, src_e, src_bias = _SOURCES16[in_dtype]
    src_emin, src_emax = 1 - src_bias, (1 << src_e) - 2 - src_bias
    if fmt.specials == "unsigned" or fmt.mantissa_bits == 0 or fmt.bits > 8:
        return False
    if fmt.mantissa_bits >= src_m or fmt.minexp < src_emin or fmt.maxexp - 1 > src_emax:
        return False
    # the largest source subnormal (< 2**src_emin) must round to zero: below half of fmt's
    # smallest subnormal, or fmt's subnormals are the source's (same smallest normal)
    if fmt.minexp != src_emin and fmt.minexp - fmt.mantissa_bits - 1 < src_emin:
        return False
    return plan(fmt, in_dtype).strategy == "fast"


def _prm(fmt: FloatFormat, in_dtype: np.dtype, saturate) -> np.ndarray | None:
    """The kernel's constants, or None where its folded Inf rule would differ (then the
    float32 kernels run)."""
    src_m, src_e, src_bias = _SOURCES16[in_dtype]
    p, _ = _params(fmt, "float32", saturate)  # the codes: source-independent
    max_mag, ovf, inf_res, nan_mag = (int(v) for v in p[9:13])
    sign_or = int(p[13]) >> (32 - fmt.bits)
    neg_zero = bool(p[15])
    m = fmt.mantissa_bits
    sh = src_m - m
    rebias = src_bias - fmt.bias
    emin_field = fmt.minexp + src_bias  # source exponent field of fmt's smallest normal
    src_inf = ((1 << src_e) - 1) << src_m
    assert ovf in (max_mag, max_mag + 1)
    # The sign rule of bits._finish_with for formats without -0 (keep, s) and the result
    # it gives a negative Inf.
    s = sign_or
    keep = 0x7FFF if s else 0
    if not neg_zero and s == 0 and ovf != max_mag:
        return None  # (-Inf is NaN there: no format the kernel takes has that rule)
    neg_inf = inf_res if neg_zero else ((inf_res & keep) | s if inf_res else 0)
    # Inf costs no compare where it gives the overflow code (the unsigned min of the
    # rounded code, which is larger for Inf, gives it) or the NaN code with either sign
    # (the NaN compare takes a >= src_inf): measured 2 vector operations of ~20.
    nan_thr = src_inf
    need_inf = inf_res != ovf
    if need_inf and inf_res == nan_mag and neg_inf == nan_mag:
        nan_thr, need_inf = src_inf - 1, False
    # below fmt's smallest normal the FPU rounds (see _make): float32 bits of the source
    # value times 2**(127 - src_bias), the widened bits, scaled back by one exact FMA
    _, _, _, _, min_normal, magic, magic_bits, use_magic, *_ = p
    magic_bits = int(magic_bits)
    assert magic_bits & 0xFFFF == 0 and (127 - src_bias) >= 0
    scale_bits = int(np.array(2.0 ** (127 - src_bias), np.float32).view(np.uint32))
    prm = [
        0x7FFF,  # abs_mask
        sh,
        ((1 << (sh - 1)) - 1 - (rebias << src_m)) & 0xFFFF,  # rb (as in codec._params)
        # min_normal: below it, the FPU rounding; none when fmt's subnormals are the
        # source's (the normal formula rounds them: float16 -> float8_e5m2)
        0 if fmt.minexp == 1 - src_bias else emin_field << src_m,
        23 - src_m,  # widening shift: source bits -> float32 bits of value * 2**-scale
        scale_bits >> 16,
        magic_bits >> 16,
        nan_thr,
        src_inf,
        ovf,
        inf_res,
        nan_mag,
        (sign_or << (16 - fmt.bits)) & 0xFFFF,  # sign_bit
        16 - fmt.bits,  # sign_shift
        int(neg_zero),
        int(need_inf),
    ]
    out = np.array(prm, np.uint16)
    out.flags.writeable = False
    return out


@functools.cache
def encode16_kernel(fmt: FloatFormat, in_dtype: np.dtype, saturate) -> Kernel | None:
    """Kernel rounding bfloat16/float16 bits (uint16) to ``fmt`` codes (uint8), nearest-even,
    with :func:`fp8kit._kernels.codec.encode_kernel`'s call and results; None where that
    kernel must do it."""
    in_dtype = np.dtype(in_dtype)
    if in_dtype == np.float16 and fmt == get_format("bfloat16"):
        return f16_to_bf16_kernel(saturate)
    if in_dtype not in _SOURCES16 or not _fits(fmt, in_dtype):
        return None
    prm = _prm(fmt, in_dtype, saturate)
    if prm is None:
        return None
    sig = types.void(
        _array(np.uint16, readonly=True),
        _array(np.uint16, readonly=True),
        _array(np.uint32, readonly=True),
        _array(np.uint8, readonly=True),
        _array(np.uint8),
        types.intp,
    )
    return Kernel(_make, sig, ("encode16", source_version()), prm)


def _make(parallel):
    version = source_version()
    one = np.uint16(1)
    zero = np.uint16(0)
    one32 = np.uint32(1)
    sixteen = np.uint32(16)

    def kernel(prm, x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # never true; see codec.source_version
            return
        nchunks, c_first, c_stop = chunk_range(nchunks)
        abs_mask, sh, rb, min_normal, wsh = prm[0], prm[1], prm[2], prm[3], prm[4]
        scale = as_float(shl(cast_like(prm[5], one32), sixteen, one32))
        magic = as_float(shl(cast_like(prm[6], one32), sixteen, one32))
        nan_thr, src_inf, ovf, inf_res, nan_mag = prm[7], prm[8], prm[9], prm[10], prm[11]
        sign_bit, sign_shift, neg_zero, need_inf = prm[12], prm[13], prm[14] != 0, prm[15] != 0
        s = shr(sign_bit, sign_shift, one)
        keep = abs_mask if s != zero else zero  # (all the low bits, or none)
        step = (x.size + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            prefer_512()
            xc, oc = chunks(x, out, c, step)
            for j in range(xc.size):
                v = xc[j]
                a = cast_like(v & abs_mask, one)
                code = shr(
                    cast_like(a + cast_like(rb + (shr(a, sh, one) & one), one), one), sh, one
                )
                # below fmt's smallest normal, the FPU rounds (hardware nearest-even, one
                # rounding) as in bits.encode_fast: the source value widened to float32
                # (exact; a source subnormal, which rounds to zero anyway, may be flushed)
                # plus a power of two whose ulp is fmt's subnormal spacing (thread CPU time
                # per element in cache, bfloat16 -> float8_e4m3fn: 0.155 -> 0.136 ns against
                # the variable integer shifts)
                f = as_float(shl(cast_like(a, one32), wsh, one32))
                sub = cast_like(as_bits(fma(f, scale, magic)), one)
                code = sub if a < min_normal else code
                mag = ovf if code > ovf else code
                if need_inf:
                    mag = inf_res if a == src_inf else mag
                if neg_zero:
                    mag = nan_mag if a > nan_thr else mag
                    # (shift, then mask: the and and the xor fuse into one vpternlog)
                    oc[j] = cast_like(mag ^ (shr(v, sign_shift, one) & s), one)
                    continue
                mag = cast_like((mag & keep) | s, one) if (v > abs_mask and mag != zero) else mag
                oc[j] = nan_mag if a > nan_thr else mag

    return kernel


@functools.cache
def f16_to_bf16_kernel(saturate) -> Kernel:
    """Kernel rounding float16 bits to bfloat16 bits, nearest-even (the call of
    :func:`encode16_kernel`'s kernels).  Every float16 is a bfloat16 normal in range, so
    only the mantissa rounds: the float32 value (the hardware conversion, exact) rounded by
    one add and shift, Inf and NaN by the saturation's codes (about 8 vector operations per
    16 elements, where the general float32 kernel takes 20)."""
    p, _ = _params(get_format("bfloat16"), "float32", saturate)
    prm = np.array([int(p[11]), int(p[12])], np.uint16)  # inf_res, nan_mag
    prm.flags.writeable = False
    sig = types.void(
        _array(np.uint16, readonly=True),
        _array(np.uint16, readonly=True),
        _array(np.uint32, readonly=True),
        _array(np.uint8, readonly=True),
        _array(np.uint16),
        types.intp,
    )
    return Kernel(_make_f16_bf16, sig, ("f16_to_bf16", source_version()), prm)


def _make_f16_bf16(parallel):
    version = source_version()
    one = np.uint32(1)
    one16 = np.uint16(1)
    half_m1 = np.uint32(0x7FFF)
    sixteen = np.uint32(16)
    abs16, sign16, inf16 = np.uint16(0x7FFF), np.uint16(0x8000), np.uint16(0x7C00)

    def kernel(prm, x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # never true; see codec.source_version
            return
        nchunks, c_first, c_stop = chunk_range(nchunks)
        inf_res, nan_mag = prm[0], prm[1]
        step = (x.size + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            prefer_512()
            xc, oc = chunks(x, out, c, step)
            for j in range(xc.size):
                v = xc[j]
                f = half_to_single_bits(v)
                r = cast_like(
                    cast_like(f + half_m1 + (cast_like(f >> sixteen, one) & one), one) >> sixteen,
                    one16,
                )
                a = cast_like(v & abs16, one16)
                s = cast_like(v & sign16, one16)
                # (Inf: +-max when saturating; NaN: the NaN code with the sign, as the
                # float32 kernel's _finish_with gives for formats with -0)
                r = cast_like(inf_res | s, one16) if a == inf16 else r
                r = cast_like(nan_mag ^ s, one16) if a > inf16 else r
                oc[j] = r

    return kernel
