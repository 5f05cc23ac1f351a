"""ONNX Cast-21 for every numeric type: ``fp8kit.cast(x, to, saturate=True)``.

Also the further formats of the registry (float8_e4m3, float8_e3m4, float8_e4m3b11fnuz,
float8_e8m0fnu, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn), as source and destination.
Casts are compositions of the codec's steps (round, encode, decode) and of numpy casts
where numpy's semantics equal the spec's; see docs/cast.md for the full tables.

``fp8kit.cast`` is the function (re-exported by the package); this module's other public
names, :func:`cast_rule` and :func:`cast_table`, are re-exported too.
"""

from __future__ import annotations

import dataclasses
import math
import re
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from . import _args, _backends, _parallel
from ._casttypes import (
    _CAST_RULES,
    _CONFORMANCE,
    _E8M0,
    _FLOAT4,
    _SUB_BYTE,
    ALL_CAST_TYPES,
    CAST_TYPES,
    MORE_CAST_TYPES,
    CastType,
    _cast_rules,
    _Rules,
    cast_type,
)
from ._kernels.codec import dummy
from ._kernels.integer import int_to_odd_float64_kernel, saturating_kernel, x86_kernel
from ._kernels.rounding import NEAREST_EVEN, is_stochastic
from .codec import _FAST_ENCODE, _NEAREST_EVEN, _RANDOM_BITS, _run_plan, decode, encode
from .formats import _P3109_ONLY, FloatFormat, get_format

__all__ = [
    "cast",
    "cast_rule",
    "cast_table",
    "CastType",
    "cast_type",
    "CAST_TYPES",
    "MORE_CAST_TYPES",
    "ALL_CAST_TYPES",
    "RULES",
    "CAST_RULES",
]


# ------------------------------------------------------------------------------- rules
#: The readings of ``cast(..., rules=...)``.  Where ONNX's own texts, its conformance suite,
#: onnx.reference and ONNX Runtime disagree, the default ``"conformance"`` follows the suite
#: and, where the suite has no case, ONNX Runtime (CPU) unless that contradicts the Cast text;
#: each other name switches one disputed case to another reading (docs/cast.md lists them).
#: (Defined in fp8kit._casttypes, which the GPU twin shares.)
CAST_RULES = _CAST_RULES


def _source_type(x: np.ndarray) -> CastType:
    dt = x.dtype
    if dt.kind in "cC":
        raise TypeError(f"cast: complex input ({dt}) is not supported by Cast-21")
    if dt.kind in "UST" or (dt.kind == "O" and all(isinstance(v, str) for v in x.flat)):
        return CAST_TYPES["string"]
    if dt.kind == "O":
        raise TypeError("cast: object arrays must hold only str (a Cast-21 STRING tensor)")
    return cast_type(dt, argname="x")


def _codes_only(to: Any) -> FloatFormat | None:
    """The format ``to`` names when it is an IEEE P3109 format (not an ONNX type):
    ``cast`` returns its codes (as its ml_dtypes dtype for ``p3109_k8p4sf`` and
    ``p3109_k8p3sf``, which have the codes of float8_e4m3fnuz and float8_e5m2fnuz)."""
    if not isinstance(to, (str, FloatFormat)):
        return None
    try:
        fmt = get_format(to, argname="to")
    except ValueError:
        return None
    return fmt if fmt in _P3109_ONLY else None


def _to_codes(arr, src, fmt, sat, rounding, seed, random_bits) -> np.ndarray:
    """Cast to a P3109 format (no ONNX type, no dtype): its uint8 codes, by the float8 rules
    of Cast-21 as :func:`fp8kit.encode` has them (from the exact value, once)."""
    if src.kind not in ("float", "int", "bool"):
        raise ValueError(
            f"cast: to {fmt.name} (a P3109 format: the result is its codes) takes numbers; "
            f"got {src.name}"
        )
    if src.kind != "float":
        if src.dtype in (np.dtype(np.int64), np.dtype(np.uint64)) and np.any(
            np.abs(arr.astype(np.float64)) >= 2**53
        ):
            raise ValueError(
                f"cast: {src.name} values of 2**53 or more to {fmt.name} are not supported "
                "(not exact in float64); cast to float64 first if that is acceptable"
            )
        arr = arr.astype(np.float64)
    codes = encode(arr, fmt, saturate=sat, rounding=rounding, seed=seed, random_bits=random_bits)
    return codes if fmt.dtype is None else codes.view(fmt.dtype)


