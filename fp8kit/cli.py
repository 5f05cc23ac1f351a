"""The ``fp8kit`` command (also ``python -m fp8kit``)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TextIO

from . import __version__
from ._parallel import num_threads
from .formats import get_format, registered_formats

__all__ = ["main"]

PROG = "fp8kit"

_STUDY_DESCRIPTION = """\
Measure how much accuracy low-precision formats cost on your data: every floating-point
tensor of the files (or the seeded built-in demo when no file is given) is quantized through
each format with each scaling recipe (FakeConvert's fused kernel: round(x * scale) / scale,
nearest-even, saturating), and the error is measured in float64.  One table row per
(tensor, format, scaling)."""

_STUDY_EPILOG = """\
files:
  .npy (one tensor, named after the file), .npz and .safetensors (every float16, bfloat16,
  float32 and float64 tensor; others are skipped).  Several files: names get "FILE:".

scalings:
  none               scale 1
  tensor             max / amax of the tensor (amax: largest finite |x|)
  channel            max / amax per index along --channel-axis (default 0)
  block[:N]          OCP MX blocks of N (default 32) elements along --block-axis (default
                     -1), each with a power-of-two E8M0 scale 2**(floor(log2 amax) - emax)
  delayed[:LEN[:ALGO]]
                     Transformer Engine's delayed scaling: the leading axis is time; step
                     t uses max / A with A the max (ALGO=max, default) or the last
                     (ALGO=most_recent) amax of the LEN (default 16) steps before t; the
                     first step uses scale 1
  --margin and --pow2 apply to tensor, channel and delayed.

columns:
  SQNR dB   10 log10(sum x^2 / sum (q - x)^2), inf when there is no error
  RMSE      sqrt(mean((q - x)^2))
  max abs   max |q - x|;  max rel: max |q - x| / |x| over x != 0
  sat %     values beyond the format's range after scaling (clipped to +-max)
  flush %   x != 0 quantized to 0;  subn %: results in the format's subnormal range
  scale     the multiplier (a range when there are several)
  NaN and Inf inputs are counted (notes) and left out of every figure.

exit status: 0 on success, 1 for a bad file, format or scaling, 2 for a usage error.

