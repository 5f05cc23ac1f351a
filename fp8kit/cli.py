"""The ``fp8kit`` command (also ``python -m fp8kit``)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from . import __version__
from ._parallel import num_threads
from .formats import _valid_names, get_format

__all__ = ["main"]

PROG = "fp8kit"

_STUDY_DESCRIPTION = """\
Measure how much accuracy low-precision formats cost on your data: every floating-point
tensor of the files (or the seeded built-in demo when no file is given) is quantized through
each format with each scaling recipe (FakeConvert's fused kernel: round(x * scale) / scale,
nearest-even, saturating), and the error is measured in float64.  One table row per
(tensor, format, scaling)."""

_STUDY_EPILOG = """\
inputs (any mix):
  .npy (one tensor, named after the file; bfloat16/float8 written by np.save of an ml_dtypes
  array too), .npz and .safetensors (every float16, bfloat16, float32, float64 and float8
  tensor; others are skipped), a sharded checkpoint's *.safetensors.index.json, or a
  directory (its index files, else its .safetensors, .npz and .npy files).  Tensors keep
  their checkpoint names (the file is a column of --json/--csv), in the checkpoint's order
  with layer numbers in numeric order (layers.8 before layers.10); a name found in two
  inputs gets "FILE:" in front.  float8 tensors (F8_E4M3, F8_E5M2) are decoded exactly and
  multiplied by their scale tensor NAME_scale_inv or NAME_scale (e.g. weight_scale_inv,
  weight_scale beside weight) when there is one; scale tensors are not studied.
  --include/--exclude PATTERN (repeatable) filter tensor names with shell globs.

scalings:
  none               scale 1
  tensor             max / amax of the tensor (amax: largest finite |x|)
  channel            max / amax per index along --channel-axis (default 0)
  block[:N]          OCP MX blocks of N (default 32) elements along --block-axis (default
                     -1), each with a power-of-two E8M0 scale 2**(floor(log2 amax) - emax)
  block:N:MODE       MX blocks under torchao's rule MODE: floor, ceil, even or rceil
                     (rceil: cuBLAS's and Transformer Engine's 2**ceil(log2(amax / max)))
  tile[:N|:RxC][:pow2]
                     max / amax per tile of N x N (default 128) or R x C (tile:1x128)
                     over the last two axes (--block-axis: the columns); pow2: power-of-two
                     scales (Transformer Engine's Float8BlockScaling, DeepSeek-V3's tiles)
  nvfp4[:1x16|:16x16][:single]
                     NVFP4: E4M3 block scales per 16 values (or 16 x 16 tile) times a
                     float32 tensor scale amax / (448 * max), as torchao; single: the
                     block scales alone
  delayed[:LEN[:ALGO]]
                     Transformer Engine's delayed scaling: the leading axis is time; step
                     t uses max / A with A the max (ALGO=max, default) or the last
                     (ALGO=most_recent) amax of the LEN (default 16) steps before t; the
                     first step uses scale 1
  --margin and --pow2 apply to tensor, channel, tile and delayed.  Formats wider than 8
  bits (bfloat16, float16) are the unscaled baseline under every scaling (--scale-16bit
  scales them too).

columns:
  SQNR dB   10 log10(sum x^2 / sum (q - x)^2), inf when there is no error
  RMSE      sqrt(mean((q - x)^2))
  max abs   max |q - x|;  max rel: max |q - x| / |x| over x != 0
  sat %     values beyond the format's range after scaling (clipped to +-max)
  flush %   x != 0 quantized to 0;  subn %: results in the format's subnormal range
  crest     the tensor's crest factor max |x| / rms(x); grp crest (--crest): the mean
            crest factor of the groups sharing a scale (blocks, tiles, channels)
  scale     the multiplier (a range when there are several)
  NaN and Inf inputs are counted (notes) and left out of every figure.

