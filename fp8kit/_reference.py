"""Readable scalar oracle in exact rational arithmetic.

Slow and obviously correct: the tests check the compiled kernels against it.  It implements
round-to-nearest-even from the exact input value and the ONNX Cast-21 float8 rules for
overflow, Inf, NaN and -0, extended to every format.
"""

from __future__ import annotations

import math
from fractions import Fraction

from .formats import FloatFormat

__all__ = ["encode_value", "round_value", "decode_code"]


def _floor_log2(q: Fraction) -> int:
    """floor(log2(q)) for q > 0, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    return e


def _round_half_even(q: Fraction) -> int:
    n = math.floor(q)
    rest = q - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return n


def _special_codes(fmt: FloatFormat, negative: bool) -> tuple[int, int | None, int]:
    """(NaN code, Inf code or None, max code) carrying the sign where the format can."""
    sign = fmt.sign_mask if negative else 0
    if fmt.nan_code is None:  # "finite": never asked for (no overflow to NaN)
        nan = -1
    else:
        nan = fmt.nan_code if not fmt.has_negative_zero else fmt.nan_code | sign
    inf = None if fmt.inf_code is None else fmt.inf_code | sign
    return nan, inf, fmt.max_code | sign


def _unsigned_negative(code: int, x, fmt: FloatFormat, saturate: bool, rounding: str) -> int:
    """A negative input to an unsigned P3109 format (pychop's rule; gfloat leaves it
    undefined): 0 if it rounds to zero, when saturating, or when rounding toward zero or
    +Inf (the nearest value in that direction); NaN otherwise.  -Inf follows nearest-even's
    rule in every mode, as pychop does: 0 when saturating, NaN otherwise."""
    if isinstance(x, float) and math.isinf(x):
        return 0 if saturate else fmt.nan_code
    if code == 0 or saturate or rounding in ("toward_zero", "toward_positive"):
        return 0
    return fmt.nan_code


def _round_mode(t: Fraction, negative: bool, rounding: str, rnd: int, random_bits: int) -> int:
    """t >= 0 rounded to an integer in a rounding mode (for ``stochastic``: up when
    floor(frac(t) * 2**B) + R >= 2**B, R the top B bits of the 32-bit word ``rnd``; the
    other stochastic modes round frac(t) * 2**B to an integer F first, see
    docs/rounding.md)."""
    n = math.floor(t)
    frac = t - n
    if rounding == "nearest_even":
        return _round_half_even(t)
    if rounding == "nearest_away":
        return n + (frac >= Fraction(1, 2))
    if rounding == "toward_zero":
        return n
    if rounding == "toward_positive":
        return n + (frac > 0 and not negative)
    if rounding == "toward_negative":
        return n + (frac > 0 and negative)
    if rounding == "to_odd":  # truncate; an inexact result takes the odd neighbour
        return n | 1 if frac > 0 else n
    if rounding == "nearest_zero":  # nearest, ties toward zero
        return n + (frac > Fraction(1, 2))
    b = random_bits
    r = rnd >> (32 - b)  # the top B bits of the word
    if rounding == "stochastic":
        return n + (math.floor(frac * 2**b) + r >= 2**b)
    if rounding == "stochastic_half":  # up or down with probability 1/2 (R's top bit)
        return n + (frac > 0 and (r >> (b - 1)) & 1 == 1)
    # the fraction rounded to B bits first, then compared: F + R >= 2**B
    d = frac * 2**b
    fl = math.floor(d)
    rest = d - fl
    if rounding == "stochastic_c":  # gfloat Stochastic: F nearest, ties to even
        f_b = fl + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and fl % 2 == 1))
    elif rounding == "stochastic_b":  # gfloat StochasticFast: F nearest, ties up
        f_b = fl + (rest >= Fraction(1, 2))
    elif rounding == "stochastic_odd":  # gfloat StochasticOdd: F nearest, ties to odd
        f_b = fl + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and fl % 2 == 0))
    else:
        raise ValueError(f"unknown rounding {rounding!r}")
    return n + (f_b + r >= 2**b)


def encode_value(
    x: float | Fraction,
    fmt: FloatFormat,
    *,
    saturate: bool = True,
    rounding: str = "nearest_even",
    rnd: int = 0,
    random_bits: int = 32,
    flush_subnormals: bool = False,
) -> int:
    """Code of ``x`` in ``fmt``: one rounding of the exact value, nearest-even by default
    (``rnd``: the element's 32-bit random word, for the stochastic modes).  With
    ``flush_subnormals`` a subnormal result becomes the zero of its sign (+0 in formats
    without -0): tininess is judged after rounding.

    Examples
    --------
    >>> from fp8kit import get_format
    >>> from fp8kit._reference import encode_value
    >>> hex(encode_value(1.0 + 2**-4 + 2**-40, get_format("float8_e4m3fn")))
    '0x39'
    """
    if fmt.specials == "unsigned":
        return _encode_unsigned(x, fmt, saturate, rounding, rnd, random_bits)

    def flushed(code: int) -> int:
        mag = code & ~fmt.sign_mask if code >= 0 else code
        if flush_subnormals and 0 < mag < (1 << fmt.mantissa_bits):
            return code & fmt.sign_mask if fmt.has_negative_zero else 0
        return code

    if not fmt.signed:  # unsigned P3109: round the magnitude, then the rule for negatives
        negative = (x < 0) if not isinstance(x, float) else math.copysign(1.0, x) < 0
        if not negative or (isinstance(x, float) and math.isnan(x)):
            return flushed(_encode_signed(x, fmt, saturate, rounding, rnd, random_bits))
        # (the rule sees the rounded magnitude before any flush: a negative value that
        # rounds to a subnormal is NaN when not saturating, as for any other magnitude)
        mag = _encode_signed(-x, fmt, saturate, rounding, rnd, random_bits, flip=True)
        return _unsigned_negative(mag, x, fmt, saturate, rounding)
    return flushed(_encode_signed(x, fmt, saturate, rounding, rnd, random_bits))


def _encode_signed(x, fmt, saturate, rounding, rnd, random_bits, flip=False):
    """:func:`encode_value` for formats with zero; ``flip``: x is the magnitude of a
    negative value (unsigned formats), so directed modes round it the other way."""
    if isinstance(x, float) and math.isnan(x):
        if not fmt.has_nan:  # ml_dtypes: zero of the opposite sign
            return 0 if math.copysign(1.0, x) < 0 else fmt.sign_mask
        return _special_codes(fmt, math.copysign(1.0, x) < 0)[0]
    if not fmt.has_nan:  # no Inf and no NaN to overflow to
        saturate = True
    negative = (x < 0) if not isinstance(x, float) else math.copysign(1.0, x) < 0
    nan, inf, maxc = _special_codes(fmt, negative)
    if isinstance(x, float) and math.isinf(x):
        if saturate == "propagate" and inf is not None:  # P3109's SatPropagate
            return inf
        if saturate:
            # Cast-21 saturate table: +/-Inf -> +/-FLT_MAX (E4M3FN, E5M2), NaN (fnuz).
            return nan if fmt.specials == "fnuz" else maxc
        return inf if inf is not None else nan
    q = abs(Fraction(x))
    sign = fmt.sign_mask if negative else 0
    if q == 0:
        return sign if fmt.has_negative_zero else 0
    m = fmt.mantissa_bits
    e = max(_floor_log2(q), fmt.minexp)
    quantum = Fraction(2) ** (e - m)
    # |x| -> k * quantum
    k = _round_mode(q / quantum, negative != flip, rounding, rnd, random_bits)
    if (
        m == 0
        and rounding == "nearest_even"
        and q / quantum - math.floor(q / quantum) == Fraction(1, 2)
    ):
        # no mantissa bits (P3109's precision 1): the tie goes to the even *code*, and
        # the codes of 2**e and 2**(e+1) differ by one (gfloat, the draft)
        low = math.floor(q / quantum)
        k = low if (low == 0 or (e - fmt.minexp + 1) % 2 == 0) else low + 1
    if m == 0 and rounding == "to_odd" and q / quantum != math.floor(q / quantum):
        # likewise to_odd takes the neighbour with the odd *code*
        low = math.floor(q / quantum)
        k = low if (low != 0 and (e - fmt.minexp + 1) % 2 == 1) else low + 1
    if k == 0:
        return sign if fmt.has_negative_zero else 0
    if k == 1 << (m + 1):  # the mantissa carried into the next binade
        e, k = e + 1, 1 << m
    if k < (1 << m):  # subnormal (only possible at e == minexp)
        mag = k
    else:
        mag = ((e - fmt.minexp + 1) << m) | (k - (1 << m))
    if mag > fmt.max_code:  # "[x] > FLT_MAX"
        toward_zero = rounding == "toward_zero" or rounding == (
            "toward_negative" if negative == flip else "toward_positive"
        )
        if saturate or toward_zero:  # directed modes stop at max on their side
            return maxc
        return inf if inf is not None else nan
    return mag | sign


def _encode_unsigned(
    x: float | Fraction,
    fmt: FloatFormat,
    saturate: bool,
    rounding: str = "nearest_even",
    rnd: int = 0,
    random_bits: int = 32,
) -> int:
    """ml_dtypes' rounding to float8_e8m0fnu, for any bias: powers of two, nearest with ties
    up; below 2**(1 - bias) (where ml_dtypes rounds as if code 0 were a subnormal of quantum
    2**(1 - bias)) code 1 above 2**-bias and code 0 otherwise; no zero, no sign.

    Other modes: toward_positive rounds up to the next power of two, toward_zero and
    toward_negative down (to 2**-bias at least); stochastic goes up from 2**k with
    probability (x - 2**k) / 2**k (0 below 2**-bias).  The other modes are refused, as
    by the kernels."""
    if rounding not in (
        "nearest_even", "nearest_away", "toward_zero", "toward_positive", "toward_negative",
        "stochastic",
    ):  # fmt: skip
        raise ValueError(f"rounding={rounding!r} is not supported for {fmt.name}")
    if isinstance(x, float) and (math.isnan(x) or x == 0 or math.copysign(1.0, x) < 0):
        return fmt.nan_code
    if not isinstance(x, float) and x <= 0:
        return fmt.nan_code
    overflow = fmt.max_code if saturate else fmt.nan_code
    if isinstance(x, float) and math.isinf(x):
        return overflow
    q = Fraction(x)
    nearest = rounding in ("nearest_even", "nearest_away")
    if nearest and q < Fraction(2) ** (1 - fmt.bias):
        return 1 if q > Fraction(2) ** -fmt.bias else 0
    if q <= Fraction(2) ** -fmt.bias:
        return 0
    e = _floor_log2(q)
    t = q / Fraction(2) ** e  # in [1, 2)
    if nearest:
        k = e + (1 if t >= Fraction(3, 2) else 0)
    else:
        k = e + _round_mode(t - 1, False, rounding, rnd, random_bits)
    code = k + fmt.bias
    if code > fmt.max_code and rounding in ("toward_zero", "toward_negative"):
        return fmt.max_code
    return overflow if code > fmt.max_code else code


def decode_code(code: int, fmt: FloatFormat) -> Fraction | float:
    """Exact value of a code (a Fraction; float for NaN, Inf)."""
    return fmt.code_value(code)


def round_value(x: float | Fraction, fmt: FloatFormat, *, saturate: bool = True):
    """``x`` rounded to ``fmt``: exact value (Fraction), or a float for +-0, Inf and NaN."""
    code = encode_value(x, fmt, saturate=saturate)
    value = fmt.code_value(code)
    if not fmt.signed:
        return value
    if isinstance(value, Fraction) and value == 0:
        return -0.0 if code & fmt.sign_mask else 0.0
    return value
