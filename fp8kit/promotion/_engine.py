"""The rule machine: join, category rule, n operands, operation, reductions; the cached
result_type."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._policy import OPENVINO, REDUCTIONS, PromotionPolicy
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
    """Floats and complex: the smallest type into which both fit exactly (or by rank)."""
    rank = p._float_rank  # type: ignore[attr-defined]
    if a in rank and b in rank:
        return a if rank[a] > rank[b] else b
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
    if p.zero_dim == "ignored" and lo[0] == "0d":
        return h
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


def _pair(p: PromotionPolicy, ra: tuple[str, str], rb: tuple[str, str]) -> str:
    """The common type of two resolved operands: the join, or the category rule."""
    la, lb = _LEVEL[ra[0]], _LEVEL[rb[0]]
    if la == lb:
        return _join(p, ra[1], rb[1], restricted=la == 2)
    return _align(p, ra, rb) if la > lb else _align(p, rb, ra)


def _stronger(ra: tuple[str, str], rb: tuple[str, str]) -> str:
    return ra[0] if _LEVEL[ra[0]] >= _LEVEL[rb[0]] else rb[0]


def _fold(p: PromotionPolicy, names: list[str], restricted: bool) -> str:
    t = names[0]
    for n in names[1:]:
        t = _join(p, t, n, restricted)
    return t


# NumPy's "most knowledgeable" operand leads: categories, with Python int above bool, Python
# float above the integers and Python complex above it but below the float arrays (a float32
# array promotes a Python complex to complex64; numpy's common_dtype slots).
_PY_RANK = {0: 0.0, 1: 0.5, 2: 1.5, 3: 1.75}


def _knowledge(r: tuple[str, str]) -> tuple[float, int, int]:
    cat = _CATEGORY[r[1]]
    rank = _PY_RANK[cat] if r[0] == "py" else float(cat)
    return rank, _bits(r[1]), _ORDER[r[1]]


def _common(p: PromotionPolicy, ops: tuple[tuple[str, str], ...]) -> str:
    """The common type of any number of operands (see ``PromotionPolicy.nary``)."""
    res = [_resolve_operand(p, o) for o in ops]
    if len(res) == 1:
        return res[0][1]
    if len(res) == 2:
        return _pair(p, res[0], res[1])
    if p.nary == "chain":  # a + b + c: each step's result has the stronger level
        acc = res[0]
        for r in res[1:]:
            acc = (_stronger(acc, r), _pair(p, acc, r))
        return acc[1]
    if p.nary == "main":
        i = max(range(len(res)), key=lambda k: _knowledge(res[k]))
        main, acc = res[i], None
        for r in res[:i] + res[i + 1 :]:
            t = (_stronger(main, r), _pair(p, main, r))
            acc = t if acc is None else (_stronger(acc, t), _pair(p, acc, t))
        return acc[1]  # type: ignore[index]
    groups: dict[str, list[str]] = {"tensor": [], "0d": [], "py": []}
    for level, name in res:
        groups[level].append(name)
    hi = _fold_tensors(p, groups) if groups["tensor"] else None
    if groups["0d"] and not (hi and p.zero_dim == "ignored"):
        z = ("0d", _fold(p, groups["0d"], False))
        hi = z if hi is None else (hi[0], _align(p, hi, z))
    if not groups["py"]:
        return hi[1]  # type: ignore[index]
    if hi is None:
        return _fold(p, groups["py"], False)
    if p.nary_scalars == "each":
        common = None
        for s in groups["py"]:
            t = _align(p, hi, ("py", s))
            common = t if common is None else _join(p, common, t, restricted=True)
        return common  # type: ignore[return-value]
    return _align(p, hi, ("py", _fold(p, groups["py"], False)))


def _fold_tensors(p: PromotionPolicy, groups: dict[str, list[str]]) -> tuple[str, str] | None:
    """The tensors' join; with ``u64_signed_weak`` uint64 and a signed integer give a weak
    float, which gives way to the tensors' floats and joins the Python scalars (JAX)."""
    acc, weak = None, False
    for name in groups["tensor"]:
        if acc is None:
            acc = name
        elif p.u64_signed_weak and _weak_pair(acc, name):
            acc, weak = None, True  # both integers lie below the weak float
        else:
            acc = _join(p, acc, name, True)
    if weak:
        groups["py"].append(p.u64_signed)
    return None if acc is None else ("tensor", acc)


