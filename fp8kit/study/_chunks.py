"""Studies in chunks: grouped amaxes and metric sums that are exact across chunks.

A chunk is a box of a tensor, given as one ``(start, stop)`` range per dimension; it keeps
the tensor's number of dimensions.  The streaming sweep cuts memory-mapped tensors into
chunks of at most a working-memory budget; the Dask paths use the blocks of a dask array.
Both run the same two passes, each chunk on its own:

1. amax pass: per grouping (per tensor, per channel, MX blocks) the chunk's contribution
   (:func:`chunk_amax`), combined by a maximum into the tensor's compact amax arrays
   (:func:`merge_amax`);
2. quantize-and-measure pass: the chunk is widened to the working dtype once and serves
   every (scaling, format) job (:func:`chunk_totals`): FakeConvert's quantization, then the
   metric kernel's partial sums, which add across chunks (maxima take the max).

Every function here is a module-level function of numpy arrays and plain data, so that
Dask can pickle it to worker processes.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from .. import _args
from .._kernels import metrics as km
from ..formats import FloatFormat
from ._arrays import Box, _unmask, work_dtype, working
from .metrics import fused_totals, metric_totals
from .scaling import (
    E8M0_NAN,
    Grouping,
    apply_scale,
    broadcast_view,
    group_amax,
    local_grouping,
    mx_biased,
    mx_exponents,
    mx_scale_from_codes,
)

#: Default working-memory budget of one chunk (bytes).
DEFAULT_CHUNK_BYTES = 256 * 2**20


def bytes_per_element(dtype: np.dtype, masked: bool = False) -> int:
    """Working bytes a chunk element costs in the quantize-and-measure pass: the widened
    copy, the quantized values, for 16-bit data their rounding to its dtype, and for masked
    data the mask and two filled copies."""
    w = work_dtype(dtype).itemsize
    size = np.dtype(dtype).itemsize
    return 2 * w + (size if size < w else 0) + (2 * w + 1 if masked else 0)


def plan_chunks(shape: tuple[int, ...], max_elements: int, aligns: dict[int, int]) -> list[Box]:
    """Boxes covering a C-ordered ``shape`` in order, each a contiguous range of the data of
    at most ``max_elements`` elements where possible: ranges along one dimension ``k``, the
    dimensions before it fixed, those after it whole.  Along a dimension in ``aligns`` (an
    MX block axis) a range starts at a multiple of the alignment, or lies in one block."""
    ndim = len(shape)
    if math.prod(shape) == 0:
        return [tuple((0, n) for n in shape)]
    max_elements = max(1, int(max_elements))
    k = 0
    while k < ndim - 1 and math.prod(shape[k + 1 :]) * aligns.get(k, 1) > max_elements:
        k += 1
    inner = math.prod(shape[k + 1 :])
    align = aligns.get(k, 1)
    step = max(align, (max_elements // inner) // align * align)
    boxes: list[Box] = []
    for prefix in np.ndindex(*shape[:k]):
        head = tuple((i, i + 1) for i in prefix)
        tail = tuple((0, n) for n in shape[k + 1 :])
        for s in range(0, shape[k], step):
            boxes.append(head + ((s, min(s + step, shape[k])),) + tail)
    return boxes


def blocks_whole(boxes: list[Box], shape: tuple[int, ...], g: Grouping) -> bool:
    """Whether no box cuts an MX block of ``g``: its scales are then the chunk's own."""
    n = shape[g.axis]
    return all(
        s % g.block == 0 and (e % g.block == 0 or e == n) for s, e in (b[g.axis] for b in boxes)
    )


#: Columns of :func:`chunk_totals`' scale statistics: smallest and largest finite scale,
#: blocks holding NaN/Inf, all-zero blocks and all blocks (for MX scales computed in the
#: chunk).
SCALE_MIN, SCALE_MAX, BAD_BLOCKS, ZERO_BLOCKS, BLOCKS = range(5)


def empty_stats(njobs: int) -> np.ndarray:
    stats = np.zeros((njobs, 5))
    stats[:, SCALE_MIN], stats[:, SCALE_MAX] = np.inf, -np.inf
    return stats


