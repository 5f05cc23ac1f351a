"""fp8kit, gfloat and pychop rounding 4M float64 values to one P3109 format (docs/compare.md).

    python scripts/compare_speed.py [FORMAT] [REPEATS]

Prints the median and best of REPEATS timed calls (after one warm-up call) of
``fp8kit.round_to``, ``gfloat.round_ndarray`` and ``pychop.p3109_quantize`` on the same
standard-normal data scaled to the format's range, saturate=False, nearest-even, and checks
that the three agree.
"""

import sys
import time

import gfloat
import numpy as np
import pychop
from gfloat.formats import format_info_p3109

import fp8kit


def main(name: str = "p3109_k8p4se", repeats: int = 5) -> None:
    fmt = fp8kit.get_format(name)
    k, rest = name.removeprefix("p3109_k").split("p")
    k, p, signed, extended = int(k), int(rest[:-2]), rest[-2] == "s", rest[-1] == "e"
    fi = format_info_p3109(
        k,
        p,
        gfloat.Signedness.Signed if signed else gfloat.Signedness.Unsigned,
        gfloat.Domain.Extended if extended else gfloat.Domain.Finite,
    )
    pf = pychop.P3109Format(k, p, signed, "extended" if extended else "finite")
    x = np.random.default_rng(0).standard_normal(4_000_000) * (fmt.max / 8)
    runs = {
        "fp8kit": lambda: fp8kit.round_to(x, fmt, saturate=False),
        "gfloat": lambda: gfloat.round_ndarray(fi, x),
        "pychop": lambda: pychop.p3109_quantize(x, pf),
    }
    results, times = {}, {}
    for lib, run in runs.items():
        results[lib] = run()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run()
            ts.append(time.perf_counter() - t0)
        times[lib] = ts
    for lib, ts in times.items():
        same = np.array_equal(results[lib], results["fp8kit"], equal_nan=True)
        ratio = np.median(ts) / np.median(times["fp8kit"])
        print(
            f"{lib:7s} median {1e3 * np.median(ts):9.2f} ms  best {1e3 * min(ts):9.2f} ms  "
            f"{ratio:7.1f}x fp8kit  same values: {same}"
        )


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["p3109_k8p4se"]), *(int(a) for a in sys.argv[2:3]))
