"""Studies of dask arrays: the chunked passes of :mod:`._chunks`, one Dask task per block.

Imported only when a dask array arrives.  Amaxes and metric sums are reductions over the
blocks (each block's task returns its small partial results; they are combined by a
maximum or a sum); everything a task needs is a module-level function and plain data, so
the work runs under any Dask scheduler, ``dask.distributed`` worker processes included
(they compile the kernels or load them from Numba's disk cache).  MX blocks along an axis
whose chunks are not multiples of the block size are rechunked first.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np

from .._kernels import metrics as km
from ..formats import FloatFormat
from ._arrays import _NAMES, DATA_DTYPES, array_kind, work_dtype, working
from ._chunks import (
    Grouping,
    add_stats,
    add_totals,
    chunk_amax,
    chunk_totals,
    empty_amax,
    local_grouping,
    local_scale,
    merge_amax,
    pair_totals,
)
from .metrics import ErrorMetrics, check_scale
from .scaling import (
    amax_scale,
    apply_scale,
    broadcast_view,
    compact_shape,
    mx_exponents,
    mx_scale_from_codes,
)


def check_dtype(x: Any, func: str, argname: str = "x") -> None:
    dt = np.dtype(x.dtype)
    if dt.newbyteorder("=") not in DATA_DTYPES:
        raise TypeError(f"{func}: {argname} must have dtype {_NAMES}; got {dt}")


def aligned(x, aligns: dict[int, int]):
    """x rechunked so that along each axis in ``aligns`` every chunk but the last is a
    multiple of the alignment (MX blocks never straddle two chunks)."""
    for axis, a in aligns.items():
        chunks = x.chunks[axis]
        if all(c % a == 0 for c in chunks[:-1]):
            continue
        size = max(a, round(float(np.median(chunks)) / a) * a)
        x = x.rechunk({axis: size})
    return x


def blocks_and_boxes(x):
    """The blocks of x (Delayed, in C order of block index) and their boxes."""
    starts = [np.concatenate([[0], np.cumsum(c)]).astype(int).tolist() for c in x.chunks]
    blocks = x.to_delayed()
    out = []
    for index in np.ndindex(*x.numblocks):
        box = tuple((starts[d][i], starts[d][i + 1]) for d, i in enumerate(index))
        out.append((blocks[index], box))
    return out


def _amaxes(x, shape, groupings):
    """Compact ``(amax, nonfinite)`` per grouping of a dask array (computed)."""
    pieces = blocks_and_boxes(x)
    parts = dask.compute(*[dask.delayed(chunk_amax)(b, box, shape, groupings) for b, box in pieces])
    glob = empty_amax(shape, groupings)
    for (_, box), p in zip(pieces, parts, strict=True):
        merge_amax(glob, p, box, shape, groupings)
    return glob


def study_dask(name, x, fmts, specs, channel_axis, block_axis, margin, pow2):
    """:func:`fp8kit.study.sweep`'s rows of one dask tensor: two computes (amaxes, then
    the quantize-and-measure totals), one task per block in each."""
    from .sweep import _aligns, _local_jobs, _plan, _rows, _scales, _split_local

    check_dtype(x, "sweep", f"tensor {name!r}")
    plan = _plan(name, tuple(x.shape), np.dtype(x.dtype), specs, channel_axis, block_axis)
    x = aligned(x.reshape(plan.work_shape), _aligns(plan))
    shape = plan.work_shape
    pieces = blocks_and_boxes(x)
    local, groupings = _split_local(plan, [box for _, box in pieces])
    glob = _amaxes(x, shape, groupings) if groupings else []
    amaxes = [glob[groupings.index(g)] if g in groupings else None for g in plan.groupings]
    jobs, spec_notes = _scales(plan, fmts, amaxes, margin, pow2, local)
    tasks = [
        dask.delayed(chunk_totals)(b, box, shape, _local_jobs(jobs, box, shape))
        for b, box in pieces
    ]
    count, totals, stats = 0, None, None
    for n, t, st in dask.compute(*tasks):
        count += n
        totals = t if totals is None else add_totals(totals, t)
        stats = st if stats is None else add_stats(stats, st)
    return _rows(plan, fmts, jobs, spec_notes, count, totals, stats)


def _grouping(kind: str, axis: int, block: int) -> Grouping | None:
    if kind == "none":
        return None
    if kind == "tensor":
        return Grouping("tensor")
    return Grouping(kind, axis, block if kind == "block" else 1)


def _scale_from_parts(parts, boxes, shape, g, fmt, kind, margin, pow2, dtype, codes=False):
    glob = empty_amax(shape, [g])
    for p, box in zip(parts, boxes, strict=True):
        merge_amax(glob, p, box, shape, [g])
    amax, bad = glob[0]
    if kind == "block":
        c = mx_exponents(amax, bad, fmt)
        return c if codes else mx_scale_from_codes(c, dtype)
    return amax_scale(amax, fmt, margin, pow2, dtype)


def lazy_scale(x, fmt: FloatFormat, kind: str, axis: int, block: int, margin, pow2,
               codes: bool = False):  # fmt: skip
    """``(x1, scale)``: x as at least 1-D, aligned for MX blocks, and its compact scale as a
    Delayed (nothing computed)."""
    shape = tuple(x.shape) or (1,)
    x1 = x.reshape(shape)
    dt = work_dtype(x.dtype)
    g = _grouping(kind, axis, block)
    if g is None:
        return x1, dask.delayed(np.ones((), dt))
    x1 = aligned(x1, {axis: block} if kind == "block" else {})
    pieces = blocks_and_boxes(x1)
    parts = [dask.delayed(chunk_amax)(b, box, shape, [g]) for b, box in pieces]
    boxes = [box for _, box in pieces]
    scale = dask.delayed(_scale_from_parts)(
        parts, boxes, shape, g, fmt, kind, float(margin), bool(pow2), dt, codes,
    )  # fmt: skip
    return x1, scale


def scale_for_dask(x, fmt, kind, axis, block, margin, pow2, codes=False):
    """scale_for (or mx_scales' codes) of a dask array, as a lazy dask array."""
    check_dtype(x, "mx_scales" if codes else "scale_for")
    x1, scale = lazy_scale(x, fmt, kind, axis, block, margin, pow2, codes)
    shape = compact_shape(tuple(x1.shape), kind, axis, block)
    if kind == "none":
        shape = ()
    dt = np.dtype(np.uint8) if codes else work_dtype(x.dtype)
    out = da.from_delayed(scale, shape=shape, dtype=dt)
    return out.reshape(()) if x.ndim == 0 and shape != () else out


def _quantize_block(block, scale, g, shape, fmt, block_info=None):
    box = tuple(block_info[0]["array-location"])
    data, mask = (
        (np.asarray(block.data), np.ma.getmaskarray(block))
        if isinstance(block, np.ma.MaskedArray)
        else (np.asarray(block), None)
    )
    xw = working(data)
    if mask is not None:
        xw = np.where(mask, xw.dtype.type(0), xw)
    sc = local_scale(scale, g, box, shape).astype(xw.dtype)
    lg = Grouping("tensor") if g is None else local_grouping(g, box, shape)[0]
    xv, sv = broadcast_view(xw, sc, lg.kind, lg.axis, lg.block)
    q = apply_scale(xv, fmt, sv).reshape(xw.shape).astype(data.dtype)
    return q if mask is None else np.ma.masked_array(q, mask)


def _explicit_block(block, scale, fmt, block_info=None):
    box = block_info[0]["array-location"]
    sc = np.asarray(scale)
    sc = sc.reshape((1,) * (len(box) - sc.ndim) + sc.shape)
    sel = tuple(
        slice(0, 1) if n == 1 else slice(s, e) for n, (s, e) in zip(sc.shape, box, strict=True)
    )
    data = np.asarray(block.data if isinstance(block, np.ma.MaskedArray) else block)
    xw = working(data)
    q = apply_scale(xw, fmt, np.ascontiguousarray(sc[sel], xw.dtype)).astype(data.dtype)
    return (
        np.ma.masked_array(q, np.ma.getmaskarray(block))
        if isinstance(block, np.ma.MaskedArray)
        else q
    )


def quantize_dask(x, fmt, kind, axis, block, margin, pow2, scale=None):
    """quantize of a dask array: a lazy dask array of x's dtype, shape and chunks."""
    check_dtype(x, "quantize")
    if scale is not None:
        sc = np.asarray(scale.compute() if hasattr(scale, "__dask_graph__") else scale)
        try:
            ok = np.broadcast_shapes(sc.shape, x.shape) == x.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"quantize: scale of shape {sc.shape} does not broadcast to x's")
        x1 = x.reshape(tuple(x.shape) or (1,))
        out = x1.map_blocks(_explicit_block, sc, fmt, dtype=x.dtype, meta=x1._meta)
        return out.reshape(x.shape)
    x1, sc = lazy_scale(x, fmt, kind, axis, block, margin, pow2)
    g = _grouping(kind, axis, block)
    out = x1.map_blocks(_quantize_block, sc, g, tuple(x1.shape), fmt, dtype=x.dtype, meta=x1._meta)
    return out.reshape(x.shape)


