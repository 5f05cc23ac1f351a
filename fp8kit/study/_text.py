"""Names from files, made safe to print and to write.

Tensor and file names come from the files a study reads, so they are untrusted: an escape
sequence in a name would clear or recolour the terminal, a newline would forge a table row,
a name of a million characters would pad every row of the table, a name starting with
``=`` would run as a formula when the CSV is opened in a spreadsheet, and a file name that
is not UTF-8 (a lone surrogate in Python) cannot be encoded at all.  Every place that
prints or writes a name goes through this module.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TABLE_NAME_WIDTH", "csv_cell", "elide", "printable", "unicode_safe"]

#: The most characters of a name a table shows (longer ones lose their middle).
TABLE_NAME_WIDTH = 96

#: Characters that make a spreadsheet read a cell as a formula (OWASP's list; tab and
#: carriage return are escaped by :func:`printable` first).
_FORMULA_STARTS = ("=", "+", "-", "@")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a non-UTF-8 file name (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if ch in _NAMED:
        return _NAMED[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every character that is not printable written as its escape
    (``\\x1b``, ``\\n``, ``\\u202e``; a byte of a non-UTF-8 file name as ``\\xff``).

    Examples
    --------
    >>> from fp8kit.study._text import printable
    >>> printable("w\\x1b[2J\\nforged row"), printable("layers.0.weight")
    ('w\\\\x1b[2J\\\\nforged row', 'layers.0.weight')
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def elide(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters in the middle (``...`` marks the cut), so that
    the start and the end of a long name stay.

    Examples
    --------
    >>> from fp8kit.study._text import elide
    >>> elide("model.layers.10.mlp.down_proj.weight", 20)
    'model.la...oj.weight'
    """
    if len(text) <= width:
        return text
    if width < 4:
        return text[:width]
    head = (width - 3) // 2
    return text[:head] + "..." + text[len(text) - (width - 3 - head) :]


def csv_cell(value: Any) -> Any:
    """A value for a CSV cell: a string escaped by :func:`printable` and, when it starts
    with ``=``, ``+``, ``-`` or ``@``, prefixed with ``'`` so that a spreadsheet shows it
    as text instead of evaluating it; other values unchanged.

    Examples
    --------
    >>> from fp8kit.study._text import csv_cell
    >>> csv_cell("=HYPERLINK(1)"), csv_cell("w\\n"), csv_cell(-1.5)
    ("'=HYPERLINK(1)", 'w\\\\n', -1.5)
    """
    if not isinstance(value, str):
        return value
    text = printable(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def unicode_safe(text: str) -> str:
    r"""``text`` with its lone surrogates (bytes of a non-UTF-8 file name, as Python decodes
    them) written as escapes, so that it can be encoded as UTF-8; anything else kept (for
    JSON, which escapes control characters itself).

    Examples
    --------
    >>> from fp8kit.study._text import unicode_safe
    >>> unicode_safe(b"w\xff.npy".decode("utf-8", "surrogateescape")), unicode_safe("caf\xe9")
    ('w\\xff.npy', 'café')
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_escape(ch) if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
    return text
