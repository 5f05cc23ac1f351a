"""The study figure (matplotlib, an optional extra: ``pip install matplotlib``).

Three panels, sized for any number of formats, scalings and tensors: the SQNR of every
format and scaling with all tensors pooled (bars from 0; an infinite SQNR reaches a marked
``inf`` level), the values of the data against each format's representable values (a
histogram above, one row of ticks per format below), and the SQNR per layer (a heat map of
formats and scalings against the layer index found in the tensor names, or against the
tensors when they have none).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..codec import decode
from ..formats import get_format
from .metrics import ErrorMetrics
from .sweep import SweepRow

__all__ = [
    "PlotUnavailable",
    "check_plot_path",
    "layer_index",
    "plot_study",
    "positive_grid",
    "require_matplotlib",
    "study_figure",
]

_SAMPLE = 1 << 18  # values per tensor in the histogram ...
_TOTAL = 1 << 21  # ... and in all (a model of many tensors gets fewer per tensor)
#: The file types of :func:`plot_study`, by extension.
EXTENSIONS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}
DPI = 200
_WIDTH = 12.0  # inches
_LEFT_LIMIT = -40.0  # log2(v / max): float16's grid ends at -40; wider grids are cut there
#: The heat maps' colour range: +-3 dB against the row's pooled SQNR, the same in every
#: figure (half a bit of precision is 3 dB).
HEAT_DB = 3.0


class PlotUnavailable(ImportError):
    """matplotlib is not installed."""


def require_matplotlib():
    """matplotlib's Figure class, or :class:`PlotUnavailable` saying how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable("plotting needs matplotlib: pip install matplotlib") from None
    return Figure


def check_plot_path(path: str | os.PathLike) -> str:
    """The file type of a figure path from its extension: ``png``, ``pdf`` or ``svg``.

    Raises
    ------
    ValueError
        For any other extension (the message lists the supported ones).

    Examples
    --------
    >>> from fp8kit.study.plot import check_plot_path
    >>> check_plot_path("report/study.PDF")
    'pdf'
    """
    suffix = Path(os.fspath(path)).suffix.lower()
    if suffix not in EXTENSIONS:
        raise ValueError(
            f"plot path {os.fspath(path)!r} has extension {suffix or '(none)'!r}; "
            f"supported: {', '.join(EXTENSIONS)}"
        )
    return EXTENSIONS[suffix]


def positive_grid(fmt) -> np.ndarray:
    """The positive finite values of a format, ascending (from its decode table)."""
    codes = np.arange(1 << fmt.bits, dtype=fmt.code_dtype)
    values = decode(codes, fmt, dtype=np.float64)
    return np.unique(values[np.isfinite(values) & (values > 0)])


_LAYER = re.compile(r"(?:^|[._/])(\d+)(?=[._/]|$)")


def layer_index(name: str) -> int | None:
    """The layer number of a tensor name: its first all-digit component (between dots,
    slashes or underscores), after the last ``:`` (a file prefix); None if it has none.

    Examples
    --------
    >>> from fp8kit.study.plot import layer_index
    >>> layer_index("model.layers.12.mlp.up_proj.weight"), layer_index("encoder.layer.3.q")
    (12, 3)
    >>> layer_index("model.embed_tokens.weight") is None
    True
    """
    m = _LAYER.search(name.rsplit(":", 1)[-1])
    return None if m is None else int(m.group(1))


def role_of(name: str) -> str:
    """The role a tensor plays in every layer: its name after the layer number
    (:func:`layer_index`; after the last ``:``, a file prefix), or the whole name when it
    has none.

    Parameters
    ----------
    name : str
        A tensor name.

    Returns
    -------
    str
        Its role.

    Examples
    --------
    >>> from fp8kit.study.plot import role_of
    >>> role_of("model.layers.12.self_attn.q_proj.weight"), role_of("lm_head.weight")
    ('self_attn.q_proj.weight', 'lm_head.weight')
    """
    base = name.rsplit(":", 1)[-1]
    m = _LAYER.search(base)
    rest = "" if m is None else base[m.end() :].lstrip("._/")
    return rest or base


