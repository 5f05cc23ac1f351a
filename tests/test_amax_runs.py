"""The runs' amax kernel (fp8kit._kernels.metrics.amax_runs_kernel, the scales of the
study's channel and block recipes and mx_scales): the largest finite |x| of each run as
bits and whether the run holds a NaN or an Inf, its inner loops written as LLVM vector
code (fp8kit._kernels.bits.runs_amax).  Against numpy, for every data dtype it takes, run
lengths around the vector widths (16 float32, 8 float64, 32 bfloat16 lanes), NaN and Inf
in whole blocks and in the masked tail, runs of nothing but NaN and Inf."""

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


def test_one_compiled_function_serves_every_width():
    """The native kernel is one function for 16-, 32- and 64-bit data (the width a
    parameter), so that a study of a second data type compiles no amax of its own."""
    from fp8kit._kernels import native

    if not native.available():
        pytest.skip("no native kernels on this interpreter")
    kernels = [amax_runs_kernel(dt) for dt, _ in DTYPES]
    assert {k._key for k in kernels} == {("amax_runs",)}
    assert [int(k._params[0]) for k in kernels] == [32, 64, 16]
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
