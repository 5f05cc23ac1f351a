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
the seed; the counter and word are a fixed function of the element's index in C order (see
:func:`random_word`), so a result depends only on (seed, index, value): not on thread count,
chunking or device.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from .bits import _finish_with, as_float, cast_like, shl, shr, to_unsigned_truncated, zero_of

NEAREST_EVEN, NEAREST_AWAY, TOWARD_ZERO, TOWARD_POSITIVE, TOWARD_NEGATIVE, STOCHASTIC = range(6)
TO_ODD, NEAREST_ZERO = 6, 7
STOCHASTIC_C, STOCHASTIC_B, STOCHASTIC_ODD, STOCHASTIC_HALF = 8, 9, 10, 11
MODES = {
    "nearest_even": NEAREST_EVEN,
    "nearest_away": NEAREST_AWAY,
    "toward_zero": TOWARD_ZERO,
    "toward_positive": TOWARD_POSITIVE,
    "toward_negative": TOWARD_NEGATIVE,
    "stochastic": STOCHASTIC,
    "to_odd": TO_ODD,
    "nearest_zero": NEAREST_ZERO,
    "stochastic_c": STOCHASTIC_C,
    "stochastic_b": STOCHASTIC_B,
    "stochastic_odd": STOCHASTIC_ODD,
    "stochastic_half": STOCHASTIC_HALF,
}
#: Modes that draw a random word per element (take ``seed`` and ``random_bits``).
STOCHASTIC_MODES = frozenset({STOCHASTIC, STOCHASTIC_C, STOCHASTIC_B, STOCHASTIC_ODD,
                              STOCHASTIC_HALF})  # fmt: skip
#: The modes of issue 8 (the unsigned, power-of-two formats take only these).
CLASSIC_MODES = frozenset(range(6))

#: How a kernel rounds (compiled in; the stochastic variants' mode number is read at run
#: time, so that one compiled kernel serves them all): deterministic modes (an add and
#: a shift, with per-mode masks), ``stochastic`` (its own constant-shift path), and the
#: other stochastic modes (the residual rounded to ``random_bits`` bits first).
KIND_DET, KIND_SR, KIND_VAR = 0, 1, 2


def is_stochastic(mode: int) -> bool:
    """Does the mode draw random words?"""
    return mode in STOCHASTIC_MODES


def mode_kind(mode: int) -> int:
    """The kernel kind (KIND_*) of a mode number."""
    if mode == STOCHASTIC:
        return KIND_SR
    return KIND_VAR if mode in STOCHASTIC_MODES else KIND_DET


_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


@njit(inline="always")
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32 with 10 rounds: the four uint32 output words for counter (c0..c3) and key
    (k0, k1).  Every word is held in a 64-bit lane below 2**32, so that the 32 x 32 -> 64
    products map onto one vector multiply (pmuludq) and no lane-width conversions are
    needed between rounds."""
    a0, a1, a2, a3 = np.uint64(c0), np.uint64(c1), np.uint64(c2), np.uint64(c3)
    b0, b1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0 = _M0 * a0
        p1 = _M1 * a2
        a0, a1, a2, a3 = (p1 >> _S32) ^ a1 ^ b0, p1 & _LO, (p0 >> _S32) ^ a3 ^ b1, p0 & _LO
        b0 = (b0 + np.uint64(_W0)) & _LO
        b1 = (b1 + np.uint64(_W1)) & _LO
    return cast_like(a0, k0), cast_like(a1, k0), cast_like(a2, k0), cast_like(a3, k0)


#: Philox counters per block of random words.  With ``S = parts(random_bits)`` parts per
#: 32-bit word (1, 2 or 4: a word serves S elements when they need at most 32 / S bits),
#: element ``i`` uses part ``h = (i // K) % S`` of word ``t = (i // (K * S)) % 4`` of the
#: call with counter ``(i // (4 * K * S)) * K + i % K``.  So a kernel fills ``buf[4 * K]``
#: from K calls (one vectorized pass), then walks 4 * S contiguous runs of K elements, run
#: (t, h) reading ``buf[t]`` with a fixed shift, and every bit drawn is used.
K = 1024


def parts(random_bits: int) -> int:
    """Elements served by one 32-bit random word: 4 up to 8 bits, 2 up to 16, else 1."""
    return 4 if random_bits <= 8 else (2 if random_bits <= 16 else 1)


@njit(inline="always")
def word_part(word, h, split):
    """Part ``h`` of ``split`` of a 32-bit word, moved to the word's top bits."""
    if split == 1:
        return word
    width = 32 // split
    return cast_like(
        cast_like(word >> cast_like(h * width, word), word) << cast_like(32 - width, word), word
    )


