"""Rounding modes other than nearest-even, and the counter-based generator behind stochastic
rounding.

Every mode is one integer add before the truncating shift of the integer-only path
(:func:`fp8kit._kernels.bits.encode_generic`): the mode only decides what is added.

==================  =====================================================================
mode                added to the mantissa before dropping ``sh`` bits
==================  =====================================================================
nearest_even        ``2**(sh-1) - 1`` plus the lowest kept bit
nearest_away        ``2**(sh-1)``
toward_zero         0
toward_positive     ``2**sh - 1`` for positive values, 0 for negative ones
toward_negative     ``2**sh - 1`` for negative values, 0 for positive ones
==================  =====================================================================

Stochastic rounding instead keeps the truncated code and adds 1 when
``floor(f * 2**B) + R >= 2**B``, with ``f`` the exact fractional position of the value
between its two neighbouring codes, ``B = random_bits`` and ``R`` the top ``B`` bits of the
element's random word: it rounds up with probability ``floor(f * 2**B) / 2**B``.  ``f`` is
computed from the true shift (not the capped one the nearest modes can use), so values far
below the smallest subnormal round up with the right, tiny, probability.

Stochastic rounding draws its random word from Philox4x32-10 (Salmon et al., SC'11) keyed by
the seed and counted by the element's index in C order, so a result depends only on (seed,
index, value): not on thread count, chunking or device.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bits import _finish_with, cast_like, zero_of

NEAREST_EVEN, NEAREST_AWAY, TOWARD_ZERO, TOWARD_POSITIVE, TOWARD_NEGATIVE, STOCHASTIC = range(6)
MODES = {
    "nearest_even": NEAREST_EVEN,
    "nearest_away": NEAREST_AWAY,
    "toward_zero": TOWARD_ZERO,
    "toward_positive": TOWARD_POSITIVE,
    "toward_negative": TOWARD_NEGATIVE,
    "stochastic": STOCHASTIC,
}

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


@njit(inline="always")
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32 with 10 rounds: the four uint32 output words for counter (c0..c3) and key
    (k0, k1).  Products are formed in 64 bits; every word stays below 2**32."""
    for _ in range(10):
        p0 = _M0 * np.uint64(c0)
        p1 = _M1 * np.uint64(c2)
        n0 = cast_like((p1 >> _S32) ^ np.uint64(c1) ^ np.uint64(k0), k0)
        n2 = cast_like((p0 >> _S32) ^ np.uint64(c3) ^ np.uint64(k1), k0)
        c0, c1, c2, c3 = n0, cast_like(p1 & _LO, k0), n2, cast_like(p0 & _LO, k0)
        k0 = cast_like(np.uint64(k0) + np.uint64(_W0), k0)
        k1 = cast_like(np.uint64(k1) + np.uint64(_W1), k0)
    return c0, c1, c2, c3


@njit(inline="always")
def random_word(index, k0, k1):
    """The uint32 random word of element ``index`` (uint64): word 0 of Philox4x32-10 with
    counter (index low, index high, 0, 0) and key (k0, k1)."""
    zero = k0 - k0
    lo = cast_like(index & _LO, k0)
    hi = cast_like(index >> _S32, k0)
    return philox4x32_10(lo, hi, zero, zero, k0, k1)[0]


@njit(inline="always")
def _increment(mode, sh, one, kept_lsb, negative):
    """What a deterministic mode adds below the kept bits (see the module docstring)."""
    if mode == NEAREST_EVEN:
        return ((one << (sh - one)) - one) + kept_lsb
    if mode == NEAREST_AWAY:
        return one << (sh - one)
    if mode == TOWARD_ZERO:
        return zero_of(one)
    if mode == TOWARD_POSITIVE:
        return zero_of(one) if negative else (one << sh) - one
    return (one << sh) - one if negative else zero_of(one)  # TOWARD_NEGATIVE


