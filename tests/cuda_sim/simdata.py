"""Inputs and comparisons shared by the simulator tests."""

import ml_dtypes
import numpy as np
from numba import cuda

import fp8kit
from fp8kit._kernels.tables import code_values
from fp8kit.cuda._dispatch import _view

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
BF16 = np.dtype(ml_dtypes.bfloat16)
# every 37th of the 65,536 16-bit patterns (the simulator runs a Python thread per lane)
SUBSAMPLE16 = np.arange(0, 1 << 16, 37, dtype=np.uint16)
SPECIALS32 = np.array(
    [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
     0xFFBFFFFF, 0x7FA00005, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,
     0xFF7FFFFF, 0x3F800000],
    dtype=np.uint32,
).view(np.float32)  # fmt: skip


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def host(d):
    return d.copy_to_host()


def same_bits(got, want):
    """Bit-for-bit equality (NaN payloads and signs included), with the first differences."""
    g, w = bits(got).ravel(), bits(want).ravel()
    assert g.shape == w.shape, (g.shape, w.shape)
    bad = np.flatnonzero(g != w)
    assert not bad.size, [(int(i), hex(int(g[i])), hex(int(w[i]))) for i in bad[:5]]


def every_code_value() -> np.ndarray:
    """float64: every value of every 8-bit format (NaN, +-Inf, +-0, subnormals), each
    midpoint between neighbours (a tie) and the floats just beside them."""
    vals = np.unique(
        np.concatenate([code_values(fp8kit.get_format(n)) for n in FLOAT8])
    )  # NaN sorts last; unique keeps one
    finite = vals[np.isfinite(vals)]
    mids = (finite[1:] + finite[:-1]) / 2
    near = np.concatenate([np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    return np.concatenate([vals, -vals, mids, near, [np.nan, -np.nan]])


def inputs(dtype, seed=0) -> np.ndarray:
    """Host test data of a float dtype: 16-bit dtypes a subsample of all bit patterns; float32
    and float64 every 8-bit value and tie, specials, random values and random bit patterns."""
    dtype = np.dtype(dtype)
    if dtype.itemsize == 2:
        return SUBSAMPLE16.view(dtype)
    rng = np.random.default_rng(seed)
    with np.errstate(invalid="ignore", over="ignore"):  # signalling NaNs and huge values
        x = _inputs(dtype, rng)
    if dtype == np.float64:  # float64 just beside a float32 tie: one rounding, not two
        x = np.concatenate([x, [1 + 2**-4 + 2**-40, 1 + 2**-4 - 2**-40, -(2**-9 * 1.5)]])
    return x


def _inputs(dtype, rng):
    return np.concatenate(
        [
            every_code_value().astype(dtype),
            SPECIALS32.astype(dtype),
            (rng.standard_normal(1000) * np.exp2(rng.uniform(-30, 30, 1000))).astype(dtype),
            rng.integers(0, 2**64, 500, dtype=np.uint64).astype(f"u{dtype.itemsize}").view(dtype),
        ]
    )


def to_device(a):
    """``a`` on the device, C order, 0-d kept 0-d.  ml_dtypes arrays travel as their bits:
    numba-cuda copies through the buffer protocol, which has no such dtypes (on a GPU
    ``cuda.to_device`` of a bfloat16 array raises; the simulator takes it)."""
    a = np.array(a, order="C")
    if a.dtype.type.__module__ != "ml_dtypes":  # (their kinds vary: V, or f for e5m2)
        return cuda.to_device(a)
    return _view(cuda.to_device(a.view(f"u{a.dtype.itemsize}")), a.dtype)
