"""Stochastic kernels take the flat index of their first element (``offset``), so that a
block of a larger array (a Dask chunk) draws the same random words as the whole array."""

import numpy as np
import pytest

import fp8kit
from fp8kit._kernels.codec import dummy, encode_mode_kernel
from fp8kit._kernels.rounding import STOCHASTIC
from fp8kit.codec import _rounding


@pytest.mark.parametrize("nchunks", [1, 3])
def test_stochastic_offset_continues_the_flat_index(nchunks):
    fmt = fp8kit.get_format("float8_e4m3fn")
    x = np.random.default_rng(4).standard_normal(3 * 8192 + 123).astype(np.float32) * 50
    want = fp8kit.encode(x, fmt, rounding="stochastic", seed=5, random_bits=16)
    _, key, rbits = _rounding("stochastic", 5, 16, "encode")
    kernel, _ = encode_mode_kernel(fmt, np.dtype(np.float32), True, STOCHASTIC, rbits)
    run = kernel.build()
    # block boundaries fall every 4 * 1024 * 2 elements at 16 random bits: starts and ends
    # inside, on and across them
    for lo, hi in [(0, 100), (1000, 9000), (8192, 2 * 8192 + 5), (777, x.size), (5, 6)]:
        out = np.empty(hi - lo, np.uint8)
        xb = x[lo:hi].view(np.uint32)
        run(xb, dummy(np.uint32), dummy(np.uint8), out, key, lo, nchunks)
        assert np.array_equal(out, want[lo:hi]), (lo, hi)
