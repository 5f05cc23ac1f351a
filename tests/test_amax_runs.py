"""The runs' amax kernel (fp8kit._kernels.metrics.amax_runs_kernel, the scales of the
study's channel and block recipes and mx_scales): the largest finite |x| of each run as
bits and whether the run holds a NaN or an Inf, a Numba loop over each run
(fp8kit._kernels.metrics.run_amax) that LLVM vectorizes.  Against numpy, for every data
dtype it takes, run lengths around the vector widths (16 float32, 8 float64, 32 bfloat16
lanes), NaN and Inf in whole blocks and in the vector loop's remainder, runs of nothing
but NaN and Inf."""

import ml_dtypes
import numpy as np
import pytest

from fp8kit import _parallel
from fp8kit._kernels.metrics import amax_runs_kernel

DTYPES = [
    (np.dtype(np.float32), np.uint32),
    (np.dtype(np.float64), np.uint64),
    (np.dtype(ml_dtypes.bfloat16), np.uint16),
]


def reference(x, length, run):
    rows = x.size // length
    xs = np.abs(x.astype(np.float64)).reshape(rows, length)
    amax, bad = [], []
    for r in range(rows):
        for b in range(-(-length // run)):
            seg = xs[r, b * run : (b + 1) * run]
            fin = seg[np.isfinite(seg)]
            bad.append(int(not np.isfinite(seg).all()))
            amax.append(fin.max() if fin.size else 0.0)
    return np.array(amax), np.array(bad)


@pytest.mark.parametrize("dt, bits_dt", DTYPES, ids=lambda d: str(d))
@pytest.mark.parametrize(
    "length, run",
    [(1, 1), (7, 7), (8, 8), (9, 9), (15, 15), (16, 16), (17, 17), (31, 31), (32, 32),
     (33, 33), (64, 64), (65, 65), (1000, 32), (1000, 1000), (37, 5), (300, 7), (5, 100)],
)  # fmt: skip
def test_amax_and_flags_match_numpy(dt, bits_dt, length, run):
    rng = np.random.default_rng(length * 1000 + run)
    rows = 40
    x = rng.standard_normal(rows * length) * np.exp2(rng.integers(-30, 30, rows * length))
    x = x.astype(dt)
    x[rng.integers(0, x.size, 4)] = np.nan
    x[rng.integers(0, x.size, 4)] = -np.inf
    x[rng.integers(0, x.size, 2)] = np.inf
    x[-1] = np.nan  # (the last run's tail)
    if length >= 2:
        x[:length] = np.nan  # a row of nothing but NaN
        x[length : 2 * length] = -0.0
    want_amax, want_bad = reference(x, length, run)
    amax = np.full(want_amax.size, 0xAB, bits_dt)
    bad = np.full(want_amax.size, 0xAB, bits_dt)
    bits = x.view(bits_dt)
    _parallel.launch(amax_runs_kernel(dt), bits.size, bits, np.array([length, run], np.int64),
                     amax, bad)  # fmt: skip
    np.testing.assert_array_equal(amax.view(dt).astype(np.float64), want_amax)
    np.testing.assert_array_equal(bad, want_bad.astype(bits_dt))


def test_each_width_builds_once():
    """One compiled function per bits width, built once per process and reused."""
    from fp8kit._kernels import native

    kernels = [amax_runs_kernel(dt) for dt, _ in DTYPES]
    assert len({k._key for k in kernels}) == 3
    x = np.arange(64, dtype=np.float32)
    for dt, bits_dt in DTYPES:
        bits = x.astype(dt).view(bits_dt)
        amax, bad = np.zeros(2, bits_dt), np.zeros(2, bits_dt)
        _parallel.launch(amax_runs_kernel(dt), 64, bits, np.array([64, 32], np.int64), amax, bad)
        assert amax.view(dt).tolist() == [31.0, 63.0], dt
    built = native.native_count()
    for dt, _ in DTYPES:
        amax_runs_kernel(dt).build()
    assert native.native_count() == built


_COLS = """
import json
import numpy as np
from fp8kit._kernels import codec, native
from fp8kit.study.scaling import group_amax
x = np.random.default_rng(3).standard_normal((48, 40)).astype(np.float32)
x[7, 3] = np.nan
out = {}
for kind, axis, block in (("channel", 1, 1), ("block", 0, 16)):
    am, bad = group_amax(x, kind, axis, block)
    out[kind] = [np.asarray(am).ravel().tolist(), np.asarray(bad).ravel().tolist()]
print(json.dumps({"route": native.numba_route() and codec._JIT["cache"], **out}))
"""


def native_route_here() -> bool:
    from fp8kit._kernels import native

    return native.numba_route()


def test_column_amax_through_the_native_route(tmp_path):
    """The column-wise amax (2-D outputs, a row per chunk) through the checked native entry
    (1-D arrays only), which the tests' in-process kernels do not take (conftest compiles
    them without the disk cache): in a process of its own, against numpy."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", _COLS], env=env, check=True,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["route"] or not native_route_here()
    x = np.random.default_rng(3).standard_normal((48, 40)).astype(np.float32)
    x[7, 3] = np.nan
    a = np.abs(x.astype(np.float64))
    fin = np.where(np.isfinite(a), a, 0.0)
    want = {
        "channel": (fin.max(axis=0), ~np.isfinite(a).all(axis=0)),  # (a channel a column)
        "block": (fin.reshape(3, 16, 40).max(axis=1), ~np.isfinite(a).reshape(3, 16, 40).all(1)),
    }
    for kind, (am, bad) in want.items():
        np.testing.assert_array_equal(got[kind][0], am.ravel())
        np.testing.assert_array_equal(np.array(got[kind][1]) > 0, bad.ravel())