summary:
  The table ends with one line per format and scaling with every tensor pooled: SQNR
  10 log10(sum x^2 / sum (q - x)^2) over all elements of all tensors, the shares of
  saturated, flushed and subnormal values among all elements, and the worst tensor (lowest
  SQNR).  --top N prints the N worst tensors of each format and scaling instead of every
  row.  --json has the summary under "summary"; --csv has its lines after the rows, marked
  summary in the first column, kind.

GEMM outputs (--activations ACTS):
  Each 2-D weight w (out_features, K) is also multiplied by its inputs x (tokens, K) as a
  quantized layer computes y = x @ w.T: w and x quantized to each format with each scaling
  (channel: per output channel of w and per token of x; block:N: MX blocks along K; delayed
  does not apply), multiplied by fp8kit.matmul under each accumulator.  One row per (layer,
  format, scaling, accumulator): SQNR, RMSE and max rel of y against the float64 product of
  the original values, and (acc) against the exact product of the quantized values: the
  accumulator's own error.  Then the layers pooled per format, scaling and accumulator.
  ACTS: a .npy, .npz or .safetensors file whose tensors are named after the weights
  (shape (tokens, K) or (..., K); a file of one tensor pairs with the only 2-D weight), or
  synthetic:N (N seeded Gaussian tokens per weight with a few outlier channels, --seed).
  Every 2-D weight needs samples (leave others out with --exclude).
  --accumulators NAME...: exact, fp32, fp32-pairwise, hopper-fast, hopper-promote<N>, ada,
  ada-promote<N>, blackwell, blackwell-promote<N>, blackwell-mx (default: hopper-fast
  hopper-promote128 exact).  hopper-fast is Hopper's wgmma chained along K (fast
  accumulation); -promote<N> adds its partial sums into fp32 every N elements of K
  (DeepSeek-V3, cuBLAS's slow accumulation); MX blocks need promotion every N dividing the
  block, or blackwell-mx (block:32): combinations an accumulator cannot compute are
  skipped with a note on stderr.  --json has the rows under "gemm", --csv as lines of
  kind gemm and gemm-summary, --plot adds a panel.

outputs:
  --json, --csv and --plot are checked before the study starts (the directory exists and is
  writable; no output is one of the input files) and written only when all of them can be:
  each to a temporary file beside it, then renamed into place, so that a failure (a full
  disk) leaves every existing file as it was and no partial file behind.

exit status: 0 on success, 1 for a bad file, format, scaling or output, 2 for a usage
error, 130 when interrupted (Ctrl-C).

examples:
  fp8kit study
  fp8kit study path/to/checkpoint/ --exclude '*norm*' --csv results.csv
  fp8kit study weights.npy --formats float8_e4m3fn float8_e5m2 --scaling tensor channel block:32
  fp8kit study model.safetensors --top 5 --plot report.pdf --json results.json
  fp8kit study model.safetensors --activations synthetic:64 --scaling tensor channel
  fp8kit study model.safetensors --activations inputs.npz --accumulators hopper-fast ada exact"""


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
        "files", nargs="*", metavar="PATH",
        help=".npy, .npz, .safetensors, *.safetensors.index.json or a directory (none: the demo)",
    )  # fmt: skip
    p.add_argument("--include", action="append", default=[], metavar="PATTERN",
                   help="study only tensors whose name matches this glob (repeatable)")  # fmt: skip
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="leave out tensors whose name matches this glob (repeatable)")  # fmt: skip
    p.add_argument(
        "--formats", nargs="+", metavar="NAME", default=["float8_e4m3fn", "float8_e5m2"],
        help="formats to study (default: float8_e4m3fn float8_e5m2; any of: "
        + _valid_names() + ", or an alias)",
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
    p.add_argument("--scale-16bit", action="store_true",
                   help="scale formats wider than 8 bits too (default: unscaled)")  # fmt: skip
    p.add_argument("--crest", action="store_true",
                   help="add the mean crest factor of each scaling's groups")  # fmt: skip
    p.add_argument("--group-by", choices=("role", "layer"), default=None,
                   help="after the summary, the summary per role (the tensor name without "
                   "its layer number: q_proj, mlp.up_proj, ...) or per layer")  # fmt: skip
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the demo data and of synthetic:N (default 0)")  # fmt: skip
    p.add_argument("--activations", metavar="ACTS",
                   help="also measure each 2-D weight's GEMM output y = x @ w.T with these "
                   "inputs: a .npy, .npz or .safetensors file of samples (tokens, K) named "
                   "after the weights, or synthetic:N (see below)")  # fmt: skip
    p.add_argument("--accumulators", nargs="+", metavar="NAME", default=None,
                   help="accumulators of the GEMMs with --activations (default: hopper-fast "
                   "hopper-promote128 exact; see below)")  # fmt: skip
    # output: table, summary, files, figure, progress
    p.add_argument("--json", metavar="FILE",
                   help="write every row and the summary as JSON")  # fmt: skip
    p.add_argument("--csv", metavar="FILE",
                   help="write every row, then the summary lines, as CSV (column 'kind': "
                   "tensor or summary)")  # fmt: skip
    p.add_argument("--plot", metavar="FILE",
                   help="draw the study figure: .png (200 dpi), .pdf or .svg (needs "
                   "matplotlib: pip install matplotlib)")  # fmt: skip
    p.add_argument("--top", type=_positive_int, metavar="N",
                   help="print only the N tensors of lowest SQNR of each format and scaling "
                   "(the files keep every row)")  # fmt: skip
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--threads", type=_positive_int, metavar="N",
                   help="threads for large tensors (default: all)")  # fmt: skip
    # streaming and Dask (issue 17, parts 2 and 4)
    p.add_argument("--chunk-budget", type=_byte_size, default=None, metavar="SIZE",
                   help="working memory of one chunk of a tensor: bytes or 64K, 16M, 1G "
                   "(default 256M); results do not depend on it")  # fmt: skip
    p.add_argument("--scheduler", metavar="NAME|ADDRESS", default=None,
                   help="study the tensors as Dask tasks: threads, processes, sync, or the "
                   "address of a dask.distributed scheduler (tcp://host:8786); each worker "
                   "reads its own tensors; none: in this process, without Dask (default: "
                   "threads for inputs over 1 GiB when Dask is installed, else none)")  # fmt: skip
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show the progress bar on stderr (default: when stderr is "
                     "a terminal and the study runs for more than a second)")  # fmt: skip
    bar.add_argument("--no-progress", dest="progress", action="store_false",
                     help="never show the progress bar")  # fmt: skip
    return parser


class _Failure(Exception):
    """An error reported as one line, exit status 1."""


def _load(args: argparse.Namespace):
    """The tensors, a StudyInputs (None for the demo) and a description of the source."""
    from .study import demo_tensors
    from .study.io import load_inputs

    if not args.files:
        if args.include or args.exclude:
            raise _Failure("--include/--exclude filter the tensors of files; none given")
        return demo_tensors(args.seed), None, f"demo (seed {args.seed})"
    inputs = load_inputs(args.files, include=args.include, exclude=args.exclude)
    return inputs.tensors, inputs, args.files


def _skipped_line(skipped: dict[str, str]) -> str:
    """'skipped 5 tensors: ids (int64); 4 scale tensors (a_scale, b_scale, ...)'."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in skipped.items():
        by_reason.setdefault(reason, []).append(name)
    parts = []
    for reason, names in by_reason.items():
        what = {"scale": "scale tensors", "excluded": "excluded",
                "not included": "not included"}.get(reason, reason)  # fmt: skip
        shown = ", ".join(_shown(n) for n in names[:3]) + (", ..." if len(names) > 3 else "")
        parts.append(f"{len(names)} {what} ({shown})")
    n = len(skipped)
    return f"skipped {n} tensor{'s' if n != 1 else ''}: " + "; ".join(parts)


def _shown(name: str, width: int = 60) -> str:
    """A name from a file as a message shows it: escaped, long ones cut in the middle."""
    from .study._text import elide, printable

    return elide(printable(name), width)


# ----------------------------------------------------------------------------- outputs
@dataclasses.dataclass
class _Output:
    option: str  # "--json", "--csv", "--plot"
    path: str


class _Outputs:
    """The files ``--json``, ``--csv`` and ``--plot`` name: checked before the study (their
    directory exists and is writable, none is an input), then written all or none.

    Each is written to a temporary file in its own directory, and only when every one has
    been written completely are they renamed into place (:func:`os.replace`, atomic within
    a directory): a full disk or any other failure leaves the existing files as they were,
    no partial file, and no temporary file."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.items = [
            _Output(option, os.fspath(path))
            for option, path in (("--json", args.json), ("--csv", args.csv), ("--plot", args.plot))
            if path is not None
        ]

    def check_places(self) -> None:
        """Each output's directory exists and is writable, the output is no directory,
        and no two outputs are the same file."""
        seen: dict[str, str] = {}
        for o in self.items:
            where = f"{o.option} {o.path}"
            if not o.path:
                raise _Failure(f"{o.option}: empty file name")
            if os.path.isdir(o.path):
                raise _Failure(f"{where}: is a directory; give a file name")
            parent = os.path.dirname(os.path.abspath(o.path))
            if not os.path.isdir(parent):
                raise _Failure(f"{where}: directory {parent} does not exist")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise _Failure(f"{where}: directory {parent} is not writable")
            if os.path.exists(o.path) and not os.access(o.path, os.W_OK):
                raise _Failure(f"{where}: the file is not writable")
            key = os.path.realpath(o.path)
            if key in seen:
                raise _Failure(f"{where}: also given as {seen[key]}; give each output its own file")
            seen[key] = where

    def check_inputs(self, sources: Sequence[str]) -> None:
        """No output is one of the files the study reads (writing it would destroy the
        input, and a memory map of it would be read while it is truncated)."""
        for o in self.items:
            if not os.path.exists(o.path):
                continue
            for src in sources:
                with contextlib.suppress(OSError):
                    if os.path.samefile(o.path, src):
                        raise _Failure(
                            f"{o.option} {o.path}: is the input {src}; writing it would destroy "
                            "the input: give another file name"
                        )

    def write(self, writers: dict[str, Callable[[int, str], None]]) -> None:
        """Write every output: ``writers[option](fd, temporary path)`` writes one (to the
        descriptor, or by the path, which has the output's extension); then all are renamed
        into place.  On any failure every temporary file is removed and nothing is
        replaced."""
        mask = os.umask(0)
        os.umask(mask)
        temps: list[tuple[str, str]] = []
        try:
            for o in self.items:
                try:
                    self._write_one(o, writers[o.option], mask, temps)
                except OSError as exc:  # (the message names the output, not the temporary)
                    raise _Failure(f"{o.option} {o.path}: {exc.strerror or exc}") from None
            for tmp, path in temps:
                os.replace(tmp, path)
        except BaseException:
            for tmp, _ in temps:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise

    @staticmethod
    def _write_one(o: _Output, writer, mask: int, temps: list[tuple[str, str]]) -> None:
        """One output into a temporary file beside its file (recorded in ``temps``)."""
        # (through a symlink to its file, as a plain open writes: the link stays)
        target = os.path.realpath(o.path)
        directory, name = os.path.split(target)
        suffix = os.path.splitext(name)[1]
        # (hidden, and short enough for any file system: the name is cut)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{name[:64]}.", suffix=f".tmp{suffix[:16]}", dir=directory
        )
        temps.append((tmp, target))
        try:
            # (the mode a plain open would give: an existing file's, else the umask's)
            try:
                mode = os.stat(target).st_mode & 0o7777
            except OSError:
                mode = 0o666 & ~mask
            if hasattr(os, "fchmod"):  # (POSIX)
                os.fchmod(fd, mode)
            writer(fd, tmp)
            os.fsync(fd)  # (a full disk may only show here, or at close)
        finally:
            os.close(fd)


def _write_text(text: str) -> Callable[[int, str], None]:
    def write(fd: int, tmp: str) -> None:
        view = memoryview(text.encode("utf-8"))
        while view:
            n = os.write(fd, view)
            if n <= 0:  # (os.write raises on errors; 0 bytes written is one too)
                raise OSError(errno.EIO, "write wrote nothing", tmp)
            view = view[n:]

    return write


def _plot_writer(plot_study, rows: list, tensors: dict, gemm_rows, source):
    """The writer of the figure, with names as the figure shows them (escaped, elided)."""
    from .study._text import TABLE_NAME_WIDTH

    names = {n: _shown(n, TABLE_NAME_WIDTH) for n in tensors}
    if any(k != v for k, v in names.items()):
        rows = [dataclasses.replace(r, tensor=names.get(r.tensor, r.tensor)) for r in rows]
        tensors = {names[n]: t for n, t in tensors.items()}
    if gemm_rows:
        gemm_rows = [
            dataclasses.replace(g, tensor=names.get(g.tensor, g.tensor)) for g in gemm_rows
        ]
    title = f"fp8kit study: {_shown(_describe(source), 200)}"

    def draw(fd: int, tmp: str) -> None:
        plot_study(rows, tensors, tmp, title=title, gemm=gemm_rows or None)

    return draw


# ----------------------------------------------------------------------------- the study
def _study(args: argparse.Namespace) -> int:
    from . import study
    from .study import report
    from .study.gemm import summarize_gemm
    from .study.io import StudyInputError
    from .study.plot import PlotUnavailable, check_plot_path, plot_study, require_matplotlib
    from .study.progress import StudyProgress

    try:
        formats = [get_format(f).name for f in args.formats]
        specs = [study.parse_scaling(s).label for s in args.scaling]
        _check_scheduler(args.scheduler)
        outputs = _Outputs(args)
        if args.plot:
            check_plot_path(args.plot)  # fail before the sweep, not after it
            try:
                require_matplotlib()
            except PlotUnavailable:
                raise _Failure(PLOT_NEEDS) from None
        outputs.check_places()
        outputs.check_inputs([f for f in args.files if os.path.isfile(f)])
        accumulators = _accumulators(args)
        tensors, inputs, source = _load(args)
        sources = list(inputs.sources) if inputs is not None else []
        if args.activations is not None and not args.activations.startswith("synthetic"):
            sources.append(args.activations)
        outputs.check_inputs(sources)  # (the shards of an index, the files of a directory)
        skipped = inputs.skipped if inputs is not None else {}
        if skipped:
            print(f"{PROG} study: {_skipped_line(skipped)}", file=sys.stderr)
        acts = None
        if args.activations is not None:  # read (or drawn) before the sweep: errors first
            from .study.io import load_activations

            acts = load_activations(args.activations, tensors, seed=args.seed)
        data, scheduler = _scheduled(args, tensors, inputs)
        bar = StudyProgress(
            tensors, len(formats) * len(specs), stream=sys.stderr, enabled=args.progress,
            delay=1.0 if args.progress is None else 0.0,
        )  # fmt: skip
        start = time.perf_counter()
        try:
            from ._dask import interruptible

            threads = num_threads(args.threads) if args.threads else contextlib.nullcontext()
            notice = _compile_notice(sys.stderr) if bar.enabled else contextlib.nullcontext()
            with threads, notice, interruptible(scheduler):
                rows = study.sweep(
                    data, formats, specs, channel_axis=args.channel_axis,
                    block_axis=args.block_axis, margin=args.margin, pow2=args.pow2,
                    progress=bar, chunk_bytes=args.chunk_budget, scheduler=scheduler,
                    scale_wide=args.scale_16bit, crest=args.crest,
                )  # fmt: skip
        finally:
            bar.close()
        gemm_rows = gemm_skipped = None
        if acts is not None:
            from .study.gemm import gemm_sweep

            layers = {name: (tensors[name], x) for name, x in acts.items()}
            again = num_threads(args.threads) if args.threads else contextlib.nullcontext()
            # (the GEMMs take none, tensor, channel and OCP MX blocks: the others are skipped)
            gemm_specs = [s for s in specs if _gemm_takes(s)]
            with again:
                gemm_rows, gemm_skipped = gemm_sweep(
                    layers, formats, gemm_specs, accumulators, margin=args.margin,
                    pow2=args.pow2,
                )  # fmt: skip
            gemm_skipped = [f"scaling {s}: not measured for GEMM outputs yet"
                            for s in specs if not _gemm_takes(s)] + gemm_skipped  # fmt: skip
            for line in gemm_skipped:
                print(f"{PROG} study: GEMM skipped: {_shown(line, 1000)}", file=sys.stderr)
        seconds = time.perf_counter() - start
        print(report.format_report(rows, top=args.top, markdown=args.markdown,
                                   group_by=args.group_by))  # fmt: skip
        if gemm_rows:
            print()
            print(report.format_gemm_report(gemm_rows, top=args.top, markdown=args.markdown))
        elif gemm_rows is not None:
            print(f"{PROG} study: no GEMM rows: every combination was skipped", file=sys.stderr)
        settings = dict(
            fp8kit_version=__version__, source=source, formats=formats, scalings=specs,
            channel_axis=args.channel_axis, block_axis=args.block_axis, margin=args.margin,
            pow2=args.pow2, scale_16bit=args.scale_16bit, crest=args.crest,
            include=args.include, exclude=args.exclude,
            skipped=list(skipped), skip_reasons=skipped,
            scales=inputs.scales if inputs is not None else {},
            float8_dtypes={k: v.source_dtype for k, v in tensors.items()
                           if hasattr(v, "source_dtype")},
            seconds=round(seconds, 3),
        )  # fmt: skip
        if gemm_rows is not None:
            settings.update(activations=args.activations, accumulators=accumulators)
            settings["gemm"] = dict(
                rows=report.gemm_records(gemm_rows),
                summary=[g.as_dict() for g in summarize_gemm(gemm_rows)],
                skipped=gemm_skipped,
            )
        if args.group_by is not None:
            settings["summary_by"] = dict(
                by=args.group_by, rows=report.records(report.summarize(rows, by=args.group_by))
            )
        files = inputs.files if inputs is not None else None
        writers: dict[str, Callable[[int, str], None]] = {}
        if args.json:
            writers["--json"] = _write_text(report.to_json(rows, files=files, **settings))
        if args.csv:
            writers["--csv"] = _write_text(report.to_csv(rows, files=files, gemm=gemm_rows))
        if args.plot:
            writers["--plot"] = _plot_writer(plot_study, rows, tensors, gemm_rows, source)
        outputs.write(writers)
    except (_Failure, StudyInputError, PlotUnavailable, ValueError, TypeError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        where = "" if exc.filename is None else os.fsdecode(exc.filename)
        return _fail(f"{where}: {exc.strerror or exc}".lstrip(": "))
    return 0


#: What --plot says when matplotlib is missing (an install command that works anywhere:
#: fp8kit itself is installed from its clone, on no package index).
PLOT_NEEDS = "plotting needs matplotlib: pip install matplotlib"
#: What a Dask scheduler says when Dask is missing.
DASK_NEEDS = "needs Dask: pip install 'dask[array]' distributed"
_LOCAL_SCHEDULERS = ("none", "threads", "processes", "sync", "synchronous", "single-threaded")


def _check_scheduler(name: str | None) -> None:
    """--scheduler: a local scheduler's name or a dask.distributed address, and Dask there
    for any but ``none`` (checked before the inputs are read)."""
    if name is None or name == "none":
        return
    if name not in _LOCAL_SCHEDULERS and ":" not in name:
        raise _Failure(
            f"--scheduler {_shown(name)!r}: expected one of {', '.join(_LOCAL_SCHEDULERS)}, "
            "or the address of a dask.distributed scheduler (tcp://host:8786)"
        )
    if not _has_dask():
        raise _Failure(f"--scheduler {name}: {DASK_NEEDS}")


def _gemm_takes(spec: str) -> bool:
    """Whether the GEMM-output study takes a scaling: not delayed (skipped there, with its
    reason) nor tiles, NVFP4 or the torchao MX rules, which it does not model yet."""
    from .study import parse_scaling

    s = parse_scaling(spec)
    return s.kind not in ("tile", "nvfp4") and not (s.kind == "block" and s.scale_mode != "ocp")


def _accumulators(args: argparse.Namespace) -> list[str] | None:
    """The checked accumulator names of --activations (None without it)."""
    if args.activations is None:
        if args.accumulators is not None:
            raise _Failure("--accumulators applies to the GEMMs of --activations; none given")
        return None
    from .study.gemm import DEFAULT_ACCUMULATORS, parse_accumulator

    names = list(args.accumulators or DEFAULT_ACCUMULATORS)
    for name in names:
        parse_accumulator(name, "--accumulators")
    return names


COMPILE_NOTICE = "compiling kernels (first run only)..."


@contextlib.contextmanager
def _compile_notice(stream: TextIO):
    """Say once on ``stream`` that kernels are being compiled, when the first kernel of the
    block is not in Numba's disk cache (a cold cache: a first run compiles for seconds; a
    kernel loaded from the cache triggers no compile event; native kernels, see
    :mod:`fp8kit._kernels.native`, announce theirs as another event).  Like the progress bar, only
    where stderr is a terminal or ``--progress`` is given: logs and pipes stay clean."""
    from numba.core import event

    said = False

    class Notice(event.Listener):
        def on_start(self, ev):
            nonlocal said
            if not said:
                said = True
                print(f"{PROG}: {COMPILE_NOTICE}", file=stream, flush=True)

        def on_end(self, ev):
            pass

    from ._kernels.native import COMPILE_EVENT  # (native kernels' compiles)

    notice = Notice()
    with event.install_listener("numba:compile", notice):
        with event.install_listener(COMPILE_EVENT, notice):
            yield


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


def _scheduled(args: argparse.Namespace, tensors: dict, inputs):
    """``(data, scheduler)`` for study.sweep: with a Dask scheduler, the memory-mapped file
    tensors as :class:`fp8kit.study.TensorFile` references, so that each worker reads its
    own (float8 tensors with their scales, and ``.npz`` arrays, which are not memory-mapped,
    travel as they are)."""
    from .study import TensorFile

    scheduler = args.scheduler
    if scheduler == "none":  # (in this process, whatever the size)
        return tensors, None
    if scheduler is None and inputs is not None and len(tensors) > 1:
        size = sum(math.prod(t.shape) * t.dtype.itemsize for t in tensors.values())
        if size > THREADS_FROM_BYTES and _has_dask():
            scheduler = "threads"
    if scheduler is None or inputs is None:
        return tensors, scheduler
    from .study.io import load_tensors

    keys: dict[str, set] = {}  # file -> the names load_tensors gives its tensors
    data = {}
    for name, arr in tensors.items():
        f = inputs.files.get(name, "")
        data[name] = arr
        if not isinstance(arr, np.ndarray) or Path(f).suffix.lower() == ".npz":
            continue
        if f not in keys:
            keys[f] = set(load_tensors(f)[0])  # headers only (memory maps)
        key = name.removeprefix(f"{f}:")
        if key in keys[f]:
            data[name] = TensorFile(str(Path(f).resolve()), key)
    return data, scheduler


def _has_dask() -> bool:
    import importlib.util

    return importlib.util.find_spec("dask") is not None


def _describe(source) -> str:
    return source if isinstance(source, str) else ", ".join(Path(s).name for s in source)


def _fail(message: str) -> int:
    # one line, escaped: messages quote names from files (a newline or an escape sequence
    # in a name must not reach the terminal)
    text = _shown(message.strip(), 2000) if message.strip() else "failed"
    print(f"{PROG} study: error: {text}", file=sys.stderr)
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
        if argv is None and "fp8kit._dask" in sys.modules:
            from ._dask import busy_threads

            if busy_threads():
                _exit_now(130)
        return 130


def _exit_now(status: int) -> None:
    """End the process at once (the command's own run, after Ctrl-C, with tasks still
    running on Dask's threads): a thread cannot be stopped, and the interpreter would wait
    for them at exit (for minutes on a large tensor).  Outputs were written or removed
    before."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