def _weak_pair(a: str, b: str) -> bool:
    if _CATEGORY[a] != 1 or _CATEGORY[b] != 1 or "uint64" not in (a, b):
        return False
    return _int_info(b if a == "uint64" else a)[0]  # the other one is signed


def _all_arrays(p: PromotionPolicy, ops: tuple[tuple[str, str], ...]) -> str | None:
    """The join of the tensors and 0-d tensors, all as tensors (None if there are none)."""
    names = [_resolve_operand(p, o)[1] for o in ops if o[0] != "py"]
    return _fold(p, names, False) if names else None


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
_ALL_OPS = _OPS + REDUCTIONS
_ORDER = {n: i for i, n in enumerate(_DTYPES)}


def _reduce(p: PromotionPolicy, operand: tuple[str, str], op: str) -> str:
    """The result type of a reduction of one tensor or 0-d tensor (not a promotion: a type
    the policy promotes with nothing, as OpenVINO's u2, reduces all the same)."""
    level, name = operand
    if name not in p.dtypes:
        raise _Refused(f"{name} is not a type of {p.name}")
    name = p._canon.get(name, name)  # type: ignore[attr-defined]
    special = p._reduce_type.get((op, name))  # type: ignore[attr-defined]
    if special is not None:
        if special == "error":
            raise _Refused(f"{op} of {name} is not defined")
        return special
    if level == "0d" and op in p.reductions_keep_zero_dim:
        return name
    if _CATEGORY[name] > 1:
        return p._canon.get(name, name)  # type: ignore[attr-defined]
    rule = p._reduce_rule[op]  # type: ignore[attr-defined]
    default = p._canon.get(p.scalar_dtypes[1] or "int64", p.scalar_dtypes[1] or "int64")  # type: ignore[attr-defined]
    if rule == "keep":
        return name
    if rule == "error":
        raise _Refused(f"{op} of {name} is not defined (floating types only)")
    if rule == "divide":
        return _finish(p, name, "divide")
    if rule == "default_int" or (rule == "keep_int" and name == "bool"):
        return default
    if rule == "keep_int":
        return name
    # widen: to the default integer (its unsigned twin for unsigned types) when narrower
    bits = _bits(default)
    if name == "bool":
        return _join(p, "bool", default, restricted=True)
    signed, width = _int_info(name)
    if width >= bits:
        return name
    return _join(p, name, default if signed else f"uint{bits}", restricted=True)


def _describe_all(ops: tuple[tuple[str, str], ...]) -> str:
    names = [_describe(*o) for o in ops]
    return " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]


@functools.lru_cache(maxsize=8192)
def _cached(ops: tuple[tuple[str, str], ...], policy: PromotionPolicy, op: str):
    """The result dtype, or the error message (a str) -- exceptions are not cached."""
    try:
        if op in REDUCTIONS:
            return _DTYPES[_reduce(policy, ops[0], op)]
        common = _common(policy, ops)
        if op == "divide":
            if not policy.divide_bool_scalars and ("py", "bool") in ops:
                raise _Refused("true division takes no Python bool")
            if policy.divide_checks_zero_dim and common == "bool":
                raw = _all_arrays(policy, ops)  # OneFlow's BinaryFloatFunctor looks at all
                if raw is not None and _CATEGORY[raw] == 1:
                    common = raw
        return _DTYPES[_finish(policy, common, op)]
    except _Refused as e:
        if op in REDUCTIONS:
            return f"{policy.name}: {op} of {_describe(*ops[0])}: {e}"
        return f"{policy.name}: {_describe_all(ops)} have no common type: {e}"


