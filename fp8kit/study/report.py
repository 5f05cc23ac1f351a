"""Sweep results as an aligned text table, Markdown, JSON and CSV; the model-level summary,
the worst tensors, and the rows as records or a pandas DataFrame."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._text import TABLE_NAME_WIDTH, csv_cell, elide, printable, unicode_safe
from .gemm import GemmRow, summarize_gemm, worst_gemm
from .metrics import ErrorMetrics
from .sweep import SweepRow

__all__ = [
    "COLUMNS",
    "SummaryRow",
    "format_gemm_report",
    "format_report",
    "format_summary",
    "format_table",
    "gemm_records",
    "records",
    "summarize",
    "to_csv",
    "to_dataframe",
    "to_json",
    "worst",
]

#: (header, right-aligned) of the table columns.
COLUMNS = (
    ("tensor", False),
    ("format", False),
    ("scaling", False),
    ("SQNR dB", True),
    ("RMSE", True),
    ("max abs", True),
    ("max rel", True),
    ("sat %", True),
    ("flush %", True),
    ("subn %", True),
    ("crest", True),
    ("grp crest", True),
    ("scale", True),
    ("notes", False),
)

#: (header, right-aligned) of the summary's columns.
SUMMARY_COLUMNS = (
    ("format", False),
    ("scaling", False),
    ("tensors", True),
    ("elements", True),
    ("SQNR dB", True),
    ("RMSE", True),
    ("max abs", True),
    ("sat %", True),
    ("flush %", True),
    ("subn %", True),
    ("worst tensor", False),
    ("its SQNR dB", True),
)


def _num(v: float | None, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return format(v, spec)


def _pct(v: float | None) -> str:
    if v is None or math.isnan(v):
        return _num(v)
    return "0" if v == 0 else format(100 * v, ".3g")


def _scale(row: SweepRow) -> str:
    if row.scale_min == row.scale_max or math.isnan(row.scale_min):
        return _num(row.scale_min, ".4g")
    return f"{_num(row.scale_min)}..{_num(row.scale_max)}"


def _name(name: str | None) -> str:
    """A tensor name as a table shows it: escaped (names come from files, see
    :mod:`fp8kit.study._text`) and, when long, cut in the middle."""
    return "-" if name is None else elide(printable(name), TABLE_NAME_WIDTH)


def cells(row: SweepRow) -> list[str]:
    """The table cells of one row."""
    m = row.metrics
    return [
        _name(row.tensor),
        row.format,
        row.scaling,
        _num(m.sqnr_db, ".2f"),
        _num(m.rmse),
        _num(m.max_abs_error),
        _num(m.max_rel_error),
        _pct(m.saturated),
        _pct(m.flushed_to_zero),
        _pct(m.subnormal),
        _num(row.crest),
        _num(row.group_crest),
        _scale(row),
        "; ".join(row.notes),
    ]


def _render(table: list[list[str]], right: Sequence[bool], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(table[0]) + " |"]
        out.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in t) + " |" for t in table[1:]]
        return "\n".join(out)
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    lines = []
    for k, t in enumerate(table):
        parts = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(t, widths, right, strict=True)]
        lines.append("  ".join(parts).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_table(rows: Sequence[SweepRow], *, markdown: bool = False) -> str:
    """An aligned plain-text table (or a Markdown table) with one line per row.

    Columns: SQNR in dB, RMSE, largest absolute and relative error, the percentages of
    saturated, flushed-to-zero and subnormal values, the tensor's crest factor (and the
    mean crest factor of the scaling's groups, when the sweep computed it), the scale (a
    range when there are several) and notes.

    Parameters
    ----------
    rows : sequence of SweepRow
        Rows from :func:`fp8kit.study.sweep`.
    markdown : bool, default False
        A Markdown table instead of aligned text.

    Returns
    -------
    str
        The table, without a final newline.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> from fp8kit.study import report
    >>> rows = study.sweep({"w": np.float32([1.0, 3.0])}, ["float8_e4m3fn"], ["none"])
    >>> print(report.format_table(rows))  # doctest: +NORMALIZE_WHITESPACE
    tensor format scaling SQNR dB RMSE max abs max rel sat % flush % subn % crest scale
    ------ ------------- ------- ------- ---- ------- ------- ----- ------- ------ ----- -----
    w      float8_e4m3fn none        inf    0       0       0     0       0      0  1.34     1
    """
    table = [[h for h, _ in COLUMNS]] + [cells(r) for r in rows]
    # no notes, no group crest factors (sweep(crest=True)): the columns are left out
    empty = {"notes": "", "grp crest": "-"}
    keep = [i for i, (h, _) in enumerate(COLUMNS)
            if h not in empty or any(t[i] != empty[h] for t in table[1:])]  # fmt: skip
    table = [[t[i] for i in keep] for t in table]
    right = [COLUMNS[i][1] for i in keep]
    return _render(table, right, markdown)


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    """The model-level figures of one (format, scaling): every tensor's elements pooled.

    Attributes
    ----------
    format : str
        The format's canonical name.
    scaling : str
        The scaling spec.
    tensors : int
        Tensors pooled.
    metrics : ErrorMetrics
        The pooled figures (:meth:`ErrorMetrics.pooled`): SQNR is
        ``10 log10(sum x**2 / sum (q - x)**2)`` over all compared elements of all tensors,
        the saturated, flushed and subnormal shares are of all compared elements, the
        largest errors the largest of any tensor.
    worst_tensor : str or None
        The tensor of lowest SQNR (the first of equals; None when no tensor has one).
    worst_sqnr_db : float
        Its SQNR (NaN when there is none).

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> data = {"a": np.float32([1.0, 3.3]), "b": np.float32([2.0, 5.0])}
    >>> s = study.summarize(study.sweep(data, ["float8_e4m3fn"], ["none"]))[0]
    >>> s.format, s.scaling, s.tensors, s.worst_tensor, round(s.worst_sqnr_db, 2)
    ('float8_e4m3fn', 'none', 2, 'a', 36.77)
    >>> round(s.metrics.sqnr_db, 2)  # pooled: 10 log10(sum x**2 / sum (q - x)**2), all four
    42.14
    """

    format: str
    scaling: str
    tensors: int
    metrics: ErrorMetrics
    worst_tensor: str | None
    worst_sqnr_db: float
    group: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A flat dict: format, scaling, (the group, with ``summarize(by=...)``), tensors,
        the pooled metrics' fields, the worst tensor and its SQNR.

        Returns
        -------
        dict of str
            Field name to value.

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> rows = study.sweep({"w": np.float32([1.0, 3.3])}, ["float8_e5m2"], ["none"])
        >>> d = study.summarize(rows)[0].as_dict()
        >>> d["tensors"], d["count"], d["worst_tensor"]
        (1, 2, 'w')
        """
        d: dict[str, Any] = {"format": self.format, "scaling": self.scaling}
        if self.group is not None:
            d["group"] = self.group
        d["tensors"] = self.tensors
        d.update(self.metrics.as_dict())
        d.update(worst_tensor=self.worst_tensor, worst_sqnr_db=self.worst_sqnr_db)
        return d


