"""Issue 8: the new formats against ml_dtypes, and every rounding mode against nearest-even.

``setup`` builds seeded standard-normal float32 data, preallocates the output and runs the
call once (JIT compilation is not timed).
"""

import ml_dtypes
import numpy as np

import fp8kit

from ._grid import FULL, pick

SEED = 20240601
SIZES = pick([1_000_000], [1_000_000, 16_000_000])
NEW_FORMATS = pick(
    ["float8_e3m4", "float4_e2m1fn"],
    [
        "float8_e4m3",
        "float8_e3m4",
        "float8_e4m3b11fnuz",
        "float8_e8m0fnu",
        "float6_e2m3fn",
        "float6_e3m2fn",
        "float4_e2m1fn",
    ],
)
MODES = pick(
    ["nearest_even", "toward_zero", "stochastic"],
    [
        "nearest_even",
        "nearest_away",
        "toward_zero",
        "toward_positive",
        "toward_negative",
        "stochastic",
        # issue 20
        "to_odd",
        "nearest_zero",
        "stochastic_c",
        "stochastic_b",
        "stochastic_odd",
        "stochastic_half",
    ],
)


def _data(size):
    return np.random.default_rng(SEED).standard_normal(size, dtype=np.float32)


class EncodeNewFormats:
    """float32 -> each new format: fp8kit.encode into a preallocated array, and ml_dtypes'
    ``astype``."""

    params = (NEW_FORMATS, ["fp8kit", "ml_dtypes"], SIZES)
    param_names = ["format", "library", "size"]

    def setup(self, fmt, library, size):
        self.x = _data(size)
        self.out = np.empty(size, np.uint8)
        self.dtype = np.dtype(getattr(ml_dtypes, fmt))
        self.time_encode(fmt, library, size)

    def time_encode(self, fmt, library, size):
        if library == "fp8kit":
            fp8kit.encode(self.x, fmt, out=self.out)
        else:
            self.x.astype(self.dtype)


class DecodeNewFormats:
    """Codes of each new format -> float32: fp8kit.decode into a preallocated array, and
    ml_dtypes' ``astype`` (the codes are the encoded benchmark data)."""

    params = (NEW_FORMATS, ["fp8kit", "ml_dtypes"], SIZES)
    param_names = ["format", "library", "size"]

    def setup(self, fmt, library, size):
        self.codes = fp8kit.encode(_data(size), fmt)
        self.values = self.codes.view(getattr(ml_dtypes, fmt))  # one code per byte
        self.out = np.empty(size, np.float32)
        self.time_decode(fmt, library, size)

    def time_decode(self, fmt, library, size):
        if library == "fp8kit":
            fp8kit.decode(self.codes, fmt, out=self.out)
        else:
            self.values.astype(np.float32)


class RoundingModes:
    """float32 -> float8_e4m3fn and bfloat16 codes in each rounding mode (stochastic with
    its default 16 random bits, and with 32), and nearest-even with flush_subnormals."""

    params = (
        MODES + (["stochastic_32bits", "nearest_even_flush"] if FULL else []),
        pick(["float8_e4m3fn"], ["float8_e4m3fn", "bfloat16"]),
        SIZES,
    )
    param_names = ["rounding", "format", "size"]

    def setup(self, rounding, fmt, size):
        self.x = _data(size)
        self.out = np.empty(size, fp8kit.get_format(fmt).code_dtype)
        self.kw = {"rounding": rounding.removesuffix("_32bits").removesuffix("_flush")}
        if rounding.endswith("_flush"):
            self.kw.update(flush_subnormals=True)
        if rounding.startswith("stochastic"):
            self.kw.update(seed=1, random_bits=32 if rounding.endswith("32bits") else 16)
        self.time_encode(rounding, fmt, size)

    def time_encode(self, rounding, fmt, size):
        fp8kit.encode(self.x, fmt, out=self.out, **self.kw)
