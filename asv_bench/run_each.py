"""Run the asv suite one benchmark at a time, so that each result is saved as it is measured.

``asv run`` writes its results file once, when every benchmark of the commit has run: a run
stopped halfway (Ctrl-C, a closed laptop, a time limit) leaves nothing to publish or
compare.  This script calls ``asv run`` once per benchmark, each call saving its result,
and skips the benchmarks that already have one (``--skip-existing-successful``), so a
stopped run resumes where it stopped::

    cd asv_bench
    python run_each.py --quick                 # the default suite, each result kept
    python run_each.py --bench bench_codec     # the benchmarks whose name matches
    python run_each.py -- --show-stderr        # more options for asv run after --

It benchmarks the Python it runs under (``--python=same``) at the checked-out commit
(``--set-commit-hash``: asv saves no results of an existing environment without it).
``FP8KIT_ASV_FULL=1`` selects the full parameter grids, as for ``asv run``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PREFIXES = ("time_", "timeraw_", "track_", "mem_", "peakmem_")


def benchmark_names(package: str = "benchmarks") -> list[str]:
    """asv's names of the suite's benchmarks (``module.Class.method`` or ``module.function``),
    in file order."""
    sys.path.insert(0, str(HERE))
    names = []
    pkg = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for attr, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj):
                names += [f"{info.name}.{attr}.{m}" for m in vars(obj) if m.startswith(PREFIXES)]
            elif inspect.isfunction(obj) and attr.startswith(PREFIXES):
                names.append(f"{info.name}.{attr}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one call per benchmark (asv --quick)")
    parser.add_argument("--bench", default="", metavar="REGEX",
                        help="only the benchmarks whose name matches")  # fmt: skip
    parser.add_argument("asv_args", nargs="*", help="further arguments of asv run (after --)")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=HERE, check=True, capture_output=True, text=True
    ).stdout.strip()
    names = [n for n in benchmark_names() if re.search(args.bench, n)]
    if not names:
        print(f"run_each: no benchmark matches {args.bench!r}", file=sys.stderr)
        return 2
    start, failed = time.monotonic(), []
    for i, name in enumerate(names, 1):
        print(f"run_each: [{i}/{len(names)}] {name}", flush=True)
        cmd = ["asv", "run", "--python=same", "--set-commit-hash", commit,
               "--skip-existing-successful", "--bench", f"^{re.escape(name)}($|\\()"]  # fmt: skip
        # (asv matches a parametrized benchmark's regex against "name(params)" too)
        if args.quick:
            cmd.append("--quick")
        try:
            if subprocess.run(cmd + args.asv_args, cwd=HERE).returncode:
                failed.append(name)
        except KeyboardInterrupt:
            print(f"\nrun_each: stopped at {name}; the {i - 1} before it are saved (run again "
                  "to resume)", file=sys.stderr)  # fmt: skip
            return 130
    minutes = (time.monotonic() - start) / 60
    print(f"run_each: {len(names)} benchmarks in {minutes:.1f} min; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