def tensor_amax(x) -> float:
    """The largest finite |x| of a dask array (computed)."""
    check_dtype(x, "DelayedScaling.scale")
    shape = tuple(x.shape) or (1,)
    return float(_amaxes(x.reshape(shape), shape, [Grouping("tensor")])[0][0])


def error_metrics_dask(x, q, fmt, scale) -> ErrorMetrics:
    """error_metrics with x or q (or both) dask arrays: a sum over the blocks (computed).
    A dask ``scale`` is computed first (scales are small)."""
    x = x if hasattr(x, "__dask_graph__") else da.asarray(x)
    check_dtype(x, "error_metrics", "x")
    if hasattr(q, "__dask_graph__"):
        check_dtype(q, "error_metrics", "q")
    else:
        q = np.asarray(q) if not isinstance(q, np.ma.MaskedArray) else q
        check_dtype(q, "error_metrics", "q")
    if tuple(x.shape) != tuple(q.shape):
        raise ValueError(f"error_metrics: x has shape {tuple(x.shape)} but q has {q.shape}")
    if scale is not None and hasattr(scale, "__dask_graph__"):
        scale = scale.compute()
    shape = tuple(x.shape) or (1,)
    sc = check_scale(scale, tuple(x.shape))
    sc = sc.reshape((1,) * (len(shape) - sc.ndim) + sc.shape)
    x = x.reshape(shape)
    q = da.asarray(q).reshape(shape).rechunk(x.chunks)
    qblocks = q.to_delayed()
    tasks = []
    for index, (xb, box) in zip(np.ndindex(*x.numblocks), blocks_and_boxes(x), strict=True):
        sel = tuple(
            slice(0, 1) if n == 1 else slice(s, e) for n, (s, e) in zip(sc.shape, box, strict=True)
        )
        tasks.append(dask.delayed(pair_totals)(xb, qblocks[index], sc[sel], fmt))
    count, totals = 0, np.zeros((1, km.N_METRICS))
    for n, t in dask.compute(*tasks):
        count += n
        totals = add_totals(totals, t.reshape(1, -1))
    return ErrorMetrics.from_totals(count, totals[0], fmt is not None)


