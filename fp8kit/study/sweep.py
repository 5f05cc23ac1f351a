"""Sweeps: every (tensor, format, scaling) combination, one row of metrics each."""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from .. import _args, _parallel
from ..formats import FloatFormat
from ._arrays import (
    aligned,
    array_kind,
    blocks_and_boxes,
    box_slices,
    check_axis,
    check_dtype,
    float_data,
    work_dtype,
    working,
)
from ._chunks import (
    DEFAULT_CHUNK_BYTES,
    add_stats,
    blocks_whole,
    bytes_per_element,
    chunk_totals,
    plan_chunks,
)
from .metrics import ErrorMetrics, add_totals
from .scaling import (
    DelayedScaling,
    Grouping,
    _amaxes,
    amax_scale,
    chunk_amax,
    clamp_scale,
    compact_shape,
    empty_amax,
    group_amax,
    local_grouping,
    local_scale,
    merge_amax,
    mx_exponents,
    mx_scale_from_codes,
)

__all__ = ["Scaling", "SweepRow", "TensorFile", "demo_tensors", "parse_scaling", "sweep"]

DEFAULT_FORMATS = ("float8_e4m3fn", "float8_e5m2")
DEFAULT_SCALINGS = ("tensor", "channel", "block:32")
SCALING_SYNTAX = "none, tensor, channel, block[:N], delayed[:LEN[:max|most_recent]]"


@dataclasses.dataclass(frozen=True)
class Scaling:
    """A parsed scaling spec of a sweep (see :func:`parse_scaling`).

    Parameters
    ----------
    kind : {"none", "tensor", "channel", "block", "delayed"}
        The recipe.
    block_size : int, default 32
        Elements per MX block (``kind="block"``).
    history_len : int, default 16
        Steps in the amax history (``kind="delayed"``).
    algo : {"max", "most_recent"}, default "max"
        How delayed scaling picks the amax of its history.

    Examples
    --------
    >>> from fp8kit.study import Scaling
    >>> Scaling("delayed", history_len=4).label
    'delayed:4:max'
    """

    kind: str
    block_size: int = 32
    history_len: int = 16
    algo: str = "max"

    @property
    def label(self) -> str:
        """The spec string that parses back to this scaling."""
        if self.kind == "block":
            return f"block:{self.block_size}"
        if self.kind == "delayed":
            return f"delayed:{self.history_len}:{self.algo}"
        return self.kind


_SPEC = re.compile(
    r"^(?:(none|tensor|channel)|block(?::(\d+))?|delayed(?::(\d+)(?::(max|most_recent))?)?)$"
)


def parse_scaling(spec: Any) -> Scaling:
    """Parse a scaling spec: ``none``, ``tensor``, ``channel``, ``block[:N]`` (MX blocks of
    N elements, default 32) or ``delayed[:LEN[:ALGO]]`` (Transformer Engine's delayed
    scaling, history length LEN, default 16, ALGO ``max`` or ``most_recent``).

    Parameters
    ----------
    spec : str or Scaling
        The spec (a Scaling is returned as is).

    Returns
    -------
    Scaling
        The parsed spec.

    Raises
    ------
    ValueError
        For anything else; the message shows the syntax.

    Examples
    --------
    >>> from fp8kit.study import parse_scaling
    >>> parse_scaling("block:16").block_size, parse_scaling("delayed:4:most_recent").algo
    (16, 'most_recent')
    """
    if isinstance(spec, Scaling):
        return spec
    m = _SPEC.match(spec) if isinstance(spec, str) else None
    if (
        m is None
        or (m.group(2) is not None and int(m.group(2)) < 1)
        or (m.group(3) is not None and int(m.group(3)) < 1)
    ):
        raise ValueError(f"unknown scaling {spec!r}; valid: {SCALING_SYNTAX}")
    if m.group(1):
        return Scaling(m.group(1))
    if spec.startswith("block"):
        return Scaling("block", block_size=int(m.group(2) or 32))
    return Scaling("delayed", history_len=int(m.group(3) or 16), algo=m.group(4) or "max")


