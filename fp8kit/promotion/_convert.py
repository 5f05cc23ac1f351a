"""convert_promote_types and promote_inputs: operands converted to their common type."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..cast import cast
from ._engine import _ALL_OPS, result_type
from ._policy import PromotionPolicy, openvino
from ._types import _COMPONENT, _DTYPES, _FLOATS, _NAME_OF_DTYPE, PromotionError

_FLOAT_DTYPES = frozenset(_DTYPES[n] for n in _FLOATS)


_ONE_BIT = {np.dtype(ml_dtypes.int1): "int1", np.dtype(ml_dtypes.uint1): "uint1"}

#: ConvertPromoteTypes keeps fp8kit's Cast rules of before issue 19 (Inf -> NaN into FNUZ
#: types, clamping into integers with saturate, rounding once), not Cast's new default
_RULES = "legacy"


def _to_one_bit(x: np.ndarray, to: np.dtype, saturate: bool) -> np.ndarray:
    """To ml_dtypes int1/uint1, which fp8kit.cast does not take: integers wrap to their
    lowest bit (as ONNX Cast narrows integers); floats go through int8 first."""
    if x.dtype in _FLOAT_DTYPES:
        x = cast(x, np.int8, saturate=saturate, rules=_RULES)
    elif x.dtype.kind not in "biu":  # ml_dtypes int2/uint2/int4/uint4
        x = x.astype(np.int8)
    # both store the bit in the byte's lowest bit: int1 reads 1 as -1
    return np.asarray(np.bitwise_and(x, 1)).astype(np.uint8).view(to)


def _from_one_bit(x: np.ndarray) -> np.ndarray:
    """int1/uint1 data as int8 (exact), without ml_dtypes' element-wise conversion."""
    bit = np.asarray(np.bitwise_and(x.view(np.uint8), 1)).astype(np.int8)
    return np.asarray(-bit) if _ONE_BIT[x.dtype] == "int1" else bit


def _convert(x: np.ndarray, to: np.dtype, saturate: bool) -> np.ndarray:
    if x.dtype == to:
        return x
    if x.dtype in _ONE_BIT:  # exact in int8, which cast takes
        x = _from_one_bit(x)
        if x.dtype == to:
            return x
    if to in _ONE_BIT:
        return _to_one_bit(x, to, saturate)
    if to.kind == "c":
        if x.dtype.kind == "c":
            return x.astype(to)
        # real -> complex: exact to the real component type first, then numpy's widening
        real = cast(x, _COMPONENT[_NAME_OF_DTYPE[to]], saturate=saturate, rules=_RULES)
        return real.astype(to)
    if x.dtype.kind == "c":
        raise PromotionError(f"cannot convert complex data to {to}")
    return cast(x, to, saturate=saturate, rules=_RULES)


