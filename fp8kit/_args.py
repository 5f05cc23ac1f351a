"""Argument checking and normalisation shared by every backend (the bottom of the dispatch
layer; see docs/contributing.md, "Contributor notes: dispatch layer").

The public functions (:mod:`fp8kit.codec`, :mod:`fp8kit.cast`, :mod:`fp8kit.fake_convert`)
and the backends (numpy kernels, :mod:`fp8kit.cuda`, :mod:`fp8kit._dask`, the wrappers of
:mod:`fp8kit._backends`) import from here; this module imports no public module of fp8kit
but :mod:`fp8kit.formats` (the registry), so no import circle can pass through it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._kernels.fake import OV_F32, OV_FP16, SPEC
from ._kernels.rounding import MODES, is_stochastic
from .formats import _NUMPY_DTYPES, FloatFormat, get_format, registered_formats

#: ml_dtypes/numpy dtype -> its format (float8, float6, float4, bfloat16, float16)
FORMAT_DTYPES = {dt: fmt for fmt, dt in reversed(_NUMPY_DTYPES.items())}
# (reversed: a dtype shared by two formats, float8_e4m3fnuz and p3109_k8p4sf, names the first)
FLOAT_NAMES = "float16, bfloat16, float32 or float64"
ROUNDING_MODES = tuple(MODES)
STOCHASTIC_NAMES = tuple(k for k, v in MODES.items() if is_stochastic(v))


def on_device(*args: Any) -> bool:
    """Is an argument a GPU array?  Checked without importing numba.cuda: numba's device
    arrays (also the CUDA simulator's, which lack ``__cuda_array_interface__``) and objects
    with ``__cuda_array_interface__`` but no host ``__array_interface__`` (CuPy, torch).
    Such calls go to :mod:`fp8kit.cuda`."""
    for a in args:
        if a is None or isinstance(a, (np.ndarray, np.generic, float, int)):
            continue
        if getattr(type(a), "__cuda_ndarray__", False) or (
            hasattr(a, "__cuda_array_interface__") and not hasattr(a, "__array_interface__")
        ):
            return True
    return False


def native(a: np.ndarray) -> np.ndarray:
    """``a`` in native byte order (a copy only if it is not)."""
    if not a.dtype.isnative:
        return a.astype(a.dtype.newbyteorder("="))
    return a


def name_arg(value: Any) -> Any:
    """A 0-d string array (what ``xarray.apply_ufunc(..., dask="parallelized")`` makes of a
    positional format name) as its str; anything else unchanged."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "US":
        return str(value[()])
    if isinstance(value, np.str_):
        return str(value)
    return value


def format_arg(fmt: Any, argname: str = "fmt") -> FloatFormat:
    """:func:`fp8kit.get_format` of a format argument (also given as a 0-d string array)."""
    return get_format(name_arg(fmt), argname=argname)


def saturate(value: Any, func: str, propagate: bool = False) -> Any:
    """The ``saturate`` argument as a bool, or a TypeError; with ``propagate``, the string
    ``"propagate"`` too (P3109's SatPropagate: see :func:`fp8kit.encode`)."""
    if isinstance(value, (bool, np.bool_)) or (
        isinstance(value, (int, np.integer)) and value in (0, 1)
    ):
        return bool(value)
    if propagate and isinstance(value, str) and value == "propagate":
        return "propagate"
    also = ", 'propagate'" if propagate else ""
    raise TypeError(f"{func}: saturate must be True or False (or 1/0{also}); got {value!r}")


def flag(value: Any, name: str, func: str) -> bool:
    """A True/False option (``flush_subnormals``, ``flush_subnormal_inputs``), or a
    TypeError naming it."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{func}: {name} must be True or False; got {value!r}")


def _float_layout(dtype: np.dtype) -> tuple[int, int, bool] | None:
    """(bits, mantissa bits, has -0) of a float dtype (numpy or ml_dtypes), or None."""
    dtype = np.dtype(dtype)
    if dtype in FORMAT_DTYPES:
        f = FORMAT_DTYPES[dtype]
        return f.bits, f.mantissa_bits, f.has_negative_zero
    if dtype.kind == "f":
        return dtype.itemsize * 8, np.finfo(dtype).nmant, True
    return None


def flush_inputs(x: Any) -> Any:
    """``flush_subnormal_inputs`` (denormals-are-zero): values that are subnormal in their
    own dtype (float16/bfloat16/float32/float64 or an ml_dtypes float8) become the zero of
    their sign (+0 in dtypes without -0); other inputs are returned as they are (the caller
    checks their dtype).  Works on the bits: one pass, no per-element Python."""
    arr = np.asarray(x)
    lay = _float_layout(arr.dtype)
    if lay is None or arr.dtype.itemsize * 8 < lay[0] or arr.size == 0:
        return x
    bits, m, neg_zero = lay
    u = arr.view(f"u{arr.dtype.itemsize}") if arr.ndim else arr.reshape(1).view(
        f"u{arr.dtype.itemsize}")  # fmt: skip
    sign = u.dtype.type(1 << (bits - 1))
    mag = u & u.dtype.type((1 << (bits - 1)) - 1)
    sub = (mag != 0) & (mag < u.dtype.type(1 << m))
    if not sub.any():
        return x
    zeros = (u & sign) if neg_zero else np.zeros_like(u)
    res = np.where(sub, zeros, u).view(arr.dtype)
    return res.reshape(arr.shape)


def check_rounding(rounding: Any, random_bits: Any, func: str) -> int:
    """The mode number of ``rounding`` (and check ``random_bits``)."""
    if not isinstance(rounding, str) or rounding not in MODES:
        raise ValueError(
            f"{func}: rounding must be one of {', '.join(ROUNDING_MODES)}; got {rounding!r}"
        )
    if (
        not isinstance(random_bits, (int, np.integer))
        or isinstance(random_bits, bool)
        or not 1 <= random_bits <= 32
    ):
        raise ValueError(f"{func}: random_bits must be an int in 1..32; got {random_bits!r}")
    return MODES[rounding]


def seed_int(seed: Any, func: str) -> int:
    """The stochastic-rounding seed as an int in 0..2**64-1: None draws a fresh one, a
    numpy Generator is advanced by one draw."""
    if seed is None:
        seed = int(np.random.default_rng().integers(0, 1 << 63))
    elif isinstance(seed, np.random.Generator):
        seed = int(seed.integers(0, 1 << 63))
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(
            f"{func}: seed must be an int in 0..2**64-1 or a numpy Generator; got {seed!r}"
        )
    if not 0 <= int(seed) < 1 << 64:
        raise ValueError(f"{func}: seed must be in 0..2**64-1; got {seed}")
    return int(seed)


def rounding(rounding: Any, seed: Any, random_bits: Any, func: str):
    """(mode number, key, random bits) of the rounding arguments, validated.

    ``key`` is a read-only uint32[2]: the Philox key (low, high word of the seed); the
    flat index of the first element is :func:`current_offset`."""
    mode = check_rounding(rounding, random_bits, func)
    if not is_stochastic(mode):
        if seed is not None:
            raise ValueError(
                f"{func}: seed is only used with rounding='stochastic' and the other "
                f"stochastic modes ({', '.join(STOCHASTIC_NAMES[1:])}); got "
                f"rounding={rounding!r}"
            )
        return mode, NO_KEY, int(random_bits)
    s = seed_int(seed, func)
    key = np.array([s & 0xFFFFFFFF, s >> 32], np.uint32)
    key.flags.writeable = False
    return mode, key, int(random_bits)


NO_KEY = np.zeros(2, np.uint32)
NO_KEY.flags.writeable = False

# ---------------------------------------------------------------------- index offset
#: The flat C-order index, in the whole array, of the first element of the array a
#: numpy-backend call works on (0 but inside a Dask block): stochastic rounding keys its
#: random stream by the global index.
_index_offset: contextvars.ContextVar[int] = contextvars.ContextVar(
    "fp8kit_index_offset", default=0
)


@contextlib.contextmanager
def index_offset(offset: int) -> Iterator[None]:
    """Inside the block, numpy-backend calls treat their (C-contiguous, 1-D or any) input as
    starting at flat index ``offset`` of a larger array."""
    token = _index_offset.set(int(offset))
    try:
        yield
    finally:
        _index_offset.reset(token)


def current_offset() -> int:
    """The index offset set by :func:`index_offset` (0 outside one)."""
    return _index_offset.get()


# ---------------------------------------------------------------------- fake_convert
def destination(name: Any) -> FloatFormat:
    """FakeConvert's ``destination_type``: an 8-bit format with a zero, by name (the
    registry's) or as a FloatFormat, registered or not."""
    # float8_e8m0fnu (no sign, no zero) is a scale type, not a destination a
    # quantize-dequantize can round x * scale to.
    if isinstance(name, FloatFormat):
        if name.bits == 8 and name.has_zero:
            return name
        raise ValueError(
            f"destination_type {name.name!r} is a {name.bits}-bit format"
            f"{'' if name.has_zero else ' without a zero'}; FakeConvert rounds to 8-bit "
            "formats with a zero (any FloatFormat of 8 bits, registered or not)"
        )
    try:
        fmt = get_format(name_arg(name), argname="destination_type")
    except (ValueError, TypeError):
        fmt = None
    # (a name gives a registered format; the list is built for the message alone: built
    # on every call, it took half of a 1,000-element fake_convert's 50 us)
    if fmt is not None and fmt.bits == 8 and fmt.specials != "unsigned":
        return fmt
    eight_bit = [
        n for n, f in registered_formats().items() if f.bits == 8 and f.specials != "unsigned"
    ]
    raise ValueError(
        f"unknown destination_type {name!r}; valid: f8e4m3, f8e5m2 (OpenVINO), an 8-bit "
        f"format: {', '.join(eight_bit)}, or an 8-bit FloatFormat"
    )


def rounds_in_place(fmt: FloatFormat) -> bool:
    """Whether FakeConvert's kernels take ``fmt``: formats of at most 8 bits with a sign bit
    and a mantissa bit (fake_convert's 8-bit destinations; the study's fp4 and fp6 formats
    too).  They round the magnitude in place on float32 bits and break ties on the
    mantissa's lowest bit; the unsigned P3109 formats and the precision-1 ones (ties on the
    code's parity) are rounded by :func:`fp8kit.round_to`'s kernels instead."""
    return fmt.bits <= 8 and fmt.signed and fmt.mantissa_bits > 0


#: FakeConvert's ``mode`` -> the kernels' ``openvino`` variant ("openvino" is resolved per
#: host CPU)
FAKE_MODES = {"spec": SPEC, "openvino-fp16": OV_FP16, "openvino-f32": OV_F32, "openvino": None}


@functools.cache
def host_has_avx512_fp16() -> bool:
    """Whether this machine's CPU has AVX512-FP16, as LLVM (Numba's compiler) reports it."""
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("avx512fp16", False))