@dataclasses.dataclass(frozen=True)
class SweepRow:
    """One result of :func:`sweep`: a tensor through one format with one scaling.

    ``scale_min``/``scale_max`` span the finite scales used (FakeConvert's multiplier;
    equal for one scale per tensor); ``notes`` explain special cases.

    Attributes
    ----------
    tensor : str
        The tensor's name.
    shape : tuple of int
        Its shape.
    dtype : str
        Its dtype.
    format : str
        The format's canonical name.
    scaling : str
        The scaling spec (:attr:`Scaling.label`).
    metrics : ErrorMetrics
        The error figures.
    scale_min, scale_max : float
        The smallest and largest finite scale used.
    notes : tuple of str
        Special cases met (NaN or Inf inputs, an all-zero tensor, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> row = study.sweep({"w": np.float32([[1.0, -2.0]])}, ["float8_e5m2"], ["tensor"])[0]
    >>> row.tensor, row.format, row.scaling, row.scale_min, row.metrics.rmse
    ('w', 'float8_e5m2', 'tensor', 28672.0, 0.0)
    """

    tensor: str
    shape: tuple[int, ...]
    dtype: str
    format: str
    scaling: str
    metrics: ErrorMetrics
    scale_min: float
    scale_max: float
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A flat dict: the row's fields with the metrics' fields inlined.

        Returns
        -------
        dict of str
            Field name to value, JSON-ready (the shape and notes as lists).

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> row = study.sweep({"w": np.float32([1.0, 3.0])}, ["float8_e4m3fn"], ["none"])[0]
        >>> d = row.as_dict()
        >>> d["tensor"], d["shape"], d["sqnr_db"]
        ('w', [2], inf)
        """
        d: dict[str, Any] = {
            "tensor": self.tensor,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "format": self.format,
            "scaling": self.scaling,
        }
        d.update(self.metrics.as_dict())
        d.update(scale_min=self.scale_min, scale_max=self.scale_max, notes=list(self.notes))
        return d


def demo_tensors(seed: int = 0, shape: tuple[int, int] = (256, 1024)) -> dict[str, np.ndarray]:
    """Seeded float32 weight-like matrices for the built-in demo: normal, Laplace and
    Student-t (3 degrees of freedom, heavy tails) values of standard deviation about 0.02,
    each row multiplied by a log-normal factor (channels of different ranges).

    Parameters
    ----------
    seed : int, default 0
        Seed of the numpy generator that draws them.
    shape : tuple of 2 int, default (256, 1024)
        Shape of each matrix (rows are the channels).

    Returns
    -------
    dict of str to ndarray
        ``"normal"``, ``"laplace"`` and ``"student_t3"`` float32 matrices.

    Examples
    --------
    >>> from fp8kit import study
    >>> {k: v.shape for k, v in study.demo_tensors(shape=(4, 8)).items()}
    {'normal': (4, 8), 'laplace': (4, 8), 'student_t3': (4, 8)}
    """
    rng = np.random.default_rng(seed)
    rows = np.exp(rng.normal(0.0, 1.0, (shape[0], 1)))
    draws = {
        "normal": rng.standard_normal(shape),
        "laplace": rng.laplace(0.0, np.sqrt(0.5), shape),
        "student_t3": rng.standard_t(3, shape) / np.sqrt(3.0),
    }
    return {k: (v * rows * 0.02).astype(np.float32) for k, v in draws.items()}


Progress = Callable[[int, int, str], None]


@dataclasses.dataclass(frozen=True)
class TensorFile:
    """A tensor of a file, by reference: :func:`sweep` reads it where it studies it (in a
    Dask worker with ``scheduler=``), so only the path and the name travel.

    Parameters
    ----------
    path : str
        A ``.npy``, ``.npz`` or ``.safetensors`` file, as :mod:`fp8kit.study.io` reads it
        (memory-mapped where the format allows); workers must see the same path.
    name : str
        The tensor's name in the file (a ``.npy`` file's stem).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from fp8kit import study
    >>> path = os.path.join(tempfile.mkdtemp(), "w.npy")
    >>> np.save(path, np.float32([[1.0, -2.0], [0.5, 4.0]]))
    >>> study.TensorFile(path, "w").load().shape
    (2, 2)
    """

    path: str
    name: str

    def load(self) -> np.ndarray:
        """The tensor (a read-only memory map where the file format allows).

        Returns
        -------
        ndarray
            The tensor.

        Raises
        ------
        fp8kit.study.io.StudyInputError
            If the file cannot be read or has no such floating-point tensor.

        Examples
        --------
        >>> import numpy as np, tempfile, os
        >>> from fp8kit import study
        >>> path = os.path.join(tempfile.mkdtemp(), "t.npz")
        >>> np.savez(path, a=np.float32([1.0]), b=np.float64([2.0, 3.0]))
        >>> study.TensorFile(path, "b").load().tolist()
        [2.0, 3.0]
        """
        from .io import StudyInputError, load_tensors

        tensors, _ = load_tensors(self.path)
        if self.name not in tensors:
            raise StudyInputError(f"{self.path}: no floating-point tensor {self.name!r}")
        return tensors[self.name]


def sweep(
    data: Any,
    formats: Iterable[Any] = DEFAULT_FORMATS,
    scalings: Iterable[Any] = DEFAULT_SCALINGS,
    *,
    channel_axis: int = 0,
    block_axis: int = -1,
    margin: float = 0.0,
    pow2: bool = False,
    progress: Progress | None = None,
    chunk_bytes: int | None = None,
    scheduler: Any = None,
    flush_subnormals: bool = False,
    flush_subnormal_inputs: bool = False,
) -> list[SweepRow]:
    """Quantize every tensor through every format with every scaling and measure the error.

    Per combination: the scale (:func:`scale_for` recipes; ``delayed`` treats the leading
    axis as time steps and replays :class:`DelayedScaling` over them), one fused
    quantize pass (:func:`quantize`) and one metrics pass (:func:`error_metrics`).  Amaxes
    are computed once per tensor and scaling and shared by the formats.  16-bit data is
    quantized in float32 and rounded once to its dtype; the error is measured on that.

    Tensors are worked on in chunks of at most ``chunk_bytes`` of working memory (two
    passes over each tensor: every amax, then every quantize-and-measure job, each chunk
    widened once for all of them), so a memory-mapped tensor of any size is studied in
    bounded memory; per-channel and MX-block amaxes are exact across chunks.  Dask arrays
    (and xarray DataArrays holding them) run the same passes over their blocks as Dask
    tasks, under the current Dask scheduler (``dask.distributed`` included).  Masked
    elements (numpy or Dask masked arrays) are quantized as zeros and left out of every
    amax, count and figure.

    Parameters
    ----------
    data : array or mapping of str to array
        One tensor (named ``"x"``) or named tensors (float16, bfloat16, float32, float64):
        numpy arrays (memory-mapped ones included), masked arrays, dask arrays or xarray
        DataArrays.
    formats : iterable of str or FloatFormat
        Default ``float8_e4m3fn`` and ``float8_e5m2``.
    scalings : iterable of str
        Specs as :func:`parse_scaling` reads them; default tensor, channel, block:32.
    channel_axis : int, default 0
        Channel axis of ``channel`` (tensors of fewer than 2 dims get one scale, noted).
    block_axis : int, default -1
        Axis the MX blocks run along.
    margin : float, default 0
        ``tensor``, ``channel`` and ``delayed``: divide the scale by ``2**margin``.
    pow2 : bool, default False
        ``tensor``, ``channel`` and ``delayed``: round scales down to powers of two.
    progress : callable, optional
        Called as ``progress(done, total, label)`` after each combination.
    chunk_bytes : int, optional
        Working-memory budget of one chunk of a numpy tensor, in bytes (default 256 MiB);
        results do not depend on it beyond the rounding of float sums (1e-15 relative).
    scheduler : str or dask.distributed.Client, optional
        Study the tensors as Dask tasks, one per tensor: ``"threads"`` (each thread with
        its share of ``chunk_bytes``), ``"processes"``, ``"sync"``, the address of a
        ``dask.distributed`` scheduler (``"tcp://host:8786"``) or a ``Client``.  Give
        file tensors as :class:`TensorFile` so that each worker reads its own.  Default:
        scheduler).  Needs ``pip install 'fp8kit[dask]'``.
    flush_subnormals, flush_subnormal_inputs : bool, default False
        As in :func:`quantize`.  When either is set, each row's metrics (and scale range)
        are those of :func:`quantize` with the option followed by :func:`error_metrics`
        (an unfused pass per row, after the fused sweep; not ``delayed`` scalings).

    Returns
    -------
    list of SweepRow
        In order tensor, scaling, format.

    Raises
    ------
    TypeError, ValueError
        Non-float tensors, unknown formats or scaling specs, axes out of range, a
        ``chunk_bytes`` below 1.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    >>> rows = study.sweep(x, ["float8_e4m3fn"], ["tensor", "block:32"])
    >>> [(r.scaling, round(r.metrics.sqnr_db)) for r in rows]
    [('tensor', 31), ('block:32', 30)]
    >>> small = study.sweep(x, ["float8_e4m3fn"], ["tensor", "block:32"], chunk_bytes=4096)
    >>> [round(r.metrics.sqnr_db, 9) for r in small] == [round(r.metrics.sqnr_db, 9)
    ...                                                   for r in rows]
    True
    """
    tensors = _named(data)
    fmts = [_args.study_format(f) for f in formats]
    specs = [parse_scaling(s) for s in scalings]
    if not fmts or not specs:
        raise ValueError("sweep: formats and scalings must not be empty")
    budget = check_chunk_bytes(chunk_bytes, "sweep")
    ftz = _args.flag(flush_subnormals, "flush_subnormals", "sweep")
    dazi = _args.flag(flush_subnormal_inputs, "flush_subnormal_inputs", "sweep")
    if (ftz or dazi) and any(sp.kind == "delayed" for sp in specs):
        raise ValueError(
            "sweep: flush_subnormals and flush_subnormal_inputs do not take 'delayed' "
            "scalings; got scalings " + ", ".join(repr(sp.label) for sp in specs)
        )
    total = len(tensors) * len(fmts) * len(specs)
    try:
        rows = _sweep_rows(
            tensors, fmts, specs, channel_axis, block_axis, margin, pow2, budget, total,
            scheduler, progress,
        )  # fmt: skip
    finally:
        _BUFFERS.clear()
    if ftz or dazi:
        rows = _flushed_rows(
            tensors, rows, channel_axis, block_axis, margin, pow2, ftz, dazi
        )  # fmt: skip
    return rows


def _flushed_rows(tensors, rows, channel_axis, block_axis, margin, pow2, ftz, dazi):
    """``rows`` with the metrics and scale range of quantize (with the flush options)
    followed by error_metrics, per row (the unfused path)."""
    from .metrics import error_metrics
    from .scaling import quantize, scale_for

    out = []
    data = {}
    for row in rows:
        if row.tensor not in data:
            arr = tensors[row.tensor]
            data[row.tensor] = arr.load() if isinstance(arr, TensorFile) else arr
        x = data[row.tensor]
        spec = parse_scaling(row.scaling)
        kind, kw = spec.kind, {}
        if kind == "channel" and np.ndim(x) < 2:
            kind = "tensor"
        if kind == "channel":
            kw = dict(axis=channel_axis, margin=margin, pow2=pow2)
        elif kind == "tensor":
            kw = dict(margin=margin, pow2=pow2)
        elif kind == "block":
            kw = dict(axis=block_axis, block_size=spec.block_size)
        opts = dict(flush_subnormals=ftz, flush_subnormal_inputs=dazi)
        q = quantize(x, row.format, kind, **kw, **opts)
        xs = _args.flush_inputs(np.asarray(x)) if dazi else x
        if dazi and isinstance(x, np.ma.MaskedArray):
            xs = np.ma.masked_array(xs, np.ma.getmaskarray(x))
        sc = np.asarray(scale_for(xs, row.format, kind, **kw), dtype=np.float64)
        if kind == "block" and sc.ndim:
            ax = block_axis % np.ndim(x)
            sc = np.repeat(sc, spec.block_size, axis=ax).take(np.arange(np.shape(x)[ax]), axis=ax)
        m = error_metrics(x, q, fmt=row.format, scale=sc)
        finite = sc[np.isfinite(sc)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (np.nan, np.nan)
        out.append(dataclasses.replace(row, metrics=m, scale_min=lo, scale_max=hi))
    return out


def _sweep_rows(
    tensors, fmts, specs, channel_axis, block_axis, margin, pow2, budget, total, scheduler,
    progress,
):  # fmt: skip
    rows: list[SweepRow] = []
    if scheduler is not None:
        check_axis(channel_axis, 64, "sweep", "channel_axis")
        check_axis(block_axis, 64, "sweep", "block_axis")
        options = dict(
            channel_axis=channel_axis, block_axis=block_axis, margin=float(margin),
            pow2=bool(pow2), chunk_bytes=budget,
        )  # fmt: skip
        return sweep_tasks(tensors, fmts, specs, options, scheduler, progress)
    for name, arr in tensors.items():
        for row in study_tensor(
            name, arr, fmts, specs, channel_axis=channel_axis, block_axis=block_axis,
            margin=float(margin), pow2=bool(pow2), chunk_bytes=budget,
        ):  # fmt: skip
            rows.append(row)
            if progress is not None:
                progress(len(rows), total, f"{name} {row.format} {row.scaling}")
    return rows


def check_chunk_bytes(chunk_bytes: Any, func: str) -> int:
    """The chunk budget in bytes (default :data:`DEFAULT_CHUNK_BYTES`), or an error."""
    if chunk_bytes is None:
        return DEFAULT_CHUNK_BYTES
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, (int, np.integer)):
        raise TypeError(f"{func}: chunk_bytes must be a positive int; got {chunk_bytes!r}")
    if chunk_bytes < 1:
        raise ValueError(f"{func}: chunk_bytes must be a positive int; got {chunk_bytes}")
    return int(chunk_bytes)


def _named(data: Any) -> dict[str, Any]:
    if isinstance(data, Mapping):
        if not data:
            raise ValueError("sweep: no tensors given")
        return {str(k): v for k, v in data.items()}
    return {"x": data}


@dataclasses.dataclass
class _Plan:
    """How one tensor is studied: per scaling spec its effective kind, grouping and notes."""

    name: str
    shape: tuple[int, ...]  # the tensor's shape as given (0-d stays 0-d)
    work_shape: tuple[int, ...]  # at least 1-D
    dtype: np.dtype
    specs: list  # (Scaling, kind, Grouping | None, notes)
    groupings: list[Grouping]


def _plan(name, shape, dtype, specs, channel_axis, block_axis) -> _Plan:
    work_shape = shape or (1,)
    ndim = len(work_shape)
    for ax_name, ax in (("channel_axis", channel_axis), ("block_axis", block_axis)):
        check_axis(ax, ndim, "sweep", f"{ax_name} (tensor {name!r})")
    out, groupings = [], []
    for spec in specs:
        kind, notes, g = spec.kind, [], None
        if kind == "channel" and ndim < 2:
            kind = "tensor"
            notes.append("1-D tensor: one channel")
        if kind == "delayed" and ndim < 2:
            notes.append("1-D tensor: one step")
        if kind == "channel":
            g = Grouping("channel", channel_axis % ndim)
        elif kind == "block":
            axis, block = block_axis % ndim, spec.block_size
            g = Grouping("block", axis, block)
            if work_shape[axis] % block:
                notes.append(
                    f"axis length {work_shape[axis]} is not a multiple of {block}: "
                    f"last block of {work_shape[axis] % block}"
                )
        elif kind == "delayed" and ndim >= 2:
            kind, g = "steps", Grouping("channel", 0)
        elif kind in ("tensor", "delayed"):
            g = Grouping("tensor")
        if g is not None and g not in groupings:
            groupings.append(g)
        out.append((spec, kind, g, notes))
    return _Plan(name, tuple(shape), work_shape, np.dtype(dtype), out, groupings)


def _aligns(plan: _Plan) -> dict[int, int]:
    aligns: dict[int, int] = {}
    for g in plan.groupings:
        if g.kind == "block":
            aligns[g.axis] = math.lcm(aligns.get(g.axis, 1), g.block)
    return aligns


def _scales(plan: _Plan, fmts, amaxes, margin: float, pow2: bool, local=()):
    """Per (spec, format): (grouping, compact scale) and the spec's notes.  MX groupings in
    ``local`` get the scale None: each chunk computes its own."""
    dt = work_dtype(plan.dtype)
    jobs, spec_notes = [], []
    for spec, kind, g, notes in plan.specs:
        notes = list(notes)
        if g in local:
            spec_notes.append(notes)
            jobs += [(fmt, g, None) for fmt in fmts]
            continue
        if g is not None:
            amax, bad = amaxes[plan.groupings.index(g)]
            zeros = int(np.count_nonzero(amax == 0))
            if kind in ("tensor", "channel") and zeros:
                where = "zero amax" if amax.size == 1 else f"{zeros} of {amax.size} channels"
                notes.append(f"{where}: scale 1")
            if kind == "block" and bad.any():
                notes.append(f"{int(bad.sum())} blocks hold NaN/Inf: scale NaN")
        spec_notes.append(notes)
        for fmt in fmts:
            if kind == "none":
                scale = np.ones((), dt)
            elif kind == "block":
                scale = mx_scale_from_codes(mx_exponents(amax, bad, fmt), dt)
            elif kind in ("tensor", "channel"):
                scale = amax_scale(amax, fmt, margin, pow2, dt)
            else:
                ds = DelayedScaling(fmt, spec.history_len, spec.algo, margin=margin, pow2=pow2)
                # one step per index of the leading axis (one step for fewer than 2 dims)
                used = np.array([ds.step(a) for a in amax.reshape(-1)])
                scale = clamp_scale(used, dt).astype(dt).reshape(amax.shape)
            jobs.append((fmt, g, scale))
    return jobs, spec_notes


def _rows(plan: _Plan, fmts, jobs, spec_notes, count: int, totals: np.ndarray, stats):
    rows = []
    for j, (fmt, _g, scale) in enumerate(jobs):
        spec = plan.specs[j // len(fmts)][0]
        m = ErrorMetrics.from_totals(count, totals[j], True)
        notes = list(spec_notes[j // len(fmts)])
        if scale is None:  # MX scales computed chunk by chunk
            lo, hi, nbad = (float(v) for v in stats[j])
            if nbad:
                notes.append(f"{int(nbad)} blocks hold NaN/Inf: scale NaN")
            lo, hi = (lo, hi) if lo <= hi else (np.nan, np.nan)
        else:
            finite = scale[np.isfinite(scale)]
            lo, hi = (finite.min(), finite.max()) if finite.size else (np.nan, np.nan)
            lo, hi = float(lo), float(hi)
        if m.nan_inputs or m.inf_inputs:
            notes.append(f"{m.nan_inputs} NaN, {m.inf_inputs} Inf inputs not compared")
        if m.lost:
            notes.append(f"{m.lost} values lost to NaN scales")
        rows.append(
            SweepRow(
                tensor=plan.name,
                shape=plan.shape,
                dtype=_dtype_name(plan.dtype),
                format=fmt.name,
                scaling=spec.label,
                metrics=m,
                scale_min=lo,
                scale_max=hi,
                notes=tuple(notes),
            )  # fmt: skip
        )
    return rows


def study_tensor(
    name: str,
    arr: Any,
    fmts: list[FloatFormat],
    specs: list[Scaling],
    *,
    channel_axis: int = 0,
    block_axis: int = -1,
    margin: float = 0.0,
    pow2: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> list[SweepRow]:
    """The rows of one tensor (numpy, masked, dask, xarray or a :class:`TensorFile`), in
    order scaling, format."""
    if isinstance(arr, TensorFile):
        arr = arr.load()
    kind, arr = array_kind(arr)
    if kind == "dask":
        return study_dask(
            name, arr, fmts, specs, channel_axis, block_axis, margin, pow2
        )  # fmt: skip
    arr = float_data(arr, "sweep", f"tensor {name!r}", keep_mask=True)
    plan = _plan(name, arr.shape, arr.dtype, specs, channel_axis, block_axis)
    x = arr.reshape(plan.work_shape)
    masked = isinstance(x, np.ma.MaskedArray)
    per_chunk = max(1, chunk_bytes // bytes_per_element(x.dtype, masked))
    boxes = plan_chunks(plan.work_shape, per_chunk, _aligns(plan))
    local, groupings = _split_local(plan, boxes)
    derived = _derived_tensor(groupings)
    passes = [g for g in groupings if g != derived]
    glob = empty_amax(plan.work_shape, passes)
    # one chunk of unmasked data: widened once for both passes (amax, then the metrics);
    # bfloat16 is read as is by the kernels of both (no widened copy)
    one = len(boxes) == 1 and not masked
    direct = one and x.dtype == ml_dtypes.bfloat16
    if direct:
        xw, buf = np.ascontiguousarray(x), None
    else:
        xw, buf = _widened(x) if one else (None, None)
    if buf is None and not direct:  # (a chunked tensor: no buffer kept beside its chunks)
        _BUFFERS.pop(threading.get_ident(), None)
    # one chunk: the per-tensor and per-channel amaxes taken from an MX grouping's block
    # amaxes when its blocks lie along another axis (one amax pass instead of two)
    pre = _from_blocks(xw, plan.work_shape, local, passes) if xw is not None else None
    if pre is not None:
        glob, pre = pre
    elif passes:
        for box in boxes:
            y = x[box_slices(box)] if xw is None else xw
            parts = chunk_amax(y, box, plan.work_shape, passes)
            merge_amax(glob, parts, box, plan.work_shape, passes)
    amaxes = _with_tensor(plan, passes, glob, derived)
    jobs, spec_notes = _scales(plan, fmts, amaxes, margin, pow2, local)
    count, totals, stats = 0, None, None
    for box in boxes:
        n, t, st = chunk_totals(
            x[box_slices(box)], box, plan.work_shape, _local_jobs(jobs, box, plan.work_shape),
            widened=None if direct else xw, amaxes=pre,
        )  # fmt: skip
        count += n
        totals = t if totals is None else add_totals(totals, t)
        stats = st if stats is None else add_stats(stats, st)
    if buf is not None:
        _BUFFERS[threading.get_ident()] = buf
    return _rows(plan, fmts, jobs, spec_notes, count, totals, stats)


#: Per thread, the float32 buffer that the last one-chunk 16-bit tensor was widened into
#: (emptied at the end of every sweep).
_BUFFERS: dict[int, np.ndarray] = {}


def _widened(x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(working(x), buffer)``: 16-bit data widened into this thread's buffer when it is
    large enough (2x faster than a new array, whose pages are faulted in afresh)."""
    if x.dtype.itemsize >= 4 or x.ndim == 0 or x.size == 0:
        return working(x), None
    buf = _BUFFERS.pop(threading.get_ident(), None)
    if buf is None or buf.size < x.size:
        buf = None
        buf = np.empty(x.size, np.float32)
    xw = buf[: x.size].reshape(x.shape)
    np.copyto(xw, x, casting="unsafe")  # (exact: float16 and bfloat16 are float32 values)
    return xw, buf


