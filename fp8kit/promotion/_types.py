"""The types the engine knows, their facts, and how operands are read."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import ml_dtypes
import numpy as np

from ..formats import get_format


class PromotionError(TypeError):
    """Two operands have no common type under a policy; the message says why.

    A subclass of TypeError, as numpy's ``DTypePromotionError`` is.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> try:
    ...     P.result_type("int8", "uint8", policy=P.OPENVINO)
    ... except P.PromotionError as e:
    ...     print(str(e).split(":")[0])
    OPENVINO
    """


PromotionError.__module__ = "fp8kit.promotion"  # where users import it from


# --------------------------------------------------------------------------------- types
#: Every type the engine knows, in display order (ml_dtypes/numpy names).
ALL_DTYPES: tuple[str, ...] = (
    "bool",
    "int1",
    "int2",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint1",
    "uint2",
    "uint4",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e4m3",
    "float8_e3m4",
    "float8_e4m3b11fnuz",
    "float8_e8m0fnu",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
_DTYPES = {n: np.dtype(getattr(ml_dtypes, n, None) or n) for n in ALL_DTYPES}
_NAME_OF_DTYPE = {dt: n for n, dt in _DTYPES.items()}
#: The real floating types, narrowest first (the order in which joins try them).
_FLOATS = tuple(n for n in ALL_DTYPES if "float" in n)
_CATEGORY = {
    n: 0 if n == "bool" else 1 if "int" in n else 3 if "complex" in n else 2 for n in ALL_DTYPES
}
_CATEGORY_NAME = ("bool", "int", "float", "complex")
_COMPONENT = {"complex64": "float32", "complex128": "float64"}
_COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}


def _int_info(name: str) -> tuple[bool, int]:
    """(signed, bits) of an integer type."""
    return not name.startswith("u"), int(name.lstrip("uint"))


def _bits(name: str) -> int:
    if name == "bool":
        return 8
    if _CATEGORY[name] == 1:
        return _int_info(name)[1]
    if name in _FLOAT_BITS:
        return _FLOAT_BITS[name]
    return _DTYPES[name].itemsize * 8


@dataclasses.dataclass(frozen=True)
class _FloatInfo:
    precision: int  # significand digits, hidden bit included
    min_exponent: int  # log2 of the smallest subnormal
    max: float
    has_inf: bool
    has_nan: bool = True
    signed: bool = True
    has_zero: bool = True
    has_negative_zero: bool = True


def _float_info(name: str) -> _FloatInfo:
    if name == "float32":
        return _FloatInfo(24, -149, float(np.finfo(np.float32).max), True)
    if name == "float64":
        return _FloatInfo(53, -1074, float(np.finfo(np.float64).max), True)
    f = get_format(name)
    return _FloatInfo(
        f.mantissa_bits + 1,
        round(math.log2(f.smallest_subnormal)),
        f.max,
        f.has_inf,
        f.has_nan,
        f.signed,
        f.has_zero,
        f.has_negative_zero,
    )


_FLOAT_INFO = {n: _float_info(n) for n in _FLOATS}
_FLOAT_BITS = {n: get_format(n).bits for n in _FLOATS if n not in ("float32", "float64")}


def _float_fits(src: str, dst: str) -> bool:
    """Every value of float type src is a value of dst (Inf needs Inf, NaN NaN, -0 -0)."""
    s, d = _FLOAT_INFO[src], _FLOAT_INFO[dst]
    return (
        s.precision <= d.precision
        and s.min_exponent >= d.min_exponent
        and s.max <= d.max
        and (d.has_inf or not s.has_inf)
        and (d.has_nan or not s.has_nan)
        and (d.signed or not s.signed)
        and (d.has_zero or not s.has_zero)
        and (d.has_negative_zero or not s.has_negative_zero)
    )


def _int_fits(src: str, dst: str) -> bool:
    """Every value of integer type src is a value of float type dst."""
    signed, bits = _int_info(src)
    value_bits = bits - 1 if signed else bits
    d = _FLOAT_INFO[dst]
    return (
        d.has_zero
        and (d.signed or not signed)
        and value_bits <= d.precision
        and 2.0**value_bits - (0 if signed else 1) <= d.max  # -2**(bits-1) or 2**bits - 1
    )


_OV_NAMES = {
    "boolean": "bool",
    "i4": "int4",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u1": "uint1",
    "u2": "uint2",
    "u4": "uint4",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "f8e8m0": "float8_e8m0fnu",
    "f4e2m1": "float4_e2m1fn",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
}


# ---------------------------------------------------------------------------- operands
_PY_TYPES = {
    bool: ("py", "bool"),
    int: ("py", "int"),
    float: ("py", "float"),
    complex: ("py", "complex"),
}
_PY_INDEX = {"bool": 0, "int": 1, "float": 2, "complex": 3}
_EXTRA_NAMES = {
    **_OV_NAMES,
    "float": "float64",  # numpy's meaning, as np.dtype("float")
    "double": "float64",
    "half": "float16",
    "bf16": "bfloat16",
}
#: Types of the frameworks that fp8kit does not represent (no numpy/ml_dtypes dtype, or none
#: that fp8kit promotes and casts): naming one raises a TypeError that says so.
UNREPRESENTED: dict[str, str] = {
    "complex32": "PyTorch's complex32 (ComplexHalf; ml_dtypes.complex32 has no cast kernels)",
    "chalf": "PyTorch's complex32 (ComplexHalf)",
    "bcomplex32": "ml_dtypes' bcomplex32 (bfloat16 complex)",
    **{f"int{b}": f"PyTorch's int{b} (a shell type; no ml_dtypes dtype)" for b in (3, 5, 6, 7)},
    **{f"uint{b}": f"PyTorch's uint{b} (a shell type; no ml_dtypes dtype)" for b in (3, 5, 6, 7)},
    "float4_e2m1fn_x2": "PyTorch's float4_e2m1fn_x2 (two float4 values packed in a byte)",
    **{
        q: f"PyTorch's quantized {q}" for q in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
    },
    **{b: f"PyTorch's {b} (raw bits)" for b in ("bits1x8", "bits2x4", "bits4x2", "bits8")},
    "bits16": "PyTorch's bits16 (raw bits)",
    "u3": "OpenVINO's u3 (3-bit unsigned integer; no ml_dtypes dtype)",
    "u6": "OpenVINO's u6 (6-bit unsigned integer; no ml_dtypes dtype)",
    "nf4": "OpenVINO's nf4 (NormalFloat4 lookup codes; no ml_dtypes dtype)",
    "string": "OpenVINO's string element type (not a numeric type)",
    "dynamic": "OpenVINO's dynamic element type (a type not yet known)",
}
_NAME_CACHE: dict[Any, str] = {}


def _name(spec: Any, argname: str) -> str:
    """The canonical name of a dtype-like (dtype, type, name or alias)."""
    try:
        return _NAME_CACHE[spec]
    except (KeyError, TypeError):
        pass
    name = dt = None
    if isinstance(spec, str):
        low = spec.lower()
        name = low if low in _DTYPES else _EXTRA_NAMES.get(low)
        if name is None:
            try:
                name = get_format(spec).name
            except ValueError:
                name = None
    if name is None:
        try:
            dt = np.dtype(spec)
        except TypeError:
            dt = None
        if dt is not None:
            name = _NAME_OF_DTYPE.get(dt.newbyteorder("=") if dt.byteorder not in "=|" else dt)
    if name is None or name not in _DTYPES:
        key = spec.lower() if isinstance(spec, str) else getattr(dt, "name", None)
        if key in UNREPRESENTED:
            raise TypeError(
                f"{argname}: {spec!r} is {UNREPRESENTED[key]}, a type fp8kit cannot represent; "
                f"valid: {', '.join(ALL_DTYPES)}"
            )
        raise TypeError(
            f"{argname}: {spec!r} is not a type fp8kit promotes; valid: {', '.join(ALL_DTYPES)}"
        )
    try:
        _NAME_CACHE[spec] = name
    except TypeError:
        pass
    return name


_SPEC_CACHE: dict[Any, tuple[str, str]] = {}  # dtypes, names and types -> operand


def _operand(x: Any, argname: str) -> tuple[str, str]:
    """(level, name): ("tensor", dtype), ("0d", dtype) or ("py", "bool"/"int"/...)."""
    t = type(x)
    r = _PY_TYPES.get(t)  # by type: True == 1 == 1.0 would collide in a value-keyed dict
    if r is not None:
        return r
    if t is np.ndarray:
        n = _NAME_OF_DTYPE.get(x.dtype)
        return ("0d" if x.ndim == 0 else "tensor", n if n is not None else _name(x.dtype, argname))
    if isinstance(x, np.generic):  # before the cache: np.float32(1) == 1.0
        return ("0d", _name(x.dtype, argname))
    try:
        return _SPEC_CACHE[x]
    except (KeyError, TypeError):
        pass
    r = _slow_operand(x, argname)
    if isinstance(x, (str, type, np.dtype)):
        _SPEC_CACHE[x] = r
    return r


def _slow_operand(x: Any, argname: str) -> tuple[str, str]:
    if isinstance(x, str):
        if x.startswith("0d:"):
            return ("0d", _name(x[3:], argname))
        if x.startswith("py:") and x[3:] in _PY_INDEX:
            return ("py", x[3:])
        return ("tensor", _name(x, argname))
    if isinstance(x, type) and x in _PY_TYPES:
        return _PY_TYPES[x]
    for py in (bool, int, float, complex):  # subclasses of the Python scalar types
        if isinstance(x, py):
            return _PY_TYPES[py]
    if isinstance(x, (type, np.dtype)):
        return ("tensor", _name(x, argname))
    dtype, ndim = getattr(x, "dtype", None), getattr(x, "ndim", None)
    if dtype is not None and ndim is not None:
        return ("0d" if ndim == 0 else "tensor", _name(dtype, argname))
    raise TypeError(f"{argname}: {x!r} is not an array, dtype, type name or Python scalar")


def _describe(level: str, name: str) -> str:
    return {"tensor": name, "0d": f"0-d {name}", "py": f"Python {name}"}[level]
