"""fp8kit: bit-exact low-precision floating point (float8, bfloat16, float16) for numpy.

Formats are data (:class:`FloatFormat`); :func:`encode`, :func:`decode`, :func:`round_to`
and :func:`astype` run compiled Numba kernels built on first use (nothing compiles at
import).
"""

from . import promotion  # (compiles nothing at import)
from ._parallel import get_num_threads, num_threads, set_num_threads
from .cast import cast, cast_rule, cast_table
from .codec import astype, decode, encode, round_to
from .fake_convert import fake_convert
from .formats import FloatFormat, format_table, get_format, register_format, registered_formats
from .packing import pack, unpack
from .promotion import PromotionError, PromotionPolicy, convert_promote_types, promote_inputs

__version__ = "0.1.0"


def __getattr__(name):
    # fp8kit.study is imported on first use: a quarter of fp8kit's own import time (~27 of
    # ~105 ms, measured with -X importtime) for code that only studies use
    if name in ("study", "mma"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in ("matmul", "scaled_mm"):
        # (the matrix products are imported on first use too: their kernels' module
        # registers Numba functions, which the codec's users need not pay for)
        from . import products

        return getattr(products, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FloatFormat",
    "PromotionError",
    "PromotionPolicy",
    "astype",
    "cast",
    "cast_rule",
    "cast_table",
    "convert_promote_types",
    "decode",
    "encode",
    "fake_convert",
    "format_table",
    "get_format",
    "get_num_threads",
    "matmul",
    "mma",
    "num_threads",
    "pack",
    "promote_inputs",
    "promotion",
    "register_format",
    "registered_formats",
    "round_to",
    "scaled_mm",
    "set_num_threads",
    "study",
    "unpack",
]