def cast(
    x: Any,
    to: Any,
    *,
    saturate: bool = True,
    rounding: str = "nearest_even",
    seed: Any = None,
    random_bits: int = 16,
    round_mode: str = "up",
    rules: Any = "conformance",
    flush_subnormals: bool = False,
    flush_subnormal_inputs: bool = False,
) -> np.ndarray:
    """Cast ``x`` to another type, with ONNX Cast semantics.

    Between the types of ONNX Cast-21's list, and from and to the further formats of the
    registry: ``float4_e2m1fn`` (ONNX ``FLOAT4E2M1``), ``float6_e2m3fn`` and
    ``float6_e3m2fn`` (``FLOAT6E2M3``, ``FLOAT6E3M2``), ``float8_e8m0fnu`` (``FLOAT8E8M0``)
    and ``float8_e4m3``, ``float8_e3m4``, ``float8_e4m3b11fnuz`` (not ONNX types; they
    follow the Cast-21 float8 tables); and Cast-25's ``int2``/``uint2`` (``INT2``,
    ``UINT2``) as int4/uint4.  docs/cast.md has the rule of every pair.

    Parameters
    ----------
    x : array_like
        bool, integer (including ml_dtypes int4/uint4 and int2/uint2), float (float16,
        bfloat16, float32, float64, or an ml_dtypes array of a float8, float6 or float4
        type) or string data.
    to : dtype or str
        numpy/ml_dtypes dtype, fp8kit format name or alias, or ONNX type name
        (``"FLOAT8E4M3FN"``, ``"FLOAT4E2M1"``, ``"INT4"``, ``"STRING"``, ...).  An IEEE
        P3109 format without an ml_dtypes type (``"p3109_k8p4se"``; no ONNX type either)
        gives its uint8 codes, by :func:`fp8kit.encode`'s rules (the Cast-21 float8 tables,
        rounded once from the exact value) from float, integer or bool data.
    saturate : bool, default True
        For float8 destinations, the Cast-21 saturate tables (float8_e4m3 and float8_e3m4
        take E5M2's column, float8_e4m3b11fnuz E4M3FNUZ's), with +-Inf -> +-max into the
        FNUZ types as ONNX's conformance suite; float6 and float4 have no Inf and no NaN and
        saturate either way.  Other destinations ignore it ("it only applies for float 8
        conversion"): floats out of an integer range give x86's truncating bits, as ONNX
        Runtime (``rules="int-clamp"`` clamps instead).
    rounding : str, default "nearest_even"
        For float16, bfloat16, float8, float6 and float4 destinations (float8_e8m0fnu takes
        ``round_mode``): any rounding mode of :func:`fp8kit.encode` (ONNX Cast itself rounds
        to nearest-even).  ``"stochastic"`` takes ``seed`` and ``random_bits`` as there; it
        needs float or 8- to 32-bit integer data (int64 values are not all exact in
        float64).
    seed, random_bits
        Stochastic rounding only; see :func:`fp8kit.encode`.
    flush_subnormals, flush_subnormal_inputs : bool, default False
        As in :func:`fp8kit.encode`, for the destinations that take ``rounding``; inputs
        that are subnormal in a float source type become zeros of their sign.
    round_mode : {"up", "down", "nearest"}, default "up"
        Casts to ``float8_e8m0fnu`` (``FLOAT8E8M0``) only: the ``round_mode`` attribute of
        Cast-24/25, bit-compatible with the ONNX reference (``onnx.reference``); see
        docs/formats.md.
    rules : str or iterable of str, default "conformance"
        Which reading of ONNX Cast applies where ONNX's texts, its conformance suite and
        ONNX Runtime disagree.  ``"conformance"``: the suite, then ONNX Runtime (CPU).  Other
        names (a key of :data:`CAST_RULES`, several joined with ``+``) switch one case each:
        ``"fnuz-inf-nan"`` (the Cast table's Inf -> NaN into FNUZ types), ``"float4-nan-six"``
        (the float4 page's NaN -> 6), ``"int-clamp"`` (floats clamped into integers, NaN ->
        0), ``"reference-int"`` (onnx.reference's integer bits), ``"round-once"`` (wide
        sources rounded once, not through float32), ``"exact-strings"`` (strings parsed
        exactly and printed with the shortest round-trip digits, not as ONNX Runtime);
        ``"legacy"`` is fp8kit 0.x's default.

    Returns
    -------
    ndarray
        Array of ``to``'s dtype (an ml_dtypes dtype for the narrow floats, an object array of
        str for STRING), shaped like ``x``.

    Raises
    ------
    TypeError
        For complex data or a dtype that is neither a Cast-21 type nor a format of fp8kit.
    ValueError
        For an unknown type name or ``rules`` name; a string that is not a number (names the
        element and its index); ``rounding`` for a destination that does not take it; or,
        for GPU arrays, a type outside Cast-21's list.

    Examples
    --------
    >>> import ml_dtypes, numpy as np, fp8kit
    >>> fp8kit.cast(np.array([200], np.int16), np.int8).tolist()
    [-56]
    >>> x = np.array([1e9, np.inf], np.float32)
    >>> fp8kit.cast(x, "float8_e5m2fnuz").view(np.uint8)  # +-max, as the conformance suite
    array([127, 127], dtype=uint8)
    >>> fp8kit.cast(x, "float8_e5m2fnuz", rules="fnuz-inf-nan").view(np.uint8)  # the table
    array([127, 128], dtype=uint8)
    >>> fp8kit.cast(np.float32([2.4, 2.6, -100.0, np.nan]), "FLOAT4E2M1").tolist()
    [2.0, 3.0, -6.0, -0.0]
    >>> fp8kit.cast(np.float32([np.nan]), "FLOAT4E2M1", rules="float4-nan-six").tolist()
    [6.0]
    >>> fp8kit.cast(np.float32([300.0, -9.0]), "INT8").tolist()  # x86's bits, as ONNX Runtime
    [44, -9]
    >>> fp8kit.cast(np.float32([300.0, np.nan]), "INT8", rules="int-clamp").tolist()
    [127, 0]
    >>> fp8kit.cast(np.array([0.5, 3, -6], ml_dtypes.float4_e2m1fn), "int8").tolist()
    [0, 3, -6]
    """
    fast = False
    if (
        type(x) is np.ndarray and (saturate is True or saturate is False) and seed is None
        and rounding is _NEAREST_EVEN and random_bits is _RANDOM_BITS and round_mode is _UP
        and flush_subnormals is False and flush_subnormal_inputs is False
    ):  # fmt: skip
        try:
            plan = _FAST_CAST.get((to, x.dtype, saturate, rules))
        except TypeError:  # an unhashable argument: the full path every time
            plan = False
        if plan:
            res = _run_plan(plan, x, None)
            if res is not None:
                return res
        fast = plan is None
    kind = _backends.kind_of(x)
    if kind != "numpy":
        return _backends.call(
            kind, "cast", cast, (x, to), dict(saturate=saturate, rounding=rounding, seed=seed,
            random_bits=random_bits, round_mode=round_mode, rules=rules,
            flush_subnormals=flush_subnormals, flush_subnormal_inputs=flush_subnormal_inputs),
        )  # fmt: skip
    to = _args.name_arg(to)
    arr = np.asarray(x)
    sat = _args.saturate(saturate, "cast")
    how = _cast_rules(rules, sat)
    src = _source_type(arr)
    codes_fmt = _codes_only(to)
    if codes_fmt is not None:
        return _to_codes(arr, src, codes_fmt, sat, rounding, seed, random_bits)
    dst = cast_type(to)
    arr = _args.native(arr)
    ftz = _args.flag(flush_subnormals, "flush_subnormals", "cast")
    if _args.flag(flush_subnormal_inputs, "flush_subnormal_inputs", "cast") and src.kind == "float":
        arr = np.asarray(_args.flush_inputs(arr))
    if dst.name == _E8M0:
        if src.kind == "string" and not how.exact_strings:
            arr, src = _stod_all(arr), CAST_TYPES["float64"]
        return _to_e8m0(arr, src, sat, round_mode, rounding, seed)
    mode = _args.rounding(rounding, seed, random_bits, "cast")[0]
    rnd = {"rounding": rounding, "seed": seed, "random_bits": random_bits}
    if ftz:
        rnd["flush_subnormals"] = True
    if mode != NEAREST_EVEN or ftz:
        if _format_of(dst) is None or src.kind not in ("float", "int"):
            raise ValueError(
                f"cast: rounding={rounding!r}{' and flush_subnormals' if ftz else ''} applies "
                "to casts from numbers to float16, "
                f"bfloat16, float8, float6 and float4 types; got {src.name} -> {dst.name}"
            )
        if is_stochastic(mode) and src.dtype in (np.dtype(np.int64), np.dtype(np.uint64)):
            raise ValueError(
                f"cast: rounding={rounding!r} from {src.name} is not supported (its values "
                "are not all exact in float64); cast to float64 first if that is acceptable"
            )
        return _numeric(arr, src, dst, sat, rnd, how)
    if src.kind == "string":
        return _from_string(arr, dst, sat, how)
    if dst.kind == "string":
        return _to_string(arr, src) if how.exact_strings else _to_string_like_ort(arr, src)
    if dst.kind == "bool":
        return _to_bool(arr, src)
    if src.kind == "bool":
        # "Casting from bool to floating point: {1.0, 0.0}; fixed point: {1, 0}."
        return _numeric(arr.astype(np.uint8), CAST_TYPES["uint8"], dst, sat, None, how)
    res = _numeric(arr, src, dst, sat, None, how)
    if fast and arr is x and src.name == "float32":
        _record_plan((to, x.dtype, saturate, rules), x, dst, sat, how)
    return res