def _groups(rows: Iterable[SweepRow], caller: str) -> dict[tuple[str, str], list[SweepRow]]:
    """Rows by (format, scaling), in order of first appearance (formats first)."""
    by: dict[tuple[str, str], list[SweepRow]] = {}
    for r in rows:
        if not isinstance(r, SweepRow):
            raise TypeError(f"{caller}: rows must be SweepRow items; got {type(r).__name__}")
        by.setdefault((r.format, r.scaling), []).append(r)
    formats = list(dict.fromkeys(f for f, _ in by))
    scalings = list(dict.fromkeys(s for _, s in by))
    return {(f, s): by[f, s] for f in formats for s in scalings if (f, s) in by}


def _sqnr_key(r: SweepRow) -> tuple[bool, float]:
    v = r.metrics.sqnr_db
    return (math.isnan(v), v)  # NaN (nothing compared) after every number


#: The groupings of :func:`summarize`'s ``by``.
GROUP_BY = ("role", "layer")


def group_of(name: str, by: str) -> str:
    """A tensor's group under ``by``: ``"role"``, its name with the layer number and what
    comes before it taken off (``model.layers.3.self_attn.q_proj.weight`` plays the role
    ``self_attn.q_proj.weight`` in every layer; a name without a layer number is its own
    role); ``"layer"``, that number (``"other"`` without one; see
    :func:`fp8kit.study.plot.layer_index`).

    Parameters
    ----------
    name : str
        A tensor name.
    by : {"role", "layer"}
        The grouping.

    Returns
    -------
    str
        The group.

    Examples
    --------
    >>> from fp8kit.study.report import group_of
    >>> name = "model.layers.3.self_attn.q_proj.weight"
    >>> group_of(name, "role"), group_of(name, "layer")
    ('self_attn.q_proj.weight', '3')
    """
    from .plot import layer_index, role_of

    if by == "role":
        return role_of(name)
    i = layer_index(name)
    return "other" if i is None else str(i)