def openvino_variant(mode: Any, fmt: FloatFormat, has_fp16=None) -> int:
    """The kernels' variant for ``mode`` (and check that ``fmt`` suits it); ``has_fp16``:
    the function that tells whether the CPU has AVX512-FP16 (default
    :func:`host_has_avx512_fp16`)."""
    if not isinstance(mode, str) or mode not in FAKE_MODES:
        raise ValueError(
            f"fake_convert: mode must be 'spec' or 'openvino' (or 'openvino-fp16', "
            f"'openvino-f32'); got {mode!r}"
        )
    variant = FAKE_MODES[mode]
    if variant is None:
        variant = OV_FP16 if (has_fp16 or host_has_avx512_fp16)() else OV_F32
    if variant != SPEC and fmt.name not in ("float8_e4m3fn", "float8_e5m2"):
        raise ValueError(
            f"fake_convert: mode={mode!r} supports f8e4m3 and f8e5m2 (OpenVINO's types); "
            f"got {fmt.name}"
        )
    return variant


def merge(shape: tuple[int, ...], strides: tuple[int, ...]):
    """Merge adjacent dimensions that a strided walk can treat as one; pad to 4."""
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    merged: list[list[int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == s * n:
            merged[-1] = [merged[-1][0] * n, s]
        else:
            merged.append([n, s])
    if len(merged) > 4:
        return None
    merged = [[1, 0]] * (4 - len(merged)) + merged
    return (np.array([m[0] for m in merged], np.int64), np.array([m[1] for m in merged], np.int64))


def element_strides(operand: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides, in elements, of ``operand`` broadcast to ``shape``."""
    full = np.broadcast_to(operand, shape)
    return tuple(st // operand.itemsize for st in full.strides)


def study_format(spec: Any) -> FloatFormat:
    """A format of the study: any format (those FakeConvert's in-place rounding cannot take,
    the unsigned and precision-1 ones, are rounded by fp8kit.round_to's kernels)."""
    return get_format(spec, argname="format")
