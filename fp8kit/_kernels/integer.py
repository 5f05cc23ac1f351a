"""Float -> integer kernels: saturating (clamp, NaN -> 0) and the x86 bit pattern that the
ONNX reference produces through numpy (``x.astype(int_type)``) for out-of-range values."""

from __future__ import annotations

import functools

import numpy as np
from numba import from_dtype, prange, types

from .bits import chunk
from .codec import Kernel, source_version


def _sig(in_dtype, out_dtype):
    def arr(dt, readonly):
        return types.Array(from_dtype(np.dtype(dt)), 1, "C", readonly=readonly)

    return types.void(
        arr(in_dtype, True),
        arr(np.uint32, True),
        arr(np.uint8, True),
        arr(out_dtype, False),
        types.intp,
    )


@functools.cache
def saturating_kernel(in_dtype: np.dtype, out_dtype: np.dtype) -> Kernel:
    """float -> integer, truncating toward zero, clamped to the integer range, NaN -> 0."""
    info = np.iinfo(out_dtype)
    f = np.dtype(in_dtype).type
    # The clamp bounds as floats: values at or beyond them saturate.  float(info.max) can
    # round up (2**63 for int64), which is exactly the first value that must saturate.
    hi_f, lo_f = f(float(info.max)), f(float(info.min))
    hi, lo = np.dtype(out_dtype).type(info.max), np.dtype(out_dtype).type(info.min)
    zero = np.dtype(out_dtype).type(0)
    cast = np.dtype(out_dtype).type
    version = source_version()

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:
                return
            step = (x.size + nchunks - 1) // nchunks
            for c in prange(nchunks):
                xc, oc = chunk(x, c, step), chunk(out, c, step)
                for j in range(xc.size):
                    v = xc[j]
                    if v != v:
                        oc[j] = zero
                    elif v >= hi_f:
                        oc[j] = hi
                    elif v <= lo_f:
                        oc[j] = lo
                    else:
                        oc[j] = cast(v)

        return kernel

    return Kernel(make, _sig(in_dtype, out_dtype))
