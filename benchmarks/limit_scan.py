#!/usr/bin/env python
"""Every registered format against the streaming limit: encode from float32, bfloat16 and
float16, decode to float32; 16M elements, measured as ``compare.py`` measures (a 20 ms
pause, an untimed call, samples of the two interleaved).  Prints the conversions below a
fraction of the limit and the counts.

    python benchmarks/limit_scan.py [--threads 1] [--repeat 5] [--below 0.9] [--match p3109]
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from compare import Impl, _limit_impl, measure

import fp8kit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--size", type=int, default=16_000_000)
    ap.add_argument("--below", type=float, default=0.9)
    ap.add_argument("--match", default="", help="only the formats whose name holds this")
    args = ap.parse_args()
    fp8kit.set_num_threads(args.threads)
    n = args.size
    x32 = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    sources = {"float32": x32, "bfloat16": x32.astype(ml_dtypes.bfloat16),
               "float16": x32.astype(np.float16)}  # fmt: skip
    results = []
    for name, fmt in fp8kit.formats.registered_formats().items():
        if args.match not in name:
            continue
        code_dtype = np.dtype(fmt.code_dtype)
        for src, x in sources.items():
            if src == name:
                continue
            out = np.empty(n, code_dtype)
            run = Impl(
                "fp8kit", lambda x=x, o=out, f=fmt: fp8kit.encode(x, f, out=o), lambda o=out: o
            )
            rows = measure("scan", [run, _limit_impl(x, code_dtype, "limit")], n, 1, args.repeat)
            results.append((rows[1].seconds / rows[0].seconds, f"encode {src} -> {name}"))
        codes = fp8kit.encode(x32, fmt)
        out = np.empty(n, np.float32)
        run = Impl("fp8kit", lambda c=codes, o=out, f=fmt: fp8kit.decode(c, f, out=o),
                   lambda o=out: o.view(np.uint32))  # fmt: skip
        rows = measure("scan", [run, _limit_impl(codes, np.float32, "limit")], n, 1, args.repeat)
        results.append((rows[1].seconds / rows[0].seconds, f"decode {name} -> float32"))
    results.sort()
    low = [(f, c) for f, c in results if f < args.below]
    print(f"{len(results)} conversions, {len(results) - len(low)} at {args.below} of the "
          f"streaming limit or above ({args.threads} thread(s), {n:,} elements)")  # fmt: skip
    for fraction, case in low:
        print(f"{fraction:5.2f}  {case}")


if __name__ == "__main__":
    main()
