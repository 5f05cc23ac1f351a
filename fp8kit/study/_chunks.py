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

import dataclasses
import math
from typing import Any

import ml_dtypes
import numpy as np

from .._kernels import metrics as km
from ..formats import FloatFormat
from ._arrays import work_dtype, working
from .metrics import fused_totals, metric_totals
from .scaling import (
    apply_scale,
    broadcast_view,
    compact_shape,
    group_amax,
    mx_exponents,
    mx_scale_from_codes,
)

#: Default working-memory budget of one chunk (bytes).
DEFAULT_CHUNK_BYTES = 256 * 2**20

Box = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class Grouping:
    """The groups one amax is taken over: ``kind`` tensor, channel or block, along ``axis``
    (channel, block), of ``block`` elements (block)."""

    kind: str
    axis: int = 0
    block: int = 1


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


def box_slices(box: Box) -> tuple[slice, ...]:
    return tuple(slice(s, e) for s, e in box)


def local_grouping(g: Grouping, box: Box, shape: tuple[int, ...]):
    """``(local Grouping, index)``: the grouping as it applies to the chunk ``box`` and the
    index of the chunk's groups in the tensor's compact arrays (:func:`compact_shape`)."""
    if g.kind == "tensor":
        return g, ()
    s, e = box[g.axis]
    if g.kind == "channel":
        idx = tuple(slice(s, e) if d == g.axis else slice(0, 1) for d in range(len(shape)))
        return g, idx
    b = g.block
    if s % b == 0 and (e % b == 0 or e == shape[g.axis]):
        local, sel = b, slice(s // b, -(-e // b))
    elif s // b == (e - 1) // b:  # the chunk lies inside one block along the axis
        local, sel = e - s, slice(s // b, s // b + 1)
    else:
        raise ValueError(f"chunk {box} cuts MX blocks of {b} along axis {g.axis}")
    idx = tuple(sel if d == g.axis else slice(bs, be) for d, (bs, be) in enumerate(box))
    return Grouping("block", g.axis, local), idx


def _unmask(y: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A chunk's data and its mask (None when nothing is masked)."""
    if isinstance(y, np.ma.MaskedArray):
        mask = np.ma.getmaskarray(y)
        return np.asarray(y.data), (mask if mask.any() else None)
    return np.asarray(y), None


def chunk_amax(y: Any, box: Box, shape: tuple[int, ...], groupings: list[Grouping]) -> list:
    """Per grouping, ``(amax, nonfinite)`` of one chunk (masked elements left out), in the
    chunk's own compact shape."""
    data, mask = _unmask(y)
    xw = working(data)
    if mask is not None:
        xw = np.where(mask, xw.dtype.type(0), xw)
    out = []
    for g in groupings:
        lg, _ = local_grouping(g, box, shape)
        out.append(group_amax(xw, lg.kind, lg.axis, lg.block))
    return out


def merge_amax(glob: list, parts: list, box: Box, shape, groupings: list[Grouping]) -> None:
    """Combine one chunk's :func:`chunk_amax` into the tensor's compact arrays (in place)."""
    for (am, bad), (pa, pb), g in zip(glob, parts, groupings, strict=True):
        _, idx = local_grouping(g, box, shape)
        shape_here = np.shape(am[idx])
        am[idx] = np.maximum(am[idx], pa.reshape(shape_here))
        bad[idx] = np.logical_or(bad[idx], pb.reshape(shape_here))


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


def blocks_whole(boxes: list[Box], shape: tuple[int, ...], g: Grouping) -> bool:
    """Whether no box cuts an MX block of ``g``: its scales are then the chunk's own."""
    n = shape[g.axis]
    return all(
        s % g.block == 0 and (e % g.block == 0 or e == n) for s, e in (b[g.axis] for b in boxes)
    )


#: Columns of :func:`chunk_totals`' scale statistics: smallest and largest finite scale,
#: blocks holding NaN/Inf (for MX scales computed in the chunk).
SCALE_MIN, SCALE_MAX, BAD_BLOCKS = 0, 1, 2


def empty_stats(njobs: int) -> np.ndarray:
    stats = np.zeros((njobs, 3))
    stats[:, SCALE_MIN], stats[:, SCALE_MAX] = np.inf, -np.inf
    return stats


def add_stats(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = a + b
    out[:, SCALE_MIN] = np.minimum(a[:, SCALE_MIN], b[:, SCALE_MIN])
    out[:, SCALE_MAX] = np.maximum(a[:, SCALE_MAX], b[:, SCALE_MAX])
    return out


def chunk_totals(
    y: Any,
    box: Box,
    shape: tuple[int, ...],
    jobs: list[tuple[FloatFormat, Grouping | None, np.ndarray | None]],
) -> tuple[int, np.ndarray, np.ndarray]:
    """``(count, totals, stats)`` of one chunk: its unmasked elements and, per job
    ``(format, grouping, local scale)``, the metric kernel's combined columns
    (``(jobs, N_METRICS)``).  A job whose scale is None has MX block scales that the chunk
    holds whole: they are computed here (one amax per grouping, shared by the formats), and
    ``stats`` (``(jobs, 3)``, see :data:`SCALE_MIN`) gives their range and NaN blocks.

    The chunk is widened once; each job quantizes it into one shared buffer.  Masked
    elements are quantized as zeros and left out of every figure."""
    data, mask = _unmask(y)
    narrow = data.dtype
    xw = working(data)
    xq = xw if mask is None else np.where(mask, xw.dtype.type(0), xw)
    xm = xw if mask is None else np.where(mask, xw.dtype.type(np.nan), xw)
    nmasked = 0 if mask is None else int(np.count_nonzero(mask))
    qbuf = None
    narrow_name = {np.dtype(np.float16): "float16"}.get(narrow, narrow.name)
    if narrow == np.dtype(ml_dtypes.bfloat16):
        narrow_name = "bfloat16"
    out = np.zeros((len(jobs), km.N_METRICS))
    stats = empty_stats(len(jobs))
    amaxes: dict[Grouping, tuple] = {}
    for j, (fmt, g, sc) in enumerate(jobs):
        lg = Grouping("tensor") if g is None else local_grouping(g, box, shape)[0]
        if sc is None:  # MX blocks held whole by the chunk
            if lg not in amaxes:
                amaxes[lg] = group_amax(xq, lg.kind, lg.axis, lg.block)
            am, bad = amaxes[lg]
            sc = mx_scale_from_codes(mx_exponents(am, bad, fmt), xw.dtype)
            finite = sc[np.isfinite(sc)]
            if finite.size:
                stats[j, SCALE_MIN], stats[j, SCALE_MAX] = finite.min(), finite.max()
            stats[j, BAD_BLOCKS] = np.count_nonzero(bad)
        xv, sv = broadcast_view(xq, sc, lg.kind, lg.axis, lg.block)
        if xw.dtype == np.float32 and fmt.bits == 8 and xm is xq:
            # one pass: quantize and measure, the quantized values never stored
            out[j] = fused_totals(xv, sv, fmt, narrow_name)
            continue
        if qbuf is None:
            qbuf = np.empty_like(xw)
        qv = apply_scale(xv, fmt, sv, out=qbuf.reshape(xv.shape))
        if narrow != xw.dtype:  # the result stored in the data's dtype, as FakeConvert does
            np.copyto(qv, qv.astype(narrow))
        mv = xv if xm is xq else xm.reshape(xv.shape)
        out[j] = metric_totals(mv, qv, sv.astype(np.float64), fmt)
    if nmasked:
        out[:, km.NAN_IN] -= nmasked
    return xw.size - nmasked, out, stats


def add_totals(acc: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Totals of two sets of chunks: sums add, maxima take the max (row-wise)."""
    total = acc + part
    for col in km._MAX_COLUMNS:
        total[:, col] = np.maximum(acc[:, col], part[:, col])
    return total


def pair_totals(
    x: Any, q: Any, scale: np.ndarray, fmt: FloatFormat | None
) -> tuple[int, np.ndarray]:
    """``(count, totals)`` of data ``x`` against its quantized values ``q`` (same shape;
    numpy or masked; worked on in float64 when either is float64, else float32) with a
    scale that broadcasts to them.  Elements masked in either are left out."""
    xa, mx = _unmask(x)
    qa, mq = _unmask(q)
    mask = mx if mq is None else (mq if mx is None else mx | mq)
    wide = np.float64 in (xa.dtype, qa.dtype)
    dt = np.dtype(np.float64 if wide else np.float32)
    xw = np.ascontiguousarray(xa, dtype=dt)
    qw = np.ascontiguousarray(qa, dtype=dt)
    nmasked = 0
    if mask is not None:
        xw = np.where(mask, dt.type(np.nan), xw)
        nmasked = int(np.count_nonzero(mask))
    totals = metric_totals(xw, qw, np.asarray(scale, np.float64), fmt)
    totals[km.NAN_IN] -= nmasked
    return xw.size - nmasked, totals
