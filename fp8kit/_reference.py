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
    nan = fmt.nan_code if fmt.specials == "fnuz" else fmt.nan_code | sign
    inf = None if fmt.inf_code is None else fmt.inf_code | sign
    return nan, inf, fmt.max_code | sign


def encode_value(x: float | Fraction, fmt: FloatFormat, *, saturate: bool = True) -> int:
    """Code of ``x`` in ``fmt``: one rounding (nearest, ties to even) of the exact value.

    Examples
    --------
    >>> from fp8kit import get_format
    >>> from fp8kit._reference import encode_value
    >>> hex(encode_value(1.0 + 2**-4 + 2**-40, get_format("float8_e4m3fn")))
    '0x39'
    """
    if isinstance(x, float) and math.isnan(x):
        return _special_codes(fmt, math.copysign(1.0, x) < 0)[0]
    negative = (x < 0) if not isinstance(x, float) else math.copysign(1.0, x) < 0
    nan, inf, maxc = _special_codes(fmt, negative)
    if isinstance(x, float) and math.isinf(x):
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
    k = _round_half_even(q / quantum)  # |x| rounds to k * quantum
    if k == 0:
        return sign if fmt.has_negative_zero else 0
    if k == 1 << (m + 1):  # the mantissa carried into the next binade
        e, k = e + 1, 1 << m
    if k < (1 << m):  # subnormal (only possible at e == minexp)
        mag = k
    else:
        mag = ((e - fmt.minexp + 1) << m) | (k - (1 << m))
    if mag > fmt.max_code:  # "[x] > FLT_MAX"
        if saturate:
            return maxc
        return inf if inf is not None else nan
    return mag | sign


def decode_code(code: int, fmt: FloatFormat) -> Fraction | float:
    """Exact value of a code (a Fraction; float for NaN, Inf)."""
    return fmt.code_value(code)


def round_value(x: float | Fraction, fmt: FloatFormat, *, saturate: bool = True):
    """``x`` rounded to ``fmt``: exact value (Fraction), or a float for +-0, Inf and NaN."""
    code = encode_value(x, fmt, saturate=saturate)
    value = fmt.code_value(code)
    if isinstance(value, Fraction) and value == 0:
        return -0.0 if code & fmt.sign_mask else 0.0
    return value
