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


# ------------------------------------------------------------------------------- rules
#: The readings of ``cast(..., rules=...)``.  Where ONNX's own texts, its conformance suite,
#: onnx.reference and ONNX Runtime disagree, the default ``"conformance"`` follows the suite
#: and, where the suite has no case, ONNX Runtime (CPU) unless that contradicts the Cast text;
#: each other name switches one disputed case to another reading (docs/cast.md lists them).
_CAST_RULES = {
    "conformance": "ONNX's conformance suite, then ONNX Runtime (CPU): the default",
    "fnuz-inf-nan": "+-Inf into a FNUZ float8 type with saturate=True gives NaN (the Cast "
    "table) instead of +-max (the suite, onnx.reference, ONNX Runtime)",
    "float4-nan-six": "NaN into float4_e2m1fn gives +6 (ONNX's float4 page) instead of the "
    "zero of the opposite sign (the suite, onnx.reference, ml_dtypes)",
    "int-clamp": "floats into integers: out-of-range values clamp to the integer range and NaN "
    "gives 0 (fp8kit's own reading of 'undefined') instead of x86's truncating bits",
    "reference-int": "floats into integers: onnx.reference's bits (numpy's scalar loop; int4 "
    "and uint4 truncate; float8 NaN -> 0 and +-Inf saturate, as ml_dtypes) instead of "
    "ONNX Runtime's",
    "round-once": "int32/int64/uint32/uint64 and float64 into float16, bfloat16 and the "
    "narrow floats are rounded once from the exact value instead of through float32 (the "
    "double rounding of ONNX Runtime and onnx.reference)",
    "exact-strings": "strings: fp8kit's exact reading (a decimal parsed exactly and rounded "
    "once, integer literals exact, strict syntax; numbers printed with the shortest digits "
    "that round-trip) instead of ONNX Runtime's (std::stod/stoll/stoull prefixes, '%.8g')",
    "legacy": "fp8kit 0.x's default: fnuz-inf-nan, float4-nan-six, round-once, exact-strings, "
    "and int-clamp with saturate=True or reference-int with saturate=False",
}


@dataclasses.dataclass(frozen=True)
class _Rules:
    """The resolved ``rules=`` of one call (all False: the conformance default)."""

    fnuz_inf_nan: bool = False
    float4_nan_six: bool = False
    int_clamp: bool = False
    reference_int: bool = False
    round_once: bool = False
    exact_strings: bool = False


_CONFORMANCE = _Rules()


def _cast_rules(rules: Any, sat: bool) -> _Rules:
    """Validate ``rules=``: a name of :data:`CAST_RULES`, several joined with ``+``, or an
    iterable of names (or rules already resolved)."""
    if isinstance(rules, _Rules):
        return rules
    if isinstance(rules, str):
        names = [n.strip() for n in rules.split("+")]
    else:
        try:
            names = list(rules)
        except TypeError:
            raise TypeError(
                f"cast: rules must be a str or an iterable of str; got {rules!r}"
            ) from None
        if not all(isinstance(n, str) for n in names):
            raise TypeError(f"cast: rules must be a str or an iterable of str; got {rules!r}")
    flags: set[str] = set()
    for name in names:
        if name not in _CAST_RULES:
            raise ValueError(
                f"cast: unknown rules name {name!r} in rules={rules!r}; valid: "
                + ", ".join(_CAST_RULES)
            )
        if name == "legacy":
            flags |= {"fnuz-inf-nan", "float4-nan-six", "round-once", "exact-strings"}
            flags.add("int-clamp" if sat else "reference-int")
        elif name != "conformance":
            flags.add(name)
    if {"int-clamp", "reference-int"} <= flags:
        raise ValueError(
            f"cast: rules={rules!r} asks for both 'int-clamp' and 'reference-int' (with "
            "'legacy', saturate chooses one of them)"
        )
    return _Rules(**{f.replace("-", "_"): True for f in flags})
