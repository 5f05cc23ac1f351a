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
from .._backends import is_masked
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
    empty_stats,
    plan_chunks,
    prefetch_fused,
)
from ._groups import chunk_sums, crest_of, merge_sums, two_level_totals
from .metrics import ErrorMetrics, add_totals
from .scaling import (
    DelayedScaling,
    Grouping,
    Recipe,
    _amaxes,
    _blocks_of,
    amax_scale,
    chunk_amax,
    chunk_nan,
    clamp_scale,
    compact_shape,
    empty_amax,
    group_amax,
    grouping_of,
    local_grouping,
    local_scale,
    merge_amax,
    merge_nan,
    mx_exponents,
    mx_scale_from_codes,
    scales_from_amax,
)

__all__ = ["Scaling", "SweepRow", "TensorFile", "demo_tensors", "parse_scaling", "sweep"]

DEFAULT_FORMATS = ("float8_e4m3fn", "float8_e5m2")
DEFAULT_SCALINGS = ("tensor", "channel", "block:32")
SCALING_SYNTAX = (
    "none, tensor, channel, block[:N[:floor|ceil|even|rceil]], tile[:N|:RxC][:pow2], "
    "nvfp4[:1x16|:16x16][:single], delayed[:LEN[:max|most_recent]]"
)


@dataclasses.dataclass(frozen=True)
class Scaling:
    """A parsed scaling spec of a sweep (see :func:`parse_scaling`).

    Parameters
    ----------
    kind : {"none", "tensor", "channel", "block", "tile", "nvfp4", "delayed"}
        The recipe.
    block_size : int, default 32
        Elements per MX block (``kind="block"``); a tile's or NVFP4 block's columns.
    history_len : int, default 16
        Steps in the amax history (``kind="delayed"``).
    algo : {"max", "most_recent"}, default "max"
        How delayed scaling picks the amax of its history.
    scale_mode : {"ocp", "floor", "ceil", "even", "rceil"}, default "ocp"
        The MX shared-exponent rule (``kind="block"``; see :func:`scale_for`).
    rows : int, default 1
        A tile's or NVFP4 block's rows (1: blocks along the block axis).
    pow2 : bool, default False
        Power-of-two tile scales (Transformer Engine's Float8BlockScaling).
    tensor_scale : "amax" or None, default "amax"
        NVFP4's per-tensor scale (None: the block scales alone).

    Examples
    --------
    >>> from fp8kit.study import Scaling
    >>> Scaling("delayed", history_len=4).label
    'delayed:4:max'
    >>> Scaling("block", scale_mode="rceil").label, Scaling("tile", 128, rows=128).label
    ('block:32:rceil', 'tile:128')
    """

    kind: str
    block_size: int = 32
    history_len: int = 16
    algo: str = "max"
    scale_mode: str = "ocp"
    rows: int = 1
    pow2: bool = False
    tensor_scale: Any = "amax"

    @property
    def label(self) -> str:
        """The spec string that parses back to this scaling."""
        if self.kind == "block":
            mode = "" if self.scale_mode == "ocp" else f":{self.scale_mode}"
            return f"block:{self.block_size}{mode}"
        if self.kind == "tile":
            size = (str(self.block_size) if self.rows == self.block_size
                    else f"{self.rows}x{self.block_size}")  # fmt: skip
            return f"tile:{size}" + (":pow2" if self.pow2 else "")
        if self.kind == "nvfp4":
            size = "" if (self.rows, self.block_size) == (1, 16) else (
                f":{self.rows}x{self.block_size}")  # fmt: skip
            return f"nvfp4{size}" + (":single" if self.tensor_scale is None else "")
        if self.kind == "delayed":
            return f"delayed:{self.history_len}:{self.algo}"
        return self.kind

    @property
    def block(self) -> Any:
        """The block size as :func:`fp8kit.study.scale_for` takes it: an int for MX blocks
        and 1 x N tiles or NVFP4 blocks, ``(rows, cols)`` for 2-D ones.

        Examples
        --------
        >>> from fp8kit.study import parse_scaling
        >>> parse_scaling("block:32").block, parse_scaling("tile:128").block
        (32, (128, 128))
        """
        if self.kind in ("tile", "nvfp4") and self.rows > 1:
            return (self.rows, self.block_size)
        return self.block_size