#: The small-call fast path of cast (see fp8kit.codec's): a plan per (to, dtype, saturate,
#: rules), for the casts from float32 that are exactly one encode of the codes (no fix-up
#: that depends on the data), recorded by the first fully checked call.
_FAST_CAST: dict = {}
_UP = "up"


def _record_plan(key: tuple, x: np.ndarray, dst: CastType, sat: bool, how: _Rules) -> None:
    if dst.kind != "float":
        return
    if dst.name in ("bfloat16", "float16"):
        sat = False  # as _float_to_float
    elif dst.is_float8 or dst.is_finite_only:
        fmt = get_format(dst.name)
        if sat and fmt.specials == "fnuz" and not how.fnuz_inf_nan:
            return  # +-Inf replaced first, where the data has it
        if dst.name == _FLOAT4 and how.float4_nan_six:
            return  # NaN codes replaced after
    else:
        return
    # the plan that _float_to_float's encode call just recorded, its result typed
    plan = _FAST_ENCODE.get((dst.name, x.dtype, sat))
    if plan is not None:
        _FAST_CAST[key] = plan[:4] + (dst.dtype, None)


def _format_of(t: CastType):
    """The FloatFormat of a float type that has one (all but float32 and float64)."""
    if t.kind != "float" or t.name in ("float32", "float64"):
        return None
    return get_format(t.name)


# ------------------------------------------------------------------------------- numeric
def _to_bool(arr: np.ndarray, src: CastType) -> np.ndarray:
    # "+/- 0.0 to False; all else to True" (NaN too); integers: "zero to False".
    if src.kind == "float":
        arr = _widen_float(arr, src)
    elif src.name in _SUB_BYTE:
        arr = arr.astype(np.int8)
    return arr != 0


def _widen_float(arr: np.ndarray, src: CastType) -> np.ndarray:
    """float8/bfloat16/float16 -> float32, exact (every value fits)."""
    if src.dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        return arr
    return decode(arr, dtype=np.float32)


def _numeric(
    arr: np.ndarray,
    src: CastType,
    dst: CastType,
    sat: bool,
    rnd: dict | None = None,
    how: _Rules = _CONFORMANCE,
) -> np.ndarray:
    rnd = rnd or {}
    if src.kind == "float":
        narrow_dst = dst.kind == "float" and dst.name not in ("float32", "float64")
        if narrow_dst and src.name in ("bfloat16", "float16"):
            # encoded as they are: the same values as widened to float32 (exactly), without
            # a pass and a kernel (0.2 s to compile) to widen them first
            return _float_to_float(arr, dst, sat, rnd, how)
        wide = _widen_float(arr, src)
        if dst.kind == "int":
            f8_inf = np.isinf(wide) if src.is_narrow else None
            return _float_to_int(wide, dst, sat, f8_inf, how, src)
        if _through_float32(wide, dst, rnd, how):
            with np.errstate(over="ignore"):
                wide = wide.astype(np.float32)
        return _float_to_float(wide, dst, sat, rnd, how)
    # integer source
    if src.name in _SUB_BYTE:
        arr = arr.astype(np.int8)
    if dst.kind == "int":
        return _int_to_int(arr, dst)
    return _int_to_float(arr, dst, sat, rnd, how)


def _through_float32(x: np.ndarray, dst: CastType, rnd: dict, how: _Rules) -> bool:
    """Whether float64 or wide-integer data goes to ``dst`` through float32 (two roundings),
    as ONNX Runtime and onnx.reference do: to float16, bfloat16 and the narrow floats, with
    nearest-even rounding, unless ``rules="round-once"``."""
    if how.round_once or rnd.get("rounding", "nearest_even") != "nearest_even":
        return False
    wide = x.dtype.itemsize >= 4 and x.dtype != np.dtype(np.float32)
    return wide and dst.kind == "float" and dst.dtype.itemsize <= 2