def _argname(i: int) -> str:
    return chr(ord("a") + i) if i < 26 else f"operands[{i}]"


def result_type(*operands: Any, policy: PromotionPolicy | None = None, op: str = "add") -> np.dtype:
    """The common dtype of any number of operands under a promotion policy, or the dtype of a
    reduction of one.

    Parameters
    ----------
    *operands : array, dtype, type name or Python scalar
        See the module docstring: dtypes and names are tensors, 0-d arrays and numpy scalars
        are 0-d tensors, Python values and types are Python scalars.  Two operands promote
        by the pairwise rules; more promote at once as the library does
        (``PromotionPolicy.nary``: PyTorch by levels, NumPy around its main operand, Paddle
        and OpenVINO as a chain of binary operations), which is not always a fold of pairs.
    policy : PromotionPolicy, default OPENVINO
        A preset (``OPENVINO``, ``TORCH``, ``NUMPY``, ``JAX``, ``JAX_X64``, ``ARRAY_API``,
        ``PADDLE``, ``ONEFLOW``) or a policy of your own.
    op : {"add", "divide", "compare", "sum", "prod", "cumsum", "mean"}
        ``"add"`` is any arithmetic operator; ``"divide"`` applies the policy's true-division
        rule; ``"compare"`` gives bool when the operands promote; the reductions take one
        tensor or 0-d tensor and give the type of its sum, product, cumulative sum or mean
        (``PromotionPolicy.reductions``).

    Returns
    -------
    numpy.dtype
        A numpy or ml_dtypes dtype.

    Raises
    ------
    PromotionError
        When the policy gives no common type (or refuses the reduction); the message names
        the operands, the policy and the reason.
    TypeError
        If an operand is not a type fp8kit promotes, ``policy`` is not a PromotionPolicy, or a
        reduction is given a Python scalar.
    ValueError
        If ``op`` is unknown, no operand is given, or a reduction is given more than one.

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
    >>> P.result_type("int8", "uint8", "float16", policy=P.NUMPY)  # n-ary: not a fold
    dtype('float16')
    >>> P.result_type("int8", op="sum", policy=P.TORCH)
    dtype('int64')
    >>> P.result_type("float8_e4m3fn", "float8_e5m2")  # OPENVINO, promote_unsafe=False
    Traceback (most recent call last):
    ...
    fp8kit.promotion.PromotionError: OPENVINO: float8_e4m3fn and float8_e5m2 have no common
    type: promote_unsafe=False refuses lossy promotions: float8_e4m3fn and float8_e5m2 need a
    wider type (float16)
    """
    if policy is None:
        policy = OPENVINO
    elif type(policy) is not PromotionPolicy and not isinstance(policy, PromotionPolicy):
        raise TypeError(f"policy must be a PromotionPolicy; got {policy!r}")
    if len(operands) == 2 and op in _BINARY:  # the common case, kept as fast as before
        ops = (_operand(operands[0], "a"), _operand(operands[1], "b"))
    else:
        ops = _check_operands(operands, op)
    r = _cached(ops, policy, op)
    if type(r) is str:
        raise PromotionError(r)
    return r


_BINARY = frozenset(_OPS)


def _check_operands(operands: tuple[Any, ...], op: str) -> tuple[tuple[str, str], ...]:
    if op not in _ALL_OPS:
        raise ValueError(f"op: {op!r} is not allowed; valid: {', '.join(_ALL_OPS)}")
    if not operands:
        raise ValueError("result_type needs at least one operand; got none")
    ops = tuple(_operand(x, _argname(i)) for i, x in enumerate(operands))
    if op in REDUCTIONS:
        if len(ops) != 1:
            raise ValueError(
                f"op={op!r} reduces one operand; got {len(ops)} (valid: one tensor or 0-d tensor)"
            )
        if ops[0][0] == "py":
            raise TypeError(
                f"a: {operands[0]!r} is a Python scalar; op={op!r} reduces a tensor or 0-d "
                "tensor (an array, a dtype or a type name)"
            )
    return ops
