#!/usr/bin/env python
"""Time fp8kit.encode on a Dask array against the same call on the numpy array.

Usage::

    python benchmarks/compare_dask.py [--size N] [--chunk C] [--repeat R] [--rounding MODE]
    python benchmarks/compare_dask.py --sweep [--repeat R]

A float32 array of N elements (default 16M) is encoded to float8_e4m3fn once as numpy
(``fp8kit.encode(x, fmt)``) and once as a Dask array of C-element chunks (default 1M,
``dask.array.from_array``) computed on the threaded scheduler
(``fp8kit.encode(d, fmt).compute(scheduler="threads")``: building the graph, encoding the
blocks, and concatenating them into one result).  Samples alternate between the two after
one untimed warm-up each (which also compiles the kernels); the medians and their ratio are
printed, and the results are checked to be bit-identical.  A third row, "dask floor", times
the same graph with a trivial numpy operation per block (``b.astype(np.uint8)``): what Dask
itself costs (tasks, and concatenating the blocks into one result).

``--sweep`` times ``fp8kit.study.sweep`` (the default 2 formats x 3 scalings) over a
4096 x 4096 float32 tensor held as numpy and as a Dask array of 512-row chunks on the
threaded scheduler, and checks that both give the same rows (counts exactly, sums to 1e-12).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import fp8kit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=16 << 20)
    ap.add_argument("--chunk", type=int, default=1 << 20)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounding", default="nearest_even")
    ap.add_argument("--sweep", action="store_true", help="time study.sweep instead of encode")
    args = ap.parse_args()
    if args.sweep:
        return sweep_main(args.repeat)
    import dask
    import dask.array as da

    fmt = "float8_e4m3fn"
    x = np.random.default_rng(0).standard_normal(args.size).astype(np.float32) * 100
    d = da.from_array(x, chunks=args.chunk)
    kw = {"rounding": args.rounding}
    if args.rounding == "stochastic":
        kw["seed"] = 1

    def run_numpy():
        return fp8kit.encode(x, fmt, **kw)

    def run_dask():
        return fp8kit.encode(d, fmt, **kw).compute(scheduler="threads")

    def run_floor():
        return d.map_blocks(lambda b: b.astype(np.uint8), dtype=np.uint8).compute(
            scheduler="threads"
        )

    assert np.array_equal(run_numpy(), run_dask())
    run_floor()
    times = {"numpy": [], "dask": [], "dask floor": []}
    for _ in range(args.repeat):
        for name, fn in (("numpy", run_numpy), ("dask", run_dask), ("dask floor", run_floor)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"encode float32 -> {fmt}, {args.size:,} elements, rounding={args.rounding}, "
        f"dask chunks of {args.chunk:,} on the threaded scheduler (dask {dask.__version__}, "
        f"{fp8kit.get_num_threads()} fp8kit threads)"
    )
    print("| call | median time | ratio |\n|---|---|---|")
    for k in times:
        print(f"| {k} | {med[k] * 1e3:.1f} ms | {med[k] / med['numpy']:.2f}x |")


def sweep_main(repeat: int) -> None:
    import dask
    import dask.array as da

    from fp8kit import study

    w = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
    d = da.from_array(w, chunks=(512, 4096))

    def run_numpy():
        return study.sweep({"w": w})

    def run_dask():
        with dask.config.set(scheduler="threads"):
            return study.sweep({"w": d})

    a, b = run_numpy(), run_dask()
    for ra, rb in zip(a, b, strict=True):
        ma, mb = ra.metrics, rb.metrics
        assert (ma.count, ma.n_saturated, ma.n_flushed) == (mb.count, mb.n_saturated, mb.n_flushed)
        assert abs(ma.sum_sq_error - mb.sum_sq_error) <= 1e-12 * ma.sum_sq_error
    times = {"numpy": [], "dask": []}
    for _ in range(repeat):
        for name, fn in (("numpy", run_numpy), ("dask", run_dask)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"study.sweep, 4096 x 4096 float32, {len(a)} rows (2 formats x 3 scalings); dask: "
        f"chunks of 512 rows on the threaded scheduler (dask {dask.__version__}, "
        f"{fp8kit.get_num_threads()} fp8kit threads)"
    )
    print("| call | median time | ratio |\n|---|---|---|")
    for k in times:
        print(f"| {k} | {med[k] * 1e3:.0f} ms | {med[k] / med['numpy']:.2f}x |")


if __name__ == "__main__":
    main()