def _float_to_float(
    x: np.ndarray, dst: CastType, sat: bool, rnd: dict | None = None, how: _Rules = _CONFORMANCE
) -> np.ndarray:
    rnd = rnd or {}
    if dst.is_float8 or dst.is_finite_only:
        # float8: the Cast-21 tables (the codec's saturate rule); float6/float4 have no Inf
        # and no NaN, so the codec saturates them either way ("Downcasting RNE with
        # saturation", ONNX's float6 page; float4's table: "x>6 | 6", "+Inf | 6").
        fmt = get_format(dst.name)
        if sat and fmt.specials == "fnuz" and not how.fnuz_inf_nan:
            # the conformance suite, onnx.reference and ONNX Runtime: +-Inf -> +-max (the
            # Cast table: NaN, rules="fnuz-inf-nan")
            with np.errstate(invalid="ignore"):  # (a signaling NaN of bfloat16/float16 data)
                inf = np.isinf(x)
            if inf.any():
                x = np.where(inf, np.copysign(x.dtype.type(fmt.max), x), x)
        codes = encode(x, dst.name, saturate=sat, **rnd)
        if dst.name == _FLOAT4 and how.float4_nan_six:
            # ONNX's float4 table: "NaN | 6" (either sign).  The codec, ml_dtypes,
            # onnx.reference and the conformance suite give a zero of the opposite sign
            # instead; float6 keeps that (its page: "nan | -0.0 (unspecified; matches
            # FLOAT4E2M1's cast behavior)").
            nan = np.isnan(x)
            if nan.any():
                codes[nan] = get_format(_FLOAT4).max_code
        return codes.view(dst.dtype)
    if dst.name in ("bfloat16", "float16"):
        # "floating point: +/- infinity if OOR": saturate applies to float8 only.
        return encode(x, dst.name, saturate=False, **rnd).view(dst.dtype)
    with np.errstate(over="ignore"):  # float64 -> float32 overflow is Inf by the spec
        return x.astype(dst.dtype)


def _int_to_int(arr: np.ndarray, dst: CastType) -> np.ndarray:
    # "discard higher bits and reinterpret (two's complement)": numpy's integer casts.
    if dst.name in _SUB_BYTE:
        return _low_bits(arr, dst.name).astype(dst.dtype)
    return arr.astype(dst.dtype)


def _run_unary(kernel, x: np.ndarray, out_dtype) -> np.ndarray:
    """Run an elementwise kernel over x (any layout) into a new array of out_dtype."""
    out = np.empty(x.shape, dtype=out_dtype)
    flat = np.ascontiguousarray(x).reshape(-1)
    _parallel.run(kernel, flat, dummy(np.uint32), dummy(np.uint8), out.reshape(-1))
    return out


def _round_to_odd_f64(v: np.ndarray) -> np.ndarray:
    """int64/uint64 -> float64 rounded to odd (compiled): one more rounding to any format of
    at most 51 bits of precision then equals a single rounding of the integer."""
    return _run_unary(int_to_odd_float64_kernel(v.dtype), v, np.float64)


def _int_to_float(
    arr: np.ndarray, dst: CastType, sat: bool, rnd: dict | None = None, how: _Rules = _CONFORMANCE
) -> np.ndarray:
    if dst.name in ("float32", "float64"):
        return arr.astype(dst.dtype)  # C int -> float conversion: one rounding
    if _through_float32(arr, dst, rnd or {}, how):
        # ONNX Runtime and onnx.reference: the C conversion to float32 (nearest-even), then
        # float32 -> dst (rules="round-once" rounds the integer once)
        return _float_to_float(arr.astype(np.float32), dst, sat, rnd, how)
    if arr.dtype in (np.dtype(np.int64), np.dtype(np.uint64)):
        # round-to-odd keeps every directed and nearest rounding to <= 51 bits exact
        f64 = _round_to_odd_f64(arr)
    else:
        f64 = arr.astype(np.float64)  # exact
    return _float_to_float(f64, dst, sat, rnd, how)


# ------------------------------------------------------------------------------- e8m0
def _to_e8m0(
    arr: np.ndarray, src: CastType, sat: bool, round_mode: Any, rounding: Any, seed: Any
) -> np.ndarray:
    """Cast-24/25 to FLOAT8E8M0 as the ONNX reference computes it: the value is taken as
    float32, its sign ignored; the exponent field is the code, raised by one by
    ``round_mode`` ("up": any fraction; "nearest": guard bit and (round or sticky bit or a
    nonzero exponent), so ties go up except below 2**-126; "down": never); the largest
    exponent does not round up under saturate; NaN and Inf give the NaN code 0xFF.  (So 0
    gives 2**-127, and 2**-127 itself rounds "up" to 2**-126: the reference works on the
    float32 exponent field, where 2**-127 is a subnormal.)"""
    if round_mode not in ("up", "down", "nearest"):
        raise ValueError(f"cast: round_mode must be 'up', 'down' or 'nearest'; got {round_mode!r}")
    if rounding != "nearest_even" or seed is not None:
        raise ValueError(
            f"cast: to float8_e8m0fnu, Cast-24/25's round_mode ('up', 'down', 'nearest') "
            f"chooses the rounding, not rounding={rounding!r}; "
            "fp8kit.encode(x, 'float8_e8m0fnu', rounding=...) takes every mode"
        )
    if src.name == _E8M0:
        return arr.copy()  # (the float32 detour below would round 2**-127 "up")
    if src.kind == "string":
        arr, src = _parse_floats(arr, odd=True), CAST_TYPES["float64"]
    if src.kind == "float":
        arr = _widen_float(arr, src)
    elif src.name in _SUB_BYTE:
        arr = arr.astype(np.int8)
    with np.errstate(over="ignore", invalid="ignore"):  # as the reference: via float32
        bits = np.ascontiguousarray(arr.astype(np.float32)).view(np.uint32)
    exp = (bits >> np.uint32(23)) & np.uint32(0xFF)
    special = exp == 0xFF
    if round_mode == "up":
        up = (bits & np.uint32(0x7FFFFF)) != 0
    elif round_mode == "nearest":
        guard = (bits & np.uint32(0x400000)) != 0
        rest = (bits & np.uint32(0x3FFFFF)) != 0
        up = guard & (rest | (exp > 0))
    else:
        up = np.zeros(bits.shape, bool)
    if sat:
        up &= exp != 0xFE
    code = np.where(special, np.uint32(0xFF), exp + up).astype(np.uint8)
    return code.view(ml_dtypes.float8_e8m0fnu)