def add_stats(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = a + b
    out[:, SCALE_MIN] = np.minimum(a[:, SCALE_MIN], b[:, SCALE_MIN])
    out[:, SCALE_MAX] = np.maximum(a[:, SCALE_MAX], b[:, SCALE_MAX])
    return out


def _narrow_name(dtype: np.dtype) -> str:
    """The fused kernel's ``narrow`` for data of ``dtype`` (its results rounded to it)."""
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return "bfloat16"
    return "float16" if dtype == np.dtype(np.float16) else np.dtype(dtype).name


def _fused(wdt: np.dtype, fmt: FloatFormat, masked: bool) -> bool:
    """Whether :func:`chunk_totals` quantizes and measures a job in one pass (the fused
    kernel, :func:`fused_totals`): unmasked data worked on in float32, a format FakeConvert
    rounds in place."""
    return wdt == np.float32 and _args.rounds_in_place(fmt) and not masked


def prefetch_fused(dtype: np.dtype, fmts: list[FloatFormat], masked: bool) -> None:
    """Start compiling the fused kernel :func:`chunk_totals` will take for data of ``dtype``
    and these formats, if it takes it (one compiled function serves every format), so that
    its machine code is generated while the amax pass compiles and runs
    (:meth:`fp8kit._kernels.codec.Kernel.prefetch`)."""
    fmt = next((f for f in fmts if _fused(work_dtype(dtype), f, masked)), None)
    if fmt is not None:
        km.quantize_metrics_kernel(fmt, _narrow_name(np.dtype(dtype))).prefetch()


def chunk_totals(
    y: Any,
    box: Box,
    shape: tuple[int, ...],
    jobs: list[tuple[FloatFormat, Grouping | None, np.ndarray | None]],
    widened: np.ndarray | None = None,
    amaxes: dict | None = None,
) -> tuple[int, np.ndarray, np.ndarray]:
    """``(count, totals, stats)`` of one chunk: its unmasked elements and, per job
    ``(format, grouping, local scale)``, the metric kernel's combined columns
    (``(jobs, N_METRICS)``).  A job whose scale is None has MX block scales that the chunk
    holds whole: they are computed here (one amax per grouping, shared by the formats), and
    ``stats`` (``(jobs, 5)``, see :data:`SCALE_MIN`) gives their range, NaN blocks and
    all-zero blocks.

    The chunk is widened once; each job quantizes it into one shared buffer.  Masked
    elements are quantized as zeros and left out of every figure.  ``widened``: the
    unmasked chunk already in the working dtype, when the caller has it (no second copy);
    ``amaxes``: ``{local grouping: (amax, nonfinite)}`` of MX groupings already computed
    on that unmasked chunk.  Unmasked bfloat16 data without ``widened`` is read as is by
    the amax and fused kernels (widened only for a job of another width)."""
    data, mask = _unmask(y)
    narrow = data.dtype
    wdt = work_dtype(narrow)
    direct = mask is None and widened is None and narrow == np.dtype(ml_dtypes.bfloat16)
    if direct:
        xw = None
        xq = xm = data = np.ascontiguousarray(data)
    else:
        xw = working(data) if widened is None else widened
        xq = xw if mask is None else np.where(mask, xw.dtype.type(0), xw)
        xm = xw if mask is None else np.where(mask, xw.dtype.type(np.nan), xw)
    nmasked = 0 if mask is None else int(np.count_nonzero(mask))
    qbuf = None
    narrow_name = _narrow_name(narrow)
    out = np.zeros((len(jobs), km.N_METRICS))
    stats = empty_stats(len(jobs))
    amaxes = {} if amaxes is None or mask is not None else dict(amaxes)
    biased: dict = {}
    for j, (fmt, g, sc) in enumerate(jobs):
        lg = Grouping("tensor") if g is None else local_grouping(g, box, shape)[0]
        if sc is None:  # MX blocks held whole by the chunk
            if lg not in amaxes:
                amaxes[lg] = group_amax(xq, lg.kind, lg.axis, lg.block)
            am, bad = amaxes[lg]
            if lg not in biased:  # (shared by the formats)
                biased[lg] = mx_biased(am, bad)
            codes = mx_exponents(am, bad, fmt, biased[lg])
            sc = mx_scale_from_codes(codes, wdt)
            if codes.size and codes.min() != E8M0_NAN:  # finite scales: codes below 0xFF
                hi = np.max(codes, where=codes != E8M0_NAN, initial=0)
                ends = mx_scale_from_codes(np.array([hi, codes.min()], np.uint8), wdt)
                stats[j, SCALE_MIN], stats[j, SCALE_MAX] = ends  # (2**-(code - 127))
            stats[j, BAD_BLOCKS] = np.count_nonzero(bad)
            stats[j, ZERO_BLOCKS] = np.count_nonzero((am == 0) & (bad == 0))
            stats[j, BLOCKS] = am.size
        xv, sv = broadcast_view(xq, sc, lg.kind, lg.axis, lg.block)
        if _fused(wdt, fmt, mask is not None):
            # one pass: quantize and measure, the quantized values never stored (where
            # no NaN or Inf is met: else the two passes below)
            totals = fused_totals(xv, sv, fmt, narrow_name)
            if totals is not None:
                out[j] = totals
                continue
        if xw is None:  # (bfloat16 read as is so far)
            xw = working(data)
        if direct:
            xv, sv = broadcast_view(xw, sc, lg.kind, lg.axis, lg.block)
        if qbuf is None:
            qbuf = np.empty_like(xw)
        qv = apply_scale(xv, fmt, sv, out=qbuf.reshape(xv.shape))
        if narrow != xw.dtype:  # the result stored in the data's dtype, as FakeConvert does
            with np.errstate(over="ignore"):  # (an overflow to Inf counts as lost)
                np.copyto(qv, qv.astype(narrow))
        mv = xv if xm is xq else xm.reshape(xv.shape)
        out[j] = metric_totals(mv, qv, sv.astype(np.float64), fmt)
    if nmasked:
        out[:, km.NAN_IN] -= nmasked
    return data.size - nmasked, out, stats