def _from_blocks(xw, shape, local, passes):
    """``(glob, {grouping: (amax, nonfinite)})`` for the amax pass of a one-chunk tensor
    from the block amaxes of a local MX grouping, when every grouping of ``passes`` is per
    tensor or per channel along another axis than the blocks' (None otherwise).  The
    maxima of block maxima are the groups' maxima exactly."""
    blocks = [g for g in local if all(p.kind == "tensor" or p.axis != g.axis for p in passes)]
    if not passes or not blocks or any(p.kind not in ("tensor", "channel") for p in passes):
        return None
    g = blocks[0]
    am, bad = group_amax(xw, g.kind, g.axis, g.block)
    glob = []
    for p in passes:
        axes = tuple(d for d in range(xw.ndim) if p.kind == "tensor" or d != p.axis)
        cs = compact_shape(shape, p.kind, p.axis, p.block)
        glob.append((am.max(axis=axes, initial=0.0).reshape(cs), bad.any(axis=axes).reshape(cs)))
    box = tuple((0, n) for n in shape)
    return glob, {local_grouping(g, box, shape)[0]: (am, bad)}


def _derived_tensor(groupings):
    """The per-tensor grouping when a per-channel one is also computed: its amax is then
    the channels' largest (one pass fewer)."""
    t = Grouping("tensor")
    return t if t in groupings and any(g.kind == "channel" for g in groupings) else None


