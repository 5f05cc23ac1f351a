"""The study figure (matplotlib, an optional extra: ``pip install 'fp8kit[plot]'``)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np

from ..codec import decode
from ..formats import get_format
from .metrics import ErrorMetrics
from .sweep import SweepRow

__all__ = ["PlotUnavailable", "plot_study", "positive_grid", "require_matplotlib"]

_SAMPLE = 1 << 18  # values per tensor in the histogram ...
_TOTAL = 1 << 21  # ... and in all (a model of many tensors gets fewer per tensor)


class PlotUnavailable(ImportError):
    """matplotlib is not installed."""


def require_matplotlib():
    """matplotlib's Figure class, or :class:`PlotUnavailable` saying how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable("plotting needs matplotlib: pip install 'fp8kit[plot]'") from None
    return Figure


def positive_grid(fmt) -> np.ndarray:
    """The positive finite values of a format, ascending (from its decode table)."""
    codes = np.arange(1 << fmt.bits, dtype=fmt.code_dtype)
    values = decode(codes, fmt, dtype=np.float64)
    return np.unique(values[np.isfinite(values) & (values > 0)])


def _relative_log2(tensors: Mapping[str, np.ndarray]) -> tuple[np.ndarray, int]:
    """log2(|x| / amax) of a strided sample of each tensor's finite nonzero values."""
    parts, zeros = [], 0
    per_tensor = max(1024, min(_SAMPLE, _TOTAL // max(1, len(tensors))))
    for arr in tensors.values():
        flat = np.asarray(arr).reshape(-1)
        sample = flat[:: max(1, flat.size // per_tensor)].astype(np.float64)
        a = np.abs(sample[np.isfinite(sample)])
        zeros += int(np.count_nonzero(a == 0))
        a = a[a > 0]
        if a.size:
            parts.append(np.log2(a / a.max()))
    return (np.concatenate(parts) if parts else np.zeros(0)), zeros


def plot_study(
    rows: Sequence[SweepRow],
    tensors: Mapping[str, np.ndarray],
    path: str | os.PathLike,
    *,
    title: str | None = None,
) -> None:
    """Write a PNG with two panels: SQNR per format and scaling (pooled over the tensors),
    and the histogram of ``log2(|x| / amax)`` against each format's representable values
    seen the same way (``log2(v / max)``: where per-tensor amax scaling puts them).

    Raises
    ------
    PlotUnavailable
        If matplotlib is not installed.
    """
    figure = require_matplotlib()
    fig = figure(figsize=(12, 4.8), layout="constrained")
    ax_sqnr, ax_hist = fig.subplots(1, 2, width_ratios=[1, 1.35])
    if title:
        fig.suptitle(title)
    formats = list(dict.fromkeys(r.format for r in rows))
    scalings = list(dict.fromkeys(r.scaling for r in rows))
    colors = [f"C{i}" for i in range(10)]

    width = 0.8 / max(1, len(scalings))
    lowest = math.inf
    for j, sc in enumerate(scalings):
        vals = []
        for f in formats:
            parts = [r.metrics for r in rows if r.format == f and r.scaling == sc]
            v = ErrorMetrics.pooled(parts).sqnr_db if parts else math.nan
            vals.append(v if math.isfinite(v) else math.nan)
        lowest = min([lowest] + [v for v in vals if math.isfinite(v)])
        xs = np.arange(len(formats)) + (j - (len(scalings) - 1) / 2) * width
        bars = ax_sqnr.bar(xs, vals, width, label=sc, color=colors[j % 10])
        ax_sqnr.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    ax_sqnr.set_xticks(np.arange(len(formats)), formats, rotation=15, fontsize=8)
    if math.isfinite(lowest) and lowest > 10:  # differences of a few dB stay visible
        ax_sqnr.set_ylim(bottom=5 * math.floor((lowest - 5) / 5))
    ax_sqnr.set_ylabel("SQNR (dB), all tensors pooled")
    ax_sqnr.set_title("SQNR per format and scaling")
    ax_sqnr.legend(fontsize=8, title="scaling", title_fontsize=8)

    rel, zeros = _relative_log2(tensors)
    grids = {f: np.log2(positive_grid(get_format(f)) / get_format(f).max) for f in formats}
    lo = min([float(rel.min()) if rel.size else -8.0] + [float(g.min()) for g in grids.values()])
    bins = np.linspace(math.floor(lo) - 1, 0.5, 160)
    counts, _, _ = ax_hist.hist(rel, bins=bins, color="0.75", label="data (sampled)")
    ax_hist.set_yscale("log")
    # room above the data for one band of grid ticks per format
    ax_hist.set_ylim(0.5, max(1.0, float(np.max(counts, initial=1.0))) * 10.0 ** (1 + len(formats)))
    ax_hist.set_xlabel("log2(|x| / amax)   (per-tensor amax scaling maps amax to the format max)")
    ax_hist.set_ylabel("count")
    ax_hist.set_title("Values against each format's representable grid")
    band = 0.07
    for i, f in enumerate(formats):
        fmt = get_format(f)
        top = 0.98 - i * (band + 0.02)
        c = colors[i % 10]
        ax_hist.vlines(grids[f], top - band, top, transform=ax_hist.get_xaxis_transform(),
                       colors=c, linewidth=0.6)  # fmt: skip
        ax_hist.axvline(math.log2(fmt.smallest_normal / fmt.max), color=c, linestyle="--",
                        linewidth=0.8, label=f"{f}: grid; smallest normal (dashed)")  # fmt: skip
    if zeros:
        ax_hist.text(0.01, 0.02, f"{zeros} zeros not shown", transform=ax_hist.transAxes,
                     fontsize=7)  # fmt: skip
    ax_hist.legend(fontsize=7, loc="lower left")
    fig.savefig(os.fspath(path), dpi=100)
