"""Block-scale rules beyond OCP MX's: the shared-exponent rules of torchao's ``to_mx``
(``ScaleCalculationMode`` FLOOR, CEIL, EVEN, RCEIL), NVFP4's two-level scales, and the
reductions and expansions that 2-D tiles need.  Plain numpy on compact arrays (one value
per block): the data itself is read by :mod:`fp8kit.study.scaling`'s kernels.

The OCP rule with the edge cases of the MX emulation library (``scale_mode="ocp"``) stays
in :func:`fp8kit.study.scaling.mx_exponents`; the rules here reproduce torchao 0.18
(``torchao.prototype.mx_formats.mx_tensor.to_mx`` and ``nvfp4_tensor.nvfp4_quantize``),
edge cases included, on the float32 bits of the block amaxes (float64 bits for float64
data, which torchao does not take).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..codec import round_to
from ..formats import FloatFormat, get_format

#: The MX shared-exponent rules (``scale_mode``): ``"ocp"`` is the OCP v1.0 rule with the
#: MX emulation library's edge cases; the others are torchao's ScaleCalculationMode.
SCALE_MODES = ("ocp", "floor", "ceil", "even", "rceil")

# Exponent range of an E8M0 scale: codes 0..254 are 2**-127 .. 2**127, code 255 is NaN.
E8M0_BIAS, E8M0_NAN = 127, 255
#: torchao clamps a FLOOR/CEIL/EVEN block's divisor 2**(code - 127) to float32's smallest
#: normal (2**-127 is a float32 subnormal that Triton flushes): the code stays 0.
_F32_MIN_NORMAL_EXP = -126

#: (unsigned int type, mantissa bits, exponent bits, bias) of the amaxes' float layout
_LAYOUTS = {
    np.dtype(np.float32): (np.uint32, 23, 8, 127),
    np.dtype(np.float64): (np.uint64, 52, 11, 1023),
}


def check_scale_mode(mode: Any, func: str) -> str:
    """``mode`` if it is one of :data:`SCALE_MODES`, else a ValueError naming it."""
    if not isinstance(mode, str) or mode not in SCALE_MODES:
        raise ValueError(f"{func}: unknown scale_mode {mode!r}; valid: {', '.join(SCALE_MODES)}")
    return mode


def special_amax(amax: np.ndarray, bad: np.ndarray, nan: np.ndarray | None) -> np.ndarray:
    """Block amaxes as torch.amax(abs(block)) gives them: NaN for a block holding a NaN,
    +Inf for one holding an Inf (and no NaN), else the largest finite ``|x|``.  ``bad``:
    blocks holding NaN or Inf; ``nan``: those holding a NaN (None: none does)."""
    a = np.array(amax, np.float64)
    bad = np.asarray(bad, bool)
    if bad.any():
        a[bad] = np.inf
        if nan is not None:
            a[np.asarray(nan, bool)] = np.nan
    return a


def mx_mode_codes(amax: np.ndarray, fmt: FloatFormat, mode: str, dtype) -> np.ndarray:
    """E8M0 codes (uint8) of torchao's ``to_mx`` for block amaxes (:func:`special_amax`:
    NaN and Inf included) of data of working dtype ``dtype`` (float32: torchao's layout).

    ``floor``: the amax's exponent field minus the element format's ``emax``
    (``maxexp - 1``, torchao's ``*_MAX_POW2``); ``even``: the same after rounding the amax
    to the element's mantissa bits (adding half an element ulp to its bits, then keeping
    sign and exponent); ``ceil``: plus one when the amax's mantissa bits are not all zero;
    the unbiased exponent is clamped to -127..128 (128, NaN amaxes: the NaN code 0xFF).
    An amax of 0 or a subnormal gives the exponent field 0, i.e. -127 (-126 for ``ceil``
    of a subnormal).  ``rceil`` (cuBLAS, Transformer Engine): ``descale = amax / max``
    rounded in ``dtype``, the code is ``ceil(log2(descale))`` clamped to -127..127, NaN for a
    NaN descale and 0xFE for an infinite one (as PTX's ``cvt.rp.satfinite.ue8m0x2.f32``;
    torchao's eager fallback takes ``ceil(torch.log2(descale))`` in float32, which rounds
    a descale a few ulps above a power of two down to that power: see docs/study.md).
    """
    uint, mb, eb, bias = _LAYOUTS[np.dtype(dtype)]
    a = np.asarray(amax, np.float64).astype(dtype)
    nan = np.isnan(a)
    emax = fmt.maxexp - 1
    if mode == "rceil":
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            descale = (a / np.asarray(fmt.max, dtype)).astype(np.float64)
            frac, e = np.frexp(descale)  # descale = frac * 2**e, 0.5 <= frac < 1
        ceil = np.where(frac == 0.5, e - 1, e)
        ceil = np.where(descale > 0, ceil, -E8M0_BIAS)  # (0: log2 = -inf, clamped)
        codes = np.clip(ceil, -E8M0_BIAS, E8M0_BIAS) + E8M0_BIAS
        codes = np.where(np.isinf(descale), 254, codes)
        return np.where(nan, E8M0_NAN, codes).astype(np.uint8)
    bits = a.view(uint)
    if mode == "even":
        add = uint(1 << (mb - fmt.mantissa_bits - 1))
        keep = uint(((1 << (eb + 1)) - 1) << mb)  # sign and exponent
        bits = (bits + add) & keep
    field = ((bits >> uint(mb)) & uint((1 << eb) - 1)).astype(np.int64)
    extracted = field - bias
    if mode == "ceil":
        extracted += (bits & uint((1 << mb) - 1)) > 0
    unbiased = np.clip(extracted - emax, -E8M0_BIAS, E8M0_BIAS + 1)
    codes = unbiased + E8M0_BIAS
    return np.where(nan, E8M0_NAN, codes).astype(np.uint8)


def mx_mode_multipliers(codes: np.ndarray, mode: str, dtype) -> np.ndarray:
    """The multiplier ``s`` of each block (``round(x * s)``; q is that divided by ``s``) for
    torchao's codes: ``1 / max(2**(code - 127), 2**-126)`` for floor, ceil and even (its
    divisor clamp), and for rceil its reciprocal table: 1 for code 0, ``2**-127`` for 0xFE,
    ``2**(127 - code)`` otherwise.  NaN for the NaN code 0xFF."""
    return _mode_table(mode, np.dtype(dtype))[np.asarray(codes, np.uint8)]


@functools.cache
def _mode_table(mode: str, dtype: np.dtype) -> np.ndarray:
    codes = np.arange(256)
    if mode == "rceil":
        e = np.where(codes == 254, -E8M0_BIAS, E8M0_BIAS - codes)
        e = np.where(codes == 0, 0, e)
    else:
        e = -np.maximum(codes - E8M0_BIAS, _F32_MIN_NORMAL_EXP)
    table = np.ldexp(1.0, e)
    table[codes == E8M0_NAN] = np.nan
    table = table.astype(dtype)
    table.flags.writeable = False
    return table


# --------------------------------------------------------------------------------- NVFP4
#: The format of NVFP4's block scales.
_E4M3 = "float8_e4m3fn"


def nvfp4_tensor_scale(amax: float, fmt: FloatFormat, dtype) -> Any:
    """torchao's ``per_tensor_amax_to_scale``: ``amax / (448 * max)`` in ``dtype`` (448:
    float8_e4m3fn's max, the block scales' format; ``max``: the element format's, 6 for
    float4_e2m1fn).  An all-zero tensor (amax 0) gets 1 instead of torchao's 0, whose
    block scales would be NaN."""
    dt = np.dtype(dtype)
    if not amax > 0:
        return dt.type(1.0)
    with np.errstate(over="ignore"):  # (a 16-bit element format: 448 * max beyond float32)
        return dt.type(dt.type(amax) / dt.type(get_format(_E4M3).max * fmt.max))


def nvfp4_factors(amax: np.ndarray, fmt: FloatFormat, tensor_scale: Any, dtype):
    """``(m, d)``: per block the multiplier ``m`` and the dequantization factor ``d`` of
    torchao's ``nvfp4_quantize`` (``q = round(clamp(x * m, -max, max)) * d``), from block
    amaxes (:func:`special_amax`) in working dtype ``dtype``.

    ``b = amax / max`` (max: the element format's, 6 for float4_e2m1fn); without a tensor
    scale ``t`` the block scale is ``s8 = e4m3(clamp(b, 2**-6, 448))`` (round to nearest
    even), ``m = 1 / s8`` and ``d = s8``; with ``t``, ``s8 = e4m3(clamp(b / t, 2**-6, 448))``,
    ``m = (1 / t) / s8`` and ``d = t * s8``: each operation rounded once in ``dtype``, in
    torchao's order."""
    dt = np.dtype(dtype)
    e4 = get_format(_E4M3)
    a = np.asarray(amax, np.float64).astype(dt)
    one = dt.type(1.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        b = a / dt.type(fmt.max)
        if tensor_scale is None:
            s8 = _to_e4m3(b, e4, dt)
            return (one / s8).astype(dt), s8
        t = dt.type(tensor_scale)
        s8 = _to_e4m3(b / t, e4, dt)
        return ((one / t) / s8).astype(dt), (t * s8).astype(dt)


def _to_e4m3(v: np.ndarray, e4: FloatFormat, dt: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        clipped = np.clip(v, e4.smallest_normal, e4.max)  # (NaN stays NaN)
    return np.asarray(round_to(np.ascontiguousarray(clipped, dt), e4), dt)


def nvfp4_round(y: np.ndarray, fmt: FloatFormat, m: np.ndarray, d: np.ndarray, **rnd):
    """``round(clamp(y * m, -max, max)) * d`` in ``y``'s dtype (float32 or float64), with
    ``m`` and ``d`` broadcasting to ``y``: NVFP4's quantization and dequantization."""
    with np.errstate(over="ignore", invalid="ignore"):
        z = np.multiply(y, m.astype(y.dtype, copy=False))
        np.clip(z, -fmt.max, fmt.max, out=z)
        round_to(z, fmt, saturate=True, out=z, **rnd)
        return np.multiply(z, d.astype(y.dtype, copy=False), out=z)


# ----------------------------------------------------------------- blocks of 1 or 2 axes
def group_reduce(arr: np.ndarray, axis: int, size: int, ufunc) -> np.ndarray:
    """``ufunc.reduce`` over consecutive groups of ``size`` along ``axis`` (the last group
    holds the remainder)."""
    n = arr.shape[axis]
    if size == 1 or n == 0:
        return arr
    return ufunc.reduceat(arr, np.arange(0, n, size), axis=axis)


def split_shapes(shape: tuple[int, ...], blocks: dict[int, int], scale_shape=None):
    """``(data shape, scale shape)`` in which per-block scales broadcast to the data: each
    axis of ``blocks`` (axis -> block size, dividing the axis length ``n``) split into
    ``(n / b, b)`` for the data and ``(n / b, 1)`` for the scales; the other axes as the
    scale has them (``scale_shape``, default the data's)."""
    scale_shape = shape if scale_shape is None else scale_shape
    xs, ss = [], []
    for d, n in enumerate(shape):
        if d in blocks:
            xs += [n // blocks[d], blocks[d]]
            ss += [n // blocks[d], 1]
        else:
            xs.append(n)
            ss.append(scale_shape[d])
    return tuple(xs), tuple(ss)


def expand(scale: np.ndarray, shape: tuple[int, ...], blocks: dict[int, int]) -> np.ndarray:
    """A compact per-block array repeated along each axis of ``blocks`` (axis -> block
    size) to ``shape``'s length there (other axes as they are)."""
    out = np.asarray(scale)
    for ax, b in blocks.items():
        if b > 1 and out.shape[ax] != shape[ax]:
            out = np.repeat(out, b, axis=ax).take(np.arange(shape[ax]), axis=ax)
    return out
