"""Encode float64 input on 32-bit lanes: the high word of each float64, with a sticky bit.

The float64 kernel of :mod:`fp8kit._kernels.codec` rounds on 64-bit lanes, 8 per 512-bit
vector: about 20 vector operations per 8 elements, so on one thread float64 -> bfloat16 is
bound by the vector ports (slower than torch, which is at the memory limit).  Every format
with at most 18 mantissa bits keeps bits of the high word only: its round bit is there, and
the low word only matters as a sticky bit, or-ed into the high word's lowest bit.  The
high word is then a 32-bit float with an 11-bit exponent, rounded (nearest-even) and
finished (overflow, Inf, NaN, sign) by the float32 kernels' own integer formula and
:func:`fp8kit._kernels.bits._finish_with` on 16 lanes per vector; only the result below the
format's smallest normal (the FPU trick of :func:`fp8kit._kernels.bits.encode_fast`, exact on
float64 normals) and the split stay on 64-bit lanes.  Rounded once, from the float64 value.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import types

from ..formats import FloatFormat
from .bits import as_bits, as_float, cast_like, chunk_range, chunks, prefer_512, shl, shr
from .codec import Kernel, _array, _params, plan, source_version


def _fits(fmt: FloatFormat) -> bool:
    # round bit in the high word above its lowest bit (where the sticky bit goes); the
    # subnormal range scaled into float32's normal range (see _prm's clamp)
    return (
        fmt.specials != "unsigned"
        and fmt.mantissa_bits <= 18
        and fmt.bits <= 16
        and (fmt.minexp == -1022 or fmt.minexp >= -896)
    )


def _prm(fmt: FloatFormat, saturate) -> tuple[np.ndarray, bool]:
    p, _ = _params(fmt, "float64", saturate)
    m = fmt.mantissa_bits
    sh = 20 - m
    rebias = 1023 - fmt.bias
    hi = [
        0x7FFFFFFF,  # abs_mask
        1,  # one
        sh,
        ((1 << (sh - 1)) - 1 - (rebias << 20)) & 0xFFFFFFFF,  # rb (as in codec._params)
        int(p[4]) >> 32,  # min_normal: its low word is zero
        0,  # (magic, magic_bits: unused, the integer path rounds subnormals)
        0,
        int(bool(p[7])),  # use_magic
        0x7FF00000,  # src_inf
        *(int(v) for v in p[9:13]),  # max_mag, ovf, inf_res, nan_mag
        int(p[13]) >> 32,  # sign_bit: the float64 kernel's, in the high word
        int(p[14]) - 32,  # sign_shift
        int(bool(p[15])),  # neg_zero
        0,  # zero
    ]
    assert int(p[4]) & 0xFFFFFFFF == 0 and int(p[13]) & 0xFFFFFFFF == 0
    magic = np.float32(2.0 ** (23 - m))  # its ulp: the subnormal spacing, scaled
    sub = [
        ((1023 + fmt.minexp - 127) << 20) & 0xFFFFFFFF,  # sub_rebias: scaled by 2**-minexp
        (1023 + fmt.minexp - 126) << 20,  # clamp: the scaled value's exponent >= -126
        int(magic.view(np.uint32)),
    ]
    prm = np.array([*hi, *(sub if p[7] else (0, 0, 0))], np.uint64)
    prm.flags.writeable = False
    return prm, bool(p[7])


@functools.cache
def encode64_kernel(fmt: FloatFormat, saturate) -> Kernel | None:
    """Kernel rounding float64 bits (uint64) to ``fmt`` codes, nearest-even, with
    :func:`fp8kit._kernels.codec.encode_kernel`'s call and results; None where that kernel
    must do it (its generic or unsigned algorithms, wider mantissas)."""
    if not _fits(fmt) or plan(fmt, np.dtype(np.float64)).strategy != "fast":
        return None
    prm, use_magic = _prm(fmt, saturate)
    code = np.dtype(np.uint8 if fmt.bits <= 8 else np.uint16)
    sig = types.void(
        _array(np.uint64, readonly=True),
        _array(np.uint64, readonly=True),
        _array(np.uint32, readonly=True),
        _array(np.uint8, readonly=True),
        _array(code),
        types.intp,
    )
    key = ("encode64", code.str, use_magic, source_version())
    return Kernel(functools.partial(_make, use_magic), sig, key, prm)


def _make(use_magic, parallel):
    version = source_version()
    one = np.uint32(1)
    zero = np.uint32(0)
    u32 = np.uint32

    def kernel(prm, x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # never true; see codec.source_version
            return
        nchunks, c_first, c_stop = chunk_range(nchunks)
        p = (
            cast_like(prm[0], one), one, cast_like(prm[2], one), cast_like(prm[3], one),
            cast_like(prm[4], one), zero, zero, use_magic, cast_like(prm[8], one),
            cast_like(prm[9], one), cast_like(prm[10], one), cast_like(prm[11], one),
            cast_like(prm[12], one), cast_like(prm[13], one), cast_like(prm[14], one),
            prm[15] != 0, zero,
        )  # fmt: skip
        abs_mask, sh, rb, min_normal = p[0], p[2], p[3], p[4]
        src_inf, max_mag, ovf, inf_res, nan_mag = p[8], p[9], p[10], p[11], p[12]
        sign_bit, sign_shift, neg_zero = p[13], p[14], p[15]
        s = shr(sign_bit, sign_shift, one)
        keep = abs_mask if s != zero else zero  # (all the low bits, or none)
        neg_inf_nan = s == zero and ovf != max_mag  # -Inf, not saturating: NaN
        sub_rebias, clamp = cast_like(prm[17], one), cast_like(prm[18], one)
        magic, magic_bits = as_float(cast_like(prm[19], one)), cast_like(prm[19], one)
        three = np.uint32(3)
        step = (x.size + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            prefer_512()
            xc, oc = chunks(x, out, c, step)
            # (the words of each float64 read as two uint32: loads LLVM deinterleaves with
            # shuffles, so that the whole loop runs on 16 32-bit lanes; 64-bit loads kept
            # the loop at 8 lanes)
            w = xc.view(u32)
            for j in range(oc.size):
                # the high word, the low word's bits or-ed into its lowest bit (sticky)
                # (a select of hi | 1: a test and a masked or, where an or of the test's
                # 0 or 1 took four vector instructions)
                hi = w[2 * j + 1]
                hs = cast_like(hi | one, one) if w[2 * j] != zero else hi
                a = cast_like(hs & abs_mask, one)
                code = shr(
                    cast_like(a + cast_like(rb + (shr(a, sh, one) & one), one), one), sh, one
                )
                if use_magic:
                    # below the smallest normal: the FPU trick on float32 lanes, on the
                    # value scaled by 2**-minexp (a float32 normal, its sticky bit kept;
                    # values that small round to zero are clamped up, still rounding to 0)
                    ac = a if a > clamp else clamp
                    scaled = as_float(shl(cast_like(ac - sub_rebias, one), three, one))
                    code = (
                        cast_like(as_bits(scaled + magic) - magic_bits, one)
                        if a < min_normal
                        else code
                    )
                # overflow, Inf, NaN and sign: bits._finish_with, each step cast back to
                # 32 bits (Numba types uint32 & uint32 as uint64, and LLVM kept those
                # steps on 64-bit lanes, two vectors per 16 elements)
                mag = ovf if code > ovf else code
                mag = inf_res if a == src_inf else mag
                if neg_zero:
                    mag = nan_mag if a > src_inf else mag
                    oc[j] = cast_like(
                        mag ^ shr(cast_like(hs & sign_bit, one), sign_shift, one), one
                    )
                    continue
                neg = hs > abs_mask and mag != zero
                mag = cast_like(cast_like(mag & keep, one) | s, one) if neg else mag
                nan = a > src_inf or (neg_inf_nan and a == src_inf and hs > abs_mask)
                oc[j] = nan_mag if nan else mag

    return kernel