#: ONNX Runtime's float -> uint32 takes its vectorised pattern from these sources (float16 and
#: the float8 types convert one element at a time, as numpy's scalar loop)
_UINT32_VECTOR_SOURCES = ("bfloat16", "float32", "float64")


def _float_to_int(
    x: np.ndarray,
    dst: CastType,
    sat: bool,
    f8_inf=None,
    how: _Rules = _CONFORMANCE,
    src: CastType | None = None,
) -> np.ndarray:
    """x: float32 or float64 (narrower sources widened exactly); src: the original type."""
    if not (how.int_clamp or how.reference_int):
        return _float_to_int_like_onnxruntime(x, dst, src.name if src else x.dtype.name)
    target = np.dtype(np.int8) if dst.name in _SUB_BYTE else dst.dtype
    if how.int_clamp:
        out = _run_unary(saturating_kernel(x.dtype, target), x, target)
        if dst.name in _SUB_BYTE:  # saturated to int8 first, then to 4 or 2 bits
            signed, nbits = _SUB_BYTE[dst.name]
            lo, hi = (-(1 << (nbits - 1)), (1 << (nbits - 1)) - 1) if signed else (0, 2**nbits - 1)
            return np.clip(out, lo, hi).astype(dst.dtype)
        return out
    return _float_to_int_like_reference(x, dst, f8_inf)


def _float_to_int_like_onnxruntime(x: np.ndarray, dst: CastType, src_name: str) -> np.ndarray:
    """ONNX Runtime's (CPU, x86-64) bits: x86's truncating conversions (numpy's scalar-loop
    bits, as onnx.reference, for every element, float8 NaN and Inf included), but uint32 from
    bfloat16/float32/float64 through ORT's vectorised pattern and int4/uint4 rounded half
    away from zero.  int2/uint2 (no ORT kernel) take the reference's bits."""
    name = dst.name
    if name == "uint32" and src_name in _UINT32_VECTOR_SOURCES:
        target = "uint32_vector"
    elif name in ("int4", "uint4"):
        target = name + "_round"
    else:
        return _float_to_int_like_reference(x, dst, None)
    res = _run_unary(x86_kernel(x.dtype, target), x, np.int8 if name in _SUB_BYTE else dst.dtype)
    return res.astype(dst.dtype) if name in _SUB_BYTE else res


def _float_to_int_like_reference(x: np.ndarray, dst: CastType, float8_inf=None) -> np.ndarray:
    """The bits numpy's float -> int casts give on x86-64 (what onnx.reference returns),
    made deterministic: numpy's float -> uint32 differs between its SIMD and scalar loops
    (on length and position); fp8kit always gives the scalar loop's bits."""
    name = dst.name
    sub_byte = name in _SUB_BYTE
    # 2 bits: the low bits of uint4's (the low 4 bits of the same int32 conversion)
    kernel = x86_kernel(x.dtype, "uint4" if name in ("int2", "uint2") else name)
    res = _run_unary(kernel, x, np.int8 if sub_byte else dst.dtype)
    if name in ("int2", "uint2"):
        res = _low_bits(res, name)
    if float8_inf is not None:
        # ml_dtypes converts float8 NaN to 0 and +-Inf by saturating (through int32 for the
        # sub-byte types); only the few special elements are rewritten.
        if sub_byte:
            top, bottom = _low_bits(2**31 - 1, name), _low_bits(-(2**31), name)
        else:
            info = np.iinfo(dst.dtype)
            top, bottom = info.max, info.min
        special = np.flatnonzero(float8_inf.ravel() | np.isnan(x.ravel()))
        if special.size:
            flat_res = res.reshape(-1)
            vals = x.ravel()[special]
            flat_res[special] = np.where(np.isnan(vals), 0, np.where(vals > 0, top, bottom))
    return res.astype(dst.dtype) if sub_byte else res


def _low_bits(v, name: str) -> np.ndarray:
    """The low 4 or 2 bits of integers, as int8 values of int4/int2 (sign-extended) or
    uint4/uint2."""
    signed, nbits = _SUB_BYTE[name]
    low = np.asarray(v).astype(np.int64) & ((1 << nbits) - 1)
    if signed:
        low = np.where(low >= 1 << (nbits - 1), low - (1 << nbits), low)
    return np.asarray(low, dtype=np.int8)


# ------------------------------------------------------------------------------- strings
_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
_SPECIAL = {
    "+inf": math.inf,
    "inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": -math.nan,
}


def _parse(s: str, index: tuple[int, ...]) -> Fraction | float:
    special = _SPECIAL.get(s.strip().lower())
    if special is not None:
        return special
    if not _NUMBER.match(s):
        where = ", ".join(map(str, index))
        raise ValueError(
            f"cast: x[{where}] = {s!r} is not a number (plain or scientific notation, or "
            "+INF, INF, -INF, NaN in any case)"
        )
    q = Fraction(s.strip())
    if q == 0 and s.strip().startswith("-"):
        return -0.0  # a Fraction has no signed zero
    return q


def _to_float64(q: Fraction | float) -> float:
    """Nearest-even float64 of an exact value; beyond float64's range, +-Inf."""
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def _to_odd_float64(q: Fraction | float) -> float:
    """A Fraction rounded to float64 to odd: exact for one more rounding (see
    _round_to_odd_f64)."""
    if isinstance(q, float):
        return q
    f = _to_float64(q)  # nearest-even, correctly rounded
    if math.isfinite(f) and Fraction(f) != q and (int(np.float64(f).view(np.uint64)) & 1) == 0:
        f = math.nextafter(f, math.inf if Fraction(f) < q else -math.inf)
    if f == 0 and q < 0:
        f = -0.0
    return f


