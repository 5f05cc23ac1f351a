"""Sweeps: every (tensor, format, scaling) combination, one row of metrics each."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from ..formats import FloatFormat, get_format
from ._arrays import check_axis, float_data, working
from .metrics import ErrorMetrics, metrics_of
from .scaling import (
    DelayedScaling,
    amax_scale,
    apply_scale,
    broadcast_view,
    clamp_scale,
    group_amax,
    mx_exponents,
    mx_scale_from_codes,
)

__all__ = ["Scaling", "SweepRow", "demo_tensors", "parse_scaling", "sweep"]

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
) -> list[SweepRow]:
    """Quantize every tensor through every format with every scaling and measure the error.

    Per combination: the scale (:func:`scale_for` recipes; ``delayed`` treats the leading
    axis as time steps and replays :class:`DelayedScaling` over them), one fused
    quantize pass (:func:`quantize`) and one metrics pass (:func:`error_metrics`).  Amaxes
    are computed once per tensor and scaling and shared by the formats.  16-bit data is
    quantized in float32 and rounded once to its dtype; the error is measured on that.

    Parameters
    ----------
    data : ndarray or mapping of str to ndarray
        One tensor (named ``"x"``) or named tensors (float16, bfloat16, float32, float64).
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

    Returns
    -------
    list of SweepRow
        In order tensor, scaling, format.

    Raises
    ------
    TypeError, ValueError
        Non-float tensors, unknown formats or scaling specs, axes out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    >>> rows = study.sweep(x, ["float8_e4m3fn"], ["tensor", "block:32"])
    >>> [(r.scaling, round(r.metrics.sqnr_db)) for r in rows]
    [('tensor', 31), ('block:32', 30)]
    """
    tensors = _named(data)
    fmts = [get_format(f, argname="format") for f in formats]
    specs = [parse_scaling(s) for s in scalings]
    if not fmts or not specs:
        raise ValueError("sweep: formats and scalings must not be empty")
    total = len(tensors) * len(fmts) * len(specs)
    rows: list[SweepRow] = []
    for name, arr in tensors.items():
        arr = float_data(arr, "sweep", f"tensor {name!r}")
        shape = arr.shape
        if arr.ndim == 0:
            arr = arr.reshape(1)
        for ax_name, ax in (("channel_axis", channel_axis), ("block_axis", block_axis)):
            check_axis(ax, arr.ndim, "sweep", f"{ax_name} (tensor {name!r})")
        study = _TensorStudy(name, arr, shape, float(margin), bool(pow2))
        for spec in specs:
            for fmt, row in study.run(spec, fmts, channel_axis, block_axis):
                rows.append(row)
                if progress is not None:
                    progress(len(rows), total, f"{name} {fmt.name} {spec.label}")
    return rows


def _named(data: Any) -> dict[str, Any]:
    if isinstance(data, Mapping):
        if not data:
            raise ValueError("sweep: no tensors given")
        return {str(k): v for k, v in data.items()}
    return {"x": data}


class _TensorStudy:
    """The working copy of one tensor and the buffers its combinations share."""

    def __init__(self, name: str, arr: np.ndarray, shape, margin: float, pow2: bool) -> None:
        self.name, self.arr, self.shape, self.margin, self.pow2 = name, arr, shape, margin, pow2
        self.xw = working(arr)
        self.qbuf = np.empty_like(self.xw)
        self.narrow = arr.dtype != self.xw.dtype  # float16/bfloat16, worked on in float32

    def run(self, spec: Scaling, fmts: list[FloatFormat], channel_axis: int, block_axis: int):
        xw, kind = self.xw, spec.kind
        notes: list[str] = []
        axis, block = 0, 1
        if kind == "channel" and xw.ndim < 2:
            kind = "tensor"
            notes.append("1-D tensor: one channel")
        if kind == "delayed" and xw.ndim < 2:
            notes.append("1-D tensor: one step")
        if kind == "channel":
            axis = channel_axis % xw.ndim
        elif kind == "block":
            axis, block = block_axis % xw.ndim, spec.block_size
            if xw.shape[axis] % block:
                notes.append(
                    f"axis length {xw.shape[axis]} is not a multiple of {block}: "
                    f"last block of {xw.shape[axis] % block}"
                )
        elif kind == "delayed" and xw.ndim >= 2:
            kind, axis = "steps", 0

        if kind == "none":
            amax = bad = None
        else:
            grouping = {"steps": "channel", "delayed": "tensor"}.get(kind, kind)
            amax, bad = group_amax(xw, grouping, axis, block)
            zeros = int(np.count_nonzero(amax == 0))
            if kind in ("tensor", "channel") and zeros:
                where = "zero amax" if amax.size == 1 else f"{zeros} of {amax.size} channels"
                notes.append(f"{where}: scale 1")
            if kind == "block" and bad.any():
                notes.append(f"{int(bad.sum())} blocks hold NaN/Inf: scale NaN")

        for fmt in fmts:
            scale = self._scale(kind, spec, fmt, amax, bad)
            yield fmt, self._measure(fmt, spec.label, scale, kind, axis, block, notes)

    def _scale(self, kind, spec, fmt, amax, bad):
        dt = self.xw.dtype
        if kind == "none":
            return np.ones((), dt)
        if kind == "block":
            return mx_scale_from_codes(mx_exponents(amax, bad, fmt), dt)
        if kind in ("tensor", "channel"):
            return amax_scale(amax, fmt, self.margin, self.pow2, dt)
        ds = DelayedScaling(fmt, spec.history_len, spec.algo, margin=self.margin, pow2=self.pow2)
        # one step per index of the leading axis (a single step for fewer than 2 dims)
        used = np.array([ds.step(a) for a in amax.reshape(-1)])
        return clamp_scale(used, dt).astype(dt).reshape(amax.shape)

    def _measure(self, fmt, label, scale, kind, axis, block, notes):
        xv, sv = broadcast_view(self.xw, scale, kind, axis, block)
        qv = apply_scale(xv, fmt, sv, out=self.qbuf.reshape(xv.shape))
        if self.narrow:  # the result stored in the data's dtype, as FakeConvert does
            qv = qv.astype(self.arr.dtype).astype(np.float32)
        m = metrics_of(xv, qv, sv.astype(np.float64), fmt)
        row_notes = list(notes)
        if m.nan_inputs or m.inf_inputs:
            row_notes.append(f"{m.nan_inputs} NaN, {m.inf_inputs} Inf inputs not compared")
        if m.lost:
            row_notes.append(f"{m.lost} values lost to NaN scales")
        finite = scale[np.isfinite(scale)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (np.nan, np.nan)
        return SweepRow(
            tensor=self.name,
            shape=tuple(self.shape),
            dtype=_dtype_name(self.arr.dtype),
            format=fmt.name,
            scaling=label,
            metrics=m,
            scale_min=lo,
            scale_max=hi,
            notes=tuple(row_notes),
        )


def _dtype_name(dt: np.dtype) -> str:
    return "bfloat16" if dt == ml_dtypes.bfloat16 else dt.name
