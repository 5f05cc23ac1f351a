"""The progress bar of ``fp8kit study``: tqdm when it is installed (the ``progress`` extra),
else a minimal bar that follows the same rules.

Rules: the work is counted in elements (a tensor of n elements through F formats and S
scalings weighs ``n * F * S``), the line shows elapsed time and an estimate of the time
left, it is never wider than the terminal (one line, rewritten in place), and nothing is
written when the stream is not a terminal unless the bar is forced.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from ._text import printable

__all__ = ["StudyProgress", "terminal_width"]


def terminal_width(stream: Any, default: int = 80) -> int:
    """Columns of the terminal behind ``stream`` (``$COLUMNS`` first, as tqdm and
    :func:`shutil.get_terminal_size` do; ``default`` when neither says)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return os.get_terminal_size(stream.fileno()).columns or default
    except (AttributeError, OSError, ValueError):
        return default


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(seconds)
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


def _si(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters in the middle (a tensor name's start and its
    format and scaling at the end stay)."""
    if len(text) <= width:
        return text
    if width < 2:
        return ""
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


class _PlainBar:
    """tqdm's line without tqdm: ``desc: 42%|####      | 1.2G/2.9G el [00:03<00:04] label``,
    cut to the terminal's width, redrawn at most every ``mininterval`` seconds."""

    def __init__(self, total: int, stream: TextIO, width: int, delay: float) -> None:
        self.total, self.stream, self.width, self.delay = total, stream, width, delay
        self.n, self.label = 0, ""
        self.start = time.monotonic()
        self.shown, self._last_draw, self._last_len = False, -math.inf, 0

    def update(self, n: int, label: str) -> None:
        self.n = min(self.total, self.n + n)
        self.label = label
        now = time.monotonic()
        if now - self.start < self.delay:
            return
        if now - self._last_draw >= 0.1 or self.n >= self.total:
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = now - self.start
        frac = self.n / self.total if self.total else 1.0
        eta = elapsed * (1 - frac) / frac if frac > 0 else math.inf
        head = f"study: {100 * frac:3.0f}%|"
        tail = f"| {_si(self.n)}/{_si(self.total)} el [{_clock(elapsed)}<{_clock(eta)}]"
        cells = max(5, min(30, self.width - 1 - len(head) - len(tail) - 20))
        filled = int(cells * frac)
        line = head + "#" * filled + " " * (cells - filled) + tail
        room = self.width - 1 - len(line) - 1
        if room >= 16 and self.label:
            line += " " + _fit(self.label, room)
        line = line[: self.width - 1]
        self.stream.write("\r" + line + " " * max(0, self._last_len - len(line)))
        self.stream.flush()
        self._last_len, self._last_draw, self.shown = len(line), now, True

    def close(self) -> None:
        if self.shown:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()


class StudyProgress:
    """The progress of a sweep, weighted by elements; a ``progress=`` callback for
    :func:`fp8kit.study.sweep` (called as ``progress(done, total, label)`` after each
    combination, ``label`` starting with the tensor's name).

    Parameters
    ----------
    tensors : mapping of str to array
        The tensors of the sweep (only their shapes are read).
    combinations : int
        Formats times scalings: each tensor's elements are processed that many times.
    stream : file, default sys.stderr
        Where the bar is drawn.
    enabled : bool, optional
        True: always draw; False: never; None (default): only when ``stream`` is a
        terminal.
    delay : float, default 1.0
        Seconds before the bar appears (a short study prints none).
    use_tqdm : bool, default True
        Draw with tqdm when it can be imported; else (and when False) with a minimal bar of
        the same rules.

    Examples
    --------
    >>> import io, numpy as np
    >>> from fp8kit import study
    >>> from fp8kit.study.progress import StudyProgress
    >>> data = {"big": np.zeros((64, 64), np.float32), "small": np.ones(64, np.float32)}
    >>> bar = StudyProgress(data, 2, stream=io.StringIO(), enabled=False)
    >>> rows = study.sweep(data, ["float8_e4m3fn", "float8_e5m2"], ["tensor"], progress=bar)
    >>> bar.total, bar.done
    (8320, 8320)
    """

    def __init__(
        self,
        tensors: Mapping[str, Any],
        combinations: int,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        delay: float = 1.0,
        use_tqdm: bool = True,
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.sizes = {str(k): _size(v) for k, v in tensors.items()}
        self.total = sum(self.sizes.values()) * max(1, combinations)
        self.done = 0
        self._calls = 0
        self.enabled = _is_tty(self.stream) if enabled is None else bool(enabled)
        self._bar: Any = None
        if not self.enabled:
            return
        width = terminal_width(self.stream)
        tqdm = None
        if use_tqdm:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
        if tqdm is None:
            self._bar = _PlainBar(self.total, self.stream, width, delay)
            return
        resizable = _is_tty(self.stream) and "COLUMNS" not in os.environ
        self._bar = tqdm(
            total=self.total,
            file=self.stream,
            desc="study",
            unit="el",
            unit_scale=True,
            delay=delay,
            mininterval=0.1,
            dynamic_ncols=resizable,
            ncols=None if resizable else width - 1,
            leave=True,
            bar_format="{desc}: {percentage:3.0f}%|{bar:CELLS}| {n_fmt}/{total_fmt} el "
            "[{elapsed}<{remaining}]{postfix}".replace("CELLS", str(max(5, min(30, width - 55)))),
        )
        self._width = width

    def __call__(self, done: int, total: int, label: str, elements: int | None = None) -> None:
        """Record combinations ``done`` of ``total``; the last was ``label``
        (``"tensor format scaling"``); ``elements`` overrides the weight of the step."""
        steps = max(0, done - self._calls)
        self._calls = done
        if elements is None:
            name = label.rsplit(" ", 2)[0] if label.count(" ") >= 2 else label
            per = self.sizes.get(name)
            if per is None:  # unknown name: the average weight of a combination
                per = self.total / max(1, total)
            elements = int(per * steps)
        elements = max(0, min(elements, self.total - self.done))
        self.done += elements
        if self._bar is None:
            return
        label = printable(label)  # (a tensor name from a file: no escape sequence drawn)
        if hasattr(self._bar, "set_postfix_str"):  # tqdm
            ncols = getattr(self._bar, "ncols", None) or self._width
            room = ncols - 62
            self._bar.set_postfix_str(_fit(label, room) if room >= 16 else "", refresh=False)
            self._bar.update(elements)
        else:
            self._bar.update(elements, label)

    def close(self) -> None:
        """Finish the line (nothing when no bar was drawn)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> StudyProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _size(arr: Any) -> int:
    shape = getattr(arr, "shape", None)
    if shape is None:
        return 1
    return int(math.prod(int(n) for n in shape))