def _sweep_one(name, arr, fmts, specs, options):
    from .sweep import study_tensor

    return study_tensor(name, arr, fmts, specs, **options)


def _threads_of() -> int:
    import os

    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


def sweep_tasks(tensors, fmts, specs, options, scheduler, progress):
    """sweep's rows with one Dask task per tensor under ``scheduler`` (a local scheduler's
    name, a distributed scheduler's address or a Client); rows in the tensors' order.
    Dask tensors are studied here, their blocks being tasks already."""
    local = scheduler in ("threads", "processes", "sync", "synchronous", "single-threaded")
    if not local and not isinstance(scheduler, str) and not hasattr(scheduler, "compute"):
        raise ValueError(
            f"sweep: scheduler must be 'threads', 'processes', 'sync', the address of a "
            f"dask.distributed scheduler or a Client; got {scheduler!r}"
        )
    if scheduler == "threads":  # the threads share the working-memory budget
        options = dict(options, chunk_bytes=max(1, options["chunk_bytes"] // _threads_of()))
    names = list(tensors)
    results: dict[str, list] = {}
    eager = {n for n in names if array_kind(tensors[n])[0] == "dask"}
    total = len(names) * len(fmts) * len(specs)
    done = [0]

    def report(rows):
        done[0] += len(rows)
        if progress is not None and rows:
            r = rows[-1]
            progress(done[0], total, f"{r.tensor} {r.format} {r.scaling}")

    lazy = [n for n in names if n not in eager]
    if local:
        from dask.callbacks import Callback

        keys = {}
        tasks = []
        for n in lazy:
            t = dask.delayed(_sweep_one, pure=False)(n, tensors[n], fmts, specs, options)
            keys[t.key] = n
            tasks.append(t)

        def posttask(key, result, dsk, state, worker_id):
            if key in keys:
                report(result)

        with Callback(posttask=posttask):
            out = dask.compute(*tasks, scheduler=scheduler) if tasks else ()
        results.update(zip(lazy, out, strict=True))
    elif lazy:
        from distributed import Client, as_completed

        client = scheduler if hasattr(scheduler, "compute") else Client(scheduler)
        try:
            futures = {
                client.submit(_sweep_one, n, tensors[n], fmts, specs, options, pure=False): n
                for n in lazy
            }
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                report(results[futures[fut]])
        finally:
            if client is not scheduler:
                client.close()
    for n in eager:
        results[n] = _sweep_one(n, tensors[n], fmts, specs, options)
        report(results[n])
    return [row for n in names for row in results[n]]
