"""Decode tables: the value of every code of a format, as bits of an output float dtype."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ..formats import FloatFormat, get_format
from .codec import bits_dtype

# Canonical quiet NaN bits (positive) of each output dtype.  fp8kit does not carry NaN
# payloads: every NaN becomes the canonical NaN of the destination, with its sign, as
# ml_dtypes does for float8.
_QNAN = {
    np.dtype(np.float64): 0x7FF8000000000000,
    np.dtype(np.float32): 0x7FC00000,
    np.dtype(np.float16): 0x7E00,
    np.dtype(ml_dtypes.bfloat16): 0x7FC0,
}


def _finite_values(e, m, fmt):
    m_bits = fmt.mantissa_bits
    return np.where(
        e == 0,
        np.ldexp(m.astype(np.float64), fmt.minexp - m_bits),
        np.ldexp((m + (1 << m_bits)).astype(np.float64), (e - fmt.bias - m_bits).astype(np.int32)),
    )


def _exact_in_float32(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    with np.errstate(over="ignore"):
        return bool(np.array_equal(finite.astype(np.float32).astype(np.float64), finite))


@functools.cache
def code_values(fmt: FloatFormat) -> np.ndarray:
    """float64 value of every code 0 .. 2**bits - 1 (exact: formats fit float64)."""
    codes = np.arange(1 << fmt.bits, dtype=np.int64)
    if fmt.specials == "unsigned":  # powers of two, all ones is NaN
        values = np.ldexp(1.0, (codes - fmt.bias).astype(np.int32))
        values[fmt.nan_code] = np.nan
        values.flags.writeable = False
        return values
    m_bits = fmt.mantissa_bits
    mag = codes & fmt.magnitude_mask
    e = mag >> m_bits
    m = mag & ((1 << m_bits) - 1)
    with np.errstate(over="ignore"):  # the special codes' exponent; replaced below
        values = _finite_values(e, m, fmt)
    negative = (codes >= fmt.sign_mask) if fmt.signed else np.zeros(codes.size, bool)
    values = np.where(negative, -values, values)
    if fmt.specials == "ieee":
        top = e == (1 << fmt.exponent_bits) - 1
        values = np.where(top & (m == 0), np.copysign(np.inf, values), values)
        values = np.where(top & (m != 0), np.copysign(np.nan, values), values)
    elif fmt.specials == "fn":
        values = np.where(mag == fmt.sign_mask - 1, np.copysign(np.nan, values), values)
    elif fmt.specials in ("fnuz", "signed_finite", "extended"):
        values[fmt.sign_mask] = -np.nan  # the -0 code; the sign bit is set, as in ml_dtypes
    elif not fmt.signed:  # unsigned_extended, unsigned_finite: NaN all ones
        values[fmt.nan_code] = np.nan
    if fmt.specials in ("extended", "unsigned_extended"):
        values = np.where(mag == fmt.inf_code, np.copysign(np.inf, values), values)
    values.flags.writeable = False
    return values


def _round_once(values: np.ndarray, target: FloatFormat) -> np.ndarray:
    """float64 ``values`` rounded once to nearest-even in ``target`` (bfloat16 or float16),
    overflowing to Inf: the quantum of each value (its precision's, or the subnormals') is a
    power of two, so scaling, ``rint`` (ties to even) and scaling back are exact on
    float64, and the rounded value converts exactly through float32."""
    finite = np.isfinite(values)
    v = np.where(finite, values, 0.0)
    _, e = np.frexp(v)
    q = np.maximum(e - (target.mantissa_bits + 1), target.minexp - target.mantissa_bits)
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.where(finite, np.ldexp(np.rint(np.ldexp(v, -q)), q), values)
        return r.astype(np.float32).astype(target.dtype)


@functools.cache
def decode_table(fmt: FloatFormat, out_dtype: np.dtype) -> np.ndarray:
    """Bits (unsigned ints) of every code's value in ``out_dtype``, padded to 256 or 65,536
    entries with NaN so that a lookup with any uint8/uint16 index stays in bounds.

    Values not exact in ``out_dtype`` are rounded once to nearest-even, overflowing to Inf
    (IEEE), which only happens for formats wider than the output.
    """
    out_dtype = np.dtype(out_dtype)
    values = code_values(fmt)
    size = 256 if fmt.bits <= 8 else 1 << 16
    if out_dtype in (np.dtype(np.float64), np.dtype(np.float32)):
        with np.errstate(over="ignore"):
            bits = values.astype(out_dtype).view(bits_dtype(out_dtype)).copy()
    elif _exact_in_float32(values):
        # float32 holds every value, so one rounding float32 -> float16 (numpy) or bfloat16
        # (ml_dtypes), both nearest-even with overflow to Inf, is the single rounding from
        # the exact value; no kernel to compile for a table (a cold decode or round_to to
        # bfloat16 compiled the float64 encode kernel for it: ~0.4 s)
        with np.errstate(over="ignore", invalid="ignore"):
            bits = values.astype(np.float32).astype(out_dtype).view(bits_dtype(out_dtype))
    else:
        # (wider formats to bfloat16/float16: each value rounded once to nearest-even on
        # float64, exact steps, then converted exactly; no kernel to compile for a table)
        bits = _round_once(values, get_format(out_dtype)).view(bits_dtype(out_dtype))
    qnan = _QNAN[out_dtype]
    sign = np.signbit(values)
    width = out_dtype.itemsize * 8
    nan_bits = np.where(sign, qnan | (1 << (width - 1)), qnan).astype(bits.dtype)
    bits = np.where(np.isnan(values), nan_bits, bits)
    table = np.full(size, qnan, dtype=bits.dtype)
    table[: bits.size] = bits
    table.flags.writeable = False
    return table
