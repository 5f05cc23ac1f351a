"""Quantization-error metrics: one compiled float64 pass over data and its quantized values."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import ml_dtypes
import numpy as np

from .. import _parallel
from .._backends import is_masked
from .._kernels import metrics as km
from ..formats import FloatFormat, get_format
from ._arrays import _unmask, array_kind, blocks_and_boxes, check_dtype, float_data, scale_layout
from ._blocks import split_shapes

__all__ = ["ErrorMetrics", "error_metrics"]


@dataclasses.dataclass(frozen=True)
class ErrorMetrics:
    """Error figures of quantized values ``q`` against the data ``x``.

    NaN and Inf inputs are counted and left out of every other figure; so are finite inputs
    whose quantized value is NaN or Inf (``lost``, e.g. an MX block whose scale is NaN).
    Fractions are of the ``compared`` elements; ``saturated`` and ``subnormal`` are None
    when no format was given.

    Attributes
    ----------
    count : int
        Elements.
    compared : int
        Elements in the error figures: finite inputs with finite quantized values.
    nan_inputs, inf_inputs : int
        NaN and +-Inf inputs (not compared).
    lost : int
        Finite inputs whose quantized value is NaN or Inf (not compared).
    sqnr_db : float
        ``10 log10(sum x**2 / sum (q - x)**2)``; +Inf when there is no error (an all-zero
        input included), -Inf for a zero signal with an error, NaN when nothing is compared.
    rmse : float
        ``sqrt(mean((q - x)**2))``.
    max_abs_error : float
        ``max |q - x|``.
    max_rel_error : float
        ``max |q - x| / |x|`` over ``x != 0`` (0 when every x is 0).
    saturated : float or None
        Fraction with ``|x * scale| > max`` (the format's largest finite value).
    flushed_to_zero : float
        Fraction with ``x != 0`` and ``q == 0``.
    subnormal : float or None
        Fraction with ``q != 0`` and ``|q * scale| <`` the format's smallest normal.
    sum_sq_error, sum_sq_signal : float
        ``sum (q - x)**2`` and ``sum x**2``.
    n_saturated, n_flushed, n_subnormal : int
        The counts behind the fractions (``n_saturated``/``n_subnormal`` are 0 without a
        format).

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> m = study.error_metrics(np.float32([1.0, 3.0, np.nan]), np.float32([1.0, 2.0, np.nan]))
    >>> m.count, m.compared, m.nan_inputs, m.max_abs_error, m.rmse
    (3, 2, 1, 1.0, 0.7071067811865476)
    """

    count: int
    compared: int
    nan_inputs: int
    inf_inputs: int
    lost: int
    sqnr_db: float
    rmse: float
    max_abs_error: float
    max_rel_error: float
    saturated: float | None
    flushed_to_zero: float
    subnormal: float | None
    sum_sq_error: float
    sum_sq_signal: float
    n_saturated: int
    n_flushed: int
    n_subnormal: int

    @classmethod
    def from_totals(
        cls,
        count: int,
        totals: np.ndarray,
        has_format: bool = True,
    ) -> ErrorMetrics:
        """Figures from combined kernel partials (:data:`fp8kit._kernels.metrics` columns).

        Parameters
        ----------
        count : int
            Elements in all.
        totals : ndarray
            The partial sums, counts and maxima, one per column of the metrics kernel.
        has_format : bool, default True
            Whether the saturated and subnormal fractions apply (a format was given).

        Returns
        -------
        ErrorMetrics
            The figures.

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> from fp8kit._kernels import metrics as km
        >>> totals = np.zeros(km.N_METRICS)
        >>> totals[km.SUM_SQ_ERR], totals[km.SUM_SQ_SIG] = 1.0, 100.0
        >>> study.ErrorMetrics.from_totals(4, totals).sqnr_db
        20.0
        """
        t = [float(v) for v in totals]
        nan_in, inf_in, lost = int(t[km.NAN_IN]), int(t[km.INF_IN]), int(t[km.LOST])
        compared = count - nan_in - inf_in - lost
        se, ss = t[km.SUM_SQ_ERR], t[km.SUM_SQ_SIG]
        n_sat, n_flush, n_sub = int(t[km.SATURATED]), int(t[km.FLUSHED]), int(t[km.SUBNORMAL])
        if compared == 0:
            nan = math.nan
            return cls(count, 0, nan_in, inf_in, lost, nan, nan, nan, nan,
                       nan if has_format else None, nan, nan if has_format else None,
                       0.0, 0.0, 0, 0, 0)  # fmt: skip
        return cls(
            count=count,
            compared=compared,
            nan_inputs=nan_in,
            inf_inputs=inf_in,
            lost=lost,
            sqnr_db=_sqnr(ss, se),
            rmse=math.sqrt(se / compared),
            max_abs_error=t[km.MAX_ABS],
            max_rel_error=t[km.MAX_REL],
            saturated=n_sat / compared if has_format else None,
            flushed_to_zero=n_flush / compared,
            subnormal=n_sub / compared if has_format else None,
            sum_sq_error=se,
            sum_sq_signal=ss,
            n_saturated=n_sat,
            n_flushed=n_flush,
            n_subnormal=n_sub,
        )

    @classmethod
    def pooled(cls, parts: list[ErrorMetrics]) -> ErrorMetrics:
        """The figures of several arrays taken together (sums add, maxima take the max).

        Parameters
        ----------
        parts : list of ErrorMetrics
            Figures of the arrays, each from :func:`error_metrics`.

        Returns
        -------
        ErrorMetrics
            The figures of all the arrays' elements at once.

        Raises
        ------
        ValueError
            If ``parts`` is empty.

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> a = study.error_metrics(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
        >>> b = study.error_metrics(np.array([4.0]), np.array([4.0]))
        >>> study.ErrorMetrics.pooled([a, b]).rmse == (0.25 / 3) ** 0.5
        True
        """
        if not parts:
            raise ValueError("pooled: need at least one ErrorMetrics")
        totals = np.zeros(km.N_METRICS)
        for p in parts:
            totals[km.SUM_SQ_ERR] += p.sum_sq_error
            totals[km.SUM_SQ_SIG] += p.sum_sq_signal
            if p.compared:
                totals[km.MAX_ABS] = max(totals[km.MAX_ABS], p.max_abs_error)
                totals[km.MAX_REL] = max(totals[km.MAX_REL], p.max_rel_error)
            totals[km.NAN_IN] += p.nan_inputs
            totals[km.INF_IN] += p.inf_inputs
            totals[km.LOST] += p.lost
            totals[km.FLUSHED] += p.n_flushed
            totals[km.SATURATED] += p.n_saturated
            totals[km.SUBNORMAL] += p.n_subnormal
        has_format = all(p.saturated is not None for p in parts)
        return cls.from_totals(sum(p.count for p in parts), totals, has_format)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict.

        Returns
        -------
        dict of str
            Field name to value, in field order (for JSON output).

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> study.error_metrics(np.float32([1.0]), np.float32([1.0])).as_dict()["rmse"]
        0.0
        """
        return dataclasses.asdict(self)


def _sqnr(signal: float, error: float) -> float:
    if error == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / error)


def metrics_of(
    x: np.ndarray, q: np.ndarray, scale: np.ndarray, fmt: FloatFormat | None
) -> ErrorMetrics:
    """Metrics of C-contiguous working arrays (both float32 or both float64) of one shape,
    with a float64 ``scale`` that broadcasts to it; no validation."""
    return ErrorMetrics.from_totals(x.size, metric_totals(x, q, scale, fmt), fmt is not None)


def metric_totals(
    x: np.ndarray, q: np.ndarray, scale: np.ndarray, fmt: FloatFormat | None
) -> np.ndarray:
    """The combined kernel columns (:data:`fp8kit._kernels.metrics`) of one array or chunk,
    as :func:`metrics_of` takes them; chunks combine with :func:`fp8kit._kernels.metrics.
    combine` (sums add, maxima take the max)."""
    shape4, sstr4, sc = scale_layout(x.shape, scale)
    inner = bool(sstr4[3] == 1)
    kernel = km.metrics_kernel(x.dtype, inner)
    limits = np.array([np.inf, 0.0, 0.0]) if fmt is None else _limits(fmt)
    nchunks = _parallel.chunks_for(x.size)
    partials = np.zeros((nchunks, km.N_METRICS))
    # launch() may fall back to one chunk; unused rows stay zero, which combine() ignores
    _parallel.launch(
        kernel, x.size, x.reshape(-1), q.reshape(-1), sc, shape4, sstr4, limits, partials
    )
    return km.combine(partials)


def fused_totals(
    x: np.ndarray, scale: np.ndarray, fmt: FloatFormat, narrow: str
) -> np.ndarray | None:
    """:func:`metric_totals` of ``x`` against ``round(x * scale) / scale`` (FakeConvert's
    quantization of float32 data to an 8-bit format, then, for ``narrow`` ``"float16"`` or
    ``"bfloat16"``, rounded once to that dtype), in one compiled pass that never stores the
    quantized values.  x: C-contiguous float32, or bfloat16 for ``narrow`` ``"bfloat16"``
    (read as is: no widened copy); scale: float32, broadcasting to x.

    None where the data or its quantized values hold a NaN or an Inf: the caller measures
    those with :func:`metric_totals` (the fused kernel leaves that formula out, see
    :func:`fp8kit._kernels.metrics.fused_segment`)."""
    if narrow == "bfloat16":  # (float32 data must hold bfloat16 values: exact then)
        x = np.ascontiguousarray(x, dtype=ml_dtypes.bfloat16).view(np.uint16)
    shape4, sstr4, sc = scale_layout(x.shape, scale)
    if sstr4[3] not in (0, 1):  # (the kernel copies scale rows; _merge gives 0 or 1)
        raise AssertionError(f"unexpected inner scale stride {sstr4[3]}")
    kernel = km.quantize_metrics_kernel(fmt, narrow)
    limits = _fused_limits(fmt)
    partials = np.zeros((_parallel.chunks_for(x.size), km.N_METRICS))
    _parallel.launch(
        kernel, x.size, x.reshape(-1), sc.astype(np.float32, copy=False), shape4, sstr4,
        limits, partials,
    )  # fmt: skip
    if (partials[:, km.NAN_IN] == km.NOT_FINITE).any():
        return None
    return km.combine(partials)


@functools.cache
def _limits(fmt: FloatFormat) -> np.ndarray:
    """The metric kernels' ``limits`` for ``fmt`` (read-only): the overflow threshold
    (:func:`fp8kit._kernels.metrics.overflow_threshold`), whether a tie there rounds up,
    and the subnormal limit: ``|q * scale|`` below it is subnormal.  That limit is the
    midpoint between the largest subnormal and the smallest normal (``tiny * (1 -
    2**-(m+1))``, m mantissa bits), where no value of the format lies: ``q = g / scale``
    rounded in the data's dtype stands for the grid value ``g`` it came from, and a ``g``
    equal to the smallest normal must not count as subnormal because ``q * scale`` came out
    an ulp below it (with non-power-of-two scales about half of them did)."""
    ovf, tie_up = km.overflow_threshold(fmt)
    sub = math.ldexp(fmt.smallest_normal, 0) * (1.0 - 2.0 ** -(fmt.mantissa_bits + 1))
    limits = np.array([ovf, float(tie_up), sub])
    limits.flags.writeable = False
    return limits


@functools.cache
def _fused_limits(fmt: FloatFormat) -> np.ndarray:
    """The ``limits`` argument of the fused kernel for ``fmt`` (read-only): :func:`_limits`,
    which the kernel compares float32 FMAs with, so they must be float32 values."""
    limits = _limits(fmt)
    assert (limits == limits.astype(np.float32)).all()  # (the kernel's counts need it)
    return limits


def error_metrics(x: Any, q: Any, *, fmt: Any = None, scale: Any = None) -> ErrorMetrics:
    """Error of quantized values ``q`` against data ``x``, in float64, in one compiled pass.

    The saturated and subnormal shares are of ``x * scale`` and ``q * scale``: what the
    rounding saw.  Pass the scale the values were quantized with
    (``quantize(..., return_scale=True)`` gives it, for every recipe): without it they are
    counted as if ``q`` held the format's own values (scale 1: ``quantize(...,
    "none")``), which for scaled values is wrong (an MX-quantized tensor of small weights
    then shows most of its values as subnormal and none saturated).

    Parameters
    ----------
    x : array_like
        The data: float16, bfloat16, float32 or float64; numpy, masked or dask arrays or
        xarray DataArrays.  Elements masked in ``x`` or ``q`` are left out of every figure;
        with dask arrays the sums are a reduction over the blocks (computed by the call,
        under the current Dask scheduler; a dask ``scale`` is computed first).
    q : array_like
        Its quantized (dequantized) values, same shape, any of those dtypes.
    fmt : str or FloatFormat, optional
        The format ``x * scale`` was rounded to; needed for the saturated and subnormal
        fractions (None without it).
    scale : array_like, optional
        The multiplier applied before rounding (FakeConvert's ``scale``, as from
        :func:`scale_for` or ``quantize(..., return_scale=True)``), default 1: one that
        broadcasts to x's shape, or per-block scales, an axis of ``s`` scales over ``n``
        elements (``s`` dividing ``n``) standing for blocks of ``n / s`` (MX blocks,
        NVFP4 blocks and tiles as :func:`scale_for` returns them).

    Returns
    -------
    ErrorMetrics

    Raises
    ------
    TypeError
        Non-float ``x`` or ``q``.
    ValueError
        Shapes that differ, an unknown format, or a scale that neither broadcasts nor has a
        length dividing x's along each axis.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> x = np.array([1.0, 3.3, -1000.0, 1e-4, np.nan])
    >>> q = np.array([1.0, 3.25, -448.0, 0.0, np.nan])
    >>> m = study.error_metrics(x, q, fmt="float8_e4m3fn")
    >>> m.compared, m.nan_inputs, m.max_abs_error, m.flushed_to_zero, m.saturated
    (4, 1, 552.0, 0.25, 0.25)
    >>> w = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    >>> q, s = study.quantize(w, "float8_e4m3fn", "block", return_scale=True)
    >>> s.shape, study.error_metrics(w, q, fmt="float8_e4m3fn", scale=s).subnormal
    ((2, 1), 0.0)
    """
    kx, x = array_kind(x)
    kq, q = array_kind(q)
    f = None if fmt is None else get_format(fmt, argname="fmt")
    if "dask" in (kx, kq):
        return error_metrics_dask(x, q, f, scale)
    xa = float_data(x, "error_metrics", "x", keep_mask=True)
    qa = float_data(q, "error_metrics", "q", keep_mask=True)
    if xa.shape != qa.shape:
        raise ValueError(f"error_metrics: x has shape {xa.shape} but q has {qa.shape}")
    sc = check_scale(scale, xa.shape)
    if is_masked(xa) or is_masked(qa):
        count, totals = pair_totals(xa, qa, sc, f)
        return ErrorMetrics.from_totals(count, totals, f is not None)
    wide = np.float64 in (xa.dtype, qa.dtype)
    dt = np.dtype(np.float64 if wide else np.float32)
    xw = np.ascontiguousarray(xa, dtype=dt)
    qw = np.ascontiguousarray(qa, dtype=dt)
    xw, qw, sc = block_views(xw, qw, sc)
    return metrics_of(xw, qw, sc, f)


def scale_blocks(scale: Any, shape: tuple[int, ...], func: str):
    """``(blocks, scale)``: how a scale maps onto data of ``shape``, and the scale with as
    many dims as the data.  Along each axis the scale's length ``s`` is 1 (one for the
    axis), ``n`` (one per index) or a divisor of ``n``: blocks of ``n / s`` consecutive
    elements (``blocks`` maps those axes to the block size).  Anything else is a
    ValueError naming ``func``."""
    sc = np.asarray(scale)
    if sc.ndim > len(shape):
        raise ValueError(f"{func}: scale of shape {sc.shape} has more dims than x's shape {shape}")
    sc = sc.reshape((1,) * (len(shape) - sc.ndim) + sc.shape)
    blocks = {}
    for d, (s, n) in enumerate(zip(sc.shape, shape, strict=True)):
        if s in (1, n):
            continue
        if s == 0 or n % s:
            raise ValueError(
                f"{func}: scale of shape {np.shape(scale)} does not fit x's shape {shape}: "
                f"along axis {d} its length {s} must be 1, {n}, or a divisor of {n} "
                f"(blocks of {n} / {s} elements)"
            )
        blocks[d] = n // s
    return blocks, sc


def block_views(x: np.ndarray, q: np.ndarray, sc: np.ndarray):
    """``(x, q, scale)`` reshaped so that per-block scales broadcast: each blocked axis of
    length ``n`` split into ``(s, n / s)`` for the data and ``(s, 1)`` for the scale
    (views of C-contiguous arrays)."""
    if sc.ndim == 0 or sc.ndim != x.ndim:
        return x, q, sc
    blocks, _ = scale_blocks(sc, x.shape, "error_metrics")
    if not blocks:
        return x, q, sc
    xs, ss = split_shapes(x.shape, blocks, sc.shape)
    return x.reshape(xs), q.reshape(xs), sc.reshape(ss)


def check_scale(scale: Any, shape: tuple[int, ...]) -> np.ndarray:
    """error_metrics' scale as float64 (default 1) with x's number of dims when it has
    blocks (:func:`scale_blocks`), or an error if it does not fit x's shape."""
    sc = np.asarray(1.0 if scale is None else scale)
    if sc.dtype.kind != "f" and sc.dtype.kind not in "iu":
        raise TypeError(f"error_metrics: scale must be a number or float array; got {sc.dtype}")
    blocks, full = scale_blocks(sc, shape, "error_metrics")
    return (full if blocks else sc).astype(np.float64)


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
    xw, qw, sc = block_views(xw, qw, np.asarray(scale, np.float64))
    totals = metric_totals(xw, qw, sc, fmt)
    totals[km.NAN_IN] -= nmasked
    return xw.size - nmasked, totals


def error_metrics_dask(x, q, fmt, scale) -> ErrorMetrics:
    """error_metrics with x or q (or both) dask arrays: a sum over the blocks (computed).
    A dask ``scale`` is computed first (scales are small)."""
    import dask
    import dask.array as da

    x = x if hasattr(x, "__dask_graph__") else da.asarray(x)
    check_dtype(x, "error_metrics", "x")
    if hasattr(q, "__dask_graph__"):
        check_dtype(q, "error_metrics", "q")
    else:
        q = np.asarray(q) if not is_masked(q) else q
        check_dtype(q, "error_metrics", "q")
    if tuple(x.shape) != tuple(q.shape):
        raise ValueError(f"error_metrics: x has shape {tuple(x.shape)} but q has {q.shape}")
    if scale is not None and hasattr(scale, "__dask_graph__"):
        scale = scale.compute()
    shape = tuple(x.shape) or (1,)
    sc = check_scale(scale, tuple(x.shape))
    blocks, sc = scale_blocks(sc, shape, "error_metrics")
    x = x.reshape(shape)
    q = da.asarray(q).reshape(shape).rechunk(x.chunks)
    qblocks = q.to_delayed()
    tasks = []
    for index, (xb, box) in zip(np.ndindex(*x.numblocks), blocks_and_boxes(x), strict=True):
        tasks.append(dask.delayed(pair_totals)(xb, qblocks[index], scale_part(sc, blocks, box),
                                               fmt))  # fmt: skip
    count, totals = 0, np.zeros((1, km.N_METRICS))
    for n, t in dask.compute(*tasks):
        count += n
        totals = add_totals(totals, t.reshape(1, -1))
    return ErrorMetrics.from_totals(count, totals[0], fmt is not None)


def scale_part(sc: np.ndarray, blocks: dict[int, int], box) -> np.ndarray:
    """The part of a scale (x's number of dims, :func:`scale_blocks`) that the chunk ``box``
    of x uses, broadcasting to the chunk (per-block axes expanded to the chunk's length)."""
    sel, local = [], {}
    for d, (s, e) in enumerate(box):
        if d in blocks:
            b = blocks[d]
            sel.append(slice(s // b, -(-e // b)))
            local[d] = (b, s - (s // b) * b, e - s)
        else:
            sel.append(slice(0, 1) if sc.shape[d] == 1 else slice(s, e))
    part = sc[tuple(sel)]
    for d, (b, off, n) in local.items():
        part = np.repeat(part, b, axis=d).take(np.arange(off, off + n), axis=d)
    return part