_SPEC = re.compile(
    r"^(?:(?P<plain>none|tensor|channel)"
    r"|block(?::(?P<bs>\d+)(?::(?P<mode>ocp|floor|ceil|even|rceil))?)?"
    r"|tile(?::(?P<tile>\d+(?:x\d+)?))?(?P<pow2>:pow2)?"
    r"|nvfp4(?::(?P<nv>\d+x\d+))?(?P<single>:single)?"
    r"|delayed(?::(?P<len>\d+)(?::(?P<algo>max|most_recent))?)?)$"
)


def _dims_of(text: str | None, default: tuple[int, int]) -> tuple[int, int]:
    if text is None:
        return default
    r, _, c = text.partition("x")
    return (int(r), int(c)) if c else (int(r), int(r))


def parse_scaling(spec: Any) -> Scaling:
    """Parse a scaling spec: ``none``, ``tensor``, ``channel``, ``block[:N[:MODE]]`` (MX
    blocks of N elements, default 32, under the shared-exponent rule MODE: ``floor``,
    ``ceil``, ``even`` or ``rceil`` as torchao computes them, default the OCP rule),
    ``tile[:N|:RxC][:pow2]`` (tiles of N x N, default 128, or R x C, e.g. ``tile:1x128``,
    scaled by ``max / amax``; ``:pow2`` rounds the scales down to powers of two, as
    Transformer Engine's Float8BlockScaling), ``nvfp4[:1x16|:16x16][:single]`` (NVFP4:
    E4M3 scales per block of 16, or per 16 x 16 tile, times a per-tensor scale, or, with
    ``:single``, alone) or ``delayed[:LEN[:ALGO]]`` (Transformer Engine's delayed
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
    >>> parse_scaling("block:32:rceil").scale_mode, parse_scaling("tile:1x128").block
    ('rceil', 128)
    >>> parse_scaling("nvfp4:16x16").block, parse_scaling("tile").label
    ((16, 16), 'tile:128')
    """
    if isinstance(spec, Scaling):
        return spec
    m = _SPEC.match(spec) if isinstance(spec, str) else None
    sizes = [int(v) for v in re.findall(r"\d+", spec)] if m is not None else []
    if m is None or any(v < 1 for v in sizes):
        raise ValueError(f"unknown scaling {spec!r}; valid: {SCALING_SYNTAX}")
    if m["plain"]:
        return Scaling(m["plain"])
    if spec.startswith("block"):
        return Scaling("block", block_size=int(m["bs"] or 32), scale_mode=m["mode"] or "ocp")
    if spec.startswith("tile"):
        r, c = _dims_of(m["tile"], (128, 128))
        return Scaling("tile", block_size=c, rows=r, pow2=bool(m["pow2"]))
    if spec.startswith("nvfp4"):
        r, c = _dims_of(m["nv"], (1, 16))
        return Scaling("nvfp4", block_size=c, rows=r,
                       tensor_scale=None if m["single"] else "amax")  # fmt: skip
    return Scaling("delayed", history_len=int(m["len"] or 16), algo=m["algo"] or "max")


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
    crest : float or None
        The tensor's crest factor ``max |x| / rms(x)`` over its compared values (None when
        nothing is compared or every value is 0).
    group_crest : float or None
        The mean crest factor of the groups that share a scale under this scaling (a
        block, tile, channel, step, or the tensor), groups of zeros or NaN/Inf left out;
        None unless the sweep was asked for it (``crest=True``) or no group has one.

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
    crest: float | None = None
    group_crest: float | None = None

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
        d.update(crest=self.crest, group_crest=self.group_crest)
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
    scale_wide: bool = False,
    crest: bool = False,
) -> list[SweepRow]:
    """Quantize every tensor through every format with every scaling and measure the error.

    Per combination: the scale (:func:`scale_for` recipes; ``delayed`` treats the leading
    axis as time steps and replays :class:`DelayedScaling` over them), one fused
    quantize pass (:func:`quantize`) and one metrics pass (:func:`error_metrics`).  Amaxes
    are computed once per tensor and scaling and shared by the formats.  16-bit data is
    quantized in float32 and rounded once to its dtype; the error is measured on that.
    Formats wider than 8 bits (bfloat16, float16) are the unscaled baseline: scale 1 under
    every scaling (a note says so) unless ``scale_wide``.  NVFP4 rows are quantized and
    measured in two passes (its dequantization is not FakeConvert's division).

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
        scheduler).  Needs Dask (``pip install 'dask[array]'``).
    flush_subnormals, flush_subnormal_inputs : bool, default False
        As in :func:`quantize`.  When either is set, each row's metrics (and scale range)
        are those of :func:`quantize` with the option followed by :func:`error_metrics`
        (an unfused pass per row, after the fused sweep; not ``delayed`` scalings).
    scale_wide : bool, default False
        Scale formats wider than 8 bits like the others (default: unscaled).
    crest : bool, default False
        Also compute each row's ``group_crest`` (the mean crest factor of the scaling's
        groups; one more pass over each tensor).  Each row's ``crest`` (the tensor's) is
        always there.

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
    >>> rows = study.sweep(x, ["float8_e4m3fn"], ["block:32:rceil", "nvfp4"], crest=True)
    >>> [(r.scaling, round(r.crest, 1), round(r.group_crest, 1)) for r in rows]
    [('block:32:rceil', 3.9, 2.3), ('nvfp4', 3.9, 2.1)]
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
    options = dict(
        channel_axis=channel_axis, block_axis=block_axis, margin=float(margin),
        pow2=bool(pow2), chunk_bytes=budget,
        scale_wide=_args.flag(scale_wide, "scale_wide", "sweep"),
        crest=_args.flag(crest, "crest", "sweep"),
    )  # fmt: skip
    try:
        rows = _sweep_rows(tensors, fmts, specs, options, total, scheduler, progress)
    finally:
        _BUFFERS.clear()
    if ftz or dazi:
        rows = _flushed_rows(tensors, rows, options, ftz, dazi)
    return rows


def _flushed_rows(tensors, rows, options, ftz, dazi):
    """``rows`` with the metrics and scale range of quantize (with the flush options)
    followed by error_metrics, per row (the unfused path)."""
    from .metrics import error_metrics
    from .scaling import quantize

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
        if not options["scale_wide"] and _args.study_format(row.format).bits > 8:
            kind = "none"
        if kind in ("channel", "tensor", "tile"):
            kw = dict(margin=options["margin"], pow2=options["pow2"] or spec.pow2)
        if kind == "channel":
            kw["axis"] = options["channel_axis"]
        elif kind in ("block", "tile", "nvfp4"):
            kw.update(axis=options["block_axis"], block_size=spec.block)
            if kind == "block":
                kw["scale_mode"] = spec.scale_mode
            if kind == "nvfp4":
                kw["tensor_scale"] = spec.tensor_scale
        opts = dict(flush_subnormals=ftz, flush_subnormal_inputs=dazi, return_scale=True)
        q, sc = quantize(x, row.format, kind, **kw, **opts)
        m = error_metrics(x, q, fmt=row.format, scale=sc)
        sc = np.asarray(sc, np.float64)
        finite = sc[np.isfinite(sc)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (np.nan, np.nan)
        out.append(dataclasses.replace(row, metrics=m, scale_min=lo, scale_max=hi))
    return out


def _sweep_rows(tensors, fmts, specs, options, total, scheduler, progress):
    rows: list[SweepRow] = []
    if scheduler is not None:
        check_axis(options["channel_axis"], 64, "sweep", "channel_axis")
        check_axis(options["block_axis"], 64, "sweep", "block_axis")
        return sweep_tasks(tensors, fmts, specs, options, scheduler, progress)
    for name, arr in tensors.items():
        for row in study_tensor(name, arr, fmts, specs, **options):
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
        elif kind in ("block", "tile", "nvfp4"):
            axis = block_axis % ndim
            g = Grouping(*grouping_of(kind, axis, spec.block, ndim))
            if isinstance(spec.block, tuple) and g.kind == "block":
                notes.append(f"{'1-D tensor' if ndim < 2 else 'block axis 0'}: "
                             f"tiles of 1 x {g.block}")  # fmt: skip
            for ax, b in _blocks_of(g.kind, g.axis, g.block).items():
                if work_shape[ax] % b:
                    where = "axis" if g.kind == "block" else f"axis {ax}"
                    notes.append(
                        f"{where} length {work_shape[ax]} is not a multiple of {b}: "
                        f"last block of {work_shape[ax] % b}"
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
        for ax, b in _blocks_of(g.kind, g.axis, g.block).items():
            aligns[ax] = math.lcm(aligns.get(ax, 1), b)
    return aligns


def _recipe_of(spec: Scaling, g: Grouping, margin: float, pow2: bool) -> Recipe:
    return Recipe(spec.kind, g.axis, spec.block, margin, pow2 or spec.pow2, spec.scale_mode,
                  spec.tensor_scale)  # fmt: skip


def _needs_nan(spec: Scaling) -> bool:
    return spec.kind == "nvfp4" or (spec.kind == "block" and spec.scale_mode != "ocp")


def _scales(plan: _Plan, fmts, amaxes, margin: float, pow2: bool, local=(), nans=None,
            scale_wide: bool = False):  # fmt: skip
    """``(jobs, dequant, notes)``: per (spec, format) a job ``(format, grouping, compact
    scale)`` (MX groupings in ``local`` get the scale None: each chunk computes its own)
    and its notes; ``dequant`` maps the index of an NVFP4 job to its dequantization
    factors."""
    dt = work_dtype(plan.dtype)
    nans = nans or {}
    jobs, dequant, job_notes = [], {}, []
    for spec, kind, g, notes in plan.specs:
        scaled = list(notes)
        if g is not None and g not in local:
            amax, bad = amaxes[plan.groupings.index(g)]
            zeros = int(np.count_nonzero(amax == 0))
            if kind in ("tensor", "channel", "tile") and zeros:
                what = "tiles" if kind == "tile" else "channels"
                where = "zero amax" if amax.size == 1 else f"{zeros} of {amax.size} {what}"
                scaled.append(f"{where}: scale 1")
            if kind == "block" and bad.any() and spec.scale_mode == "ocp":
                scaled.append(f"{int(bad.sum())} blocks hold NaN/Inf: scale NaN")
            if kind in ("block", "nvfp4"):
                scaled += _zero_blocks(np.count_nonzero((amax == 0) & (bad == 0)), amax.size)
        for fmt in fmts:
            if kind != "none" and fmt.bits > 8 and not scale_wide:
                jobs.append((fmt, None, np.ones((), dt)))
                job_notes.append([*notes, f"unscaled ({fmt.bits}-bit baseline)"])
                continue
            job_notes.append(scaled)
            if g in local:
                jobs.append((fmt, g, None))
                continue
            if kind == "none":
                scale = np.ones((), dt)
            elif kind == "block" and spec.scale_mode == "ocp":
                scale = mx_scale_from_codes(mx_exponents(amax, bad, fmt), dt)
            elif kind in ("block", "nvfp4"):
                r = _recipe_of(spec, g, margin, pow2)
                scale, d = scales_from_amax(amax, bad, nans.get(g), fmt, r, dt)
                if d is not None:
                    dequant[len(jobs)] = d
            elif kind in ("tensor", "channel", "tile"):
                scale = amax_scale(amax, fmt, margin, pow2 or spec.pow2, dt)
            else:
                ds = DelayedScaling(fmt, spec.history_len, spec.algo, margin=margin, pow2=pow2)
                # one step per index of the leading axis (one step for fewer than 2 dims)
                used = np.array([ds.step(a) for a in amax.reshape(-1)])
                scale = clamp_scale(used, dt).astype(dt).reshape(amax.shape)
            jobs.append((fmt, g, scale))
    return jobs, dequant, job_notes


def _zero_blocks(zeros: int, blocks: int) -> list[str]:
    """The note on all-zero blocks (their scale is the rule's for amax 0: nothing to
    measure), as the tensor and channel recipes note a zero amax; none where there are
    none.  The same words whether the blocks' scales came from the whole tensor's amaxes
    or chunk by chunk."""
    return [f"{zeros} of {blocks} blocks: zero amax"] if zeros else []


def _rows(plan: _Plan, fmts, jobs, spec_notes, count: int, totals: np.ndarray, stats,
          tensor_amax: float = math.nan, crests=None):  # fmt: skip
    rows = []
    ms = [ErrorMetrics.from_totals(count, totals[j], True) for j in range(len(jobs))]
    # the tensor's crest factor, from the row comparing the most values (one per tensor)
    top = max(ms, key=lambda m: m.compared, default=None)
    crest = None
    if top is not None and top.compared and top.sum_sq_signal > 0 and math.isfinite(tensor_amax):
        crest = tensor_amax / math.sqrt(top.sum_sq_signal / top.compared)
    for j, (fmt, _g, scale) in enumerate(jobs):
        spec = plan.specs[j // len(fmts)][0]
        m = ms[j]
        notes = list(spec_notes[j])
        if scale is None:  # MX scales computed chunk by chunk
            lo, hi, nbad, nzero, nblocks = (float(v) for v in stats[j])
            if nbad:
                notes.append(f"{int(nbad)} blocks hold NaN/Inf: scale NaN")
            notes += _zero_blocks(int(nzero), int(nblocks))
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
                crest=crest,
                group_crest=None if crests is None else crests[j // len(fmts)],
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
    scale_wide: bool = False,
    crest: bool = False,
) -> list[SweepRow]:
    """The rows of one tensor (numpy, masked, dask, xarray or a :class:`TensorFile`), in
    order scaling, format."""
    if isinstance(arr, TensorFile):
        arr = arr.load()
    kind, arr = array_kind(arr)
    if kind == "dask":
        return study_dask(
            name, arr, fmts, specs, channel_axis, block_axis, margin, pow2, scale_wide, crest
        )  # fmt: skip
    arr = float_data(arr, "sweep", f"tensor {name!r}", keep_mask=True)
    plan = _plan(name, arr.shape, arr.dtype, specs, channel_axis, block_axis)
    x = arr.reshape(plan.work_shape)
    shape = plan.work_shape
    masked = is_masked(x)
    per_chunk = max(1, chunk_bytes // bytes_per_element(x.dtype, masked))
    boxes = plan_chunks(shape, per_chunk, _aligns(plan))
    local, groupings = _split_local(plan, boxes)
    derived = _derived_tensor(groupings)
    passes = [g for g in groupings if g != derived]
    glob = empty_amax(shape, passes)
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

    def chunk(box):
        return x[box_slices(box)] if xw is None else xw

    # one chunk: the per-tensor and per-channel amaxes taken from an MX grouping's block
    # amaxes when its blocks lie along another axis (one amax pass instead of two)
    # The fused kernel started now, its machine code generated while the amax pass
    # compiles and runs; where every spec is NVFP4's, none: their jobs take a pass of
    # their own (_with_two_level), and a kernel started for nothing costs its front end
    if any(kind != "nvfp4" for _, kind, _, _ in plan.specs):
        prefetch_fused(x.dtype, fmts, masked)
    pre = _from_blocks(xw, shape, local, passes) if xw is not None else None
    if pre is not None:
        glob, pre = pre
    elif passes:
        for box in boxes:
            merge_amax(glob, chunk_amax(chunk(box), box, shape, passes), box, shape, passes)
    amaxes = _with_tensor(plan, passes, glob, derived)
    nans = _nan_flags(plan, amaxes, [(chunk(box), box) for box in boxes])
    jobs, dequant, spec_notes = _scales(plan, fmts, amaxes, margin, pow2, local, nans,
                                        scale_wide)  # fmt: skip
    fused = [job for j, job in enumerate(jobs) if j not in dequant]
    count, totals, stats = 0, None, None
    for box in boxes:
        n, t, st = chunk_totals(
            x[box_slices(box)], box, shape, _local_jobs(fused, box, shape),
            widened=None if direct else xw, amaxes=pre,
        )  # fmt: skip
        count += n
        totals = t if totals is None else add_totals(totals, t)
        stats = st if stats is None else add_stats(stats, st)
    pieces = [(x[box_slices(box)], box) for box in boxes]
    totals, stats = _with_two_level(jobs, dequant, totals, stats, pieces, shape)
    if buf is not None:
        _BUFFERS[threading.get_ident()] = buf
    t_amax = _tensor_amax(amaxes, pre, pieces, shape)
    crests = _crests(plan, pieces) if crest else None
    return _rows(plan, fmts, jobs, spec_notes, count, totals, stats, t_amax, crests)


def _each(func, pieces, *args) -> list:
    """``[func(y, box, *args) for y, box in pieces]``; for dask blocks (Delayed) as Dask
    tasks, computed together."""
    if pieces and hasattr(pieces[0][0], "__dask_graph__"):
        import dask

        return list(dask.compute(*[dask.delayed(func)(y, box, *args) for y, box in pieces]))
    return [func(y, box, *args) for y, box in pieces]


def _nan_flags(plan: _Plan, amaxes, pieces) -> dict:
    """``{grouping: NaN flags}`` (compact) of the groupings whose rules tell NaN from Inf
    (torchao's MX rules, NVFP4) and that hold NaN or Inf: one more pass, only then."""
    need = []
    for spec, _kind, g, _ in plan.specs:
        if _needs_nan(spec) and g not in need:
            amax = amaxes[plan.groupings.index(g)]
            if amax is not None and amax[1].any():
                need.append(g)
    if not need:
        return {}
    glob = [np.zeros(amaxes[plan.groupings.index(g)][1].shape, bool) for g in need]
    for (_, box), part in zip(pieces, _each(chunk_nan, pieces, plan.work_shape, need),
                              strict=True):  # fmt: skip
        merge_nan(glob, part, box, plan.work_shape, need)
    return dict(zip(need, glob, strict=True))


def _with_two_level(jobs, dequant, totals, stats, pieces, shape):
    """The totals (and scale statistics) of every job, in order: those of the fused pass
    and, for the NVFP4 jobs (``dequant``), their own pass over the chunks."""
    if not dequant:
        return totals, stats
    two = [(jobs[j][0], jobs[j][1], jobs[j][2], d) for j, d in dequant.items()]
    t2 = None
    for _, t in _each(two_level_totals, pieces, shape, two):
        t2 = t if t2 is None else add_totals(t2, t)
    return _interleave(len(jobs), list(dequant), totals, t2, stats)


def _interleave(njobs, two_idx, totals, t2, stats):
    full = np.zeros((njobs, totals.shape[1]))
    full_stats = empty_stats(njobs)
    rest = [j for j in range(njobs) if j not in two_idx]
    full[rest], full_stats[rest] = totals, stats
    full[two_idx] = t2
    return full, full_stats


def _tensor_amax(amaxes, pre, pieces, shape) -> float:
    """The tensor's largest finite ``|x|``: from any amax computed, else one pass."""
    for a in [*(amaxes or []), *((pre or {}).values())]:
        if a is not None:
            return float(np.max(a[0], initial=0.0))
    g = [Grouping("tensor")]
    glob = empty_amax(shape, g)
    for (_, box), part in zip(pieces, _each(chunk_amax, pieces, shape, g), strict=True):
        merge_amax(glob, part, box, shape, g)
    return float(glob[0][0])


def _crest_grouping(plan: _Plan, kind: str, g: Grouping | None) -> Grouping:
    return Grouping("tensor") if g is None else g


def _crests(plan: _Plan, pieces) -> list[float]:
    """Per spec, the mean crest factor of the groups that share a scale."""
    gs = list(dict.fromkeys(_crest_grouping(plan, k, g) for _, k, g, _ in plan.specs))
    shape = plan.work_shape
    glob = []
    for g in gs:
        cs = compact_shape(shape, g.kind, g.axis, g.block)
        glob.append((np.zeros(cs), np.zeros(cs), np.zeros(cs)))
    for (_, box), part in zip(pieces, _each(chunk_sums, pieces, shape, gs), strict=True):
        merge_sums(glob, part, box, shape, gs)
    by = {g: crest_of(*sums) for g, sums in zip(gs, glob, strict=True)}
    return [by[_crest_grouping(plan, k, g)] for _, k, g, _ in plan.specs]


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
    """``(local, pass1)``: MX groupings under the OCP rule alone whose blocks no chunk cuts
    (scales computed per chunk, in the second pass) and the groupings that need the amax
    pass."""
    local = [
        g for g in plan.groupings
        if g.kind == "block" and blocks_whole(boxes, plan.work_shape, g)
        and all(sp.kind == "block" and sp.scale_mode == "ocp"
                for sp, _, gg, _ in plan.specs if gg == g)
    ]  # fmt: skip
    return local, [g for g in plan.groupings if g not in local]


def _local_jobs(jobs, box, shape):
    return [(f, g, None if s is None else local_scale(s, g, box, shape)) for f, g, s in jobs]


def _dtype_name(dt: np.dtype) -> str:
    return "bfloat16" if dt == ml_dtypes.bfloat16 else dt.name


def study_dask(name, x, fmts, specs, channel_axis, block_axis, margin, pow2,
               scale_wide=False, crest=False):  # fmt: skip
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
    nans = _nan_flags(plan, amaxes, pieces)
    jobs, dequant, spec_notes = _scales(plan, fmts, amaxes, margin, pow2, local, nans,
                                        scale_wide)  # fmt: skip
    fused = [job for j, job in enumerate(jobs) if j not in dequant]
    tasks = [
        dask.delayed(chunk_totals)(b, box, shape, _local_jobs(fused, box, shape))
        for b, box in pieces
    ]
    count, totals, stats = 0, None, None
    for n, t, st in dask.compute(*tasks):
        count += n
        totals = t if totals is None else add_totals(totals, t)
        stats = st if stats is None else add_stats(stats, st)
    totals, stats = _with_two_level(jobs, dequant, totals, stats, pieces, shape)
    t_amax = _tensor_amax(amaxes, None, pieces, shape)
    crests = _crests(plan, pieces) if crest else None
    return _rows(plan, fmts, jobs, spec_notes, count, totals, stats, t_amax, crests)


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