def _parse_floats(arr: np.ndarray, *, odd: bool, values=None) -> np.ndarray:
    """Strings -> float64: nearest-even, or rounded to odd (then one more rounding to a
    narrower type is a single rounding of the decimal value)."""
    if values is None:
        values = [_parse(str(s), idx) for idx, s in np.ndenumerate(arr)]
    to_f64 = _to_odd_float64 if odd else _to_float64
    return np.array([to_f64(v) for v in values], dtype=np.float64).reshape(arr.shape)


def _from_string(
    arr: np.ndarray, dst: CastType, sat: bool, how: _Rules = _CONFORMANCE
) -> np.ndarray:
    if dst.kind == "string":
        return np.array([str(s) for s in arr.ravel()], dtype=object).reshape(arr.shape)
    if not how.exact_strings:
        return _from_string_like_ort(arr, dst, sat, how)
    values = [_parse(str(s), idx) for idx, s in np.ndenumerate(arr)]
    floats = _parse_floats(arr, odd=dst.name != "float64", values=values)
    if dst.kind == "bool":
        return floats != 0
    # the decimal value is rounded once (the float64 is rounded to odd for that); to integers,
    # truncated toward zero (the spec's example: "100.5" -> 100), out of range x86's bits
    once = dataclasses.replace(how, round_once=True, reference_int=not how.int_clamp)
    result = _numeric(floats, CAST_TYPES["float64"], dst, sat, None, once)
    if dst.kind == "int":
        # integer literals are exact, whatever their size; only the others go through floats
        literal = [isinstance(v, Fraction) and v.denominator == 1 for v in values]
        if any(literal):
            mask = np.array(literal).reshape(arr.shape)
            exact = [v for v, lit in zip(values, literal, strict=True) if lit]
            result[mask] = _python_ints_to_int(exact, (len(exact),), dst, how.int_clamp)
    return result


def _python_ints_to_int(values, shape, dst: CastType, sat: bool) -> np.ndarray:
    """Integer literals are exact: ``sat`` (rules="int-clamp") clamps them to the range,
    otherwise they wrap (two's complement), as integer -> integer casts do."""
    signed, bits = _int_bits(dst)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    out = []
    for v in values:
        n = int(v)
        if sat:
            n = min(max(n, lo), hi)
        else:
            n &= (1 << bits) - 1
            if lo < 0 and n > hi:
                n -= 1 << bits
        out.append(n)
    if bits <= 4:
        return np.array(out, dtype=np.int8).reshape(shape).astype(dst.dtype)
    return np.array(out, dtype=object).reshape(shape).astype(dst.dtype)


def _shortest(value: float, fmt: str) -> str:
    """Shortest decimal that parses back (as cast parses strings) to the same value of the
    format, numpy style."""
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value == 0:
        return "-0.0" if math.copysign(1, value) < 0 else "0.0"
    target = encode(value, fmt, saturate=False)
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if encode(_to_odd_float64(Fraction(text)), fmt, saturate=False) == target:
            break
    return repr(float(text))  # numpy/Python style: positional for 1e-4 <= |x| < 1e16


def _to_string(arr: np.ndarray, src: CastType) -> np.ndarray:
    if src.name in _SUB_BYTE:
        text = [str(int(v)) for v in arr.astype(np.int8).ravel()]
    elif src.name == _E8M0:
        # every value is a float32 (2**-127 a subnormal), and strings reach FLOAT8E8M0
        # through float32 (Cast-24/25's round_mode works on its bits): float32's digits
        text = [str(v) for v in decode(arr, dtype=np.float32).ravel()]
    elif src.kind == "float" and src.name not in ("float16", "float32", "float64"):
        # bfloat16 and float8: the shortest digits that round-trip in that format
        text = [_shortest(float(v), src.name) for v in decode(arr, dtype=np.float64).ravel()]
    else:
        # str() of numpy scalars: the shortest round-trip digits (what onnx.reference gives)
        text = [str(v) for v in arr.ravel()]
    return np.array(text, dtype=object).reshape(arr.shape)


# ----------------------------------------------------------- strings as ONNX Runtime reads them
# ONNX Runtime (CPU) parses a string with the C++ library: std::stod into floats (then the
# double is cast as a float64 would be: to float32, float16, bfloat16 and float8 through
# float32), std::stoll into signed and std::stoull into unsigned integers and bool, the
# int4/uint4 types through std::stod; it prints numbers with std::to_string (integers, bool
# as 1/0) and "%.8g" (every float type, float64 too), NaN as "NaN", +-Inf as "INF"/"-INF".
# All three read the longest prefix that is a number, after leading white space ("1e3" -> 1
# into integers, "12abc" -> 12, "1_000" -> 1) and raise on no number at all or on a value out
# of range (stod: beyond float64's range, or a nonzero value that underflows inexactly into
# float64's subnormals or zero).
_C_SPACE = "[ \t\n\v\f\r]*"
_STOD = re.compile(
    _C_SPACE + r"([+-]?)(?:"
    r"(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
    r"|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|([iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
    r"|([nN][aA][nN])(?:\(([0-9A-Za-z_]*)\))?"
    ")"
)
_STOLL = re.compile(_C_SPACE + r"([+-]?)([0-9]+)")
_TINY = 2.2250738585072014e-308  # float64's smallest normal
_TINY_EDGE = Fraction(2) ** -1022 - Fraction(2) ** -1076  # from here on, rounds to _TINY


def _ort_error(func: str, s: str, index: tuple[int, ...], why: str) -> ValueError:
    where = ", ".join(map(str, index))
    return ValueError(
        f"cast: x[{where}] = {s!r} {why} (ONNX Runtime's std::{func} raises here; "
        "rules='exact-strings' reads strings exactly, with its own errors)"
    )


def _nan_payload(sign: str, seq: str | None) -> float:
    """glibc's strtod of "nan(n-char-sequence)": the sequence (read as strtoull's base 0)
    in the mantissa's low 51 bits; the quiet NaN otherwise."""
    bits = 0x7FF8000000000000
    if seq:
        try:
            if seq[:2].lower() == "0x":
                n = int(seq[2:], 16)
            elif seq.startswith("0"):
                n = int(seq, 8)
            else:
                n = int(seq, 10)
            bits |= n & ((1 << 51) - 1)
        except ValueError:
            pass
    if sign == "-":
        bits |= 1 << 63
    return float(np.uint64(bits).view(np.float64))


