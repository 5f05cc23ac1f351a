"""``fp8kit.promotion.result_type`` beside ``np.result_type``, and ``convert_promote_types``.

``result_type`` on dtypes is a cached lookup (the aim: under 2 us per call); numpy's own
``np.result_type`` and ``np.promote_types`` are timed in the same suite so that the ratio comes
from one run.  ``time_first_call`` clears the cache first, so it times the rule engine itself.
"""

import ml_dtypes
import numpy as np

import fp8kit
from fp8kit import promotion as P
from fp8kit.promotion import _engine

from ._grid import FULL, pick

PAIRS = {
    "int32,float32": (np.dtype(np.int32), np.dtype(np.float32)),
    "int8,float8_e4m3fn": (np.dtype(np.int8), np.dtype(ml_dtypes.float8_e4m3fn)),
    "bfloat16,float16": (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)),
    "int8_array,py_float": (np.zeros(16, np.int8), 1.0),
    "int2,float4_e2m1fn": (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.float4_e2m1fn)),
}
if not FULL:
    PAIRS = {k: PAIRS[k] for k in ("int32,float32", "int8,float8_e4m3fn")}


class ResultType:
    """Per-call time of a promotion decision."""

    params = [
        list(PAIRS),
        pick(
            ["fp8kit-NUMPY", "np.result_type"],
            ["fp8kit-NUMPY", "fp8kit-TORCH", "fp8kit-JAX", "np.result_type", "np.promote_types"],
        ),
    ]
    param_names = ["pair", "implementation"]

    def setup(self, pair, implementation):
        a, b = PAIRS[pair]
        if implementation.startswith("fp8kit"):
            policy = P.PRESETS[implementation.split("-")[1]]
            self.run = lambda: P.result_type(a, b, policy=policy)
        elif implementation == "np.result_type":
            self.run = lambda: np.result_type(a, b)
        else:
            if not isinstance(a, np.dtype):
                raise NotImplementedError  # np.promote_types takes dtypes only
            self.run = lambda: np.promote_types(a, b)
        try:
            self.run()
        except (TypeError, P.PromotionError):
            raise NotImplementedError from None  # no common type under this framework

    def time_result_type(self, pair, implementation):
        self.run()


class ResultTypeUncached:
    """The rule engine without the cache (the first call of each pair)."""

    def setup(self):
        self.pairs = [(a, b) for a in P.ALL_DTYPES for b in P.ALL_DTYPES]

    def time_all_pairs_numpy_preset(self):
        _engine._cached.cache_clear()
        for a, b in self.pairs:
            P.result_type(a, b, policy=P.NUMPY)


class ConvertPromoteTypes:
    """Both operands converted (fp8kit's cast kernels) for a few promotions."""

    params = [
        pick(
            ["int8->float32", "float8_e4m3fn->float16"],
            ["int8->float32", "float8_e4m3fn->float16", "float16->float32", "uint1->float16"],
        ),
        pick([1_000_000], [1_000, 1_000_000]),
    ]
    param_names = ["conversion", "size"]

    def setup(self, conversion, size):
        src, dst = conversion.split("->")
        rng = np.random.default_rng(0)
        self.a = (rng.standard_normal(size) * 10).astype(np.dtype(getattr(ml_dtypes, src, src)))
        self.b = np.zeros(4, np.dtype(dst))
        self.policy = P.openvino(promote_unsafe=True)
        fp8kit.convert_promote_types(self.a, self.b, policy=self.policy)  # compile

    def time_convert_promote_types(self, conversion, size):
        fp8kit.convert_promote_types(self.a, self.b, policy=self.policy)