def _relative_log2(tensors: Mapping[str, np.ndarray]) -> tuple[np.ndarray, int, int, int]:
    """log2(|x| / amax) of a strided sample of each tensor's finite nonzero values, the
    zeros of the sample, its size and the number of values it was drawn from."""
    parts, zeros, drawn, total = [], 0, 0, 0
    per_tensor = max(1024, min(_SAMPLE, _TOTAL // max(1, len(tensors))))
    for arr in tensors.values():
        flat = np.asarray(arr).reshape(-1)
        sample = flat[:: max(1, flat.size // per_tensor)].astype(np.float64)
        drawn, total = drawn + sample.size, total + flat.size
        a = np.abs(sample[np.isfinite(sample)])
        zeros += int(np.count_nonzero(a == 0))
        a = a[a > 0]
        if a.size:
            parts.append(np.log2(a / a.max()))
    return (np.concatenate(parts) if parts else np.zeros(0)), zeros, drawn, total


def _pooled_sqnr(rows: Sequence[SweepRow]) -> float:
    return ErrorMetrics.pooled([r.metrics for r in rows]).sqnr_db if rows else math.nan


def _fmt_db(v: float) -> str:
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.1f}"


def _ink(color) -> str:
    """Black or white, whichever reads better on ``color``."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n // 2 - 1] + "…" + text[-(n - n // 2) :]


def _wrap_format(name: str) -> str:
    head, sep, tail = name.partition("_")
    return f"{head}\n{tail}" if sep and tail else name


def study_figure(
    rows: Sequence[SweepRow], tensors: Mapping[str, np.ndarray], *, title=None, gemm=None
):
    """The study figure as a matplotlib Figure (laid out, not saved); see :func:`plot_study`.

    Raises
    ------
    PlotUnavailable
        If matplotlib is not installed.
    ValueError
        If ``rows`` is empty.
    """
    figure = require_matplotlib()
    if not rows:
        raise ValueError("plot_study: rows must not be empty")
    formats = list(dict.fromkeys(r.format for r in rows))
    scalings = list(dict.fromkeys(r.scaling for r in rows))
    nf, ns = len(formats), len(scalings)
    rug_h = 0.28 * nf + 0.75
    top_h = max(4.4, 2.9 + rug_h)
    heat_h = max(2.6, 0.15 * nf * ns + 1.9)
    cols, _, xlabel = _groups(rows)
    if xlabel == "tensor":  # tensor names may stand up below the heat map: room for them
        heat_h += min(28, max(len(c) for c in cols)) * 0.6 * 7.5 / 72
    gemm_rows, gemm_h = _gemm_rows(gemm) if gemm else (None, 0.0)
    fig = figure(figsize=(_WIDTH, top_h + heat_h + gemm_h + 0.5), layout="constrained", dpi=DPI)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)  # a canvas with a renderer (text extents), without pyplot
    if title:
        fig.suptitle(title, fontsize=12)
    if gemm_rows:
        top, bottom, lowest = fig.subfigures(3, 1, height_ratios=[top_h, heat_h, gemm_h])
    else:
        top, bottom = fig.subfigures(2, 1, height_ratios=[top_h, heat_h])
    gs = top.add_gridspec(2, 2, width_ratios=[1, 1.2], height_ratios=[2.9, rug_h])
    ax_bar = top.add_subplot(gs[:, 0])
    ax_hist = top.add_subplot(gs[0, 1])
    ax_rug = top.add_subplot(gs[1, 1], sharex=ax_hist)
    ax_heat = bottom.subplots()
    by = {}
    for r in rows:
        by.setdefault((r.format, r.scaling), []).append(r)
    _values(ax_hist, ax_rug, tensors, formats)
    # Side by side, each format needs a label's line height even standing up; beyond what
    # the panel's width holds (~30 formats: P3109's 120 with the rest), the bars lie down
    # and the formats go down the panel, which grows with them as the rug beside it does.
    lying = nf * _LINE_PT > _WIDTH * 72 / 2.2 * 0.85
    if lying:
        ax_bar.set_yticks(np.arange(nf), formats, fontsize=8)
        ax_bar.set_xlabel("SQNR (dB), all tensors pooled")
    else:
        ax_bar.set_xticks(np.arange(nf), [_wrap_format(f) for f in formats], fontsize=8)
        ax_bar.set_ylabel("SQNR (dB), all tensors pooled")
    ax_bar.set_title("SQNR per format and scaling", fontsize=10)
    heat = _heat_image(bottom, ax_heat, by, formats, scalings, rows, heat_h)
    if gemm_rows:
        ax_gemm = lowest.subplots()
        gemm_heat = _gemm_heat(lowest, ax_gemm, gemm_rows, gemm_h)
    fig.draw_without_rendering()  # one layout: the sizes of the axes, in points
    (_lying_bars if lying else _bars)(fig, ax_bar, by, formats, scalings)
    _heat_labels(fig, ax_heat, heat)
    if gemm_rows:
        _heat_labels(fig, ax_gemm, gemm_heat)
    return fig


def _gemm_rows(gemm) -> tuple[dict, float]:
    """GEMM rows (:class:`fp8kit.study.gemm.GemmRow`) as rows of a heat map, one row of it
    per (format, "scaling · accumulator"), with the pooled SQNR of the accumulation alone
    per row; and the panel's height (inches)."""
    rows, acc = [], {}
    for g in gemm:
        r = g.result
        row = SweepRow(tensor=g.tensor, shape=(r.out_features, r.k), dtype="",
                       format=r.w_format, scaling=f"{r.w_scaling} · {r.accumulator}",
                       metrics=r.error, scale_min=math.nan, scale_max=math.nan)  # fmt: skip
        rows.append(row)
        acc.setdefault((row.format, row.scaling), []).append(r.accumulation)
    acc_db = {c: ErrorMetrics.pooled(ms).sqnr_db for c, ms in acc.items()}
    height = max(2.6, 0.15 * len(acc_db) + 1.9)
    cols, _, xlabel = _groups(rows)
    if xlabel == "tensor":
        height += min(28, max(len(c) for c in cols)) * 0.6 * 7.5 / 72
    return {"rows": rows, "acc_db": acc_db}, height


def _gemm_heat(sub, ax, gemm: dict, height: float) -> dict:
    """The GEMM panel: the SQNR of each layer's output y = x @ w.T for every format,
    scaling and accumulator (a heat map like the tensors' one); each row's label adds the
    accumulator's own pooled SQNR (against the exact product of the quantized values)."""
    rows = gemm["rows"]
    by: dict[tuple[str, str], list[SweepRow]] = {}
    for r in rows:
        by.setdefault((r.format, r.scaling), []).append(r)
    formats = list(dict.fromkeys(r.format for r in rows))
    scalings = list(dict.fromkeys(r.scaling for r in rows))
    heat = _heat_image(sub, ax, by, formats, scalings, rows, height)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    combos = heat["combos"]
    ax.set_yticks(
        range(len(combos)),
        [f"{t} (acc {_fmt_db(gemm['acc_db'].get(c, math.nan))})" for t, c in
         zip(labels, combos, strict=True)],
        fontsize=heat["ysize"],
    )  # fmt: skip
    what = "layer" if heat["xlabel"] != "tensor" else "weight"
    ax.set_title(
        f"GEMM outputs y = x @ w.T: SQNR per {what} (dB), against the float64 product of the "
        "original values\n(colour: against the row's pooled SQNR, red below;  acc: the "
        "accumulator's own SQNR, against the exact quantized product)",
        fontsize=9.5,
    )
    return heat


def _levels(by, formats, scalings) -> tuple[np.ndarray, float, float]:
    """(pooled SQNR per format and scaling, the axis' low end, where an infinite SQNR's bar
    ends) for both bar layouts."""
    vals = np.array([[_pooled_sqnr(by.get((f, s), [])) for s in scalings] for f in formats])
    finite = vals[np.isfinite(vals)]
    hi = float(finite.max()) if finite.size else 30.0
    lo = min(0.0, float(finite.min()) if finite.size else 0.0)
    return vals, lo, max(hi, 1.0) * 1.12


def _hatch_inf(bar, color) -> None:
    """An infinite SQNR's bar (no error): light and hatched, up to the inf level."""
    bar.set_facecolor((*color[:3], 0.3))
    bar.set_hatch("////")
    bar.set_edgecolor(color)
    bar.set_linewidth(0)


#: Points a format label at fontsize 8 takes across its line (standing up, across the axis).
_LINE_PT = 11.0


def _lying_bars(fig, ax, by, formats, scalings) -> None:
    """:func:`_bars` for many formats: horizontal bars, one row of them per format, top to
    bottom in the rug's order; no value labels (the rows are too thin: the table has
    them)."""
    nf, ns = len(formats), len(scalings)
    vals, lo, inf_level = _levels(by, formats, scalings)
    height = 0.8 / ns
    colors = _colors(ns)
    for j, s in enumerate(scalings):
        ys = np.arange(nf) + (j - (ns - 1) / 2) * height
        col = vals[:, j]
        shown = np.where(np.isinf(col), np.where(col > 0, inf_level, 0.0), col)
        bars = ax.barh(ys, np.nan_to_num(shown, nan=0.0), height * 0.92, label=s,
                       color=colors[j])  # fmt: skip
        for v, b in zip(col, bars, strict=True):
            if math.isinf(v) and v > 0:
                _hatch_inf(b, colors[j])
    span = inf_level - lo
    ax.set_xlim(lo - 0.02 * span, inf_level + 0.02 * span)
    if np.isposinf(vals).any():
        ax.axvline(inf_level, color="0.5", linewidth=0.6, linestyle=":")
        ticks = [t for t in ax.get_xticks() if lo <= t <= inf_level - 0.12 * span]
        ax.set_xticks([*ticks, inf_level], [f"{t:g}" for t in ticks] + ["inf"])
    ax.axvline(0, color="0.3", linewidth=0.6)
    ax.set_yticks(np.arange(nf), formats, fontsize=8)
    ax.set_ylim(nf - 0.45, -0.55)  # the first format on top, as in the rug
    ax.set_xlabel("SQNR (dB), all tensors pooled")
    # the legend between the title and the bars (the panel's top rows are data): the title
    # stands a legend's height higher
    legend_rows = 1 if ns <= 5 else 2
    ax.set_title("SQNR per format and scaling", fontsize=10, pad=legend_rows * 13 + 20)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0),
              ncol=ns if ns <= 5 else math.ceil(ns / 2), fontsize=7.5, frameon=False,
              title="scaling (hatched, to inf: no error)" if np.isposinf(vals).any()
              else "scaling", title_fontsize=7.5, borderaxespad=0.2, handlelength=1.2,
              columnspacing=1.0)  # fmt: skip


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _bars(fig, ax, by, formats, scalings) -> None:
    nf, ns = len(formats), len(scalings)
    vals, lo, inf_level = _levels(by, formats, scalings)
    width = 0.8 / ns
    colors = _colors(ns)
    box = ax.get_window_extent()  # laid out by the caller
    h_pt = box.height * 72 / fig.dpi
    legend_rows = 1 if ns <= 5 else 2
    room = (legend_rows * 13 + 24) / max(h_pt, 50)  # the legend's share of the height
    top = (inf_level - lo) / (1 - room) + lo
    ax.set_ylim(lo, top)
    bar_pt = box.width * 72 / fig.dpi * width / (nf + 0.2)
    size = min(8.0, bar_pt / 1.35)
    labelled = size >= 4.5  # narrower bars get no value labels (the table has them)
    per_pt = (top - lo) / max(h_pt, 1)  # data units per point
    for j, s in enumerate(scalings):
        xs = np.arange(nf) + (j - (ns - 1) / 2) * width
        col = vals[:, j]
        shown = np.where(np.isinf(col), np.where(col > 0, inf_level, 0.0), col)
        shown = np.nan_to_num(shown, nan=0.0)
        bars = ax.bar(xs, shown, width * 0.92, label=s, color=colors[j])
        for x, v, b in zip(xs, col, bars, strict=True):
            text = _fmt_db(v)
            length = (len(text) * 0.6 * size + 4) * per_pt  # rotated text, in data units
            ink = _ink(colors[j])
            if math.isinf(v) and v > 0:  # light, hatched, to the inf level, a triangle on top
                _hatch_inf(b, colors[j])
                ink = "black"
                ax.plot([x], [inf_level], marker="^", color=colors[j], markersize=5,
                        clip_on=False)  # fmt: skip
            h = b.get_height()
            if not labelled:
                continue
            if math.isinf(v) and v > 0:
                ax.text(x, h - 8 * per_pt, text, rotation=90, ha="center", va="top",
                        fontsize=size, color=ink, bbox=dict(facecolor="white", alpha=0.85,
                        edgecolor="none", pad=0.5))  # fmt: skip
            elif h > length:
                ax.text(x, h - 2 * per_pt, text, rotation=90, ha="center", va="top",
                        fontsize=size, color=ink)  # fmt: skip
            else:
                ax.text(x, max(h, 0.0) + 2 * per_pt, text, rotation=90, ha="center",
                        va="bottom", fontsize=size)  # fmt: skip
    if np.isposinf(vals).any():  # the inf level gets its own tick, "inf"
        ax.axhline(inf_level, color="0.5", linewidth=0.6, linestyle=":")
        gap = 0.07 * (top - lo)
        ticks = [t for t in ax.get_yticks() if lo <= t <= inf_level - gap]
        ax.set_yticks([*ticks, inf_level], [f"{t:g}" for t in ticks] + ["inf"])
    ax.axhline(0, color="0.3", linewidth=0.6)
    names = [_wrap_format(f) for f in formats]
    widest = max(len(line) for n in names for line in n.split("\n")) * 0.62 * 8  # points
    if widest > 0.95 * box.width * 72 / fig.dpi / nf:  # too many formats side by side: stand up
        ax.set_xticks(np.arange(nf), formats, fontsize=8, rotation=90)
    else:
        ax.set_xticks(np.arange(nf), names, fontsize=8)
    ax.set_xlim(-0.55, nf - 0.45)
    ax.set_ylabel("SQNR (dB), all tensors pooled")
    ax.set_title("SQNR per format and scaling", fontsize=10)
    ax.legend(loc="upper center", ncol=ns if ns <= 5 else math.ceil(ns / 2), fontsize=7.5,
              frameon=False, title="scaling (hatched, to inf: no error)"
              if np.isposinf(vals).any() else "scaling", title_fontsize=7.5,
              borderaxespad=0.2, handlelength=1.2, columnspacing=1.0)  # fmt: skip


def _values(ax_hist, ax_rug, tensors, formats) -> None:
    rel, zeros, drawn, total = _relative_log2(tensors)
    grids = {f: np.log2(positive_grid(get_format(f)) / get_format(f).max) for f in formats}
    grid_lo = min(float(g.min()) for g in grids.values() if g.size)
    data_lo = float(rel.min()) if rel.size else -8.0
    left = math.floor(min(max(data_lo, -64.0), max(grid_lo, _LEFT_LIMIT))) - 1
    below = int(np.count_nonzero(rel < left))
    bins = np.arange(left, 0.5 + 1e-9, 0.125)
    label = (f"data: all {total:,} values" if drawn == total
             else f"data: a sample of {drawn:,} of {total:,} values")  # fmt: skip
    extra = [f"{zeros:,} zeros"] if zeros else []
    if below:
        extra.append(f"{below:,} below {left}")
    if extra:
        label += ", not shown: " + ", ".join(extra)
    ax_hist.hist(rel, bins=bins, color="0.55", label=label)
    ax_hist.set_yscale("log")
    ax_hist.set_ylim(bottom=0.7)
    ax_hist.set_ylabel("count (log scale)", fontsize=9)
    ax_hist.set_title("The data's magnitudes against each format's values", fontsize=10)
    ax_hist.legend(fontsize=7.5, loc="upper left", frameon=False)
    ax_hist.tick_params(labelbottom=False, labelsize=8)
    ax_hist.set_xlim(left, 0.5)
    # one row of ticks per format; grids denser than 1/50 binade are thinned to that
    labels = []
    for i, f in enumerate(formats):
        g = grids[f]
        pos = np.unique(np.round(g[g >= left] * 50) / 50)
        ax_rug.vlines(pos, i - 0.38, i + 0.38, colors="0.15", linewidth=0.5)
        fmt = get_format(f)
        if fmt.smallest_normal > fmt.smallest_subnormal:
            sn = math.log2(fmt.smallest_normal / fmt.max)
            if sn >= left:
                ax_rug.vlines([sn], i - 0.5, i + 0.5, colors="C3", linewidth=1.1,
                              linestyles="--")  # fmt: skip
        lowest = float(g.min()) if g.size else 0.0
        labels.append(f"{f} (to {lowest:.0f})" if lowest < left else f)
    ax_rug.set_yticks(np.arange(len(formats)), labels, fontsize=7.5)
    ax_rug.set_ylim(len(formats) - 0.5, -0.5)
    ax_rug.tick_params(axis="x", labelsize=8)
    ax_rug.set_xlabel(
        "log2(|x| / amax) of the data;  log2(v / max) of each format's values v\n"
        "(per-tensor amax scaling maps amax to max;  red dashes: the smallest normal)",
        fontsize=8,
    )


def _groups(rows: Sequence[SweepRow]) -> tuple[list[str], dict[str, str], str]:
    """Columns of the heat map: layers when the names number them, else tensors."""
    names = list(dict.fromkeys(r.tensor for r in rows))
    index = {n: layer_index(n) for n in names}
    layers = sorted({i for i in index.values() if i is not None})
    if len(layers) >= 2:
        group = {n: ("other" if i is None else str(i)) for n, i in index.items()}
        cols = [str(i) for i in layers] + (["other"] if None in index.values() else [])
        return cols, group, "layer (its tensors pooled; other: tensors outside numbered layers)"
    return names, {n: n for n in names}, "tensor"


def _heat_image(sub, ax, by, formats, scalings, rows, height: float) -> dict:
    """The heat map's image, colour bar and row labels; :func:`_heat_labels` adds the rest
    once the figure is laid out."""
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    cols, group, xlabel = _groups(rows)
    combos = [(f, s) for f in formats for s in scalings]
    where = {c: i for i, c in enumerate(cols)}
    grid = np.full((len(combos), len(cols)), np.nan)
    for k, c in enumerate(combos):
        parts: dict[int, list[SweepRow]] = {}
        for r in by.get(c, []):
            parts.setdefault(where[group[r.tensor]], []).append(r)
        for j, rs in parts.items():
            grid[k, j] = _pooled_sqnr(rs)
    # colour: a cell's SQNR against its row's (every tensor pooled), so that the weak
    # layers of every format stand out whatever the format's own level
    row_db = np.array([_pooled_sqnr(by.get(c, [])) for c in combos])
    with np.errstate(invalid="ignore"):
        dev = grid - row_db[:, None]
    finite = dev[np.isfinite(dev)]
    # one fixed range for every figure (+-HEAT_DB dB), so that a colour means the same
    # deviation in every study; cells beyond it saturate (arrows on the colour bar)
    lim = HEAT_DB
    beyond = bool(finite.size) and float(np.abs(finite).max()) > lim
    base = colormaps["RdBu"]
    cmap = base.with_extremes(bad="0.82", under=base(0.0), over=base(1.0))
    shown = np.where(np.isinf(grid), np.nan, dev)
    im = ax.imshow(shown, aspect="auto", cmap=cmap, vmin=-lim, vmax=lim,
                   interpolation="nearest")  # fmt: skip
    for k, j in zip(*np.nonzero(np.isposinf(grid)), strict=True):
        ax.add_patch(Rectangle((j - 0.5, k - 0.5), 1, 1, facecolor="white", hatch="///",
                               edgecolor="0.6", linewidth=0))  # fmt: skip
    for k, j in zip(*np.nonzero(np.isneginf(grid)), strict=True):
        ax.add_patch(Rectangle((j - 0.5, k - 0.5), 1, 1, facecolor="black", linewidth=0))
    has_inf, has_nan = bool(np.isposinf(grid).any()), bool(np.isnan(grid).any())
    extend = "both" if beyond else "neither"
    cbar = sub.colorbar(im, ax=ax, extend=extend, fraction=0.04, pad=0.01)
    cbar.set_label("dB against the row's SQNR\n(all tensors pooled)", fontsize=8)
    cbar.ax.tick_params(labelsize=7)
    # row labels now (they set the left margin); their size from the expected row height
    row_pt = max(1.0, (height - 1.4) * 72 / max(1, len(combos)))
    ysize = float(np.clip(row_pt / 1.35, 4.5, 8.0))
    ax.set_yticks(np.arange(len(combos)),
                  [f"{f} · {s}: {_fmt_db(v)} dB" for (f, s), v in zip(combos, row_db, strict=True)],
                  fontsize=ysize)  # fmt: skip
    layered = xlabel != "tensor"
    _heat_xticks(ax, cols, layered, (_WIDTH - 3.4) * 72 / max(1, len(cols)))  # expected width
    ax.set_xlabel(xlabel, fontsize=8.5)
    notes = []
    if has_inf:
        notes.append("white, hatched: inf (no error)")
    if has_nan:
        notes.append("grey: nothing compared")
    if np.isneginf(grid).any():
        notes.append("black: -inf")
    what = "layer" if layered else "tensor"
    ax.set_title(f"SQNR per {what} (dB; colour: against its row's pooled SQNR, red below)"
                 + (f"   [{'; '.join(notes)}]" if notes else ""), fontsize=10)  # fmt: skip
    return dict(cols=cols, combos=combos, xlabel=xlabel, grid=grid, dev=dev, cmap=cmap,
                norm=im.norm, ysize=ysize)  # fmt: skip


def _heat_xticks(ax, cols: list[str], layered: bool, cell_w: float) -> None:
    """Column labels, thinned to every k-th where cells are narrower than a label."""
    xsize = 7.5
    if layered:
        step = max(1, math.ceil(xsize * 2.6 / max(cell_w, 1e-9)))  # up to 3 digits + gap
        ticks = [j for j in range(len(cols)) if cols[j] == "other" or j % step == 0]
        if cols[-1] == "other" and step > 1 and len(cols) >= 2 and (len(cols) - 2) % step == 0:
            ticks = [j for j in ticks if j != len(cols) - 2]  # keep "other" clear
        ax.set_xticks(ticks, [cols[j] for j in ticks], fontsize=xsize)
    else:
        step = max(1, math.ceil(xsize * 1.4 / max(cell_w, 1e-9)))
        ticks = list(range(0, len(cols), step))
        rotate = any(len(cols[j]) * 0.6 * xsize > cell_w * step * 0.9 for j in ticks)
        ax.set_xticks(ticks, [_short(cols[j], 28) for j in ticks], fontsize=xsize,
                      rotation=90 if rotate else 0)  # fmt: skip
    ax.tick_params(length=2)


def _heat_labels(fig, ax, heat: dict) -> None:
    cols, combos, xlabel = heat["cols"], heat["combos"], heat["xlabel"]
    grid, dev, cmap, norm = heat["grid"], heat["dev"], heat["cmap"], heat["norm"]
    box = ax.get_window_extent()  # laid out by the caller
    cell_w = box.width * 72 / fig.dpi / max(1, len(cols))
    cell_h = box.height * 72 / fig.dpi / max(1, len(combos))
    if cell_h < heat["ysize"] * 1.3:  # fewer points per row than expected
        for t in ax.get_yticklabels():
            t.set_fontsize(max(4.5, cell_h / 1.35))
    _heat_xticks(ax, cols, xlabel != "tensor", cell_w)
    # the values themselves where a cell has room for them
    if cell_w >= 4 * 0.6 * 7 + 3 and cell_h >= 7 * 1.25:
        size = min(7.0, cell_h / 1.4, (cell_w - 3) / (0.6 * 4.5))
        for k in range(len(combos)):
            for j in range(len(cols)):
                v, d = grid[k, j], dev[k, j]
                color = _ink(cmap(norm(d))) if math.isfinite(d) else "black"
                if math.isinf(v) and v < 0:
                    color = "white"
                ax.text(j, k, _fmt_db(v), ha="center", va="center", fontsize=size,
                        color=color)  # fmt: skip


def plot_study(
    rows: Sequence[SweepRow],
    tensors: Mapping[str, np.ndarray],
    path: str | os.PathLike,
    *,
    title: str | None = None,
    dpi: int = DPI,
    gemm: Sequence[Any] | None = None,
) -> None:
    """Write the study figure: PNG (at ``dpi``), PDF or SVG by the path's extension.

    Panels: SQNR per format and scaling with all tensors pooled (bars from 0 dB; an
    infinite SQNR is a hatched bar up to a dotted ``inf`` level, marked with a triangle);
    the histogram of the data's ``log2(|x| / amax)`` above one row of ticks per format at
    its positive values seen the same way (``log2(v / max)``: where per-tensor amax scaling
    puts them; dashed: the smallest normal); and a heat map of the SQNR per layer (the first
    number in the tensor names, :func:`layer_index`; tensors without one pooled as
    "other") or, when the names have no layer numbers, per tensor, for every format and
    scaling. Sizes and label densities follow the numbers of formats, scalings and layers
    so that no two labels overlap.

    Parameters
    ----------
    rows : sequence of SweepRow
        From :func:`fp8kit.study.sweep`.
    tensors : mapping of str to ndarray
        The data (a sample of each tensor's values is drawn).
    path : str or path-like
        Where to write; ``.png``, ``.pdf`` or ``.svg``.
    title : str, optional
        The figure's title.
    dpi : int, default 200
        Resolution of a PNG.
    gemm : sequence of GemmRow, optional
        GEMM-output rows (``fp8kit study --activations``): a fourth panel below, the SQNR
        of each layer's output for every format, scaling and accumulator.

    Raises
    ------
    PlotUnavailable
        If matplotlib is not installed.
    ValueError
        An unsupported extension, or no rows.
    """
    kind = check_plot_path(path)
    fig = study_figure(rows, tensors, title=title, gemm=gemm)
    fig.savefig(os.fspath(path), dpi=dpi, format=kind)