def _stod(s: str, index: tuple[int, ...]) -> float:
    """std::stod (glibc's strtod, C locale) of one string."""
    m = _STOD.match(s)
    if m is None:
        raise _ort_error("stod", s, index, "does not start with a number")
    sign, hexa, dec, inf, nan, seq = m.groups()
    if nan:
        return _nan_payload(sign, seq)
    if inf:
        return -math.inf if sign == "-" else math.inf
    text = sign + (hexa or dec)
    try:
        v = float.fromhex(text) if hexa else float(text)
    except OverflowError:
        v = math.inf
    if math.isinf(v):
        raise _ort_error("stod", s, index, "is out of float64's range")
    if abs(v) <= _TINY:
        # glibc's ERANGE on underflow: the value is tiny (below 2**-1022 once rounded to 53
        # bits with an unbounded exponent) and the result inexact
        if v == 0:
            digits = re.sub(r"[pPeE].*", "", (hexa or dec)[2 if hexa else 0 :])
            underflow = any(c not in "0." for c in digits)
        else:
            q = _hex_fraction(text) if hexa else Fraction(text)
            underflow = abs(q) < _TINY_EDGE and Fraction(v) != q
        if underflow:
            raise _ort_error("stod", s, index, "underflows float64 (inexact)")
    return v