def _with_tensor(plan: _Plan, passes, glob, derived):
    """Compact amaxes in the order of ``plan.groupings`` (None for MX groupings computed per
    chunk), the derived per-tensor one from a per-channel one."""
    out = [glob[passes.index(g)] if g in passes else None for g in plan.groupings]
    if derived is not None:
        am, bad = next(glob[k] for k, g in enumerate(passes) if g.kind == "channel")
        # (initial=0: a tensor with no elements, such as 0 x 32, has no channels either)
        out[plan.groupings.index(derived)] = (am.max(initial=0).reshape(()), bad.any().reshape(()))
    return out


def _split_local(plan: _Plan, boxes):
    """``(local, pass1)``: MX groupings whose blocks no chunk cuts (scales computed per
    chunk, in the second pass) and the groupings that need the amax pass."""
    local = [
        g for g in plan.groupings
        if g.kind == "block" and blocks_whole(boxes, plan.work_shape, g)
    ]  # fmt: skip
    return local, [g for g in plan.groupings if g not in local]


def _local_jobs(jobs, box, shape):
    return [(f, g, None if s is None else local_scale(s, g, box, shape)) for f, g, s in jobs]


def _dtype_name(dt: np.dtype) -> str:
    return "bfloat16" if dt == ml_dtypes.bfloat16 else dt.name