def convert_promote_types(
    a: Any,
    b: Any,
    *,
    promote_unsafe: bool = False,
    pytorch_scalar_promotion: bool = False,
    u64_integer_promotion_target: Any = "f32",
    policy: PromotionPolicy | None = None,
    saturate: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs converted to their common type (OpenVINO ConvertPromoteTypes-14).

    Parameters
    ----------
    a, b : array_like
        Arrays (any shape; 0-d arrays count as scalar tensors), numpy scalars or Python
        scalars.
    promote_unsafe, pytorch_scalar_promotion, u64_integer_promotion_target
        The three attributes of ConvertPromoteTypes-14 (see :func:`openvino`).
    policy : PromotionPolicy, optional
        Promote by another policy instead (then the three attributes must keep their
        defaults).
    saturate : bool, default True
        Passed to :func:`fp8kit.cast` (ONNX Cast-21 semantics), which does the conversions.

    Returns
    -------
    (ndarray, ndarray)
        ``a`` and ``b`` with the common dtype and their own shapes (an input that already
        has it is returned as is, without a copy).

    Raises
    ------
    PromotionError
        When there is no common type (e.g. promote_unsafe=False and a lossy promotion).

    Examples
    --------
    >>> import numpy as np, fp8kit
    >>> a, b = fp8kit.convert_promote_types(np.array([1, 2], np.int8), np.ones(3, np.float32))
    >>> a.dtype, b.dtype, a.shape, b.shape
    (dtype('float32'), dtype('float32'), (2,), (3,))
    >>> x = np.array([0.5, 448.0], dtype="float8_e4m3fn")
    >>> a, b = fp8kit.convert_promote_types(x, np.array([1.0], dtype="float16"))
    >>> a.dtype, a.tolist()
    (dtype('float16'), [0.5, 448.0])
    """
    if policy is None:
        policy = openvino(promote_unsafe, pytorch_scalar_promotion, u64_integer_promotion_target)
    elif promote_unsafe or pytorch_scalar_promotion or u64_integer_promotion_target != "f32":
        raise ValueError(
            "convert_promote_types: give either policy= or the OpenVINO attributes, not both"
        )
    common = result_type(a, b, policy=policy)
    return _convert(np.asarray(a), common, saturate), _convert(np.asarray(b), common, saturate)


def promote_inputs(
    *arrays: Any,
    policy: PromotionPolicy | None = None,
    op: str = "add",
    saturate: bool = True,
) -> tuple[np.ndarray, ...]:
    """All inputs converted at once to the type their operation computes in.

    OpenVINO's ConvertPromoteTypes generalised to n inputs, and what PyTorch's TensorIterator
    and OneFlow's TensorProcessor do before a kernel runs: the common type of all inputs is
    decided together (:func:`fp8kit.promotion.result_type` with ``*arrays``, which is not a
    fold of pairs), then every input is converted with :func:`fp8kit.cast`.

    Parameters
    ----------
    *arrays : array_like
        Arrays (any shapes; 0-d arrays count as 0-d tensors), numpy scalars or Python scalars.
    policy : PromotionPolicy, default OPENVINO
        Whose rules decide the common type.
    op : {"add", "divide", "compare", "sum", "prod", "cumsum", "mean"}, default "add"
        ``"divide"`` converts to the true division's type (float32 for integers under
        TORCH); ``"compare"`` to the common type the comparison is made in; a reduction takes
        one array and converts it to the type its reduction gives (int64 for a sum of int8
        under TORCH).
    saturate : bool, default True
        Passed to :func:`fp8kit.cast` (ONNX Cast-21 semantics), which does the conversions.

    Returns
    -------
    tuple of ndarray
        The inputs in that type, each in its own shape (an input that already has it is
        returned as is, without a copy).

    Raises
    ------
    PromotionError
        When the policy gives the inputs no common type (or refuses the reduction).
    TypeError
        If an input is not an array, numpy scalar or Python scalar of a type fp8kit promotes.
    ValueError
        If ``op`` is unknown, no input is given, or a reduction gets more than one.

    Examples
    --------
    >>> import numpy as np, fp8kit
    >>> from fp8kit import promotion as P
    >>> a, b, c = fp8kit.promote_inputs(
    ...     np.array([1, -2], np.int8), np.array([200], np.uint8), np.ones(2, np.float16),
    ...     policy=P.NUMPY,
    ... )
    >>> a.dtype, b.dtype, c.dtype, b.tolist()
    (dtype('float16'), dtype('float16'), dtype('float16'), [200.0])
    >>> (s,) = fp8kit.promote_inputs(np.array([1, 2], np.int8), policy=P.TORCH, op="sum")
    >>> s.dtype
    dtype('int64')
    """
    if op not in _ALL_OPS:
        raise ValueError(f"op: {op!r} is not allowed; valid: {', '.join(_ALL_OPS)}")
    if not arrays:
        raise ValueError("promote_inputs needs at least one array; got none")
    if policy is None:
        policy = openvino()
    common = result_type(*arrays, policy=policy, op="add" if op == "compare" else op)
    return tuple(_convert(np.asarray(x), common, saturate) for x in arrays)