examples:
  fp8kit study
  fp8kit study weights.npy --formats float8_e4m3fn float8_e5m2 --scaling tensor channel block:32
  fp8kit study model.safetensors --plot errors.png --json results.json"""


class ProgressBar:
    """A one-line progress bar on a stream, shown once a sweep has run for ``delay``
    seconds (immediately with ``delay=0``), and only if ``enabled``."""

    def __init__(self, stream: TextIO, enabled: bool, delay: float = 1.0, width: int = 24):
        self.stream, self.enabled, self.delay, self.width = stream, enabled, delay, width
        self.start = time.monotonic()
        self.shown = False
        self._last = 0

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        if not self.shown and time.monotonic() - self.start < self.delay:
            return
        filled = self.width * done // max(total, 1)
        line = f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {label}"
        pad = max(0, self._last - len(line))
        self.stream.write(line + " " * pad)
        self.stream.flush()
        self._last = len(line)
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid positive int: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid positive int: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Bit-exact low-precision floating point for numpy: tools.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser(
        "study",
        help="quantization-error study of tensors in files, or of a built-in demo",
        description=_STUDY_DESCRIPTION,
        epilog=_STUDY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "files", nargs="*", metavar="FILE", help=".npy, .npz or .safetensors (none: the demo)"
    )
    p.add_argument(
        "--formats", nargs="+", metavar="NAME", default=["float8_e4m3fn", "float8_e5m2"],
        help="formats to study (default: float8_e4m3fn float8_e5m2; any of: "
        + ", ".join(registered_formats()) + ", or an alias)",
    )  # fmt: skip
    p.add_argument(
        "--scaling", nargs="+", metavar="SPEC", default=["tensor", "channel", "block:32"],
        help="scaling recipes (default: tensor channel block:32; see below)",
    )  # fmt: skip
    p.add_argument("--channel-axis", type=int, default=0, metavar="AXIS",
                   help="channel axis of 'channel' (default 0)")  # fmt: skip
    p.add_argument("--block-axis", type=int, default=-1, metavar="AXIS",
                   help="axis the MX blocks run along (default -1)")  # fmt: skip
    p.add_argument("--margin", type=float, default=0.0, metavar="M",
                   help="divide amax-based scales by 2**M (default 0)")  # fmt: skip
    p.add_argument("--pow2", action="store_true",
                   help="round amax-based scales down to powers of two")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the demo data (default 0)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--csv", metavar="FILE", help="write the results as CSV")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw SQNR per format and scaling and the value histogram against "
                   "each format's grid (needs matplotlib: pip install 'fp8kit[plot]')")  # fmt: skip
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--threads", type=_positive_int, metavar="N",
                   help="threads for large tensors (default: all)")  # fmt: skip
    # streaming and Dask (issue 17, parts 2 and 4)
    p.add_argument("--chunk-budget", type=_byte_size, default=None, metavar="SIZE",
                   help="working memory of one chunk of a tensor: bytes or 64K, 16M, 1G "
                   "(default 256M); results do not depend on it")  # fmt: skip
    p.add_argument("--scheduler", metavar="NAME|ADDRESS", default=None,
                   help="study the tensors as Dask tasks: threads, processes, or the address "
                   "of a dask.distributed scheduler (tcp://host:8786); each worker reads its "
                   "own tensors (default: threads for inputs over 1 GiB when Dask is "
                   "installed, else in this process)")  # fmt: skip
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show the progress bar on stderr (default: when stderr is "
                     "a terminal and the sweep runs for more than a second)")  # fmt: skip
    bar.add_argument("--no-progress", dest="progress", action="store_false",
                     help="never show the progress bar")  # fmt: skip
    return parser


class _Failure(Exception):
    """An error reported as one line, exit status 1."""


def _load(files: list[str], seed: int):
    from .study import demo_tensors
    from .study.io import load_tensors

    if not files:
        return demo_tensors(seed), [], f"demo (seed {seed})"
    tensors, skipped = {}, []
    for f in files:
        t, s = load_tensors(f, prefix=f"{f}:" if len(files) > 1 else "")
        tensors.update(t)
        skipped += s
    return tensors, skipped, files


def _study(args: argparse.Namespace) -> int:
    from . import study
    from .study import report
    from .study.io import StudyInputError
    from .study.plot import PlotUnavailable, plot_study, require_matplotlib

    try:
        formats = [get_format(f).name for f in args.formats]
        specs = [study.parse_scaling(s).label for s in args.scaling]
        if args.plot:
            require_matplotlib()  # fail before the sweep, not after it
        tensors, skipped, source = _load(args.files, args.seed)
        if skipped:
            print(f"{PROG} study: skipped (not float16/bfloat16/float32/float64): "
                  f"{', '.join(skipped)}", file=sys.stderr)  # fmt: skip
        bar = ProgressBar(
            sys.stderr,
            enabled=sys.stderr.isatty() if args.progress is None else args.progress,
            delay=1.0 if args.progress is None else 0.0,
        )
        start = time.perf_counter()
        try:
            threads = num_threads(args.threads) if args.threads else contextlib.nullcontext()
            data, scheduler = _scheduled(args, tensors)
            with threads:
                rows = study.sweep(
                    data, formats, specs, channel_axis=args.channel_axis,
                    block_axis=args.block_axis, margin=args.margin, pow2=args.pow2,
                    progress=bar, chunk_bytes=args.chunk_budget, scheduler=scheduler,
                )  # fmt: skip
        finally:
            bar.close()
        seconds = time.perf_counter() - start
        print(report.format_table(rows, markdown=args.markdown))
        settings = dict(
            fp8kit_version=__version__, source=source, formats=formats, scalings=specs,
            channel_axis=args.channel_axis, block_axis=args.block_axis, margin=args.margin,
            pow2=args.pow2, skipped=skipped, seconds=round(seconds, 3),
        )  # fmt: skip
        if args.json:
            Path(args.json).write_text(report.to_json(rows, **settings))
        if args.csv:
            Path(args.csv).write_text(report.to_csv(rows))
        if args.plot:
            plot_study(rows, tensors, args.plot, title=f"fp8kit study: {_describe(source)}")
    except (StudyInputError, PlotUnavailable, ValueError, TypeError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    return 0


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
#: Inputs larger than this run on Dask's threaded scheduler by default (when Dask is there).
THREADS_FROM_BYTES = 2**30


def _byte_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        n = float(t[: len(t) - len(unit)])
    except ValueError:
        n = -1.0
    if not n >= 1 or n * _UNITS[unit] != int(n * _UNITS[unit]):
        raise argparse.ArgumentTypeError(
            f"expected a size such as 1048576, 64K, 256M or 1G; got {text!r}"
        )
    return int(n * _UNITS[unit])


def _scheduled(args: argparse.Namespace, tensors: dict):
    """``(data, scheduler)`` for study.sweep: with a Dask scheduler, the file tensors as
    :class:`fp8kit.study.TensorFile` references, so that each worker reads its own."""
    from .study import TensorFile

    scheduler = args.scheduler
    if scheduler is None and args.files and len(tensors) > 1:
        size = sum(t.nbytes for t in tensors.values())
        if size > THREADS_FROM_BYTES and _has_dask():
            scheduler = "threads"
    if scheduler is None or not args.files:
        return tensors, scheduler
    if not _has_dask():
        raise ValueError(f"--scheduler {scheduler}: needs Dask: pip install 'fp8kit[dask]'")
    from .study.io import load_tensors

    refs = {}
    for f in args.files:
        if Path(f).suffix.lower() == ".npz":  # not memory-mapped: its arrays travel
            continue
        prefix = f"{f}:" if len(args.files) > 1 else ""
        for key in load_tensors(f)[0]:  # headers only (memory maps)
            refs[prefix + key] = TensorFile(str(Path(f).resolve()), key)
    return {name: refs.get(name, arr) for name, arr in tensors.items()}, scheduler


def _has_dask() -> bool:
    import importlib.util

    return importlib.util.find_spec("dask") is not None


def _describe(source) -> str:
    return source if isinstance(source, str) else ", ".join(Path(s).name for s in source)


def _fail(message: str) -> int:
    print(f"{PROG} study: error: {message.splitlines()[0] if message else 'failed'}",
          file=sys.stderr)  # fmt: skip
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the ``fp8kit`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit
    status (argparse exits with 2 on usage errors).

    Examples
    --------
    >>> from fp8kit.cli import main
    >>> main(["study", "--formats", "float8_e4m3fn", "--scaling", "tensor", "--markdown"])
    ... # doctest: +ELLIPSIS
    | tensor | format | scaling | SQNR dB | ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return _study(args)
    except KeyboardInterrupt:
        print(f"\n{PROG} study: interrupted", file=sys.stderr)
        return 130
