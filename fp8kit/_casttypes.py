"""The element types of ``fp8kit.cast`` and :func:`cast_type`, which names them (argument
normalisation below :mod:`fp8kit.cast` and the backends; re-exported by :mod:`fp8kit.cast`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_dtypes
import numpy as np

from ._args import name_arg
from .formats import get_format

_E8M0 = "float8_e8m0fnu"
_FLOAT4 = "float4_e2m1fn"
#: The sub-byte integers (ml_dtypes dtypes; values held in int8 while computing): signed, bits
_SUB_BYTE = {"int4": (True, 4), "uint4": (False, 4), "int2": (True, 2), "uint2": (False, 2)}


@dataclasses.dataclass(frozen=True)
class CastType:
    """One element type of ``fp8kit.cast``: its name, ONNX name (None if ONNX has none) and
    numpy/ml_dtypes dtype."""

    name: str
    onnx: str | None
    dtype: np.dtype
    kind: str  # "bool", "int", "float", "string"

    @property
    def is_float8(self) -> bool:
        """A float8 type with Cast-21's float8 rules (every float8 but the E8M0 scales)."""
        return self.name.startswith("float8") and self.name != _E8M0

    @property
    def is_cast21(self) -> bool:
        """One of the types of ONNX Cast-21's list."""
        return self.name in CAST_TYPES

    @property
    def is_narrow(self) -> bool:
        """An ml_dtypes float of at most 8 bits (float8, float6, float4)."""
        return self.kind == "float" and self.dtype.itemsize == 1

    @property
    def is_finite_only(self) -> bool:
        """A float without Inf and NaN (float6, float4)."""
        return self.name in ("float6_e2m3fn", "float6_e3m2fn", _FLOAT4)


def _t(name, onnx, dtype, kind):
    return CastType(name, onnx, np.dtype(dtype), kind)


#: The Cast-21 type list, in the order of the spec's type constraints.
CAST_TYPES: dict[str, CastType] = {
    t.name: t
    for t in [
        _t("bool", "BOOL", np.bool_, "bool"),
        _t("int4", "INT4", ml_dtypes.int4, "int"),
        _t("int8", "INT8", np.int8, "int"),
        _t("int16", "INT16", np.int16, "int"),
        _t("int32", "INT32", np.int32, "int"),
        _t("int64", "INT64", np.int64, "int"),
        _t("uint4", "UINT4", ml_dtypes.uint4, "int"),
        _t("uint8", "UINT8", np.uint8, "int"),
        _t("uint16", "UINT16", np.uint16, "int"),
        _t("uint32", "UINT32", np.uint32, "int"),
        _t("uint64", "UINT64", np.uint64, "int"),
        _t("float16", "FLOAT16", np.float16, "float"),
        _t("bfloat16", "BFLOAT16", ml_dtypes.bfloat16, "float"),
        _t("float32", "FLOAT", np.float32, "float"),
        _t("float64", "DOUBLE", np.float64, "float"),
        _t("float8_e4m3fn", "FLOAT8E4M3FN", ml_dtypes.float8_e4m3fn, "float"),
        _t("float8_e4m3fnuz", "FLOAT8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz, "float"),
        _t("float8_e5m2", "FLOAT8E5M2", ml_dtypes.float8_e5m2, "float"),
        _t("float8_e5m2fnuz", "FLOAT8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz, "float"),
        _t("string", "STRING", np.dtype(object), "string"),
    ]
}
#: The types beyond Cast-21's list: the 2-bit integers (Cast-25) and the further formats of
#: the registry, in registry order; ONNX names where ONNX has the type (Cast-25 added
#: FLOAT4E2M1 and FLOAT8E8M0, Cast-28 the two float6 types).
MORE_CAST_TYPES: dict[str, CastType] = {
    t.name: t
    for t in [
        _t("int2", "INT2", ml_dtypes.int2, "int"),
        _t("uint2", "UINT2", ml_dtypes.uint2, "int"),
        _t("float8_e4m3", None, ml_dtypes.float8_e4m3, "float"),
        _t("float8_e3m4", None, ml_dtypes.float8_e3m4, "float"),
        _t("float8_e4m3b11fnuz", None, ml_dtypes.float8_e4m3b11fnuz, "float"),
        _t(_E8M0, "FLOAT8E8M0", ml_dtypes.float8_e8m0fnu, "float"),
        _t("float6_e2m3fn", "FLOAT6E2M3", ml_dtypes.float6_e2m3fn, "float"),
        _t("float6_e3m2fn", "FLOAT6E3M2", ml_dtypes.float6_e3m2fn, "float"),
        _t(_FLOAT4, "FLOAT4E2M1", ml_dtypes.float4_e2m1fn, "float"),
    ]
}
#: Every type of ``fp8kit.cast``: Cast-21's numbers, the further formats, then string.
ALL_CAST_TYPES: dict[str, CastType] = {
    **{n: t for n, t in CAST_TYPES.items() if t.kind != "string"},
    **MORE_CAST_TYPES,
    "string": CAST_TYPES["string"],
}
_BY_DTYPE = {t.dtype: t for t in ALL_CAST_TYPES.values() if t.kind != "string"}
_BY_NAME = {
    **{t.name: t for t in ALL_CAST_TYPES.values()},
    **{t.onnx.lower(): t for t in ALL_CAST_TYPES.values() if t.onnx},
}
_BY_NAME.update(
    {
        "float": CAST_TYPES["float32"],
        "double": CAST_TYPES["float64"],
        "half": CAST_TYPES["float16"],
        "str": CAST_TYPES["string"],
    }
)


def _valid() -> str:
    return ", ".join(ALL_CAST_TYPES)


def cast_type(spec: Any, *, argname: str = "to") -> CastType:
    """The cast type named by a dtype, type name, ONNX name or fp8kit format name.

    Examples
    --------
    >>> from fp8kit.cast import cast_type
    >>> cast_type("FLOAT8E4M3FN").name, cast_type("f8e5m2").name, cast_type(float).name
    ('float8_e4m3fn', 'float8_e5m2', 'float64')
    >>> cast_type("FLOAT4E2M1").name
    'float4_e2m1fn'
    """
    spec = name_arg(spec)
    if isinstance(spec, CastType):
        return spec
    if isinstance(spec, str):
        t = _BY_NAME.get(spec.lower())
        if t is None:
            try:
                t = ALL_CAST_TYPES[get_format(spec).name]
            except (ValueError, KeyError):
                raise ValueError(f"unknown {argname} type {spec!r}; valid: {_valid()}") from None
        return t
    if spec is str:
        return CAST_TYPES["string"]
    try:
        dt = np.dtype(spec)
    except TypeError:
        raise TypeError(f"{argname} must be a dtype or type name; got {spec!r}") from None
    if dt.kind in "cC":
        raise TypeError(f"Cast-21 does not support complex types: {argname}={dt}")
    if dt.kind in "UST" or dt.kind == "O":
        return CAST_TYPES["string"]
    t = _BY_DTYPE.get(dt.newbyteorder("=") if dt.byteorder not in "=|" else dt)
    if t is None:
        raise TypeError(
            f"{argname} type {dt} is not a Cast-21 type or a format of fp8kit; valid: {_valid()}"
        )
    return t