def _hex_fraction(text: str) -> Fraction:
    """The exact value of a C hexadecimal float literal."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")[2:]
    mant, _, exp = body.replace("P", "p").partition("p")
    whole, _, frac = mant.partition(".")
    q = Fraction(int((whole + frac) or "0", 16), 16 ** len(frac))
    return sign * q * Fraction(2) ** int(exp or "0")


def _stod_all(arr: np.ndarray) -> np.ndarray:
    out = np.empty(arr.shape, np.float64)
    for idx, s in np.ndenumerate(arr):
        out[idx] = _stod(str(s), idx)
    return out


def _stoll_all(arr: np.ndarray, unsigned: bool) -> list[int]:
    """std::stoll / std::stoull (base 10) of every string, as Python ints (stoull: modulo
    2**64, a leading '-' negating as strtoull does)."""
    func, lo, hi = (
        ("stoull", 0, (1 << 64) - 1) if unsigned else ("stoll", -(1 << 63), (1 << 63) - 1)
    )
    out = []
    for idx, s in np.ndenumerate(arr):
        s = str(s)
        m = _STOLL.match(s)
        if m is None:
            raise _ort_error(func, s, idx, "does not start with a base-10 integer")
        sign, digits = m.groups()
        n = int(digits)
        if unsigned:
            if n > hi:
                raise _ort_error(func, s, idx, "is out of uint64's range")
            n = (-n) % (1 << 64) if sign == "-" else n
        else:
            n = -n if sign == "-" else n
            if not lo <= n <= hi:
                raise _ort_error(func, s, idx, "is out of int64's range")
        out.append(n)
    return out


def _from_string_like_ort(arr: np.ndarray, dst: CastType, sat: bool, how: _Rules) -> np.ndarray:
    if dst.kind == "bool":
        return np.array([n != 0 for n in _stoll_all(arr, True)], bool).reshape(arr.shape)
    if dst.kind == "int" and dst.name not in _SUB_BYTE:
        unsigned = not _int_bits(dst)[0]
        ints = _stoll_all(arr, unsigned)
        return _python_ints_to_int(ints, arr.shape, dst, False)
    # floats, and int4/uint4 (int2/uint2 as them): std::stod, then as from float64
    return _numeric(_stod_all(arr), CAST_TYPES["float64"], dst, sat, None, how)


def _g8(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return f"{v:.8g}"


def _to_string_like_ort(arr: np.ndarray, src: CastType) -> np.ndarray:
    if src.kind == "bool":
        text = ["1" if v else "0" for v in arr.ravel()]
    elif src.kind == "int":
        wide = arr.astype(np.int8) if src.name in _SUB_BYTE else arr
        text = [str(int(v)) for v in wide.ravel()]
    else:
        wide = (
            arr
            if src.name == "float64"
            else decode(arr, dtype=np.float64)
            if _format_of(src)
            else arr.astype(np.float64)
        )
        text = [_g8(float(v)) for v in wide.ravel()]
    return np.array(text, dtype=object).reshape(arr.shape)


# ------------------------------------------------------------------------------- the table
#: Legend of :func:`cast_table`: what each rule code means.
RULES = {
    "=": "same type: unchanged",
    "E": "exact (every value of the source exists in the destination)",
    "R": "round to nearest-even (float64 and 32/64-bit integers through float32, as ONNX "
    "Runtime; rules='round-once': once); +-Inf if out of range",
    "F8": "round to nearest-even (wide sources through float32, as R); overflow, Inf and NaN "
    "by the Cast-21 float8 tables (saturate), +-Inf -> +-max into FNUZ types with saturate "
    "(the conformance suite; rules='fnuz-inf-nan': NaN)",
    "W": "integer wrap: keep the low bits, two's complement",
    "T": "truncate toward zero (int4/uint4: round half away from zero, as ONNX Runtime); out "
    "of range, NaN, Inf: x86's bits, as ONNX Runtime, whatever saturate says "
    "(rules='int-clamp': clamp, NaN -> 0)",
    "B": "to bool: zero (+-0.0) -> False, everything else (NaN too) -> True",
    "01": "from bool: False -> 0, True -> 1",
    "P": "parse as ONNX Runtime: a number prefix by std::stod, then as from float64 (into "
    "bool and the integers but int4/uint4: std::stoull/stoll, wrapped); rules='exact-strings': "
    "the exact decimal, rounded once",
    "S": "print as ONNX Runtime: '%.8g' (NaN, INF, -INF), integers' digits, bool as 1/0; "
    "rules='exact-strings': the shortest decimal that round-trips",
    "F6": "to float6 (no Inf, no NaN): round as R; beyond +-max and +-Inf -> +-max whatever "
    "saturate says; NaN -> zero of the opposite sign (as onnx.reference)",
    "F4": "to float4_e2m1fn (no Inf, no NaN): round as R; beyond +-6 and +-Inf -> +-6 "
    "whatever saturate says; NaN -> zero of the opposite sign (the conformance suite; "
    "rules='float4-nan-six': +6, ONNX's float4 page)",
    "E0": "to float8_e8m0fnu: Cast-24/25's round_mode on the float32 value's exponent, as "
    "onnx.reference (sign ignored, 0 -> 2^-127, NaN and +-Inf -> NaN)",
}


def _int_bits(t: CastType) -> tuple[bool, int]:
    if t.name in _SUB_BYTE:
        return _SUB_BYTE[t.name]
    info = np.iinfo(t.dtype)
    return info.min < 0, info.bits


def _fits(src: CastType, dst: CastType) -> bool:
    """Every value of src is a value of dst."""
    if src.kind == "int" and dst.kind == "int":
        (ss, sb), (ds, db) = _int_bits(src), _int_bits(dst)
        return (ss == ds and sb <= db) or (not ss and ds and sb < db)
    if src.kind == "int" and dst.kind == "float":
        signed, nbits = _int_bits(src)
        fmt = get_format(dst.name) if dst.name not in ("float32", "float64") else None
        mant = {"float32": 24, "float64": 53}.get(dst.name) or fmt.mantissa_bits + 1
        top = nbits - 1 if signed else nbits
        # largest magnitude: -2**top (signed) or 2**top - 1 (unsigned)
        return top <= mant and (fmt is None or 2.0**top - (0 if signed else 1) <= fmt.max)
    if src.kind == "float" and dst.kind == "float":
        if dst.name == "float64" or (dst.name == "float32" and src.name != "float64"):
            return True
        if src.name in ("float32", "float64"):
            return False
        s, d = get_format(src.name), get_format(dst.name)
        return (
            s.mantissa_bits <= d.mantissa_bits
            and s.minexp - s.mantissa_bits >= (d.minexp - d.mantissa_bits)
            and s.max <= d.max
            and (d.has_inf or not s.has_inf)
            and (d.has_nan or not s.has_nan)
            and (d.has_negative_zero or not s.has_negative_zero)
            and d.signed
        )
    return False


def cast_rule(src: Any, dst: Any) -> str:
    """The rule code (a key of :data:`RULES`) that ``cast`` applies from src to dst.

    Parameters
    ----------
    src, dst : dtype or str
        Source and destination types, spelled as for :func:`fp8kit.cast`'s ``to``.

    Returns
    -------
    str
        ``"="``, ``"E"``, ``"R"``, ``"F8"``, ``"F6"``, ``"F4"``, ``"E0"``, ``"W"``,
        ``"T"``, ``"B"``, ``"01"``, ``"P"`` or ``"S"`` (the legend of :func:`cast_table`).

    Raises
    ------
    ValueError
        If a type name is unknown.
    TypeError
        If a type is not a type spec, or a dtype that ``cast`` does not know (complex ones).

    Examples
    --------
    >>> from fp8kit.cast import cast_rule
    >>> cast_rule("int16", "int8"), cast_rule("float32", "FLOAT8E4M3FN")
    ('W', 'F8')
    >>> cast_rule("float32", "FLOAT4E2M1"), cast_rule("FLOAT4E2M1", "float8_e4m3fn")
    ('F4', 'E')
    """
    s, d = cast_type(src, argname="src"), cast_type(dst, argname="dst")
    if s == d:
        return "="
    if d.kind == "string":
        return "S"
    if s.kind == "string":
        return "P"
    if d.kind == "bool":
        return "B"
    if d.name == _E8M0:
        return "E0"
    if s.kind == "bool":
        return "01"
    if _fits(s, d):
        return "E"
    if d.kind == "int":
        return "W" if s.kind == "int" else "T"
    if d.is_float8:
        return "F8"
    if d.is_finite_only:
        return "F4" if d.name == _FLOAT4 else "F6"
    return "R"


def _short(name: str) -> str:
    return (
        name.replace("float8_", "f8_")
        .replace("float", "f")
        .replace("uint", "u")
        .replace("int", "i")
        .replace("string", "str")
    )


def cast_table(sources: Any = None, destinations: Any = None) -> str:
    """A table of :func:`cast_rule` (rows: from, columns: to) as Markdown.

    Parameters
    ----------
    sources, destinations : iterable of type specs, optional
        Rows and columns, spelled as for :func:`fp8kit.cast`'s ``to``; default: the 20
        types of ONNX Cast-21's list (``fp8kit.cast.ALL_CAST_TYPES`` has every type).

    Returns
    -------
    str
        The table and, below it, the legend of the rule codes it uses.

    Raises
    ------
    ValueError, TypeError
        If a type is unknown, as for :func:`cast_rule`.

    Examples
    --------
    >>> from fp8kit.cast import cast_table
    >>> cast_table().splitlines()[0][:19]
    '| from / to | bool '
    >>> print(cast_table(["float32", "FLOAT4E2M1"], ["float4_e2m1fn"]).splitlines()[2])
    | **float32** | F4 |
    """
    rows_t = [cast_type(t, argname="sources") for t in (sources or CAST_TYPES)]
    cols_t = [cast_type(t, argname="destinations") for t in (destinations or CAST_TYPES)]
    head = "| from / to | " + " | ".join(_short(d.name) for d in cols_t) + " |"
    rows = [head, "|" + "---|" * (len(cols_t) + 1)]
    used = set()
    for s in rows_t:
        codes = [cast_rule(s, d) for d in cols_t]
        used.update(codes)
        rows.append(f"| **{s.name}** | " + " | ".join(codes) + " |")
    legend = "\n".join(f"- `{code}`: {text}" for code, text in RULES.items() if code in used)
    return "\n".join(rows) + "\n\n" + legend
