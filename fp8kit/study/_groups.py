"""Per-group statistics of a sweep that the fused kernels do not give: the crest factor
``max |x| / rms(x)`` of the groups that share a scale, and the chunk totals of NVFP4,
whose dequantization (``round(x * m) * d``) is not FakeConvert's division.

Module-level functions of numpy chunks and plain data (Dask pickles them), combined
across chunks as :mod:`fp8kit.study._chunks` combines the amaxes and totals.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._kernels import metrics as km
from ..formats import FloatFormat
from . import _blocks
from ._arrays import Box, _unmask, working
from .metrics import metric_totals
from .scaling import (
    Grouping,
    _blocks_of,
    broadcast_view,
    group_amax,
    local_grouping,
    local_scale,
)


def group_sums(xw: np.ndarray, g: Grouping, valid: np.ndarray | None = None):
    """``(sum of squares, count)`` per group of a working chunk, compact
    (:func:`fp8kit.study.scaling.compact_shape`), in float64 (the squares in float32 for
    float32 data: a statistic, not an error figure); non-finite values give NaN or Inf
    sums (their groups are left out of the crest); ``valid``: the unmasked elements
    (masked ones are zeros in ``xw``)."""
    sq = np.square(xw)
    blocks = {} if g.kind in ("tensor", "channel") else _blocks_of(g.kind, g.axis, g.block)
    if g.kind == "tensor" or xw.ndim == 0:
        total = np.asarray(sq.sum(dtype=np.float64))
        return total, np.asarray(float(xw.size if valid is None else valid.sum()))
    if g.kind == "channel":
        axes = tuple(d for d in range(xw.ndim) if d != g.axis)
        total = sq.sum(axis=axes, keepdims=True, dtype=np.float64)
        n = xw.size // max(1, xw.shape[g.axis])
        count = (np.full(total.shape, float(n)) if valid is None
                 else valid.sum(axis=axes, keepdims=True).astype(np.float64))  # fmt: skip
        return total, count
    total = sq
    for ax, b in blocks.items():
        total = np.add.reduceat(total, np.arange(0, xw.shape[ax], b), axis=ax, dtype=np.float64)
    if valid is None:
        count = np.ones((1,) * xw.ndim)
        for ax, b in blocks.items():
            n = xw.shape[ax]
            lengths = np.minimum(np.arange(0, n, b) + b, n) - np.arange(0, n, b)
            count = count * lengths.reshape([-1 if d == ax else 1 for d in range(xw.ndim)])
        return total, np.broadcast_to(count, total.shape).astype(np.float64)
    count = valid.astype(np.float64)
    for ax, b in blocks.items():
        count = _blocks.group_reduce(count, ax, b, np.add)
    return total, count


def chunk_sums(y: Any, box: Box, shape: tuple[int, ...], groupings: list[Grouping]) -> list:
    """Per grouping, ``(amax, sum of squares, count)`` of one chunk's groups (masked
    elements left out), in the chunk's own compact shape; amax NaN for groups holding a
    NaN or an Inf."""
    data, mask = _unmask(y)
    xw = working(data)
    valid = None
    if mask is not None:
        xw = np.where(mask, xw.dtype.type(0), xw)
        valid = ~mask
    out = []
    for g in groupings:
        lg, _ = local_grouping(g, box, shape)
        sq, n = group_sums(xw, lg, valid)
        am, bad = group_amax(xw, lg.kind, lg.axis, lg.block)
        am = np.where(np.asarray(bad) | ~np.isfinite(sq), np.nan, am)
        out.append((np.asarray(am, np.float64).reshape(np.shape(sq)), sq, n))
    return out


def merge_sums(glob: list, parts: list, box: Box, shape, groupings: list[Grouping]) -> None:
    """Combine one chunk's :func:`chunk_sums` into the tensor's compact arrays (in place)."""
    for (am, sq, n), (pa, ps, pn), g in zip(glob, parts, groupings, strict=True):
        _, idx = local_grouping(g, box, shape)
        here = np.shape(am[idx])
        am[idx] = np.maximum(am[idx], pa.reshape(here))  # (NaN: a group with NaN/Inf)
        sq[idx] = sq[idx] + ps.reshape(here)
        n[idx] = n[idx] + pn.reshape(here)


def crest_of(am: np.ndarray, sq: np.ndarray, n: np.ndarray) -> float | None:
    """The mean of ``amax / sqrt(sum of squares / count)`` over the groups with a nonzero,
    finite sum (None when there is none)."""
    am, sq, n = (np.asarray(v, np.float64).reshape(-1) for v in (am, sq, n))
    ok = np.isfinite(sq) & (sq > 0) & (n > 0) & np.isfinite(am)
    if not ok.any():
        return None
    return float(np.mean(am[ok] / np.sqrt(sq[ok] / n[ok])))


def two_level_totals(
    y: Any,
    box: Box,
    shape: tuple[int, ...],
    jobs: list[tuple[FloatFormat, Grouping, np.ndarray, np.ndarray]],
) -> tuple[int, np.ndarray]:
    """``(count, totals)`` of one chunk for NVFP4 jobs ``(format, grouping, multiplier,
    dequant)`` (the tensor's compact arrays): ``q = round(clamp(x * m)) * d`` in the
    working dtype, rounded once to the data's dtype, then the metric kernel with ``m`` as
    the scale (saturated: ``|x m|`` beyond the overflow threshold; subnormal: ``|q m|``
    below the subnormal limit, :func:`fp8kit.study.metrics._limits`)."""
    data, mask = _unmask(y)
    xw = working(data)
    xq = xw if mask is None else np.where(mask, xw.dtype.type(0), xw)
    xm = xw if mask is None else np.where(mask, xw.dtype.type(np.nan), xw)
    nmasked = 0 if mask is None else int(np.count_nonzero(mask))
    out = np.zeros((len(jobs), km.N_METRICS))
    for j, (fmt, g, m, d) in enumerate(jobs):
        lg, _ = local_grouping(g, box, shape)
        mloc = local_scale(m, g, box, shape).astype(xw.dtype)
        dloc = local_scale(d, g, box, shape).astype(xw.dtype)
        xv, mv = broadcast_view(xq, mloc, lg.kind, lg.axis, lg.block)
        dv = broadcast_view(xq, dloc, lg.kind, lg.axis, lg.block)[1]
        q = _blocks.nvfp4_round(np.array(xv), fmt, mv, dv)
        if data.dtype != xw.dtype:  # stored in the data's dtype, as quantize does
            with np.errstate(over="ignore"):
                q = q.astype(data.dtype).astype(xw.dtype)
        mx = xm.reshape(xv.shape)
        sv = np.broadcast_to(mv, xv.shape) if mv.ndim != xv.ndim else mv
        out[j] = metric_totals(np.ascontiguousarray(mx), np.ascontiguousarray(q),
                               np.asarray(sv, np.float64), fmt)  # fmt: skip
    if nmasked:
        out[:, km.NAN_IN] -= nmasked
    return data.size - nmasked, out
