"""Sweep results as an aligned text table, Markdown, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .sweep import SweepRow

__all__ = ["COLUMNS", "format_table", "to_csv", "to_json"]

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
    ("scale", True),
    ("notes", False),
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


def cells(row: SweepRow) -> list[str]:
    """The table cells of one row."""
    m = row.metrics
    return [
        row.tensor,
        row.format,
        row.scaling,
        _num(m.sqnr_db, ".2f"),
        _num(m.rmse),
        _num(m.max_abs_error),
        _num(m.max_rel_error),
        _pct(m.saturated),
        _pct(m.flushed_to_zero),
        _pct(m.subnormal),
        _scale(row),
        "; ".join(row.notes),
    ]


def format_table(rows: Sequence[SweepRow], *, markdown: bool = False) -> str:
    """An aligned plain-text table (or a Markdown table) with one line per row.

    Columns: SQNR in dB, RMSE, largest absolute and relative error, the percentages of
    saturated, flushed-to-zero and subnormal values, the scale (a range when there are
    several) and notes.
    """
    table = [[h for h, _ in COLUMNS]] + [cells(r) for r in rows]
    if not any(t[-1] for t in table[1:]):  # no notes: drop the column
        table = [t[:-1] for t in table]
    right = [r for _, r in COLUMNS][: len(table[0])]
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


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _row_dict(row: SweepRow, files: Mapping[str, str] | None) -> dict[str, Any]:
    d = row.as_dict()
    if files is None:
        return d
    out = {"tensor": d.pop("tensor"), "file": files.get(row.tensor, "")}
    out.update(d)
    return out


def to_json(
    rows: Sequence[SweepRow], *, files: Mapping[str, str] | None = None, **extra: Any
) -> str:
    """JSON text: ``{**extra, "rows": [row.as_dict(), ...]}``, each row with a ``"file"``
    field after ``"tensor"`` when ``files`` maps tensor names to the files (shards) they were
    read from.  JSON has no Inf or NaN: those floats are written as the strings ``"inf"``,
    ``"-inf"`` and ``"nan"``."""
    doc = {**extra, "rows": [_row_dict(r, files) for r in rows]}
    return json.dumps(_jsonable(doc), indent=1, allow_nan=False) + "\n"


def to_csv(rows: Sequence[SweepRow], *, files: Mapping[str, str] | None = None) -> str:
    """CSV text, one line per row with the fields of :meth:`SweepRow.as_dict` (shape as
    ``AxB``, notes joined by ``"; "``, floats in full precision, ``inf``/``nan`` as such),
    and a ``file`` column after ``tensor`` when ``files`` maps tensor names to files."""
    buf = io.StringIO()
    writer = None
    for r in rows:
        d = _row_dict(r, files)
        d["shape"] = "x".join(str(n) for n in r.shape)
        d["notes"] = "; ".join(r.notes)
        d = {k: ("" if v is None else v) for k, v in d.items()}
        if writer is None:
            writer = csv.DictWriter(buf, fieldnames=list(d), lineterminator="\n")
            writer.writeheader()
        writer.writerow(d)
    return buf.getvalue()
