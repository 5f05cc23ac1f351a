"""The rule machine: join, category rule, operation; the cached result_type."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._policy import OPENVINO, PromotionPolicy
from ._types import (
    _CATEGORY,
    _CATEGORY_NAME,
    _COMPLEX_OF,
    _COMPONENT,
    _DTYPES,
    _FLOAT_INFO,
    _FLOATS,
    _PY_INDEX,
    PromotionError,
    _bits,
    _describe,
    _float_fits,
    _int_fits,
    _int_info,
    _operand,
)


# ------------------------------------------------------------------------------ engine
class _Refused(Exception):
    """Internal: a pair has no common type (the message is the reason)."""


def _join(p: PromotionPolicy, a: str, b: str, restricted: bool) -> str:
    """The common type of two operands of one level."""
    if a == b:
        return a
    for x, y in ((a, b), (b, a)):
        isl = p._island_of.get(x)  # type: ignore[attr-defined]
        if isl is not None and _CATEGORY_NAME[_CATEGORY[y]] not in isl[1]:
            partners = f" and with {'/'.join(isl[1])} types" if isl[1] else ""
            raise _Refused(f"{x} promotes only with itself{partners}")
    ca, cb = sorted((_CATEGORY[a], _CATEGORY[b]))
    kinds = f"{_CATEGORY_NAME[ca]}+{_CATEGORY_NAME[cb]}"
    if restricted and kinds not in p.mixes:
        raise _Refused(f"{kinds.replace('+', ' and ')} types do not mix")
    if _CATEGORY[a] > _CATEGORY[b]:
        a, b = b, a  # a has the lower category
    if a == "bool":
        if p.int_to_float == "safe_width" and not _holds_bool(b):
            return _join(p, "uint1", b, restricted=False)  # bool's values as uint1's
        return b
    if _CATEGORY[a] == 1 and _CATEGORY[b] == 1:
        return _join_int(p, a, b)
    if _CATEGORY[a] == 1:
        return _int_with_float(p, a, b)
    return _join_float(p, a, b)


def _holds_bool(name: str) -> bool:
    """Whether a type holds 0 and 1 (int1 holds 0 and -1; float8_e8m0fnu has no zero)."""
    if _CATEGORY[name] == 1:
        return name != "int1"
    return _CATEGORY[name] != 2 or _FLOAT_INFO[name].has_zero


def _lossy(p: PromotionPolicy, why: str) -> None:
    if p.lossy == "error":
        raise _Refused(f"promote_unsafe=False refuses lossy promotions: {why}")


def _join_int(p: PromotionPolicy, a: str, b: str) -> str:
    (sa, ba), (sb, bb) = _int_info(a), _int_info(b)
    if sa == sb:
        return a if ba >= bb else b
    (s_name, s_bits), (u_name, u_bits) = ((a, ba), (b, bb)) if sa else ((b, bb), (a, ba))
    if s_bits > u_bits:
        return s_name
    if u_bits < 64:
        wide = f"int{2 * u_bits}"
        _lossy(p, f"{a} and {b} need a wider type ({wide})")
        return wide
    _lossy(p, f"uint64 and {s_name} would need int128")
    if p.u64_signed == "error":
        raise _Refused(f"uint64 and {s_name} would need int128")
    return p.u64_signed


def _float_candidates(p: PromotionPolicy) -> list[str]:
    order = [n for n in _FLOATS if n in p.dtypes or n in ("float32", "float64")]
    if p.float_tie == "bfloat16" and "bfloat16" in order and "float16" in order:
        i, j = order.index("float16"), order.index("bfloat16")
        order[i], order[j] = order[j], order[i]
    return order


def _int_with_float(p: PromotionPolicy, i: str, f: str) -> str:
    comp = _COMPONENT.get(f, f)
    if p.int_to_float == "float":
        if _bits(comp) < 2 * _bits(i):
            _lossy(p, f"{f} cannot hold every {i} (needs at least {2 * _bits(i)} bits)")
        return f
    # safe_width: the smallest type that holds the float and the integer, at most the widest
    fits = [c for c in _float_candidates(p) if _float_fits(comp, c)]
    if f in _COMPONENT:
        fits = [c for c in fits if c in _COMPLEX_OF]
    best = next((c for c in fits if _int_fits(i, c)), fits[-1])
    return _COMPLEX_OF[best] if f in _COMPONENT else best


def _join_float(p: PromotionPolicy, a: str, b: str) -> str:
    """Floats and complex: the smallest type into which both fit exactly."""
    complex_result = a in _COMPONENT or b in _COMPONENT
    ca, cb = _COMPONENT.get(a, a), _COMPONENT.get(b, b)
    cands = [c for c in _float_candidates(p) if _float_fits(ca, c) and _float_fits(cb, c)]
    if complex_result:
        cands = [c for c in cands if c in _COMPLEX_OF]
    best = cands[0]  # float64 holds every float
    if not complex_result and _bits(best) > max(_bits(a), _bits(b)):
        _lossy(p, f"{a} and {b} need a wider type ({best})")
    return _COMPLEX_OF[best] if complex_result else best


def _complex_of(p: PromotionPolicy, f: str) -> str:
    if f == "float16" and p.complex_of_float16 != "complex64":
        raise _Refused(f"the complex type of float16 is {p.complex_of_float16}, not a numpy dtype")
    return _join(p, f, "complex64", restricted=False)


def _align(p: PromotionPolicy, hi: tuple[str, str], lo: tuple[str, str]) -> str:
    """A weaker operand ``lo`` meets a stronger one ``hi`` (the category rule)."""
    h, w = hi[1], lo[1]
    ch, cw = _CATEGORY[h], _CATEGORY[w]
    if p.zero_dim == "same_kind":
        if ch == cw and ch in (1, 2):
            if p.lossy == "error":
                (sh, bh), (sw, bw) = _signed_bits(h), _signed_bits(w)
                if not ((sh == sw and bh >= bw) or (sh and not sw and 2 * bh >= bw)):
                    _lossy(p, f"{_describe(*lo)} does not fit {h}")
            return h
        return _join(p, h, w, restricted=False)
    if lo[0] == "py" and cw == 0 and ch != 0 and not p.bool_scalar_mixes:
        raise _Refused("a Python bool mixes only with bool tensors")
    if lo[0] == "0d" and p.islands_bind_zero_dim and h != w:
        for x, y in ((h, w), (w, h)):
            isl = p._island_of.get(x)  # type: ignore[attr-defined]
            if isl is not None and _CATEGORY_NAME[_CATEGORY[y]] not in isl[1]:
                raise _Refused(f"{x} promotes only with itself")
    if p.float_with_complex == "join" and 3 in (ch, cw) and ch != cw:
        return _join(p, h, w, restricted=False)
    if cw <= ch:
        return h
    if cw == 3 and ch == 2:
        return _complex_of(p, h)
    if p.scalar_upcast == "error":
        raise _Refused(
            f"a weaker {_CATEGORY_NAME[cw]} operand does not promote a {_CATEGORY_NAME[ch]} tensor"
        )
    if p.scalar_upcast == "default" or (p.scalar_upcast == "join_real" and cw == 3):
        return w
    return _join(p, h, w, restricted=False)


def _signed_bits(name: str) -> tuple[bool, int]:
    if _CATEGORY[name] == 1:
        return _int_info(name)
    return True, _bits(name)  # floats count as signed (OpenVINO)


_LEVEL = {"tensor": 2, "0d": 1, "py": 0}


def _resolve_operand(p: PromotionPolicy, op: tuple[str, str]) -> tuple[str, str]:
    level, name = op
    if level == "py":
        dt = p.scalar_dtypes[_PY_INDEX[name]]
        if dt is None:
            raise _Refused(f"{p.name} has no type for a Python {name}")
        dt = p._canon.get(dt, dt)  # type: ignore[attr-defined]
        if p.python_scalars == "weak":
            return ("py", dt)
        level = "0d"
    elif name not in p.dtypes:
        raise _Refused(f"{name} is not a type of {p.name}")
    elif name in p.unpromotable:
        raise _Refused(f"{p.name} promotes {name} with no type, not even itself")
    else:
        dt = p._canon.get(name, name)  # type: ignore[attr-defined]
    return ("tensor" if level == "0d" and p.zero_dim == "tensor" else level, dt)


def _common(p: PromotionPolicy, a: tuple[str, str], b: tuple[str, str]) -> str:
    ra, rb = _resolve_operand(p, a), _resolve_operand(p, b)
    la, lb = _LEVEL[ra[0]], _LEVEL[rb[0]]
    if la == lb:
        return _join(p, ra[1], rb[1], restricted=la == 2)
    return _align(p, ra, rb) if la > lb else _align(p, rb, ra)


def _finish(p: PromotionPolicy, common: str, op: str) -> str:
    if op == "compare":
        return "bool"
    if op == "divide" and _CATEGORY[common] <= 1 and common not in p.true_divide_keeps:
        rule = p.true_divide
        if rule == "error":
            raise _Refused(f"true division of {common} is not defined")
        if rule == "default_float" or (rule == "default_float_not_bool" and common != "bool"):
            common = p.scalar_dtypes[2] or "float32"
        elif rule == "float_of_width":
            common = "float32" if _bits(common) <= 32 else "float64"
    return p._canon.get(common, common)  # type: ignore[attr-defined]


_OPS = ("add", "divide", "compare")


@functools.lru_cache(maxsize=8192)
def _cached(a: tuple[str, str], b: tuple[str, str], policy: PromotionPolicy, op: str):
    """The result dtype, or the error message (a str) -- exceptions are not cached."""
    try:
        return _DTYPES[_finish(policy, _common(policy, a, b), op)]
    except _Refused as e:
        return f"{policy.name}: {_describe(*a)} and {_describe(*b)} have no common type: {e}"


def result_type(
    a: Any, b: Any, *, policy: PromotionPolicy | None = None, op: str = "add"
) -> np.dtype:
    """The common dtype of two operands under a promotion policy.

    Parameters
    ----------
    a, b : array, dtype, type name or Python scalar
        See the module docstring: dtypes and names are tensors, 0-d arrays and numpy scalars
        are 0-d tensors, Python values and types are Python scalars.
    policy : PromotionPolicy, default OPENVINO
        A preset (``OPENVINO``, ``TORCH``, ``NUMPY``, ``JAX``, ``JAX_X64``, ``ARRAY_API``,
        ``PADDLE``) or a policy of your own.
    op : {"add", "divide", "compare"}
        ``"add"`` is any arithmetic operator; ``"divide"`` applies the policy's true-division
        rule; ``"compare"`` gives bool when the operands promote.

    Returns
    -------
    numpy.dtype
        A numpy or ml_dtypes dtype.

    Raises
    ------
    PromotionError
        When the policy gives no common type; the message names both operands, the policy and
        the reason.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import promotion as P
    >>> P.result_type("int8", "float8_e4m3fn", policy=P.JAX)
    dtype(float8_e4m3fn)
    >>> P.result_type(np.int32, 1.0, policy=P.PADDLE)
    dtype('float32')
    >>> P.result_type(np.zeros(3, np.uint8), np.int64(5), policy=P.TORCH)
    dtype('uint8')
    >>> P.result_type("float8_e4m3fn", "float8_e5m2")  # OPENVINO, promote_unsafe=False
    Traceback (most recent call last):
    ...
    fp8kit.promotion.PromotionError: OPENVINO: float8_e4m3fn and float8_e5m2 have no common
    type: promote_unsafe=False refuses lossy promotions: float8_e4m3fn and float8_e5m2 need a
    wider type (float16)
    """
    if policy is None:
        policy = OPENVINO
    elif not isinstance(policy, PromotionPolicy):
        raise TypeError(f"policy must be a PromotionPolicy; got {policy!r}")
    if op not in _OPS:
        raise ValueError(f"op: {op!r} is not allowed; valid: {', '.join(_OPS)}")
    r = _cached(_operand(a, "a"), _operand(b, "b"), policy, op)
    if type(r) is str:
        raise PromotionError(r)
    return r
