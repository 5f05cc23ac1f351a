"""fp8kit.cast (ONNX Cast-21) against the numpy/ml_dtypes cast of the same pair."""

import ml_dtypes
import numpy as np

import fp8kit

from ._grid import SIZES, pick

PAIRS = pick(
    ["float32->int8", "float32->float8_e4m3fn", "int64->bfloat16"],
    [
        "float32->int8",
        "float32->uint64",
        "float32->float8_e4m3fn",
        "float64->bfloat16",
        "int64->bfloat16",
        "int64->float8_e5m2",
        "float8_e4m3fn->int32",
    ],
)
DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "int64": np.int64,
    "int8": np.int8,
    "int32": np.int32,
    "uint64": np.uint64,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}


def _data(src, size):
    rng = np.random.default_rng(0)
    if src == "int64":
        return rng.integers(-(2**40), 2**40, size)
    x = rng.standard_normal(size) * 100
    return x.astype(DTYPES[src])


class Cast:
    """``fp8kit.cast`` with saturate=True and False, and the numpy/ml_dtypes ``astype``."""

    params = [PAIRS, ["fp8kit", "fp8kit_no_saturate", "astype"], SIZES]
    param_names = ["pair", "implementation", "size"]

    def setup(self, pair, implementation, size):
        src, dst = pair.split("->")
        self.x = _data(src, size)
        self.dst = dst
        if implementation == "astype":
            self.run = lambda: self.x.astype(DTYPES[dst])
        else:
            sat = implementation == "fp8kit"
            self.run = lambda: fp8kit.cast(self.x, dst, saturate=sat)
        with np.errstate(all="ignore"):
            self.run()  # compile outside the timing

    def time_cast(self, pair, implementation, size):
        with np.errstate(all="ignore"):
            self.run()