@njit(inline="always")
def _stochastic_up(low, sh_true, rnd, random_bits, one, limit):
    """1 if the value rounds up: ``floor(f * 2**B) + R >= 2**B`` with ``f = low / 2**sh_true``
    (exact), written so that no intermediate needs more than 32 bits of R."""
    rb = cast_like(random_bits, one)
    if sh_true >= rb:
        d = sh_true - rb
        f_b = low >> (d if d < limit else limit)
    else:
        f_b = low << (rb - sh_true)
    r = cast_like(rnd, one) >> cast_like(32 - random_bits, one)
    max_b = cast_like((np.uint64(1) << np.uint64(random_bits)) - np.uint64(1), one)
    return one if r > max_b - f_b else zero_of(one)


@njit(inline="always")
def encode_mode(v, p, q, o, mode, rnd, random_bits):
    """Round source bits ``v`` to a format code in ``mode`` (integer-only path).

    ``o`` = (overflow code for positive values, for negative values): directed modes
    overflow to +-max on the side they round toward zero.
    """
    abs_mask, one = p[0], p[1]
    src_m, mant_mask, hidden, emin_field, cap, m_bits, base_sh = q
    a = v & abs_mask
    negative = v > abs_mask
    e = a >> src_m
    m = (a & mant_mask) | (hidden if e != zero_of(one) else zero_of(one))
    ee = e if e > one else one
    extra = emin_field - ee if ee < emin_field else zero_of(one)
    # every shift from cap = src_m + 2 on drops all of m (< 2**(src_m + 1)); capping the
    # total keeps it below the lane width (a wider shift is undefined in LLVM)
    sh_full = base_sh + extra
    sh = sh_full if sh_full < cap else cap
    if mode == STOCHASTIC:
        low = m & ((one << sh) - one)
        limit = cap - one  # low < 2**(cap - 1): a shift by cap - 1 already gives 0
        r = (m >> sh) + _stochastic_up(low, sh_full, rnd, random_bits, one, limit)
    else:
        r = (m + _increment(mode, sh, one, (m >> sh) & one, negative)) >> sh
    k = ee - emin_field if ee > emin_field else zero_of(one)
    code = (k << m_bits) + r
    return _finish_with(v, a, code, p, o[1] if negative else o[0])


@njit(inline="always")
def encode_unsigned_mode(v, q, mode, rnd, random_bits):
    """:func:`fp8kit._kernels.bits.encode_unsigned` in a rounding mode.  Nearest modes keep
    ml_dtypes' rule (ties up); toward_positive rounds the magnitude up to the next power of
    two; toward_zero and toward_negative round it down (the format has no sign and no zero,
    so values below the smallest give the smallest); stochastic rounds up with probability
    (x - 2**k) / 2**k."""
    abs_mask, one, src_m, half, rebias, src_inf, max_code, ovf, inf_res, nan_code, c1, c0 = q
    zero = zero_of(one)
    a = v & abs_mask
    mant_mask = (one << src_m) - one
    if mode == NEAREST_EVEN or mode == NEAREST_AWAY:
        inc = half
    elif mode == TOWARD_POSITIVE:
        inc = mant_mask
    else:
        inc = zero
    limit = src_m
    if mode == STOCHASTIC:
        e = cast_like(a >> src_m, one) + _stochastic_up(
            a & mant_mask, src_m, rnd, random_bits, one, limit
        )
    else:
        e = cast_like((a + inc) >> src_m, one)
    code = e - rebias if e > rebias else zero
    if rebias == zero:
        # 2**-bias is a source subnormal: below 2**(1 - bias) the position between codes 0
        # and 1 is (a - c0) / c0, scaled here to the source's mantissa
        frac = (a - c0) << one if a > c0 else zero
        if mode == STOCHASTIC:
            low = _stochastic_up(frac, src_m, rnd, random_bits, one, limit)
        else:
            low = cast_like((frac + inc) >> src_m, one)
        code = low if a < c1 else code
    if mode == NEAREST_EVEN or mode == NEAREST_AWAY:
        code = (one if a > c0 else zero) if a < c1 else code  # ml_dtypes' rule
    if mode == TOWARD_ZERO or mode == TOWARD_NEGATIVE:
        ovf = max_code
    code = ovf if code > max_code else code
    code = inf_res if a == src_inf else code
    bad = (v != a) | (a == zero) | (a > src_inf)
    return nan_code if bad else code
