"""Time a quantization-error sweep: 4 float8 formats x 3 scalings over 16M float32 values.

    python benchmarks/study_sweep.py [--repeat 7] [--threads N] [--shape 4096 4096]

Prints the median wall time of the whole sweep (after one warm-up sweep that compiles the
kernels) and, for one combination, of its parts: amax, FakeConvert, metrics.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import fp8kit
from fp8kit import study
from fp8kit.study.metrics import metrics_of
from fp8kit.study.scaling import group_amax

FORMATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SCALINGS = ["tensor", "channel", "block:32"]


def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--shape", type=int, nargs="+", default=[4096, 4096])
    args = ap.parse_args()
    x = np.random.default_rng(0).standard_normal(tuple(args.shape)).astype(np.float32)
    threads = args.threads or fp8kit.get_num_threads()
    with fp8kit.num_threads(threads):
        t0 = time.perf_counter()
        study.sweep(x, FORMATS, SCALINGS)
        first = time.perf_counter() - t0
        med, best = median_time(lambda: study.sweep(x, FORMATS, SCALINGS), args.repeat)
        fmt = fp8kit.get_format("float8_e4m3fn")
        s = study.scale_for(x, fmt)
        q = np.empty_like(x)
        parts = {
            "amax (per tensor)": lambda: group_amax(x, "tensor"),
            "amax (MX blocks of 32)": lambda: group_amax(x, "block", 1, 32),
            "fake_convert": lambda: fp8kit.fake_convert(x, s, destination_type=fmt, out=q),
            "metrics": lambda: metrics_of(x, q, np.asarray(s, np.float64), fmt),
        }
        part_times = {k: median_time(f, args.repeat)[0] for k, f in parts.items()}
    n = x.size
    print(f"{len(FORMATS)} formats x {len(SCALINGS)} scalings over {n:,} float32 values, "
          f"{threads} threads, {args.repeat} repeats")  # fmt: skip
    print(f"first sweep (compiles or loads kernels): {first:.2f} s")
    print(f"sweep: median {med:.3f} s, best {best:.3f} s")
    for k, v in part_times.items():
        print(f"  {k:24s} {v * 1e3:8.1f} ms  ({n / v / 1e9:.2f} G values/s)")


if __name__ == "__main__":
    main()