@njit(inline="always")
def random_word(index, k0, k1, split):
    """The random word (in its top bits) of element ``index`` (uint64) for key (k0, k1),
    ``split`` = :func:`parts` of the random bits; see :data:`K`.  Kernels that fill whole
    blocks with :func:`fill_block` draw the same words."""
    zero = k0 - k0
    s = np.uint64(split)
    ctr = (index // (np.uint64(4 * K) * s)) * np.uint64(K) + (index & np.uint64(K - 1))
    t = (index // (np.uint64(K) * s)) & np.uint64(3)
    h = (index // np.uint64(K)) % s
    w0, w1, w2, w3 = philox4x32_10(
        cast_like(ctr & _LO, k0), cast_like(ctr >> _S32, k0), zero, zero, k0, k1
    )
    w = w0 if t == 0 else (w1 if t == 1 else (w2 if t == 2 else w3))
    return word_part(w, cast_like(h, k0), split)


@njit(inline="always")
def fill_block(buf, block, k0, k1):
    """The random words of block ``block``: ``buf[t * K + g]`` is word t of the call with
    counter ``block * K + g`` (see :data:`K` for the elements that use it)."""
    zero = k0 - k0
    first = np.uint64(block) * np.uint64(K)
    for g in range(K):
        ctr = first + np.uint64(g)
        w0, w1, w2, w3 = philox4x32_10(
            cast_like(ctr & _LO, k0), cast_like(ctr >> _S32, k0), zero, zero, k0, k1
        )
        buf[g] = w0
        buf[K + g] = w1
        buf[2 * K + g] = w2
        buf[3 * K + g] = w3


@njit(inline="always")
def mode_masks(mode, one):
    """Per-mode masks (all ones or 0) of the deterministic modes, for :func:`_det_round`:
    (half, kept bit, one, ones if positive, ones if negative, odd).  Computed once per call
    where the mode is read at run time; folded away where it is a compile-time constant."""
    zero = zero_of(one)
    ones = cast_like(zero - one, one)
    nearest = mode == NEAREST_EVEN or mode == NEAREST_AWAY or mode == NEAREST_ZERO
    return (
        ones if nearest else zero,
        ones if mode == NEAREST_EVEN else zero,
        ones if mode == NEAREST_AWAY else zero,
        ones if mode == TOWARD_POSITIVE else zero,
        ones if mode == TOWARD_NEGATIVE else zero,
        ones if mode == TO_ODD else zero,
    )


@njit(inline="always")
def _det_round(m, sh, one, negative, mm, kept_lsb):
    """``m`` shifted right by ``sh`` in a deterministic mode given by its masks ``mm``
    (:func:`mode_masks`): what is added below the kept bits is ``2**(sh-1) - 1`` (nearest
    modes) plus the kept lowest bit (nearest_even) or 1 (nearest_away), ``2**sh - 1``
    (directed away from zero on that side, and to_odd where the kept lowest bit is 0: any
    dropped bit then carries into it, and only into it) or nothing.  Branch-free, so that
    a run-time mode costs a few selects.  ``kept_lsb``: the parity of the truncated code
    (the kept lowest bit of m, or with no mantissa bits, P3109's precision 1, the parity of
    the exponent field: the codes of 2**e and 2**(e+1) differ by one)."""
    half_m, lsb_m, one_m, pos_m, neg_m, odd_m = mm
    zero = zero_of(one)
    ones = cast_like(shl(one, sh, one) - one, one)
    even_m = odd_m if kept_lsb == zero else zero
    dir_m = cast_like((neg_m if negative else pos_m) | even_m, one)
    inc = cast_like(
        cast_like(cast_like(ones >> one, one) & half_m, one)
        + cast_like(kept_lsb & lsb_m, one)
        + cast_like(one & one_m, one)
        + cast_like(ones & dir_m, one),
        one,
    )
    return shr(cast_like(m + inc, one), sh, one)


@njit(inline="always")
def _variant_up(low, sh_true, rnd, random_bits, one, limit, mode):
    """1 if the value rounds up in stochastic_c / _b / _odd / _half: the exact fraction
    ``f = low / 2**sh_true`` is first rounded to ``B = random_bits`` bits (nearest-even,
    nearest ties up, nearest ties to odd) giving ``F`` in 0..2**B, then the value rounds up
    when ``F + R >= 2**B``; stochastic_half rounds an inexact value up when R's top bit is
    set.  ``low < 2**limit``; shifts of ``limit`` or more give 0.  Branch-free (selects
    only: the mode is read at run time and the loop must still vectorize), and every shift
    stays below the lane width."""
    zero = zero_of(one)
    rb = cast_like(random_bits, one)
    r = cast_like(cast_like(rnd, one) >> cast_like(32 - random_bits, one), one)
    max_b = cast_like((np.uint64(1) << np.uint64(random_bits)) - np.uint64(1), one)
    # F = floor(f * 2**B), and the bits below it (when sh_true > B)
    pos = sh_true > rb
    d = cast_like(sh_true - rb, one) if pos else zero
    far = d > limit  # every bit of low is below the half: F = 0, no tie
    dd = limit if far else d
    fl_down = shr(low, dd, one)
    fl_up = shl(low, cast_like(rb - sh_true, one) if not pos else zero, one)
    fl = fl_down if pos else fl_up
    rem = cast_like(low - shl(fl_down, dd, one), one)
    half = shl(one, cast_like(dd - one, one) if dd != zero else zero, one)
    near = pos & (not far)
    gt = near & (rem > half)
    tie = near & (rem == half)
    odd = cast_like(fl & one, one) != zero
    tie_up = (
        ((mode == STOCHASTIC_C) & odd)
        | (mode == STOCHASTIC_B)
        | ((mode == STOCHASTIC_ODD) & (not odd))
    )
    upf = gt | (tie & tie_up)
    full = upf & (fl == max_b)  # F == 2**B: always up
    f_b = cast_like(fl + (one if upf else zero), one)
    up = full | (r > cast_like(max_b - f_b, one))
    top = cast_like(r >> cast_like(random_bits - 1, one), one) != zero
    half_up = (low != zero) & top
    return one if (half_up if mode == STOCHASTIC_HALF else up) else zero


@njit(inline="always")
def _stochastic_up(low, sh_true, rnd, random_bits, one, limit, min_shift):
    """1 if the value rounds up: ``floor(f * 2**B) + R >= 2**B`` with ``f = low / 2**sh_true``
    (exact), written so that no intermediate needs more than 32 bits of R."""
    rb = cast_like(random_bits, one)
    d = cast_like(sh_true - rb, one)
    d = d if d < limit else limit
    if random_bits <= min_shift:  # (a compile-time constant) sh_true >= rb always
        f_b = shr(low, d, one)
    else:
        f_b = shr(low, d, one) if sh_true >= rb else shl(low, rb - sh_true, one)
    r = cast_like(cast_like(rnd, one) >> cast_like(32 - random_bits, one), one)
    max_b = cast_like((np.uint64(1) << np.uint64(random_bits)) - np.uint64(1), one)
    return one if r > cast_like(max_b - f_b, one) else zero_of(one)


@njit(inline="always")
def encode_mode(v, p, q, o, mode, rnd, random_bits):
    """Round source bits ``v`` to a format code in ``mode`` (a compile-time constant;
    integer-only path).

    ``o`` = (overflow code for positive values, for negative values): directed modes
    overflow to +-max on the side they round toward zero.
    """
    kind = KIND_SR if mode == STOCHASTIC else (
        KIND_VAR if (mode == STOCHASTIC_C) | (mode == STOCHASTIC_B) | (mode == STOCHASTIC_ODD)
        | (mode == STOCHASTIC_HALF) else KIND_DET
    )  # fmt: skip
    return encode_mode_kind(v, p, q, o, mode, kind, mode_masks(mode, p[1]), rnd, random_bits)


@njit(inline="always")
def encode_mode_kind(v, p, q, o, mode, kind, mm, rnd, random_bits):
    """:func:`encode_mode` with the kernel kind (KIND_*) a compile-time constant and the
    mode (within the kind) possibly read at run time; ``mm``: :func:`mode_masks` of the
    mode (unused by stochastic kinds)."""
    abs_mask, one = p[0], p[1]
    src_m, mant_mask, hidden, emin_field, cap, m_bits, base_sh = q
    zero = zero_of(one)
    a = cast_like(v & abs_mask, one)
    negative = v > abs_mask
    e = shr(a, src_m, one)
    m = cast_like(cast_like(a & mant_mask, one) | (hidden if e != zero else zero), one)
    ee = e if e > one else one
    extra = cast_like(emin_field - ee, one) if ee < emin_field else zero
    # every shift from cap = src_m + 2 on drops all of m (< 2**(src_m + 1)); capping the
    # total keeps it below the lane width (a wider shift is undefined in LLVM)
    sh_full = cast_like(base_sh + extra, one)
    sh = sh_full if sh_full < cap else cap
    if kind == KIND_SR and random_bits <= base_sh:
        # (the common case, decided at compile time) add R's bits right below the kept
        # ones.  A shift past the lane's top bit first drops bits of m that cannot reach
        # the R's precision: floor(floor(m / 2**a) / 2**b) == floor(m / 2**(a + b)).
        top = cast_like(31 if abs_mask == cast_like(0x7FFFFFFF, abs_mask) else 63, one)
        over = cast_like(sh_full - top, one) if sh_full > top else zero
        m2 = shr(m, over if over < top else top, one)
        sh2 = sh_full if sh_full < top else top
        r_b = cast_like(cast_like(rnd, one) >> cast_like(32 - random_bits, one), one)
        inc = shl(r_b, sh2 - cast_like(random_bits, one), one)
        r = shr(m2 + inc, sh2, one)
    elif kind == KIND_SR:
        low = cast_like(m & cast_like(shl(one, sh, one) - one, one), one)
        limit = cast_like(cap - one, one)  # low < 2**(cap - 1): that shift gives 0
        up = _stochastic_up(low, sh_full, rnd, random_bits, one, limit, base_sh)
        r = cast_like(shr(m, sh, one) + up, one)
    elif kind == KIND_VAR:
        low = cast_like(m & cast_like(shl(one, sh, one) - one, one), one)
        limit = cast_like(cap - one, one)  # low < 2**(cap - 1): that shift gives 0
        up = _variant_up(low, sh_full, rnd, random_bits, one, limit, mode)
        r = cast_like(shr(m, sh, one) + up, one)
    k = cast_like(ee - emin_field, one) if ee > emin_field else zero
    if kind != KIND_SR and kind != KIND_VAR:
        parity = cast_like(cast_like(shl(k, m_bits, one) + shr(m, sh, one), one) & one, one)
        r = _det_round(m, sh, one, negative, mm, parity)
    code = cast_like(shl(k, m_bits, one) + r, one)
    return _finish_with(v, a, code, p, o[1] if negative else o[0])


@njit(inline="always")
def flush_code(code, p, m_bits):
    """``flush_subnormals``: a subnormal code becomes the zero of its sign (+0 in formats
    without -0); other codes are kept.  ``p``: the tuple of
    :func:`fp8kit._kernels.codec._params` of a signed format, ``m_bits`` its mantissa
    bits."""
    one = p[1]
    zero = zero_of(one)
    c = cast_like(code, one)
    # the format's sign bit in a code; for unsigned P3109 formats 0 (saturating) or the NaN
    # code a negative value's magnitude is or-ed with (not a power of two): no sign to drop
    csign = cast_like(shr(p[13], p[14], one), one)
    single = cast_like(csign & cast_like(csign - one, one), one) == zero
    mag = cast_like(c & cast_like(csign - one, one), one) if single else c
    signed_zero = cast_like(c & csign, one) if p[15] else zero
    sub = (mag != zero) & (mag < cast_like(shl(one, m_bits, one), one))
    return signed_zero if sub else c


@njit(inline="always")
def encode_stochastic_fast(v, p, sp, o, rnd, random_bits):
    """Stochastic rounding with constant shifts only, where :func:`stochastic_params` allows
    it; the same bits as :func:`encode_mode`.

    The magnitude is first written as a fixed-point number ``t`` whose ``sh`` lowest bits are
    the fraction below the format's last kept bit: in the normal range that is the source
    bits with the exponent rebased (as in :func:`fp8kit._kernels.bits.encode_fast`); below
    the format's smallest normal ``2**e`` it is ``|x| * 2**(src_m - e)`` converted to an
    integer with truncation (one multiply by a power of two, exact, and one conversion).
    Truncation keeps ``floor(f * 2**B)`` (``B <= sh``), all the rule looks at, and
    ``t + (R << (sh - B))`` carries into the kept bits exactly when
    ``floor(f * 2**B) + R >= 2**B``.
    """
    abs_mask, one = p[0], p[1]
    use_magic, scale, min_normal, rb, sh = sp
    a = cast_like(v & abs_mask, one)
    t = cast_like(a + rb, one)
    if use_magic:
        # |x| < 2**e here, so the product is below 2**src_m: the signed conversion is exact
        # (where a >= min_normal it may overflow, but that lane is not selected)
        t = to_unsigned_truncated(as_float(a) * scale, one) if a < min_normal else t
    r_b = cast_like(cast_like(rnd, one) >> cast_like(32 - random_bits, one), one)
    inc = shl(r_b, sh - cast_like(random_bits, one), one)
    code = shr(t + inc, sh, one)
    return _finish_with(v, a, code, p, o[1] if v > abs_mask else o[0])


@njit(inline="always")
def encode_unsigned_mode(v, q, mode, rnd, random_bits, in_range=False):
    """:func:`fp8kit._kernels.bits.encode_unsigned` in a rounding mode.  Nearest modes keep
    ml_dtypes' rule (ties up); toward_positive rounds the magnitude up to the next power of
    two; toward_zero and toward_negative round it down (the format has no sign and no zero,
    so values below the smallest give the smallest); stochastic rounds up with probability
    (x - 2**k) / 2**k.  ``in_range``: every exponent of the source layout lands in the
    format's range, neither below nor above it (float16's words, but for its subnormals:
    see fp8kit._kernels.lean), so that no rule for either is compiled."""
    abs_mask, one, src_m, half, rebias, src_inf, max_code, ovf, inf_res, nan_code, c1, c0 = q
    # (in the words' width: Numba types uint16 & uint16, and uint16 - uint16, as int64, and
    # bfloat16's 16-bit lanes would run in 64-bit ones)
    zero = cast_like(zero_of(one), one)
    a = cast_like(v & abs_mask, one)
    mant_mask = cast_like(shl(one, src_m, one) - one, one)
    if mode == NEAREST_EVEN or mode == NEAREST_AWAY:
        inc = half
    elif mode == TOWARD_POSITIVE:
        inc = mant_mask
    else:
        inc = zero
    limit = src_m
    if mode == STOCHASTIC:
        e = shr(a, src_m, one) + _stochastic_up(
            a & mant_mask, src_m, rnd, random_bits, one, limit, src_m
        )
    else:
        # (in the source's width: Numba types uint32 + uint32 as 64 bits, half the lanes;
        # no sum here reaches 2**32)
        e = shr(cast_like(a + inc, one), src_m, one)
    if in_range:
        # (float16's words: the rebias is negative, stored wrapped in the words' width)
        code0 = cast_like(e - rebias, one)
    else:
        code0 = cast_like(e - rebias, one) if e > rebias else zero
    # (code0 a name of its own: stochastic's ``low`` is 64-bit, and a variable keeps one
    # type wherever it is used alone, see fp8kit._kernels.native._retyped)
    code = code0
    nearest = mode == NEAREST_EVEN or mode == NEAREST_AWAY
    if not in_range and not nearest and rebias == zero:
        # 2**-bias is a source subnormal: below 2**(1 - bias) the position between codes 0
        # and 1 is (a - c0) / c0, scaled here to the source's mantissa (the nearest modes
        # replace it by ml_dtypes' rule below: LLVM did not drop the overwritten work, and
        # float32 -> float8_e8m0fnu ran 1.9x slower)
        frac = cast_like((a - c0) << one, one) if a > c0 else zero
        if mode == STOCHASTIC:
            low = _stochastic_up(frac, src_m, rnd, random_bits, one, limit, src_m)
        else:
            low = shr(cast_like(frac + inc, one), src_m, one)
        code = low if a < c1 else code0
    if nearest and not in_range:
        code = (one if a > c0 else zero) if a < c1 else code  # ml_dtypes' rule
    if mode == TOWARD_ZERO or mode == TOWARD_NEGATIVE:
        ovf = max_code
    if not in_range:
        code = ovf if code > max_code else code
    code = inf_res if a == src_inf else code
    bad = (v != a) | (a == zero) | (a > src_inf)
    return nan_code if bad else code


def _words_from_py(n, offset, k0, k1, split):
    out = np.empty(n, np.uint32)
    for i in range(n):
        out[i] = random_word(np.uint64(offset + i), k0, k1, split)
    return out


@functools.cache
def _words_from():
    """The compiled :func:`_words_from_py`, on first use (at import, ``cache=True`` raised
    where no cache location is writable: a read-only install could not import fp8kit)."""
    try:
        return njit(cache=True)(_words_from_py)
    except RuntimeError:  # no writable cache location: compiled in memory
        return njit(_words_from_py)


def random_words(n: int, seed: int, random_bits: int = 16, offset: int = 0) -> np.ndarray:
    """(For tests and comparisons.)  The 32-bit random words the stochastic modes draw for
    flat indices ``offset .. offset + n - 1`` with this int ``seed`` and ``random_bits``:
    element ``i`` uses ``R = words[i] >> (32 - random_bits)`` (gfloat's and pychop's
    ``srbits`` with ``srnumbits = random_bits``)."""
    s = int(seed)
    return _words_from()(
        int(n), int(offset), np.uint32(s & 0xFFFFFFFF), np.uint32(s >> 32), parts(random_bits)
    )