def summarize(rows: Iterable[SweepRow], by: str | None = None) -> list[SummaryRow]:
    """The model-level summary: one :class:`SummaryRow` per (format, scaling), every tensor
    pooled; with ``by``, one per (format, scaling, group).

    Parameters
    ----------
    rows : iterable of SweepRow
        Rows from :func:`sweep`.
    by : {"role", "layer"}, optional
        Pool the tensors of each role (q/k/v/o projections, MLP weights, norms, ... : the
        name without its layer number, :func:`group_of`) or of each layer apart; the
        group is the rows' ``group``.

    Returns
    -------
    list of SummaryRow
        Ordered by format, then scaling, each in order of first appearance (then the
        groups in order of first appearance).

    Raises
    ------
    TypeError
        If an item is not a SweepRow.
    ValueError
        An unknown ``by`` (the message lists the choices).

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> rows = study.sweep(study.demo_tensors(shape=(8, 64)), ["float8_e4m3fn"], ["tensor"])
    >>> [(s.format, s.scaling, s.tensors) for s in study.summarize(rows)]
    [('float8_e4m3fn', 'tensor', 3)]
    >>> data = {f"layers.{i}.{p}.weight": np.ones((4, 32), np.float32) * (i + 1)
    ...         for i in range(3) for p in ("q_proj", "mlp")}
    >>> rows = study.sweep(data, ["float8_e4m3fn"], ["tensor"])
    >>> [(s.group, s.tensors) for s in study.summarize(rows, by="role")]
    [('q_proj.weight', 3), ('mlp.weight', 3)]
    """
    if by is not None and by not in GROUP_BY:
        raise ValueError(f"summarize: unknown by {by!r}; valid: {', '.join(GROUP_BY)} or None")
    out = []
    for (fmt, scaling), group in _groups(rows, "summarize").items():
        parts: dict[str | None, list[SweepRow]] = {}
        for r in group:
            parts.setdefault(None if by is None else group_of(r.tensor, by), []).append(r)
        for key, part in parts.items():
            ranked = [r for r in part if not math.isnan(r.metrics.sqnr_db)]
            worst_row = min(ranked, key=_sqnr_key) if ranked else None
            out.append(
                SummaryRow(
                    format=fmt,
                    scaling=scaling,
                    tensors=len({r.tensor for r in part}),
                    metrics=ErrorMetrics.pooled([r.metrics for r in part]),
                    worst_tensor=None if worst_row is None else worst_row.tensor,
                    worst_sqnr_db=math.nan if worst_row is None else worst_row.metrics.sqnr_db,
                    group=key,
                )
            )
    return out