def study_dask(name, x, fmts, specs, channel_axis, block_axis, margin, pow2):
    """:func:`fp8kit.study.sweep`'s rows of one dask tensor: two computes (amaxes, then
    the quantize-and-measure totals), one task per block in each."""
    import dask

    check_dtype(x, "sweep", f"tensor {name!r}")
    plan = _plan(name, tuple(x.shape), np.dtype(x.dtype), specs, channel_axis, block_axis)
    x = aligned(x.reshape(plan.work_shape), _aligns(plan))
    shape = plan.work_shape
    pieces = blocks_and_boxes(x)
    local, groupings = _split_local(plan, [box for _, box in pieces])
    derived = _derived_tensor(groupings)
    passes = [g for g in groupings if g != derived]
    glob = _amaxes(x, shape, passes) if passes else []
    amaxes = _with_tensor(plan, passes, glob, derived)
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


def _sweep_one(name, arr, fmts, specs, options, threads=None):
    from .sweep import study_tensor

    if threads is None:
        return study_tensor(name, arr, fmts, specs, **options)
    with _parallel.num_threads(threads):
        return study_tensor(name, arr, fmts, specs, **options)


def _threads_of() -> int:
    import os

    import dask

    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


def sweep_tasks(tensors, fmts, specs, options, scheduler, progress):
    """sweep's rows with one Dask task per tensor under ``scheduler`` (a local scheduler's
    name, a distributed scheduler's address or a Client); rows in the tensors' order.
    Dask tensors are studied here, their blocks being tasks already."""
    import dask

    local = scheduler in ("threads", "processes", "sync", "synchronous", "single-threaded")
    address = isinstance(scheduler, str) and (":" in scheduler)
    if not (local or address or (not isinstance(scheduler, str) and hasattr(scheduler, "compute"))):
        raise ValueError(
            f"sweep: scheduler must be 'threads', 'processes', 'sync', the address of a "
            f"dask.distributed scheduler or a Client; got {scheduler!r}"
        )
    per_task = None
    if scheduler == "threads":  # the threads share the working-memory budget and the cores
        options = dict(options, chunk_bytes=max(1, options["chunk_bytes"] // _threads_of()))
        # (kernels on all the cores in every task: 16% slower from oversubscription)
        per_task = max(1, _parallel.get_num_threads() // _threads_of())
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
            t = dask.delayed(_sweep_one, pure=False)(
                n, tensors[n], fmts, specs, options, per_task
            )  # fmt: skip
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
