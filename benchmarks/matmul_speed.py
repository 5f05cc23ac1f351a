#!/usr/bin/env python
"""Time fp8kit's matrix products side by side with the references, in one run.

Usage::

    python benchmarks/matmul_speed.py [--repeat R] [--json FILE]

Rows (medians of R interleaved samples after a warm-up call that compiles the kernels;
each sample after a 0.3 s pause, so that idle worker threads of the library timed before
have stopped spinning):

* ``scaled_mm`` 64 x 512 x 2048 (M x N x K) e4m3, fast and slow accumulation:
  ``fp8kit.scaled_mm`` against ``mmaemu.scaled_mm`` (profile ``hopper``, its CPU reference
  backend) and numpy's float32 ``a @ b`` of the same shape;
* the chained Hopper ``wgmma`` model (``fp8kit.matmul`` with
  ``("Hopper", "wgmma", "m64n256k32.f32.e4m3.e4m3")``) against ``mmasim``'s ``WGMMA`` on
  one warm m64n256k32 tile, per multiply-add;
* ``fp8kit.matmul`` with the non-hardware accumulators.

mmaemu and mmasim are test extras: rows whose library is missing print n/a.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import ml_dtypes
import numpy as np

import fp8kit

E4 = ml_dtypes.float8_e4m3fn


def _timer(fn, min_time=0.05):
    """Seconds per call: a loop of calls lasting at least ``min_time``."""
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt >= min_time:
            return dt / n
        n *= 2


def _median(fns: dict, repeat: int) -> dict:
    for fn in fns.values():
        fn()  # compile / warm
    samples = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            # (idle BLAS and OpenMP workers of the previous library spin for a while and
            # take the cores from the next one: 20 ms was not enough after OpenBLAS)
            time.sleep(0.3)
            samples[k].append(_timer(fn))
    return {k: statistics.median(v) for k, v in samples.items()}


def _data(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-4, 4, (m, k)))).astype(E4)
    b = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-4, 4, (k, n)))).astype(E4)
    return a, b


def scaled_mm_rows(repeat):
    m, n, k = 64, 512, 2048
    a, b = _data(m, k, n)
    fns = {}
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    fns["numpy float32 a @ b"] = lambda: a32 @ b32
    for fast in (True, False):
        tag = "fast" if fast else "slow"
        fns[f"fp8kit.scaled_mm {tag}"] = lambda f=fast: fp8kit.scaled_mm(
            a, b, 1.0, 1.0, out_dtype=np.float32, use_fast_accum=f
        )
    try:
        import mmaemu
        import torch

        ta = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
        tb = torch.from_numpy(np.ascontiguousarray(b.T).view(np.uint8)).view(torch.float8_e4m3fn)
        one = torch.tensor(1.0)
        warnings.simplefilter("ignore")
        for fast in (True, False):
            tag = "fast" if fast else "slow"
            fns[f"mmaemu.scaled_mm {tag}"] = lambda f=fast: mmaemu.scaled_mm(
                ta, tb.t(), one, one, out_dtype=torch.float32, use_fast_accum=f, profile="hopper"
            )
    except ImportError:
        pass
    t = _median(fns, repeat)
    macs = m * n * k
    rows = []
    for name, sec in t.items():
        rows.append((f"{name} ({m}x{n}x{k})", sec, macs / sec))
    return rows, t


def wgmma_rows(repeat):
    inst = fp8kit.mma.instruction("Hopper", "wgmma", "m64n256k32.f32.e4m3.e4m3")
    m, n, k = 64, 256, 4096
    a, b = _data(m, k, n, 1)
    fns = {"fp8kit.matmul wgmma chain (64x256x4096)": lambda: fp8kit.matmul(a, b, instruction=inst)}
    macs = {"fp8kit.matmul wgmma chain (64x256x4096)": m * n * k}
    try:
        import torch
        from mmasim.nv_ptx import WGMMA

        w = WGMMA("Hopper", "m64n256k32.f32.e4m3.e4m3")
        ta = torch.from_numpy(a[:, :32].copy().view(np.uint8)).view(torch.float8_e4m3fn)
        tb = torch.from_numpy(b[:32].copy().view(np.uint8)).view(torch.float8_e4m3fn)
        tc = torch.zeros(64, 256)
        fns["mmasim WGMMA one m64n256k32 tile"] = lambda: w(ta, tb, tc)
        macs["mmasim WGMMA one m64n256k32 tile"] = 64 * 256 * 32
    except ImportError:
        pass
    t = _median(fns, repeat)
    return [(name, sec, macs[name] / sec) for name, sec in t.items()], t


def accumulator_rows(repeat):
    m, n, k = 64, 512, 2048
    a, b = _data(m, k, n, 2)
    fns = {f"fp8kit.matmul {acc}": (lambda x=acc: fp8kit.matmul(a, b, instruction=x))
           for acc in ("exact", "fp32", "fp32-pairwise")}  # fmt: skip
    t = _median(fns, repeat)
    return [(f"{name} ({m}x{n}x{k})", sec, m * n * k / sec) for name, sec in t.items()], t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    print(f"fp8kit {fp8kit.__version__}, {os.cpu_count()} CPUs, threads={fp8kit.get_num_threads()}")
    rows = []
    r1, t1 = scaled_mm_rows(args.repeat)
    r2, t2 = wgmma_rows(args.repeat)
    r3, _ = accumulator_rows(args.repeat)
    rows = r1 + r2 + r3
    print("\n| call | median time | multiply-adds/s |\n|---|---:|---:|")
    for name, sec, rate in rows:
        print(f"| {name} | {sec * 1e3:.2f} ms | {rate / 1e9:.3f} G |")
    print()
    for tag in ("fast", "slow"):
        ref = t1.get(f"mmaemu.scaled_mm {tag}")
        if ref:
            ratio = ref / t1[f"fp8kit.scaled_mm {tag}"]
            print(f"scaled_mm {tag}: fp8kit / mmaemu speed = {ratio:.1f}x")
        print(
            f"scaled_mm {tag}: time / numpy float32 a @ b = "
            f"{t1[f'fp8kit.scaled_mm {tag}'] / t1['numpy float32 a @ b']:.1f}x"
        )
    if len(r2) == 2:
        print(f"wgmma chain: fp8kit / mmasim per multiply-add = {r2[0][2] / r2[1][2]:.0f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([dict(call=c, seconds=s, macs_per_s=r) for c, s, r in rows], fh, indent=1)


if __name__ == "__main__":
    main()