def worst(rows: Iterable[SweepRow], n: int) -> list[SweepRow]:
    """The ``n`` rows of lowest SQNR of each (format, scaling), lowest first.

    Rows whose SQNR is NaN (nothing compared) come last.

    Parameters
    ----------
    rows : iterable of SweepRow
        Rows from :func:`sweep`.
    n : int
        How many per (format, scaling), at least 1.

    Returns
    -------
    list of SweepRow
        Grouped by format and scaling as in :func:`summarize`.

    Raises
    ------
    ValueError
        If ``n`` is less than 1.
    TypeError
        If an item is not a SweepRow.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> from fp8kit.study import report
    >>> rows = study.sweep(study.demo_tensors(shape=(8, 64)), ["float8_e4m3fn"], ["none"])
    >>> [r.tensor for r in report.worst(rows, 2)]
    ['student_t3', 'laplace']
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"worst: n must be an int >= 1; got {n!r}")
    out: list[SweepRow] = []
    for group in _groups(rows, "worst").values():
        out += sorted(group, key=_sqnr_key)[:n]
    return out


def format_summary(summary: Sequence[SummaryRow], *, markdown: bool = False) -> str:
    """The summary of :func:`summarize` as an aligned text (or Markdown) table.

    Parameters
    ----------
    summary : sequence of SummaryRow
        From :func:`summarize`.
    markdown : bool, default False
        A Markdown table instead of aligned text.

    Returns
    -------
    str
        The table, without a final newline.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> from fp8kit.study import report
    >>> rows = study.sweep({"w": np.float32([1.0, 3.3])}, ["float8_e4m3fn"], ["none"])
    >>> lines = report.format_summary(study.summarize(rows)).splitlines()
    >>> lines[0].split()[:4]
    ['format', 'scaling', 'tensors', 'elements']
    >>> lines[2].split()
    ['float8_e4m3fn', 'none', '1', '2', '36.77', '0.0354', '0.05', '0', '0', '0', 'w', '36.77']
    """
    grouped = any(s.group is not None for s in summary)
    table = [[h for h, _ in SUMMARY_COLUMNS]]
    if grouped:  # (summarize(by=...): the group after the scaling)
        table[0].insert(2, "group")
    for s in summary:
        m = s.metrics
        table.append(
            [
                s.format,
                s.scaling,
                *([_name(s.group)] if grouped else []),
                str(s.tensors),
                str(m.count),
                _num(m.sqnr_db, ".2f"),
                _num(m.rmse),
                _num(m.max_abs_error),
                _pct(m.saturated),
                _pct(m.flushed_to_zero),
                _pct(m.subnormal),
                _name(s.worst_tensor),
                _num(s.worst_sqnr_db, ".2f"),
            ]
        )
    right = [r for _, r in SUMMARY_COLUMNS]
    return _render(table, right[:2] + [False] + right[2:] if grouped else right, markdown)


def format_report(
    rows: Sequence[SweepRow],
    *,
    top: int | None = None,
    markdown: bool = False,
    group_by: str | None = None,
) -> str:
    """What ``fp8kit study`` prints: the table of every row (or, with ``top``, of the
    ``top`` worst tensors of each format and scaling), then the model-level summary.

    Parameters
    ----------
    rows : sequence of SweepRow
        Rows from :func:`sweep`.
    top : int, optional
        Show only the ``top`` rows of lowest SQNR of each (format, scaling) (:func:`worst`).
    markdown : bool, default False
        Markdown tables instead of aligned text.
    group_by : {"role", "layer"}, optional
        After the summary, the summary per role or layer (:func:`summarize`'s ``by``).

    Returns
    -------
    str
        The tables and their headings, without a final newline.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> from fp8kit.study import report
    >>> rows = study.sweep(study.demo_tensors(shape=(8, 64)), ["float8_e4m3fn"], ["none"])
    >>> text = report.format_report(rows, top=1)
    >>> print(text.splitlines()[0])
    The 1 worst tensor of 3 (lowest SQNR) per format and scaling:
    >>> text.count("student_t3")  # the worst tensor, in the table and in the summary
    2
    """
    parts = []
    ntensors = len({r.tensor for r in rows})
    if top is not None:
        shown = worst(rows, top)
        what = "tensor" if top == 1 else "tensors"
        parts.append(
            f"The {top} worst {what} of {ntensors} (lowest SQNR) per format and scaling:\n"
        )
    else:
        shown = list(rows)
    parts.append(format_table(shown, markdown=markdown))
    summary = summarize(rows)
    elements = sum(s.metrics.count for s in summary[:1])
    what = "tensor" if ntensors == 1 else "tensors"
    parts.append(
        f"\nSummary: all {ntensors} {what} pooled ({elements:,} elements; SQNR over all of them):\n"
    )
    parts.append(format_summary(summary, markdown=markdown))
    if group_by is not None:
        by = summarize(rows, by=group_by)
        ngroups = len({s.group for s in by})
        parts.append(f"\nBy {group_by} ({ngroups} {group_by}s; the tensors of each pooled):\n")
        parts.append(format_summary(by, markdown=markdown))
    return "\n".join(parts)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):  # (a non-UTF-8 file name has no JSON string: its bytes escaped)
        return unicode_safe(v)
    if isinstance(v, dict):
        return {_jsonable(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def records(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """The rows as a list of flat dicts (one per row, :meth:`SweepRow.as_dict` or
    :meth:`SummaryRow.as_dict`): the form JSON, CSV and pandas take.

    Parameters
    ----------
    rows : iterable of SweepRow or SummaryRow
        From :func:`sweep` or :func:`summarize`.

    Returns
    -------
    list of dict
        Field name to value; shapes and notes are lists, Inf and NaN stay floats.

    Raises
    ------
    TypeError
        If an item is neither a SweepRow nor a SummaryRow.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> rows = study.sweep({"w": np.float32([1.0, 3.0])}, ["float8_e4m3fn"], ["none"])
    >>> rec = study.records(rows)[0]
    >>> rec["tensor"], rec["format"], rec["sqnr_db"], rec["shape"]
    ('w', 'float8_e4m3fn', inf, [2])
    """
    out = []
    for r in rows:
        if not isinstance(r, (SweepRow, SummaryRow)):
            raise TypeError(
                f"records: rows must be SweepRow or SummaryRow items; got {type(r).__name__}"
            )
        out.append(r.as_dict())
    return out


def to_dataframe(rows: Iterable[Any]):
    """The rows as a pandas DataFrame, one line per row, the columns of :func:`records`.

    pandas is imported only here (it is not a dependency of fp8kit).

    Parameters
    ----------
    rows : iterable of SweepRow or SummaryRow
        From :func:`sweep` or :func:`summarize`.

    Returns
    -------
    pandas.DataFrame
        Shapes as tuples, notes joined by ``"; "``.

    Raises
    ------
    ImportError
        If pandas is not installed (the message says how to install it).
    TypeError
        If an item is neither a SweepRow nor a SummaryRow.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> rows = study.sweep(study.demo_tensors(shape=(8, 64)), ["float8_e5m2"], ["tensor"])
    >>> df = study.to_dataframe(rows)
    >>> df[["tensor", "format", "scaling"]].values.tolist()[0]
    ['normal', 'float8_e5m2', 'tensor']
    >>> df.groupby("format")["sum_sq_error"].sum().index.tolist()
    ['float8_e5m2']
    """
    recs = records(rows)
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(
            "to_dataframe needs pandas, which is not installed: pip install pandas "
            "(or use fp8kit.study.records(rows), a list of dicts)"
        ) from None
    for d in recs:
        if "shape" in d:
            d["shape"] = tuple(d["shape"])
        if "notes" in d:
            d["notes"] = "; ".join(d["notes"])
    return pd.DataFrame.from_records(recs)


def _with_files(recs: list[dict[str, Any]], files: Mapping[str, str] | None) -> list[dict]:
    """Each row record with a ``"file"`` field after ``"tensor"`` (the shard it was read from)."""
    if files is None:
        return recs
    out = []
    for d in recs:
        tensor = d.pop("tensor")
        out.append({"tensor": tensor, "file": files.get(tensor, ""), **d})
    return out


def to_json(
    rows: Sequence[SweepRow], *, files: Mapping[str, str] | None = None, **extra: Any
) -> str:
    """JSON text: ``{**extra, "rows": [...], "summary": [...]}``, the rows' and the
    summary's :func:`records`; each row has a ``"file"`` field after ``"tensor"`` when
    ``files`` maps tensor names to the files (shards) they were read from.

    JSON has no Inf or NaN: those floats are written as the strings ``"inf"``, ``"-inf"``
    and ``"nan"``.

    Parameters
    ----------
    rows : sequence of SweepRow
        Rows from :func:`sweep`.
    files : mapping of str to str, optional
        Tensor name to the file it was read from.
    **extra
        Further top-level entries (settings of the run).

    Returns
    -------
    str
        Indented JSON text ending in a newline.

    Examples
    --------
    >>> import json, numpy as np
    >>> from fp8kit import study
    >>> from fp8kit.study import report
    >>> rows = study.sweep({"w": np.float32([1.0, 3.0])}, ["float8_e4m3fn"], ["none"])
    >>> doc = json.loads(report.to_json(rows, source="demo"))
    >>> doc["source"], doc["rows"][0]["sqnr_db"], doc["summary"][0]["worst_tensor"]
    ('demo', 'inf', 'w')
    """
    doc = {
        **extra,
        "rows": _with_files(records(rows), files),
        "summary": records(summarize(rows)),
    }
    return json.dumps(_jsonable(doc), indent=1, allow_nan=False) + "\n"


def to_csv(
    rows: Sequence[SweepRow],
    *,
    files: Mapping[str, str] | None = None,
    gemm: Sequence[Any] | None = None,
) -> str:
    """CSV text: one line per row, then one per (format, scaling) of the summary.

    The first column, ``kind``, is ``tensor`` for a row of :func:`sweep` and ``summary``
    for a line of :func:`summarize` (all tensors pooled). The other columns are the fields
    of :func:`records` of both kinds (shape as ``AxB``, notes joined by ``"; "``, floats in
    full precision, ``inf``/``nan`` as such); a field a kind does not have is empty
    (``shape`` for the summary, ``worst_tensor`` for the rows...).  Text from the files
    (tensor and file names) is escaped where it holds control characters, and a cell that
    starts with ``=``, ``+``, ``-`` or ``@`` gets a ``'`` in front, so that a spreadsheet
    shows it as text instead of evaluating it as a formula.

    Parameters
    ----------
    rows : sequence of SweepRow
        Rows from :func:`sweep`.
    files : mapping of str to str, optional
        Tensor name to the file it was read from: a ``file`` column after ``tensor``.
    gemm : sequence of GemmRow, optional
        GEMM-output rows (``fp8kit study --activations``): after the summary, one line of
        kind ``gemm`` per row and one of kind ``gemm-summary`` per (format, scaling,
        accumulator), with their own columns (``accumulator``, ``acc_sqnr_db``, ...).

    Returns
    -------
    str
        The CSV text, with a header line.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> from fp8kit.study import report
    >>> rows = study.sweep({"w": np.float32([1.0, 3.0])}, ["float8_e4m3fn"], ["none"])
    >>> lines = report.to_csv(rows).splitlines()
    >>> [line.split(",")[0] for line in lines]
    ['kind', 'tensor', 'summary']
    """
    lines = []
    for r, rec in zip(rows, _with_files(records(rows), files), strict=True):
        d = {"kind": "tensor", **rec}
        d["shape"] = "x".join(str(n) for n in r.shape)
        d["notes"] = "; ".join(r.notes)
        lines.append(d)
    for s in summarize(rows):
        lines.append({"kind": "summary", **s.as_dict()})
    for d in gemm_records(gemm or []):
        d["notes"] = "; ".join(d["notes"])
        lines.append({"kind": "gemm", **d})
    for g in summarize_gemm(gemm or []):
        lines.append({"kind": "gemm-summary", **g.as_dict()})
    fields = list(dict.fromkeys(k for d in lines for k in d))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", restval="")
    writer.writeheader()
    for d in lines:
        # (names come from files: escaped, and never read as a spreadsheet formula)
        writer.writerow({k: ("" if v is None else csv_cell(v)) for k, v in d.items()})
    return buf.getvalue() if rows else ""


# ---------------------------------------------------- GEMM outputs (fp8kit study --activations)
#: (header, right-aligned) of the GEMM table's columns.
GEMM_COLUMNS = (
    ("tensor", False),
    ("tokens", True),
    ("format", False),
    ("scaling", False),
    ("accumulator", False),
    ("SQNR dB", True),
    ("RMSE", True),
    ("max rel", True),
    ("acc SQNR dB", True),
    ("acc max rel", True),
    ("notes", False),
)
#: (header, right-aligned) of the GEMM summary's columns.
GEMM_SUMMARY_COLUMNS = (
    ("format", False),
    ("scaling", False),
    ("accumulator", False),
    ("layers", True),
    ("outputs", True),
    ("SQNR dB", True),
    ("RMSE", True),
    ("max rel", True),
    ("acc SQNR dB", True),
    ("worst layer", False),
    ("its SQNR dB", True),
)


def gemm_records(rows: Iterable[GemmRow]) -> list[dict[str, Any]]:
    """The GEMM rows as flat dicts: ``tensor``, then :meth:`GemmError.as_dict`."""
    return [r.as_dict() for r in rows]


def gemm_cells(row: GemmRow) -> list[str]:
    """The GEMM table's cells of one row."""
    r = row.result
    return [
        _name(row.tensor),
        str(r.tokens),
        r.w_format,
        r.w_scaling,
        r.accumulator,
        _num(r.error.sqnr_db, ".2f"),
        _num(r.error.rmse),
        _num(r.error.max_rel_error),
        _num(r.accumulation.sqnr_db, ".2f"),
        _num(r.accumulation.max_rel_error),
        "; ".join(r.notes),
    ]


def format_gemm_report(
    rows: Sequence[GemmRow], *, top: int | None = None, markdown: bool = False
) -> str:
    """What ``fp8kit study --activations`` prints after the tensor report: the GEMM
    output of every layer under every format, scaling and accumulator (or, with ``top``,
    the ``top`` worst layers of each), then those pooled over the layers."""
    nlayers = len({r.tensor for r in rows})
    intro = (
        "GEMM outputs y = x @ w.T (SQNR, RMSE, max rel: against the float64 product of the "
        "original values; acc: against the exact product of the quantized values, the "
        "accumulator's own error)"
    )
    shown = list(rows)
    if top is not None:
        shown = worst_gemm(rows, top)
        what = "layer" if top == 1 else "layers"
        intro += f"; the {top} worst {what} of {nlayers} per format, scaling and accumulator"
    table = [[h for h, _ in GEMM_COLUMNS]] + [gemm_cells(r) for r in shown]
    if not any(t[-1] for t in table[1:]):
        table = [t[:-1] for t in table]
    right = [r for _, r in GEMM_COLUMNS][: len(table[0])]
    parts = [intro + ":\n", _render(table, right, markdown)]
    summary = [[h for h, _ in GEMM_SUMMARY_COLUMNS]]
    for g in summarize_gemm(rows):
        summary.append([
            g.format, g.scaling, g.accumulator, str(g.layers), str(g.error.count),
            _num(g.error.sqnr_db, ".2f"), _num(g.error.rmse), _num(g.error.max_rel_error),
            _num(g.accumulation.sqnr_db, ".2f"), _name(g.worst_tensor),
            _num(g.worst_sqnr_db, ".2f"),
        ])  # fmt: skip
    what = "layer" if nlayers == 1 else "layers"
    parts.append(f"\nGEMM summary: all {nlayers} {what} pooled (SQNR over all outputs):\n")
    parts.append(_render(summary, [r for _, r in GEMM_SUMMARY_COLUMNS], markdown))
    return "\n".join(parts)
