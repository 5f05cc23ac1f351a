"""Scaling recipes (per tensor, per channel, MX blocks, tiles, NVFP4, delayed) and scaled
quantization.

A scale here is FakeConvert's: the data is multiplied by it, rounded to the format and
divided by it again, ``q = round(x * scale) / scale``.  An MX block scale ``X`` (the value
the elements are multiplied by when decoding) is therefore ``1 / scale``.  NVFP4 alone
dequantizes by another factor than the multiplier's inverse (its scales are not powers of
two and torchao multiplies by a rounded reciprocal): ``q = round(x * scale) * d``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import deque
from typing import Any

import ml_dtypes
import numpy as np

from .. import _args, _parallel
from .._backends import is_masked
from .._kernels.metrics import amax_cols_kernel, amax_runs_kernel
from ..codec import round_to
from ..fake_convert import quantize_dequantize
from ..formats import FloatFormat, get_format
from . import _blocks
from ._arrays import (
    Box,
    _unmask,
    aligned,
    array_kind,
    blocks_and_boxes,
    check_axis,
    check_dtype,
    float_data,
    work_dtype,
    working,
)
from ._blocks import E8M0_BIAS, E8M0_NAN, check_scale_mode

__all__ = ["DelayedScaling", "group_amax", "mx_scales", "quantize", "scale_for"]

SCALINGS = ("none", "tensor", "channel", "block", "tile", "nvfp4")
ALGOS = ("max", "most_recent")
DEFAULT_AXIS = {"channel": 0, "block": -1, "tile": -1, "nvfp4": -1}
#: Default block size per recipe: MX's 32, NVFP4's 16 (1 x 16), 128 x 128 tiles.
DEFAULT_BLOCK = {"block": 32, "nvfp4": 16, "tile": 128}
#: NVFP4's per-tensor scale: "amax" (torchao's per_tensor_amax_to_scale), None or a number.
TENSOR_SCALES = ("amax", None, "a positive number")

_FLOAT_OF = {
    np.dtype(np.uint16): np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.uint32): np.dtype(np.float32),
    np.dtype(np.uint64): np.dtype(np.float64),
}
_BITS_OF = {v: k for k, v in _FLOAT_OF.items()}

# Exponent range of an E8M0 scale: codes 0..254 are 2**-127 .. 2**127, code 255 is NaN.
E8M0_EMIN, E8M0_EMAX = -127, 127


def _kind(scaling: Any, func: str) -> str:
    if not isinstance(scaling, str) or scaling not in SCALINGS:
        raise ValueError(
            f"{func}: unknown scaling {scaling!r}; valid: {', '.join(SCALINGS)} "
            "(delayed scaling: DelayedScaling)"
        )
    return scaling


def _positive(v: Any, func: str, what: str = "block_size") -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{func}: {what} must be a positive int; got {v!r}")
    if v < 1:
        raise ValueError(f"{func}: {what} must be a positive int; got {v}")
    return int(v)


def _block_size(block_size: Any, func: str, kind: str = "block") -> int | tuple[int, int]:
    """The checked block size of a recipe (its default for None): an int for MX blocks
    (and for 1 x N NVFP4 blocks); ``(rows, cols)`` for a 2-D one (tiles: an int N is N x N;
    NVFP4: ``(16, 16)``)."""
    if block_size is None:
        block_size = DEFAULT_BLOCK.get(kind, 32)
    if kind in ("tile", "nvfp4") and isinstance(block_size, (tuple, list)):
        if len(block_size) != 2:
            raise ValueError(
                f"{func}: block_size of scaling {kind!r} must be an int or (rows, cols); "
                f"got {block_size!r}"
            )
        r, c = (_positive(v, func) for v in block_size)
        return c if r == 1 else (r, c)
    b = _positive(block_size, func)
    return (b, b) if kind == "tile" and b > 1 else b


def _split(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])


def grouping_of(kind: str, axis: int, block: Any, ndim: int) -> tuple[str, int, Any]:
    """``(kind, axis, block)`` of the groups sharing a scale, in the terms of
    :class:`Grouping`: tiles and NVFP4 blocks of one row are MX-like ``"block"`` groups
    along ``axis``; 2-D ones ``"tile"`` groups over ``axis - 1`` and ``axis`` (1-D data:
    blocks of the tile's columns)."""
    if kind in ("tile", "nvfp4"):
        if isinstance(block, tuple):
            if ndim >= 2 and axis >= 1:
                return "tile", axis, block
            return "block", axis, block[1]
        return "block", axis, block
    return kind, axis, block


def _blocks_of(kind: str, axis: int, block: Any) -> dict[int, int]:
    """Axis -> block size of the groups of a grouping's kind (1 per index)."""
    if kind == "block":
        return {axis: block}
    if kind == "tile":
        return {axis - 1: block[0], axis: block[1]}
    return {}


def compact_shape(shape: tuple[int, ...], kind: str, axis: int, block: Any) -> tuple[int, ...]:
    """Shape of the scales of one recipe: () per tensor, keepdims per channel, the axis
    shortened to its number of blocks per block (the two axes of a tile)."""
    if kind in ("none", "tensor"):
        return ()
    if kind == "channel":
        return tuple(n if d == axis else 1 for d, n in enumerate(shape))
    blocks = _blocks_of(kind, axis, block)
    return tuple(-(-n // blocks[d]) if d in blocks else n for d, n in enumerate(shape))


def group_amax(xw: np.ndarray, kind: str, axis: int = 0, block: Any = 1):
    """``(amax, nonfinite)``: the largest finite ``|x|`` of each group of a working array
    (float32/float64, C-contiguous; or bfloat16, read as is) and whether the group holds a
    NaN or an Inf, both of :func:`compact_shape` (float64 and bool).  One compiled pass over
    the data's bits (tiles: their rows' blocks, then a maximum over the rows)."""
    shape = compact_shape(xw.shape, kind, axis, block)
    if xw.size == 0:
        return np.zeros(shape), np.zeros(shape, bool)
    if kind == "tile":  # blocks of a row's columns, then the maxima over `rows` rows
        am, bad = group_amax(xw, "block", axis, block[1])
        am = _blocks.group_reduce(am, axis - 1, block[0], np.maximum)
        return am, _blocks.group_reduce(bad, axis - 1, block[0], np.logical_or)
    bits = xw.reshape(-1).view(_BITS_OF[xw.dtype])
    n = bits.size
    if xw.ndim == 0 or kind in ("none", "tensor"):
        # runs of at least 4K elements, several per thread; their maxima are combined here
        am, bad = _runs(bits, n, max(4096, -(-n // 256)))
        am, bad = am.max(keepdims=True), bad.max(keepdims=True)
    else:
        pre, length, post = _split(xw.shape, axis)
        if kind == "channel" and post == 1:  # channels along the contiguous axis
            am, bad = _cols(bits, pre, length, pre, pre)
        elif kind == "channel":  # one run of `post` elements per (i, l); reduce over i
            am, bad = _runs(bits, post, post)
            am, bad = am.reshape(pre, length).max(axis=0), bad.reshape(pre, length).max(axis=0)
        elif post == 1:  # blocks along the contiguous axis: runs of `block`
            am, bad = _runs(bits, length, block)
        else:  # blocks along another axis: column maxima over each block of rows
            am, bad = _cols(bits, pre * length, post, length, block)
    return am.view(xw.dtype).astype(np.float64).reshape(shape), bad.reshape(shape) > 0


def _runs(bits: np.ndarray, length: int, run: int):
    nruns = (bits.size // length) * -(-length // run)
    am = np.empty(nruns, bits.dtype)
    bad = np.empty(nruns, bits.dtype)
    _parallel.launch(
        amax_runs_kernel(_FLOAT_OF[bits.dtype]), bits.size, bits,
        np.array([length, run], np.int64), am, bad,
    )  # fmt: skip
    return am, bad


def _cols(bits: np.ndarray, rows: int, cols: int, length: int, block: int):
    groups = (rows // length) * -(-length // block)
    nchunks = _parallel.chunks_for(bits.size)
    am = np.zeros((nchunks, groups * cols), bits.dtype)
    bad = np.zeros((nchunks, groups * cols), bits.dtype)
    _parallel.launch(
        amax_cols_kernel(_FLOAT_OF[bits.dtype]), bits.size, bits,
        np.array([rows, cols, length, block], np.int64), am, bad,
    )  # fmt: skip
    return am.max(axis=0), bad.max(axis=0)


def amax_scale(amax: np.ndarray, fmt: FloatFormat, margin: float, pow2: bool, dtype):
    """``max / amax / 2**margin`` (optionally rounded down to a power of two), 1 where amax
    is 0, clamped to the normal range of ``dtype`` and returned in it."""
    amax = np.asarray(amax, np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        s = np.where(amax > 0, _max(fmt) / np.where(amax > 0, amax, 1.0), 1.0) / 2.0**margin
    s = clamp_scale(s, dtype)
    if pow2:
        # floor(log2(s)) exactly: frexp gives s = m * 2**e with 0.5 <= m < 1
        s = np.ldexp(1.0, np.frexp(s)[1] - 1)
    return s.astype(dtype)


@functools.cache
def _max(fmt: FloatFormat) -> float:
    """``fmt.max``, computed once (it is an exact Fraction's value, 20 us each time)."""
    return fmt.max


def clamp_scale(s: Any, dtype) -> np.ndarray:
    """Scales (float64) clamped to the normal range of ``dtype``, up to its largest power of
    two, so that a scale and its reciprocal exist in ``dtype``."""
    fi = np.finfo(dtype)
    return np.clip(np.asarray(s, np.float64), float(fi.smallest_normal), 2.0 ** (fi.maxexp - 1))


def mx_biased(amax: np.ndarray, bad: np.ndarray) -> np.ndarray | None:
    """The float64 biased exponents (int16) of block amaxes (float64, at least 1-D), 0x7FFF
    for blocks holding NaN/Inf, or None when an amax is a float64 subnormal: what
    :func:`mx_exponents` needs of the amaxes for any format (computed once for several)."""
    amax = np.ascontiguousarray(amax, np.float64)
    if not amax.ndim:
        return None
    ex = (amax.view(np.uint64) >> 52).astype(np.int16)  # biased exponents (amax >= 0)
    if np.any((ex == 0) & (amax > 0)):
        return None
    ex[np.asarray(bad)] = 0x7FFF
    return ex


def mx_exponents(
    amax: np.ndarray, bad: np.ndarray, fmt: FloatFormat, biased: np.ndarray | None = None
) -> np.ndarray:
    """E8M0 codes of MX block scales from block amaxes (float64) and NaN/Inf flags
    (``biased``: their :func:`mx_biased`, when already computed).

    OCP Microscaling Formats v1.0, section 6.3 (conversion of a block of k scalars to MX),
    in our words: the shared exponent is floor(log2(amax of the block)) minus the exponent
    of the element format's largest normal value (``emax_elem``: 8 for E4M3, 15 for E5M2);
    the block scale is X = 2**shared_exp, stored as E8M0; the elements are V_i / X rounded
    to the element format, normal values clamped to its largest normal.
    The spec leaves the edge cases to the implementation; ours (those of the reference
    emulation library the spec's authors published): a shared exponent above E8M0's largest
    (127) gives the NaN scale 0xFF, below its smallest (-127) is clamped to -127; a block
    holding a NaN or an Inf gets the NaN scale (log2 of Inf overflows); an all-zero block
    gets 2**-127 (log2(0) = -Inf, clamped; its elements are 0 whatever X is).
    """
    emax_elem = fmt.maxexp - 1
    amax = np.ascontiguousarray(amax, np.float64)
    ex = mx_biased(amax, bad) if biased is None else biased
    if ex is not None:
        # no float64 subnormal: floor(log2(amax)) = ex - 1023 for amax > 0, and 0 gives a
        # code below 0 (clamped to the smallest, as log2(0) = -Inf); codes above 254 are
        # shared exponents above E8M0's largest, or blocks holding NaN/Inf: the NaN scale.
        # 4x faster than frexp
        codes = ex - np.int16(1023 + emax_elem - E8M0_BIAS)
        return np.clip(codes, 0, E8M0_NAN, out=codes).astype(np.uint8)
    floor_log2 = np.frexp(amax)[1] - 1  # exact: amax = m * 2**e with 0.5 <= m < 1
    shared = np.maximum(np.where(amax > 0, floor_log2 - emax_elem, E8M0_EMIN), E8M0_EMIN)
    codes = (np.minimum(shared, E8M0_EMAX) + E8M0_BIAS).astype(np.uint8)
    codes[(shared > E8M0_EMAX) | np.asarray(bad)] = E8M0_NAN
    return codes


def mx_scale_from_codes(codes: np.ndarray, dtype) -> np.ndarray:
    """FakeConvert scales ``1 / X = 2**-(code - 127)`` (NaN for code 0xFF) in ``dtype``."""
    codes = np.asarray(codes)
    if codes.dtype == np.uint8 and codes.ndim:  # a lookup in the 256 scales: 4x faster
        return _mx_scales(np.dtype(dtype))[codes]
    return _mx_scales_of(codes, dtype)


def _mx_scales_of(codes: np.ndarray, dtype) -> np.ndarray:
    e = codes.astype(np.int64) - E8M0_BIAS
    s = np.ldexp(1.0, -e)
    s[codes == E8M0_NAN] = np.nan
    return s.astype(dtype)


@functools.cache
def _mx_scales(dtype: np.dtype) -> np.ndarray:
    table = _mx_scales_of(np.arange(256, dtype=np.uint8), dtype)
    table.flags.writeable = False
    return table


def group_nan(xw: np.ndarray, kind: str, axis: int = 0, block: Any = 1) -> np.ndarray:
    """Whether each group (:func:`compact_shape`) holds a NaN: what torchao's rules tell
    apart from an Inf (numpy; only asked where a group holds NaN or Inf)."""
    isnan = np.isnan(xw)
    if kind == "tensor" or xw.ndim == 0:
        return np.asarray(isnan.any())
    if kind == "channel":
        axes = tuple(d for d in range(xw.ndim) if d != axis)
        return isnan.any(axis=axes, keepdims=True)
    for ax, b in _blocks_of(kind, axis, block).items():
        isnan = _blocks.group_reduce(isnan, ax, b, np.logical_or)
    return isnan


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A scaling recipe with its options, checked (see :func:`scale_for`): ``kind`` one of
    :data:`SCALINGS`; ``axis`` (normalised) and ``block`` (an int, or ``(rows, cols)``) as
    :func:`grouping_of` reads them; ``margin`` and ``pow2`` for the amax scalings (tensor,
    channel, tile); ``mode`` the MX rule; ``tensor_scale`` NVFP4's."""

    kind: str
    axis: int = 0
    block: Any = 1
    margin: float = 0.0
    pow2: bool = False
    mode: str = "ocp"
    tensor_scale: Any = "amax"

    def grouping(self, ndim: int) -> tuple[str, int, Any]:
        """(kind, axis, block) of the groups that share a scale."""
        return grouping_of(self.kind, self.axis, self.block, ndim)


def recipe_scales(xw: np.ndarray, fmt: FloatFormat, r: Recipe, amax=None, bad=None, nan=None):
    """``(scale, dequant, amax, nonfinite)`` of a working array (at least 1-D) for a recipe,
    compact (:func:`compact_shape`): the multiplier, and NVFP4's dequantization factor
    (None for the others, which divide by the multiplier).  ``amax``/``bad``: the groups'
    :func:`group_amax`, when already computed; ``nan``: their :func:`group_nan` (computed
    here when a rule needs it)."""
    if r.kind == "none":
        return np.ones((), xw.dtype), None, None, None
    kind, axis, block = r.grouping(xw.ndim)
    if amax is None:
        amax, bad = group_amax(xw, kind, axis, block)
    dt = work_dtype(xw.dtype)
    if r.kind in ("tensor", "channel", "tile"):
        return amax_scale(amax, fmt, r.margin, r.pow2, dt), None, amax, bad
    if r.kind == "block" and r.mode == "ocp":
        return mx_scale_from_codes(mx_exponents(amax, bad, fmt), dt), None, amax, bad
    if nan is None and np.any(bad):
        nan = group_nan(xw, kind, axis, block)
    s, d = scales_from_amax(amax, bad, nan, fmt, r, dt)
    return s, d, amax, bad


def scales_from_amax(amax, bad, nan, fmt: FloatFormat, r: Recipe, dt):
    """``(scale, dequant)`` of MX blocks under a torchao rule, or of NVFP4, from the compact
    amaxes, NaN/Inf flags and NaN flags (None: no NaN) of the groups."""
    a = _blocks.special_amax(amax, bad, nan)
    if r.kind == "block":
        codes = _blocks.mx_mode_codes(a, fmt, r.mode, dt)
        return _blocks.mx_mode_multipliers(codes, r.mode, dt), None
    t = r.tensor_scale
    if isinstance(t, str):  # "amax": from the tensor's largest finite |x|
        t = _blocks.nvfp4_tensor_scale(float(np.max(amax, initial=0.0)), fmt, dt)
    return _blocks.nvfp4_factors(a, fmt, t, dt)


def compact_scale(
    xw: np.ndarray, fmt: FloatFormat, kind: str, axis: int, block: Any, margin: float,
    pow2: bool, mode: str = "ocp", tensor_scale: Any = "amax",
):  # fmt: skip
    """``(scale, amax, nonfinite)`` of a working array for one recipe (see :func:`scale_for`).
    For MX blocks ``scale`` comes from :func:`mx_exponents` (``mode`` "ocp")."""
    r = Recipe(kind, axis, block, margin, pow2, mode, tensor_scale)
    s, _, amax, bad = recipe_scales(xw, fmt, r)
    return s, amax, bad


def broadcast_view(xw: np.ndarray, scale: np.ndarray, kind: str, axis: int, block: Any):
    """``(x_view, scale_view)``: views in which ``scale_view`` broadcasts to ``x_view``.

    Block scales along an axis whose length is a multiple of the block size become a view
    ``(pre, blocks, block, post)`` of the data with scales ``(pre, blocks, 1, post)``, which
    FakeConvert's kernel reads through strides (tiles: both axes split so); with a shorter
    last block the scales are repeated along the axis instead (an array the size of the
    data when the axis is last).  ``kind``: as :func:`grouping_of` gives it.
    """
    if kind not in ("block", "tile") or xw.ndim == 0:
        return xw, scale
    blocks = _blocks_of(kind, axis, block)
    if all(xw.shape[ax] % b == 0 for ax, b in blocks.items()):
        xs, ss = _blocks.split_shapes(xw.shape, blocks)
        return xw.reshape(xs), scale.reshape(ss)
    if kind == "block":
        pre, length, post = _split(xw.shape, axis)
        nb = -(-length // block)
        expanded = np.repeat(scale.reshape(pre, nb, post), block, axis=1)[:, :length]
        return xw.reshape(pre, length, post), expanded
    return xw, _blocks.expand(scale, xw.shape, blocks)


def apply_scale(xw: np.ndarray, fmt: FloatFormat, scale: np.ndarray, out=None, **rnd) -> np.ndarray:
    """``round(x * scale) / scale`` of a working array with a scale that broadcasts to it.

    float32 data and the formats of :func:`fp8kit._args.rounds_in_place`: FakeConvert's kernel.
    Otherwise (float64 data, 16-bit formats, unsigned and precision-1 formats) the
    same steps in numpy and :func:`fp8kit.round_to`, in the data's dtype: multiply, clamp to
    +-max (FakeConvert saturates Inf too; NaN stays), round once, divide.  ``rnd``: the
    rounding keywords of :func:`fp8kit.round_to` (``rounding``, ``seed``, ``random_bits``,
    ``flush_subnormals``), passed to the rounding.
    """
    if xw.dtype == np.float32 and _args.rounds_in_place(fmt):
        return quantize_dequantize(xw, scale.astype(np.float32), fmt, out=out, **rnd)
    return scaled_round_numpy(xw, fmt, scale, out, **rnd)


def scaled_round_numpy(xw: np.ndarray, fmt: FloatFormat, scale: np.ndarray, out=None, **rnd):
    """FakeConvert's steps in numpy and :func:`fp8kit.round_to`, in the dtype of ``xw``."""
    sc = scale.astype(xw.dtype)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        y = np.multiply(xw, sc, out=out)
        np.clip(y, -fmt.max, fmt.max, out=y)
        round_to(y, fmt, saturate=True, out=y, **rnd)
        return np.divide(y, sc, out=y)


def scale_for(
    x: Any,
    fmt: Any,
    scaling: str = "tensor",
    *,
    axis: int | str | None = None,
    block_size: int | tuple[int, int] | None = None,
    margin: float = 0.0,
    pow2: bool = False,
    scale_mode: str = "ocp",
    tensor_scale: Any = "amax",
) -> np.ndarray:
    """The scale a recipe gives for ``x``: ``q = round(x * scale) / scale``.

    ``"tensor"`` and ``"channel"``: ``scale = max / amax / 2**margin`` with ``amax`` the
    largest finite ``|x|`` of the tensor or of each channel (NaN and Inf are ignored) and
    ``max`` the format's largest finite value; rounded down to a power of two with
    ``pow2``; 1 where ``amax`` is 0; clamped to the working dtype's normal range.
    ``"tile"``: the same per tile: ``N x N`` tiles over the axes ``axis - 1`` and ``axis``
    (``block_size`` N, default 128: Transformer Engine's Float8BlockScaling and DeepSeek-V3's
    weight tiles, with ``pow2=True`` for TE's power-of-two scales), ``1 x N`` tiles along
    ``axis`` for ``block_size=(1, N)`` (their activation tiles).
    ``"block"``: MX (OCP Microscaling v1.0) blocks of ``block_size`` consecutive elements
    along ``axis``, each with the power-of-two scale ``1 / X`` of its E8M0 shared scale X
    (see :func:`mx_scales`, and ``scale_mode`` for the rule; ``margin`` and ``pow2`` do not
    apply).  ``"nvfp4"``: NVFP4's blocks of 16 along ``axis`` (``block_size=(16, 16)``:
    16 x 16 tiles) with float8_e4m3fn block scales and a float32 tensor scale, exactly as
    torchao's ``nvfp4_quantize``: the scale returned is the multiplier ``x`` is rounded
    after (:func:`quantize` multiplies back by the stored scales, not by its inverse).
    ``"none"``: 1.

    Parameters
    ----------
    x : array_like
        float16, bfloat16, float32 or float64 data: a numpy, masked or dask array or an
        xarray DataArray (its data).  Masked elements never raise an amax.
    fmt : str or FloatFormat
        The format the data will be rounded to (any FloatFormat, registered or not).
    scaling : {"tensor", "channel", "block", "tile", "nvfp4", "none"}
        The recipe.  Delayed scaling keeps state: see :class:`DelayedScaling`.
    axis : int or str, optional
        ``"channel"``: the channel axis (one scale per index along it), default 0;
        ``"block"``, ``"tile"``, ``"nvfp4"``: the axis the blocks run along (a tile's
        columns; its rows run along ``axis - 1``), default -1.  A dim name for an xarray
        DataArray.
    block_size : int or (int, int), optional
        ``"block"``: elements per MX block, default 32; ``"tile"``: N for N x N tiles or
        ``(rows, cols)``, default 128; ``"nvfp4"``: 16 (default) or ``(16, 16)``.  A last
        block or tile shorter than this holds the remainder.
    margin : float, default 0
        Divide the scale by ``2**margin`` (headroom, as Transformer Engine's ``margin``).
    pow2 : bool, default False
        Round the scale down to a power of two (scaling is then exact).
    scale_mode : {"ocp", "floor", "ceil", "even", "rceil"}, default "ocp"
        ``"block"``: the shared-exponent rule.  ``"ocp"``: OCP MX v1.0's
        ``floor(log2(amax)) - emax`` with the MX emulation library's edge cases (a block
        holding NaN or Inf gets the NaN scale; an all-zero block ``2**-127``); the others
        are torchao 0.18's ``ScaleCalculationMode`` rules, exactly as its ``to_mx`` computes
        them (``"rceil"``: cuBLAS's and Transformer Engine's ``ceil(log2(amax / max))``).
    tensor_scale : "amax", None or float, default "amax"
        ``"nvfp4"``: the float32 per-tensor scale; ``"amax"``: torchao's
        ``per_tensor_amax_to_scale`` of the tensor's largest finite ``|x|`` (``amax / (448
        * max)``), None: one level of scales (the block scales alone), or the value.

    Returns
    -------
    ndarray or dask.array.Array
        A lazy dask array for dask data (one amax task per block, combined; nothing is
        computed by the call).  float32 (float64 for float64 data): 0-d per tensor;
        ``x``'s shape with size 1 except along ``axis`` per channel; per block or tile,
        ``x``'s shape with each blocked axis shortened to its number of blocks, or, along
        an axis whose length is not a multiple of the block size, each block's scale
        repeated per element (a form :func:`error_metrics` reads without knowing the block
        size: an axis of ``s`` scales over ``n`` elements means blocks of ``n / s``).

    Raises
    ------
    TypeError
        Non-float data, a non-int axis or block size.
    ValueError
        Unknown scaling, format or scale_mode, a scale_mode for another scaling than
        "block", an axis out of range, a bad tensor_scale.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> w = np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)
    >>> float(study.scale_for(w, "float8_e4m3fn"))
    224.0
    >>> study.scale_for(w, "float8_e4m3fn", "channel", axis=0).ravel().tolist()
    [224.0, 896.0]
    >>> float(study.scale_for(w, "float8_e4m3fn", margin=1, pow2=True))
    64.0
    >>> v = np.array([[500.0, 1.0]], np.float32)  # X = 2**(8 - 8), or 2**ceil(log2(500 / 448))
    >>> [float(study.scale_for(v, "float8_e4m3fn", "block", scale_mode=m)[0, 0])
    ...  for m in ("floor", "rceil")]
    [1.0, 0.5]
    """
    f = get_format(fmt, argname="fmt")
    kind = _kind(scaling, "scale_for")
    axis = _named_axis(x, axis, "scale_for")
    akind, x = array_kind(x)
    if akind == "dask":
        r = _recipe(x.ndim, kind, axis, block_size, margin, pow2, scale_mode, tensor_scale,
                    "scale_for")  # fmt: skip
        return scale_for_dask(x, f, r)
    arr = unmasked(float_data(x, "scale_for", keep_mask=True))
    r = _recipe(arr.ndim, kind, axis, block_size, margin, pow2, scale_mode, tensor_scale,
                "scale_for")  # fmt: skip
    xw = working(arr).reshape(arr.shape or (1,))
    s = public_scale(recipe_scales(xw, f, r)[0], xw.shape, r)
    return s.reshape(()) if arr.ndim == 0 else s


def _dims(x: Any) -> tuple | None:
    """The dims of an xarray DataArray, else None (xarray is not imported)."""
    mod = type(x).__module__ or ""
    return tuple(x.dims) if mod.startswith("xarray.") and hasattr(x, "dims") else None


def _named_axis(x: Any, axis: Any, func: str) -> Any:
    """``axis`` with a dim name of the DataArray ``x`` replaced by its index."""
    if not isinstance(axis, str):
        return axis
    dims = _dims(x)
    if dims is None:
        raise TypeError(f"{func}: axis={axis!r} is a dim name, but x is not an xarray DataArray")
    if axis not in dims:
        raise ValueError(f"{func}: axis={axis!r} is not a dim of x; dims: {', '.join(dims)}")
    return dims.index(axis)


def public_scale(s: np.ndarray, shape: tuple[int, ...], r: Recipe) -> np.ndarray:
    """A recipe's compact scale as :func:`scale_for` returns it: repeated per element along
    the blocked axes whose length is not a multiple of the block size (so that an axis of
    ``s`` scales over ``n`` elements always means blocks of ``n / s``)."""
    if r.kind not in ("block", "tile", "nvfp4") or not s.ndim:
        return s
    kind, axis, block = r.grouping(len(shape))
    ragged = {ax: b for ax, b in _blocks_of(kind, axis, block).items() if shape[ax] % b}
    return _blocks.expand(s, shape, ragged) if ragged else s


def _recipe(ndim, kind, axis, block_size, margin, pow2, scale_mode, tensor_scale, func):
    """The checked :class:`Recipe` of a call's keywords for data of ``ndim`` dims."""
    mode = check_scale_mode(scale_mode, func)
    if mode != "ocp" and kind != "block":
        raise ValueError(
            f"{func}: scale_mode={mode!r} applies to scaling='block' (MX); got scaling={kind!r}"
        )
    ax, block = _axis_block_n(ndim, kind, axis, block_size, func)
    t = tensor_scale
    if not (t is None or (isinstance(t, str) and t == "amax")):
        try:
            t = math.nan if isinstance(t, (str, bool)) else float(t)
        except (TypeError, ValueError):
            t = math.nan
        if not (math.isfinite(t) and t > 0):
            raise ValueError(
                f"{func}: tensor_scale must be 'amax', None or a positive number; "
                f"got {tensor_scale!r}"
            )
    return Recipe(kind, ax, block, float(margin), bool(pow2), mode, t)


def _axis_block_n(ndim, kind, axis, block_size, func):
    block = _block_size(block_size, func, kind)
    if kind not in DEFAULT_AXIS or ndim == 0:
        return 0, block
    ax = DEFAULT_AXIS[kind] if axis is None else axis
    return check_axis(ax, ndim, func), block


def _axis_block(arr, kind, axis, block_size, func):
    return _axis_block_n(arr.ndim, kind, axis, block_size, func)


def mx_scales(
    x: Any,
    fmt: Any,
    *,
    block_size: int = 32,
    axis: int | str = -1,
    scale_mode: str = "ocp",
) -> np.ndarray:
    """MX block scales X (E8M0) of ``x`` for an element format, per OCP Microscaling v1.0
    (or a torchao rule, ``scale_mode``).

    Blocks are ``block_size`` consecutive elements along ``axis`` (the last block holds the
    remainder when the axis length is not a multiple).  For a block with largest magnitude
    ``amax``: ``X = 2**(floor(log2(amax)) - emax_elem)``, ``emax_elem`` being the exponent
    of the element format's largest normal value (8 for float8_e4m3fn, 15 for float8_e5m2),
    clamped below to 2**-127.  NaN (code 0xFF) when the block holds a NaN or an Inf or the
    exponent exceeds 127.  The element values are then ``round(V / X)`` with saturation:
    ``quantize(x, fmt, "block")``.  The rules of torchao 0.18's ``to_mx``
    (``scale_mode`` "floor", "ceil", "even", "rceil") give its codes, edge cases included.

    Parameters
    ----------
    x : array_like
        float16, bfloat16, float32 or float64 data: a numpy, masked or dask array or an
        xarray DataArray (its data).  Masked elements never raise an amax.
    fmt : str or FloatFormat
        The element format.
    block_size : int, default 32
        Elements per block (the MX formats of the spec use 32).
    axis : int or str, default -1
        The axis the blocks run along (a dim name for a DataArray).
    scale_mode : {"ocp", "floor", "ceil", "even", "rceil"}, default "ocp"
        The shared-exponent rule, as in :func:`scale_for`.

    Returns
    -------
    ndarray of ml_dtypes.float8_e8m0fnu
        (a lazy dask array for dask data) x's shape with ``axis`` shortened to the number of blocks;
        ``.view(np.uint8)`` gives the E8M0 codes (biased exponents).

    Raises
    ------
    TypeError
        If x is not float16, bfloat16, float32 or float64 data.
    ValueError
        For an unknown format or scale_mode, a block size below 1 or an axis out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> v = np.array([0.0, 1.0, 300.0, -3.0, 0.0, 0.0, 0.0, 0.0], np.float32)
    >>> X = study.mx_scales(v, "float8_e4m3fn", block_size=4)
    >>> X.astype(np.float64).tolist(), X.view(np.uint8).tolist()
    ([1.0, 5.877471754111438e-39], [127, 0])
    >>> w = np.float32([500.0, 1.0])  # floor(log2 500) - 8 = 0; ceil(log2(500 / 448)) = 1
    >>> [int(study.mx_scales(w, "float8_e4m3fn", scale_mode=m).view(np.uint8)[0])
    ...  for m in ("ocp", "rceil")]
    [127, 128]
    """
    import ml_dtypes

    f = get_format(fmt, argname="fmt")
    axis = _named_axis(x, axis, "mx_scales")
    akind, x = array_kind(x)
    r = _recipe(np.ndim(x) if akind != "dask" else x.ndim, "block", axis, block_size, 0.0,
                False, scale_mode, "amax", "mx_scales")  # fmt: skip
    if akind == "dask":
        codes = scale_for_dask(x, f, r, codes=True)
        return codes.map_blocks(_as_e8m0, dtype=ml_dtypes.float8_e8m0fnu)
    arr = unmasked(float_data(x, "mx_scales", keep_mask=True))
    xw = working(arr).reshape(arr.shape or (1,))
    amax, bad = group_amax(xw, "block", r.axis, r.block)
    codes = mx_codes(xw, amax, bad, f, r).reshape(amax.shape if arr.ndim else ())
    return codes.view(ml_dtypes.float8_e8m0fnu)


def mx_codes(xw, amax, bad, fmt: FloatFormat, r: Recipe, nan=None, dtype=None) -> np.ndarray:
    """The E8M0 codes of MX blocks under the recipe's rule.  ``xw``: the working data, read
    for the blocks' NaN flags where a torchao rule needs them (None when ``nan`` is given,
    with ``dtype`` the working dtype)."""
    if r.mode == "ocp":
        return mx_exponents(amax, bad, fmt)
    if nan is None and np.any(bad):
        nan = group_nan(xw, "block", r.axis, r.block)
    dt = work_dtype(xw.dtype) if xw is not None else np.dtype(dtype)
    return _blocks.mx_mode_codes(_blocks.special_amax(amax, bad, nan), fmt, r.mode, dt)


def _as_e8m0(codes: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return codes.view(ml_dtypes.float8_e8m0fnu)


def unmasked(arr: np.ndarray) -> np.ndarray:
    """A masked array's data with its masked elements set to 0 (they never raise an amax);
    other arrays as they are."""
    return arr.filled(0) if is_masked(arr) else arr


def quantize(
    x: Any,
    fmt: Any,
    scaling: Any = "tensor",
    *,
    scale: Any = None,
    axis: int | str | None = None,
    block_size: int | tuple[int, int] | None = None,
    margin: float = 0.0,
    pow2: bool = False,
    scale_mode: str = "ocp",
    tensor_scale: Any = "amax",
    return_scale: bool = False,
    rounding: str = "nearest_even",
    seed: Any = None,
    random_bits: int = 16,
    flush_subnormals: bool = False,
    flush_subnormal_inputs: bool = False,
) -> Any:
    """Quantize and dequantize ``x`` through a format with a scaling recipe, in one fused
    pass: ``round(x * scale) / scale`` (FakeConvert's formula and kernel).

    Rounding is to nearest even, saturating to +-max (Inf too); NaN stays NaN.  float16 and
    bfloat16 data are computed in float32 and rounded once to their dtype, as FakeConvert
    does.  float64 data, and formats that are not 8 bits wide, take the same steps in
    numpy and :func:`fp8kit.round_to`, in the data's dtype (float64 is rounded once).
    NVFP4 (``scaling="nvfp4"``) multiplies the rounded values by its stored scales, as
    torchao's ``nvfp4_quantize`` and ``NVFP4Tensor.dequantize``:
    ``round(x * scale) * (tensor scale * block scale)``.

    Parameters
    ----------
    x : array_like
        float16, bfloat16, float32 or float64 data: a numpy, masked or dask array or an
        xarray DataArray (a DataArray of the same dims, coords and attrs is returned).
        Masked elements never raise an amax.
    fmt : str or FloatFormat
        Any fp8kit format, or any FloatFormat (registered or not).
    scaling : {"tensor", "channel", "block", "tile", "nvfp4", "none"} or DelayedScaling
        The recipe, as in :func:`scale_for`; a :class:`DelayedScaling` (for ``fmt``) uses
        and updates its history.
    scale : array_like, optional
        An explicit scale (``scaling`` is then ignored): one that broadcasts to x, or
        per-block scales as :func:`scale_for` returns them (an axis of ``s`` scales over
        ``n`` elements: blocks of ``n / s``).
    axis, block_size, margin, pow2, scale_mode, tensor_scale
        As in :func:`scale_for` (``axis`` may be a dim name of a DataArray).
    return_scale : bool, default False
        Also return the scale used: ``(q, scale)``, the scale as :func:`scale_for` gives it
        (for a DelayedScaling the step's scale), which :func:`error_metrics` takes as
        ``scale=`` to count saturated and subnormal values as the rounding saw them.
    rounding : str, default "nearest_even"
        How ``round`` rounds: any mode of :func:`fp8kit.encode` (saturation is unchanged).
        The stochastic modes draw random word ``i`` for element ``i`` of x in C order, so
        the same seed gives the same bits for numpy and dask data, for any chunking.
    seed, random_bits
        Stochastic rounding only; see :func:`fp8kit.encode` (a seed drawn or taken from a
        Generator once per call).
    flush_subnormals : bool, default False
        ``round`` gives zero (of the value's sign) where its result is subnormal in ``fmt``.
    flush_subnormal_inputs : bool, default False
        Subnormals of x's own dtype are taken as zeros of their sign (before the amax).

    Returns
    -------
    ndarray, or (ndarray, ndarray) with return_scale
        x's dtype and shape (a DataArray for a DataArray); masked where x is (masked
        elements are quantized as zeros); for dask data a lazy dask array of x's chunks
        (MX blocks along an axis whose chunks are not multiples of the block size are
        rechunked first; with ``return_scale`` the scale is a lazy dask array too).

    Raises
    ------
    TypeError, ValueError
        As :func:`scale_for`; a scale that does not broadcast; a DelayedScaling for another
        format; rounding arguments as :func:`fp8kit.round_to`.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> x = np.array([0.1, 0.2, 1000.0, -7.0], np.float32)
    >>> study.quantize(x, "float8_e4m3fn", "none").tolist()
    [0.1015625, 0.203125, 448.0, -7.0]
    >>> study.quantize(x, "float8_e4m3fn", "block", block_size=2).tolist()  # X = 2**-11, 2
    [0.1015625, 0.203125, 896.0, -7.0]
    >>> q, s = study.quantize(x, "float8_e4m3fn", "block", block_size=2, return_scale=True)
    >>> s.tolist(), study.error_metrics(x, q, fmt="float8_e4m3fn", scale=s).saturated
    ([2048.0, 0.5], 0.25)
    """
    dims = _dims(x)
    if dims is not None:
        return _quantize_dataarray(x, locals())
    axis = _named_axis(x, axis, "quantize")
    f = get_format(fmt, argname="fmt")
    rnd = _rounding_kwargs(rounding, seed, random_bits, flush_subnormals)
    dazi = _args.flag(flush_subnormal_inputs, "flush_subnormal_inputs", "quantize")
    want_scale = _args.flag(return_scale, "return_scale", "quantize")
    akind, x = array_kind(x)
    if akind == "dask":
        if dazi:
            x = x.map_blocks(_flush_block, dtype=x.dtype, meta=x._meta)
        if scale is not None:
            q, sc = quantize_dask(x, f, Recipe("none"), scale=scale, rnd=rnd)
        elif isinstance(scaling, DelayedScaling):
            if scaling.fmt != f:
                raise ValueError(
                    f"quantize: the DelayedScaling is for {scaling.fmt.name}, not {f.name}"
                )
            used = scaling.step(tensor_amax(x))
            sc = work_dtype(x.dtype).type(clamp_scale(used, work_dtype(x.dtype)))
            q, sc = quantize_dask(x, f, Recipe("none"), scale=sc, rnd=rnd)
        else:
            kind = _kind(scaling, "quantize")
            r = _recipe(x.ndim, kind, axis, block_size, margin, pow2, scale_mode,
                        tensor_scale, "quantize")  # fmt: skip
            q, sc = quantize_dask(x, f, r, rnd=rnd)
        return (q, sc) if want_scale else q
    arr = float_data(x, "quantize", keep_mask=True)
    mask = np.ma.getmaskarray(arr) if is_masked(arr) else None
    arr = unmasked(arr)
    if dazi:
        arr = np.asarray(_args.flush_inputs(arr))
    xw = working(arr)
    if scale is not None:
        sc = np.asarray(scale, dtype=xw.dtype)
        xv, sv = split_view(xw, sc, "quantize")
        q = apply_scale(xv, f, sv, **rnd).reshape(xw.shape)
    elif isinstance(scaling, DelayedScaling):
        if scaling.fmt != f:
            raise ValueError(
                f"quantize: the DelayedScaling is for {scaling.fmt.name}, not {f.name}"
            )
        sc = np.asarray(scaling.scale(arr), dtype=xw.dtype)
        q = apply_scale(xw, f, sc, **rnd).reshape(xw.shape)
    else:
        kind = _kind(scaling, "quantize")
        r = _recipe(arr.ndim, kind, axis, block_size, margin, pow2, scale_mode, tensor_scale,
                    "quantize")  # fmt: skip
        x1 = xw.reshape(xw.shape or (1,))
        q = None
        if not rnd and not want_scale and (r.kind != "block" or r.mode == "ocp"):
            q = _quantize_runs(x1, f, r.kind, r.axis, r.block, r.margin, r.pow2)
        if q is None:
            s, d, _, _ = recipe_scales(x1, f, r)
            gk, gax, gb = r.grouping(x1.ndim)
            xv, sv = broadcast_view(x1, s, gk, gax, gb)
            if d is None:
                q = apply_scale(xv, f, sv, **rnd)
            else:
                dv = broadcast_view(x1, d, gk, gax, gb)[1]
                q = _blocks.nvfp4_round(np.array(xv), f, sv, dv, **rnd)
            sc = public_scale(s, x1.shape, r)
            sc = sc if arr.ndim else sc.reshape(())
        q = q.reshape(xw.shape)
    if q.dtype != arr.dtype:
        with np.errstate(over="ignore"):  # (beyond float16's range: Inf, no warning)
            q = q.astype(arr.dtype)
    q = q if mask is None else np.ma.masked_array(q, mask)
    return (q, _scale_out(sc, arr.ndim)) if want_scale else q


def _scale_out(sc: Any, ndim: int) -> np.ndarray:
    """The scale :func:`quantize` returns (a 0-d array for 0-d data)."""
    sc = np.asarray(sc)
    return sc.reshape(()) if ndim == 0 and sc.size == 1 else sc


def _quantize_dataarray(x: Any, kw: dict) -> Any:
    """quantize of an xarray DataArray: its data quantized with ``axis`` a dim name or an
    index, rewrapped with x's dims, coords, name and attrs."""
    kw = {k: v for k, v in kw.items() if k not in ("x", "dims")}
    kw["axis"] = _named_axis(x, kw["axis"], "quantize")
    out = quantize(x.data, **kw)
    if kw["return_scale"]:
        q, sc = out
        return x.copy(data=q), sc
    return x.copy(data=out)


def split_view(xw: np.ndarray, sc: np.ndarray, func: str):
    """``(x_view, scale_view)`` of an explicit scale: one that broadcasts to ``xw``, or
    per-block scales whose axes of ``s`` values over ``n`` elements (``s`` dividing ``n``)
    are blocks of ``n / s`` (:func:`fp8kit.study.metrics.scale_blocks`)."""
    from .metrics import scale_blocks

    blocks, sc = scale_blocks(sc, xw.shape, func)
    if not blocks:
        return xw, sc
    xs, ss = _blocks.split_shapes(xw.shape, blocks, sc.shape)
    return xw.reshape(xs), sc.reshape(ss)


#: The scale argument of quantize_kernel's modes that read none.
_NO_SCALE = np.zeros(1, np.float32)


def _quantize_runs(
    xw: np.ndarray, fmt: FloatFormat, kind: str, axis: int, block: int, margin: float, pow2: bool
) -> np.ndarray | None:
    """``quantize`` of float32 data (C-contiguous, at least 1-D) with a recipe, nearest-even,
    in one compiled kernel (:func:`fp8kit._kernels.quantize.quantize_kernel`): per tensor
    (the amax, then FakeConvert), per channel along the first axis of 2-D data (likewise,
    a scale per row) or MX blocks along the last axis (one pass).  The same values as
    :func:`compact_scale` then :func:`apply_scale`; None where it does not apply."""
    from .._kernels.encode16 import fake_scalars
    from .._kernels.fake import round_params
    from .._kernels.quantize import AMAX, FAKE, MX, quantize_kernel

    if xw.dtype != np.float32 or not xw.size or not _args.rounds_in_place(fmt):
        return None
    pre, length, post = _split(xw.shape, axis)
    if kind == "tensor":
        length, run = xw.size, max(4096, -(-xw.size // 256))  # (as group_amax's runs)
    elif kind == "channel" and pre == 1 and post > 1:
        length, run = post, post  # (a run per channel: a row of 2-D data)
    elif kind == "block" and post == 1:
        run = block
    else:
        return None
    nruns = (xw.size // length) * -(-length // run)
    bits = xw.reshape(-1).view(np.uint32)
    out = np.empty(xw.shape, np.float32)
    amax, bad = np.empty(nruns, np.uint32), np.empty(nruns, np.uint32)
    consts = fake_scalars(round_params(fmt), np.float32(1.0), None)
    kernel = quantize_kernel()

    def launch(mode, scale):
        dims = np.array([mode, length, run, fmt.maxexp - 1], np.int64)
        _parallel.launch(
            kernel, xw.size, consts, bits, scale, out.reshape(-1).view(np.uint32), dims, amax,
            bad,
        )  # fmt: skip

    if kind == "block":
        launch(MX, _NO_SCALE)
        return out
    launch(AMAX, _NO_SCALE)
    am = amax.view(np.float32).astype(np.float64)
    if kind == "tensor":
        am = am.max(keepdims=True)
    s = amax_scale(am, fmt, margin, pow2, np.float32)
    launch(FAKE, np.broadcast_to(s, (nruns,)).copy() if s.size == 1 else s)
    return out


def _rounding_kwargs(rounding, seed, random_bits, flush_subnormals, func="quantize") -> dict:
    """The rounding keywords for :func:`apply_scale`, checked (errors naming ``func``);
    empty for the defaults (the unchanged path).  A stochastic mode's seed is drawn (or
    taken from a Generator) once here, so every block of a call shares it."""
    mode = _args.check_rounding(rounding, random_bits, func)
    if _args.is_stochastic(mode):
        seed = _args.seed_int(seed, func)
    _, _, bits = _args.rounding(rounding, seed, random_bits, func)
    rnd: dict[str, Any] = {}
    if _args.flag(flush_subnormals, "flush_subnormals", func):
        rnd["flush_subnormals"] = True
    if rounding != "nearest_even":
        rnd["rounding"] = rounding
        if _args.is_stochastic(mode):
            rnd.update(seed=seed, random_bits=bits)
    return rnd


class DelayedScaling:
    """Delayed scaling from an amax history, as NVIDIA Transformer Engine does on GPUs.

    Each call of :meth:`scale` returns the scale to use for this step's tensor, computed
    from the amaxes of *earlier* steps, and then records this step's amax (its largest
    finite ``|x|``).  After recording, the next scale is ``max / A / 2**margin`` with
    ``A`` the largest amax of the last ``history_len`` steps (``algo="max"``) or the one
    just recorded (``"most_recent"``); when ``A`` is 0 the previous scale is kept.  The
    first step uses ``initial_scale`` (1, as Transformer Engine initialises its scales), or
    with ``initial_scale=None`` the first tensor's own amax.

    Parameters
    ----------
    fmt : str or FloatFormat
        The format the tensors are rounded to.
    history_len : int, default 16
        Steps in the amax history window.
    algo : {"max", "most_recent"}, default "max"
        Scale from the largest amax of the window, or from the last one.
    margin : float, default 0
        Divide each scale by ``2**margin`` (headroom for growing amaxes).
    pow2 : bool, default False
        Round each scale down to a power of two.
    initial_scale : float or None, default 1.0
        The first step's scale; None: the first tensor's own ``max / amax``.

    Raises
    ------
    TypeError
        If ``history_len`` is not an int.
    ValueError
        For an unknown format or ``algo``, ``history_len < 1``, or an ``initial_scale``
        that is not a positive finite number.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> ds = study.DelayedScaling("float8_e4m3fn", history_len=2)
    >>> [float(ds.scale(np.array([a], np.float32))) for a in (2.0, 4.0, 1.0, 1.0)]
    [1.0, 224.0, 112.0, 112.0]
    >>> ds.history
    (1.0, 1.0)
    """

    def __init__(
        self,
        fmt: Any,
        history_len: int = 16,
        algo: str = "max",
        *,
        margin: float = 0.0,
        pow2: bool = False,
        initial_scale: float | None = 1.0,
    ) -> None:
        self.fmt = get_format(fmt, argname="fmt")
        if isinstance(history_len, bool) or not isinstance(history_len, (int, np.integer)):
            raise TypeError(f"DelayedScaling: history_len must be an int; got {history_len!r}")
        if history_len < 1:
            raise ValueError(f"DelayedScaling: history_len must be >= 1; got {history_len}")
        if algo not in ALGOS:
            raise ValueError(f"DelayedScaling: unknown algo {algo!r}; valid: {', '.join(ALGOS)}")
        if initial_scale is not None and not (
            math.isfinite(float(initial_scale)) and float(initial_scale) > 0
        ):
            raise ValueError(
                f"DelayedScaling: initial_scale must be a positive number or None; "
                f"got {initial_scale!r}"
            )
        self.history_len = int(history_len)
        self.algo = algo
        self.margin = float(margin)
        self.pow2 = bool(pow2)
        self.initial_scale = None if initial_scale is None else float(initial_scale)
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next step is a first step again.

        Returns
        -------
        None

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> ds = study.DelayedScaling("float8_e4m3fn")
        >>> _ = ds.scale(np.float32([2.0]))
        >>> ds.reset()
        >>> ds.history
        ()
        """
        self._history: deque[float] = deque(maxlen=self.history_len)
        self._scale: float | None = self.initial_scale

    @property
    def history(self) -> tuple[float, ...]:
        """Recorded amaxes, most recent first."""
        return tuple(reversed(self._history))

    def step(self, amax: float) -> float:
        """Record one step's amax and return the scale (float64) that step uses.

        Parameters
        ----------
        amax : float
            The step's largest finite magnitude.

        Returns
        -------
        float
            The scale computed from the earlier steps (``initial_scale`` on the first).

        Raises
        ------
        TypeError, ValueError
            If ``amax`` is not a real number (as ``float(amax)`` raises them).

        Examples
        --------
        >>> from fp8kit import study
        >>> ds = study.DelayedScaling("float8_e4m3fn", initial_scale=None)
        >>> ds.step(4.0), ds.step(8.0), ds.step(2.0)
        (112.0, 112.0, 56.0)
        """
        amax = float(amax)
        if self._scale is None:  # initial_scale=None: the first step scales by its own amax
            self._scale = float(amax_scale(amax, self.fmt, self.margin, self.pow2, np.float64))
        used = self._scale
        self._history.append(amax)
        a = max(self._history) if self.algo == "max" else amax
        if a > 0:
            self._scale = float(amax_scale(a, self.fmt, self.margin, self.pow2, np.float64))
        return used

    def scale(self, x: Any) -> np.floating:
        """The scale for this step's tensor ``x`` (float32, float64 for float64 data);
        records x's amax.

        Parameters
        ----------
        x : array_like
            float16, bfloat16, float32 or float64 data of this step.

        Returns
        -------
        numpy.float32 or numpy.float64
            The multiplier for ``x`` (``x * scale`` is what gets rounded).

        Raises
        ------
        TypeError
            If x is not float16, bfloat16, float32 or float64 data.

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> ds = study.DelayedScaling("float8_e5m2")
        >>> ds.scale(np.float32([1.0, -4.0])), ds.scale(np.float32([2.0]))
        (np.float32(1.0), np.float32(14336.0))
        """
        akind, x = array_kind(x)
        if akind == "dask":
            used = self.step(tensor_amax(x))
            return work_dtype(x.dtype).type(clamp_scale(used, work_dtype(x.dtype)))
        arr = unmasked(float_data(x, "DelayedScaling.scale", keep_mask=True))
        xw = working(arr)
        amax = group_amax(xw, "tensor")[0]
        used = self.step(float(amax))
        return work_dtype(arr.dtype).type(clamp_scale(used, xw.dtype))

    def quantize(self, x: Any) -> np.ndarray:
        """``quantize(x, self.fmt, self)``: this step's tensor through the format.

        Parameters
        ----------
        x : array_like
            float16, bfloat16, float32 or float64 data of this step.

        Returns
        -------
        ndarray
            x scaled by :meth:`scale`, rounded to the format and scaled back, in x's dtype.

        Raises
        ------
        TypeError
            If x is not float16, bfloat16, float32 or float64 data.

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> ds = study.DelayedScaling("float8_e4m3fn")
        >>> ds.quantize(np.float32([0.3, 2.0])).tolist()  # step 1: scale 1
        [0.3125, 2.0]
        >>> ds.quantize(np.float32([0.3, 2.0])).tolist()  # step 2: scale 448 / 2
        [0.2857142984867096, 2.0]
        """
        return quantize(x, self.fmt, self)


# Chunks and dask arrays: amaxes that combine across chunks (blocks), lazily for dask.


@dataclasses.dataclass(frozen=True)
class Grouping:
    """The groups one amax is taken over: ``kind`` tensor, channel, block or tile, along
    ``axis`` (channel, block; a tile's columns, its rows along ``axis - 1``), of ``block``
    elements (block) or ``(rows, cols)`` (tile)."""

    kind: str
    axis: int = 0
    block: Any = 1


def _local_axis(s: int, e: int, b: int, box, axis: int):
    """``(local block, slice of the compact index)`` of a chunk's range ``[s, e)`` along an
    axis of blocks of ``b``, or a ValueError when the chunk cuts blocks."""
    if s % b == 0:
        return b, slice(s // b, -(-e // b))
    if s // b == (e - 1) // b:  # the chunk lies inside one block along the axis
        return e - s, slice(s // b, s // b + 1)
    raise ValueError(f"chunk {box} cuts MX blocks of {b} along axis {axis}")


def local_grouping(g: Grouping, box: Box, shape: tuple[int, ...]):
    """``(local Grouping, index)``: the grouping as it applies to the chunk ``box`` and the
    index of the chunk's groups in the tensor's compact arrays (:func:`compact_shape`)."""
    if g.kind == "tensor":
        return g, ()
    s, e = box[g.axis]
    if g.kind == "channel":
        idx = tuple(slice(s, e) if d == g.axis else slice(0, 1) for d in range(len(shape)))
        return g, idx
    blocks = _blocks_of(g.kind, g.axis, g.block)
    sel, local = {}, {}
    for ax, b in blocks.items():
        s, e = box[ax]
        if not (s % b == 0 and (e % b == 0 or e == shape[ax])) and s // b != (e - 1) // b:
            raise ValueError(f"chunk {box} cuts MX blocks of {b} along axis {ax}")
        local[ax], sel[ax] = _local_axis(s, e, b, box, ax)
    idx = tuple(sel[d] if d in sel else slice(bs, be) for d, (bs, be) in enumerate(box))
    if g.kind == "block":
        return Grouping("block", g.axis, local[g.axis]), idx
    return Grouping("tile", g.axis, (local[g.axis - 1], local[g.axis])), idx


def chunk_amax(y: Any, box: Box, shape: tuple[int, ...], groupings: list[Grouping]) -> list:
    """Per grouping, ``(amax, nonfinite)`` of one chunk (masked elements left out), in the
    chunk's own compact shape."""
    xw = _chunk_working(y)
    out = []
    for g in groupings:
        lg, _ = local_grouping(g, box, shape)
        out.append(group_amax(xw, lg.kind, lg.axis, lg.block))
    return out


def _chunk_working(y: Any) -> np.ndarray:
    data, mask = _unmask(y)
    if mask is None and data.dtype == ml_dtypes.bfloat16:  # (read as is: no widened copy)
        xw = np.ascontiguousarray(data)
    else:
        xw = working(data)
    if mask is not None:
        xw = np.where(mask, xw.dtype.type(0), xw)
    return xw


def chunk_nan(y: Any, box: Box, shape: tuple[int, ...], groupings: list[Grouping]) -> list:
    """Per grouping, whether each of the chunk's groups holds a NaN (:func:`group_nan`),
    in the chunk's own compact shape."""
    xw = _chunk_working(y)
    out = []
    for g in groupings:
        lg, _ = local_grouping(g, box, shape)
        out.append(group_nan(xw, lg.kind, lg.axis, lg.block))
    return out


def merge_amax(glob: list, parts: list, box: Box, shape, groupings: list[Grouping]) -> None:
    """Combine one chunk's :func:`chunk_amax` into the tensor's compact arrays (in place)."""
    for (am, bad), (pa, pb), g in zip(glob, parts, groupings, strict=True):
        _, idx = local_grouping(g, box, shape)
        shape_here = np.shape(am[idx])
        am[idx] = np.maximum(am[idx], pa.reshape(shape_here))
        bad[idx] = np.logical_or(bad[idx], pb.reshape(shape_here))


def merge_nan(glob: list, parts: list, box: Box, shape, groupings: list[Grouping]) -> None:
    """Combine one chunk's :func:`chunk_nan` into the tensor's compact flags (in place)."""
    for nan, part, g in zip(glob, parts, groupings, strict=True):
        _, idx = local_grouping(g, box, shape)
        nan[idx] = np.logical_or(nan[idx], np.reshape(part, np.shape(nan[idx])))


def empty_amax(shape: tuple[int, ...], groupings: list[Grouping]) -> list:
    """Zeroed compact ``(amax, nonfinite)`` arrays of a tensor, one pair per grouping."""
    out = []
    for g in groupings:
        cs = compact_shape(shape, g.kind, g.axis, g.block)
        out.append((np.zeros(cs), np.zeros(cs, bool)))
    return out


def local_scale(scale: np.ndarray, g: Grouping | None, box: Box, shape) -> np.ndarray:
    """The part of a tensor's compact scale array that a chunk uses, in its compact shape."""
    if g is None or g.kind == "tensor":
        return np.asarray(scale).reshape(())
    lg, idx = local_grouping(g, box, shape)
    sub = tuple(e - s for s, e in box)
    return np.ascontiguousarray(scale[idx]).reshape(compact_shape(sub, lg.kind, lg.axis, lg.block))


def _amaxes(x, shape, groupings):
    """Compact ``(amax, nonfinite)`` per grouping of a dask array (computed)."""
    import dask

    pieces = blocks_and_boxes(x)
    parts = dask.compute(*[dask.delayed(chunk_amax)(b, box, shape, groupings) for b, box in pieces])
    glob = empty_amax(shape, groupings)
    for (_, box), p in zip(pieces, parts, strict=True):
        merge_amax(glob, p, box, shape, groupings)
    return glob


def _grouping(kind: str, axis: int, block: Any) -> Grouping | None:
    if kind == "none":
        return None
    if kind == "tensor":
        return Grouping("tensor")
    return Grouping(kind, axis, block if kind in ("block", "tile") else 1)


def needs_nan(r: Recipe) -> bool:
    """Whether a recipe's rule tells a group holding NaN from one holding only Inf."""
    return r.kind == "nvfp4" or (r.kind == "block" and r.mode != "ocp")


def _scale_from_parts(parts, nans, boxes, shape, g, fmt, r: Recipe, dtype, codes=False):
    """``(scale, dequant)`` (compact; dequant None but for NVFP4), or the E8M0 codes, of a
    dask array from its blocks' amax parts (and NaN flags, for the rules that need them)."""
    glob = empty_amax(shape, [g])
    for p, box in zip(parts, boxes, strict=True):
        merge_amax(glob, p, box, shape, [g])
    amax, bad = glob[0]
    nan = None
    if nans is not None:
        nan = [np.zeros(amax.shape, bool)]
        for p, box in zip(nans, boxes, strict=True):
            merge_nan(nan, p, box, shape, [g])
        nan = nan[0]
    if codes:
        return mx_codes(None, amax, bad, fmt, r, nan if nan is not None else bad & False, dtype)
    if r.kind in ("tensor", "channel", "tile"):
        return amax_scale(amax, fmt, r.margin, r.pow2, dtype), None
    if r.kind == "block" and r.mode == "ocp":
        return mx_scale_from_codes(mx_exponents(amax, bad, fmt), dtype), None
    return scales_from_amax(amax, bad, nan, fmt, r, dtype)


def lazy_scale(x, fmt: FloatFormat, r: Recipe, codes: bool = False):
    """``(x1, g, scales)``: x as at least 1-D, aligned for blocks and tiles, its grouping,
    and its compact ``(scale, dequant)`` (or E8M0 codes) as a Delayed (nothing computed)."""
    import dask

    shape = tuple(x.shape) or (1,)
    x1 = x.reshape(shape)
    dt = work_dtype(x.dtype)
    g = _grouping(*r.grouping(len(shape)))
    if g is None:
        return x1, g, dask.delayed((np.ones((), dt), None))
    x1 = aligned(x1, _blocks_of(g.kind, g.axis, g.block))
    pieces = blocks_and_boxes(x1)
    parts = [dask.delayed(chunk_amax)(b, box, shape, [g]) for b, box in pieces]
    nans = None
    if needs_nan(r):
        nans = [dask.delayed(chunk_nan)(b, box, shape, [g]) for b, box in pieces]
    boxes = [box for _, box in pieces]
    scale = dask.delayed(_scale_from_parts)(parts, nans, boxes, shape, g, fmt, r, dt, codes)
    return x1, g, scale


def _first(pair):
    return pair[0]


def scale_for_dask(x, fmt, r: Recipe, codes=False):
    """scale_for (or mx_scales' codes) of a dask array, as a lazy dask array."""
    import dask
    import dask.array as da

    check_dtype(x, "mx_scales" if codes else "scale_for")
    x1, g, scale = lazy_scale(x, fmt, r, codes)
    shape = tuple(x1.shape)
    gk, gax, gb = r.grouping(len(shape))
    cs = () if r.kind == "none" else compact_shape(shape, gk, gax, gb)
    dt = np.dtype(np.uint8) if codes else work_dtype(x.dtype)
    s = scale if codes else dask.delayed(_first)(scale)
    if not codes:
        s = dask.delayed(public_scale)(s, shape, r)
        cs = _public_shape(cs, shape, r)
    out = da.from_delayed(s, shape=cs, dtype=dt)
    return out.reshape(()) if x.ndim == 0 and cs != () else out


def _public_shape(cs: tuple[int, ...], shape: tuple[int, ...], r: Recipe) -> tuple[int, ...]:
    """The shape :func:`public_scale` gives a compact shape ``cs``."""
    if r.kind not in ("block", "tile", "nvfp4") or not cs:
        return cs
    gk, gax, gb = r.grouping(len(shape))
    blocks = _blocks_of(gk, gax, gb)
    return tuple(shape[d] if d in blocks and shape[d] % blocks[d] else n for d, n in enumerate(cs))


def _rounder(fmt, dq=None, **rnd):
    """The function that rounds a working block with its scale (and NVFP4's dequant)."""
    if dq is None:
        return lambda xw, sc: apply_scale(xw, fmt, sc, **rnd)
    return lambda xw, sc: _blocks.nvfp4_round(np.array(xw), fmt, sc, dq, **rnd)


def _stochastic_block(xw, fmt, sc, rnd, box, shape, dq=None):
    """apply_scale of a dask block with a stochastic rounding: each run of consecutive
    global C-order indices under its own :func:`fp8kit._args.index_offset`, so the bits
    are those of the whole-array call.  ``sc`` (and NVFP4's ``dq``) broadcast to ``xw``."""
    from .._dask import by_runs

    def run(part, offset, sp, *dp):
        with _args.index_offset(offset):
            d = np.ascontiguousarray(dp[0]) if dp else None
            return _rounder(fmt, d, **rnd)(np.ascontiguousarray(part), np.ascontiguousarray(sp))

    full = [np.broadcast_to(sc, xw.shape)]
    if dq is not None:
        full.append(np.broadcast_to(dq, xw.shape))
    return by_runs(run, xw, shape, [b[0] for b in box], full).reshape(xw.shape)


def _flush_block(block):
    """flush_subnormal_inputs of a dask block, keeping a masked block's mask."""
    if is_masked(block):
        data = np.asarray(_args.flush_inputs(np.asarray(block.data)))
        return np.ma.masked_array(data, np.ma.getmaskarray(block))
    return np.asarray(_args.flush_inputs(block))


def _stochastic(rnd: dict) -> bool:
    return "seed" in rnd


def _quantize_block(block, scales, g, shape, fmt, rnd=None, block_info=None):
    box = tuple(block_info[0]["array-location"])
    data, mask = (
        (np.asarray(block.data), np.ma.getmaskarray(block))
        if is_masked(block)
        else (np.asarray(block), None)
    )
    xw = working(data)
    if mask is not None:
        xw = np.where(mask, xw.dtype.type(0), xw)
    scale, dq = scales
    lg = Grouping("tensor") if g is None else local_grouping(g, box, shape)[0]
    sc = local_scale(scale, g, box, shape).astype(xw.dtype)
    xv, sv = broadcast_view(xw, sc, lg.kind, lg.axis, lg.block)
    dv = None
    if dq is not None:
        dv = broadcast_view(xw, local_scale(dq, g, box, shape).astype(xw.dtype), lg.kind,
                            lg.axis, lg.block)[1]  # fmt: skip
    rnd = rnd or {}
    if _stochastic(rnd):
        full = np.broadcast_to(sv, xv.shape).reshape(xw.shape)
        dfull = None if dv is None else np.broadcast_to(dv, xv.shape).reshape(xw.shape)
        q = _stochastic_block(xw, fmt, full, rnd, box, shape, dfull)
    else:
        q = _rounder(fmt, dv, **rnd)(xv, sv).reshape(xw.shape)
    q = q.astype(data.dtype)
    return q if mask is None else np.ma.masked_array(q, mask)


def _explicit_block(block, scale, fmt, rnd=None, shape=None, block_info=None):
    box = block_info[0]["array-location"]
    sc = np.asarray(scale)
    sc = sc.reshape((1,) * (len(box) - sc.ndim) + sc.shape)
    sel = tuple(
        slice(0, 1) if n == 1 else slice(s, e) for n, (s, e) in zip(sc.shape, box, strict=True)
    )
    data = np.asarray(block.data if is_masked(block) else block)
    xw = working(data)
    rnd = rnd or {}
    sb = np.ascontiguousarray(sc[sel], xw.dtype)
    if _stochastic(rnd):
        q = _stochastic_block(xw, fmt, sb, rnd, box, shape).astype(data.dtype)
    else:
        q = apply_scale(xw, fmt, sb, **rnd).astype(data.dtype)
    return np.ma.masked_array(q, np.ma.getmaskarray(block)) if is_masked(block) else q


def quantize_dask(x, fmt, r: Recipe, scale=None, rnd=None):
    """``(q, scale)``: quantize of a dask array (a lazy dask array of x's dtype, shape and
    chunks) and its scale (as :func:`scale_for` gives it: a lazy dask array, or the explicit
    scale)."""
    import dask
    import dask.array as da

    from .metrics import scale_blocks

    check_dtype(x, "quantize")
    if scale is not None:
        sc = np.asarray(scale.compute() if hasattr(scale, "__dask_graph__") else scale)
        blocks, full = scale_blocks(sc, tuple(x.shape), "quantize")
        # per-block scales are expanded (in memory) to broadcast to x
        full = _blocks.expand(full, tuple(x.shape), blocks) if blocks else full
        x1 = x.reshape(tuple(x.shape) or (1,))
        out = x1.map_blocks(
            _explicit_block, full, fmt, rnd, tuple(x1.shape), dtype=x.dtype, meta=x1._meta
        )
        return out.reshape(x.shape), sc
    x1, g, scales = lazy_scale(x, fmt, r)
    out = x1.map_blocks(
        _quantize_block, scales, g, tuple(x1.shape), fmt, rnd, dtype=x.dtype, meta=x1._meta
    )
    shape = tuple(x1.shape)
    gk, gax, gb = r.grouping(len(shape))
    cs = () if r.kind == "none" else compact_shape(shape, gk, gax, gb)
    s = dask.delayed(public_scale)(dask.delayed(_first)(scales), shape, r)
    sc = da.from_delayed(s, shape=_public_shape(cs, shape, r), dtype=work_dtype(x.dtype))
    return out.reshape(x.shape), (sc.reshape(()) if x.ndim == 0 and cs != () else sc)


def tensor_amax(x) -> float:
    """The largest finite |x| of a dask array (computed)."""
    check_dtype(x, "DelayedScaling.scale")
    shape = tuple(x.shape) or (1,)
    return float(_amaxes(x.reshape(shape), shape, [Grouping("tensor")])[0][0])
