"""PromotionPolicy, the presets, and openvino() for ConvertPromoteTypes-14 attributes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal

from ._types import _CATEGORY_NAME, _OV_NAMES, ALL_DTYPES, _name

# ------------------------------------------------------------------------------- policy
_KIND_PAIRS = (
    "bool+int",
    "bool+float",
    "bool+complex",
    "int+int",
    "int+float",
    "int+complex",
    "float+float",
    "float+complex",
    "complex+complex",
)
Island = tuple[tuple[str, ...], tuple[str, ...]]
#: The reductions ``result_type(x, op=...)`` answers for, and the rules they may follow.
REDUCTIONS = ("sum", "prod", "cumsum", "mean")
_REDUCTION_RULES = ("keep", "keep_int", "default_int", "widen", "divide", "error")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PromotionPolicy:
    """The knobs of a type-promotion system.  Every preset is one of these.

    Operands have a level: tensors, then 0-d tensors (``zero_dim``), then Python scalars.
    Two operands of one level meet by the *join* (the fields from ``dtypes`` to
    ``u64_signed``); a weaker operand meets a stronger one by the *category rule*
    (``zero_dim`` to ``float_with_complex``): categories are bool < int < float <
    complex, and a weaker operand of the same or a lower category takes the stronger one's
    type.

    Attributes
    ----------
    name : str
        Shown in error messages and tables.
    dtypes : tuple of str
        The framework's types; others raise PromotionError.
    mixes : frozenset of str
        Which kinds may meet at the tensor level: ``"bool+int"``, ``"int+int"`` (integers of
        different types), ``"int+float"``, ``"float+complex"``, ... (all nine by default).
    islands : tuple of (types, partner kinds)
        Types that promote only with themselves and with the kinds listed
        (e.g. PyTorch's float8 types: ``((float8 types), ())``).
    unpromotable : tuple of str
        Types of the framework that it refuses to promote with anything, themselves included
        (OpenVINO's u2, f4e2m1 and f8e8m0 in ConvertPromoteTypes-14).
    islands_bind_zero_dim : bool
        Whether islands also refuse a weaker 0-d tensor (Paddle) or let the category rule
        decide (PyTorch).
    int_to_float : {"float", "safe_width"}
        An integer meets a float (or complex): ``"float"`` gives the float's type;
        ``"safe_width"`` gives the smallest type that holds both exactly, float64/complex128
        at most (NumPy); then bool meets a type that cannot hold both False and True (int1,
        float8_e8m0fnu) as uint1 would.
    float_tie : {"float16", "bfloat16"}
        When two 16-bit floats are both smallest (two different float8 types), which one.
    u64_signed : str
        uint64 meets a signed integer: the result type, or ``"error"``.
    u64_signed_weak : bool
        Whether that result is weak, as a Python float is (JAX's lattice: int64 and uint64
        join to its weak float, so int16, uint64 and float16 together give float16).
    lossy : {"allow", "error"}
        ``"error"`` refuses promotions that widen past both inputs, integers into floats
        narrower than twice their width, uint64 with signed integers, and narrowing 0-d
        operands (OpenVINO's promote_unsafe=False).
    zero_dim : {"tensor", "weaker", "same_kind", "ignored"}
        0-d tensors are tensors (NumPy, JAX, Array API), a weaker level (PyTorch, Paddle),
        weaker only against a tensor of the same kind, int or float (OpenVINO's
        pytorch_scalar_promotion), or a weaker level that a tensor ignores altogether (OneFlow's
        TensorProcessor skips 0-d tensors unless all inputs are 0-d: an int8 tensor with a
        0-d float64 tensor is int8).
    python_scalars : {"weak", "zero_dim"}
        Python scalars are the weakest level, or 0-d tensors of their default dtypes
        (OpenVINO constants).
    scalar_dtypes : tuple of 4 str or None
        Default dtypes of Python bool, int, float, complex (None: not supported).
    scalar_upcast : {"join", "join_real", "default", "error"}
        A weaker operand of a higher category than the stronger one: join their types (NumPy,
        JAX), join unless it is complex, whose type then wins (PyTorch), take the weaker
        one's type (Paddle), or refuse (Array API).
    bool_scalar_mixes : bool
        Whether a Python bool meets non-bool tensors (False in the Array API).
    complex_of_float16 : str
        The complex type of a float16 tensor meeting a weaker complex operand: ``complex64``,
        or ``complex32`` (PyTorch; it has no numpy dtype, so that is an error here).
    float_with_complex : {"category", "join"}
        A real (bool, integer or float) and a complex operand of different levels: by the
        category rule (a complex tensor keeps its type; a float tensor meeting a weaker
        complex gets the complex type of its own precision), or by their join whichever is
        weaker, islands included (Paddle: complex64 with a 0-d float64 gives complex128,
        float32 with a 0-d complex128 gives complex128, uint16 with a Python complex is an
        error).
    canonical : tuple of (str, str)
        Types replaced on input and output (JAX without x64: int64 -> int32, ...).
    true_divide : {"common", "default_float", "default_float_not_bool", "float_of_width", "error"}
        ``op="divide"`` when the common type is bool or integer: keep it, the default float
        dtype, the default float for integers only (bool stays bool), float32 up to 32 bits
        and float64 above (JAX), or refuse (Array API).
    true_divide_keeps : tuple of str
        Integer types whose true division keeps the common type, whatever ``true_divide``
        says (JAX: int1, int2, uint1 and uint2, which its ``true_divide`` leaves integral).
    float_ranks : tuple of str
        Empty: two floats join to the smallest type both fit into exactly.  Otherwise two
        floats of this tuple join to the later one (OneFlow: float16, float32, float64,
        bfloat16: bfloat16 wins over every float).
    divide_checks_zero_dim : bool
        With ``zero_dim="ignored"``: true division treats the operands as integers when the
        tensors and 0-d tensors together join to an integer type, even if the common type (0-d
        tensors ignored) is bool (OneFlow: a bool tensor / a 0-d uint8 tensor is float32).
    divide_bool_scalars : bool
        Whether true division takes a Python bool (False: OneFlow's scalar_div refuses it).
    nary : {"levels", "main", "chain"}
        How more than two operands promote.  ``"levels"``: the operands of each level join in
        order (tensors, then 0-d tensors, then Python scalars) and the levels meet by the
        category rule, strongest first (PyTorch's ResultTypeState, JAX's lattice, the Array
        API, OneFlow's TensorProcessor); ``"main"``: the operand of the highest category meets
        each other one and those results join (NumPy's ``result_type``); ``"chain"``: a chain
        of binary operations left to right, as ``a + b + c`` computes it (Paddle and
        OpenVINO, whose operations of more inputs do not promote).
    nary_scalars : {"join", "each"}
        With ``nary="levels"``: the Python scalars join first and then meet the arrays' type
        (PyTorch, JAX), or each one meets the arrays' type on its own (the Array API: a Python
        bool beside a Python int still refuses an integer array).
    reductions : tuple of (op, rule)
        The result type of ``op="sum"``, ``"prod"``, ``"cumsum"`` and ``"mean"`` of a bool or
        integer operand (floats keep their type): ``"keep"`` the operand's type;
        ``"keep_int"`` integers keep theirs and bool gives the default integer (the
        policy's Python int type); ``"default_int"`` the default integer for all;
        ``"widen"`` bool and integers narrower than the default integer join with it (its
        unsigned twin for unsigned integers: NumPy's, JAX's and the Array API's sum, where
        the join may refuse); ``"divide"`` the true-division rule (a mean of integers);
        ``"error"``.
    reduction_types : tuple of (op, type, result)
        Exceptions to ``reductions``: the result type, or ``"error"`` (Paddle's sum gives
        int64 for bool and int32 only; OneFlow refuses the mean of bfloat16).
    reductions_keep_zero_dim : tuple of str
        Reductions that return a 0-d tensor's own type (OneFlow's sum and prod of a 0-d
        tensor reduce nothing).

    Raises
    ------
    ValueError
        If a field has a value outside its allowed set (the message names the field).

    Examples
    --------
    >>> import dataclasses
    >>> from fp8kit import promotion as P
    >>> mine = dataclasses.replace(P.TORCH, name="MINE", int_to_float="safe_width")
    >>> P.result_type("int16", "float16", policy=mine)
    dtype('float32')
    >>> P.result_type("int16", "float16", policy=P.TORCH)
    dtype('float16')
    """

    name: str
    dtypes: tuple[str, ...] = ALL_DTYPES
    mixes: frozenset[str] = frozenset(_KIND_PAIRS)
    islands: tuple[Island, ...] = ()
    unpromotable: tuple[str, ...] = ()
    islands_bind_zero_dim: bool = False
    int_to_float: Literal["float", "safe_width"] = "float"
    float_tie: Literal["float16", "bfloat16"] = "float16"
    u64_signed: str = "float64"
    u64_signed_weak: bool = False
    lossy: Literal["allow", "error"] = "allow"
    zero_dim: Literal["tensor", "weaker", "same_kind"] = "tensor"
    python_scalars: Literal["weak", "zero_dim"] = "weak"
    scalar_dtypes: tuple[str, str, str, str | None] = ("bool", "int64", "float64", "complex128")
    scalar_upcast: Literal["join", "join_real", "default", "error"] = "join"
    bool_scalar_mixes: bool = True
    complex_of_float16: str = "complex64"
    float_with_complex: Literal["category", "join"] = "category"
    canonical: tuple[tuple[str, str], ...] = ()
    true_divide: Literal[
        "common", "default_float", "default_float_not_bool", "float_of_width", "error"
    ] = "default_float"
    true_divide_keeps: tuple[str, ...] = ()
    float_ranks: tuple[str, ...] = ()
    divide_checks_zero_dim: bool = False
    divide_bool_scalars: bool = True
    nary: Literal["levels", "main", "chain"] = "levels"
    nary_scalars: Literal["join", "each"] = "join"
    reductions: tuple[tuple[str, str], ...] = (
        ("sum", "widen"),
        ("prod", "widen"),
        ("cumsum", "widen"),
        ("mean", "divide"),
    )
    reduction_types: tuple[tuple[str, str, str], ...] = ()
    reductions_keep_zero_dim: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_choice(self.int_to_float, ("float", "safe_width"), "int_to_float")
        _check_choice(self.float_tie, ("float16", "bfloat16"), "float_tie")
        _check_choice(self.lossy, ("allow", "error"), "lossy")
        _check_choice(self.zero_dim, ("tensor", "weaker", "same_kind", "ignored"), "zero_dim")
        _check_choice(self.python_scalars, ("weak", "zero_dim"), "python_scalars")
        _check_choice(
            self.scalar_upcast, ("join", "join_real", "default", "error"), "scalar_upcast"
        )
        _check_choice(self.float_with_complex, ("category", "join"), "float_with_complex")
        _check_choice(
            self.true_divide,
            ("common", "default_float", "default_float_not_bool", "float_of_width", "error"),
            "true_divide",
        )
        for n in self.dtypes:
            _check_choice(n, ALL_DTYPES, "dtypes")
        for m in self.mixes:
            _check_choice(m, _KIND_PAIRS, "mixes")
        if self.u64_signed != "error":
            _check_choice(self.u64_signed, ALL_DTYPES, "u64_signed")
        for n in self.unpromotable:
            _check_choice(n, ALL_DTYPES, "unpromotable")
        for n in self.true_divide_keeps:
            _check_choice(n, ALL_DTYPES, "true_divide_keeps")
        for members, partners in self.islands:
            for n in members:
                _check_choice(n, ALL_DTYPES, "islands")
            for k in partners:
                _check_choice(k, _CATEGORY_NAME, "island partner kinds")
        for n in self.float_ranks:
            _check_choice(n, [f for f in ALL_DTYPES if "float" in f], "float_ranks")
        _check_choice(self.nary, ("levels", "main", "chain"), "nary")
        _check_choice(self.nary_scalars, ("join", "each"), "nary_scalars")
        for op, rule in self.reductions:
            _check_choice(op, REDUCTIONS, "reductions")
            _check_choice(rule, _REDUCTION_RULES, f"reductions ({op})")
        if sorted(op for op, _ in self.reductions) != sorted(REDUCTIONS):
            raise ValueError(
                f"reductions must give one rule for each of {', '.join(REDUCTIONS)}; "
                f"got {self.reductions!r}"
            )
        for op, n, result in self.reduction_types:
            _check_choice(op, REDUCTIONS, "reduction_types")
            _check_choice(n, ALL_DTYPES, "reduction_types")
            if result != "error":
                _check_choice(result, ALL_DTYPES, "reduction_types")
        for op in self.reductions_keep_zero_dim:
            _check_choice(op, REDUCTIONS, "reductions_keep_zero_dim")
        if len(self.scalar_dtypes) != 4:
            raise ValueError(f"scalar_dtypes must have 4 entries; got {self.scalar_dtypes!r}")
        for n in self.scalar_dtypes:
            if n is not None:
                _check_choice(n, ALL_DTYPES, "scalar_dtypes")
        # A policy is a cache key: hash it once.
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in _FIELDS)))
        object.__setattr__(self, "_island_of", {n: isl for isl in self.islands for n in isl[0]})
        object.__setattr__(self, "_canon", dict(self.canonical))
        object.__setattr__(self, "_reduce_rule", dict(self.reductions))
        object.__setattr__(self, "_reduce_type", {(o, n): r for o, n, r in self.reduction_types})
        object.__setattr__(self, "_float_rank", {n: i for i, n in enumerate(self.float_ranks)})

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]


PromotionPolicy.__module__ = "fp8kit.promotion"
_FIELDS = dataclasses.fields(PromotionPolicy)


def _check_choice(value: Any, allowed: Iterable[str], what: str) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{what}: {value!r} is not allowed; valid: {', '.join(allowed)}")


# ------------------------------------------------------------------------------ presets
_F8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
#: The narrow floats ml_dtypes adds beyond the four float8 types of ONNX.
_NARROW_MORE = (
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float8_e4m3",
    "float8_e3m4",
    "float8_e4m3b11fnuz",
    "float8_e8m0fnu",
)
_NARROW_INTS = ("int1", "int2", "int4", "uint1", "uint2", "uint4")
_NUMPY_OWN = tuple(
    n for n in ALL_DTYPES if n not in _F8 + _NARROW_MORE + _NARROW_INTS + ("bfloat16",)
)

#: OpenVINO ConvertPromoteTypes-14 with its default attributes (see :func:`openvino`).
OPENVINO: PromotionPolicy  # set below

_TORCH_F8 = _F8 + ("float8_e8m0fnu",)
#: PyTorch 2.13 (``torch.result_type``; ``op="divide"`` is ``torch.true_divide``).
TORCH = PromotionPolicy(
    name="TORCH",
    dtypes=tuple(n for n in ALL_DTYPES if n not in _NARROW_MORE or n in _TORCH_F8),
    islands=(
        (_TORCH_F8, ()),  # "Promotion for Float8 Types is not supported"
        (("int1", "int2", "int4"), ()),  # shell signed types
        (("uint1", "uint2", "uint4", "uint16", "uint32", "uint64"), ("float",)),  # shell unsigned
    ),
    zero_dim="weaker",
    scalar_dtypes=("bool", "int64", "float32", "complex64"),
    scalar_upcast="join_real",
    complex_of_float16="complex32",
    u64_signed="error",
    # sum/prod/cumsum of bool and integers are int64; "mean(): could not infer output dtype"
    reductions=(
        ("sum", "default_int"),
        ("prod", "default_int"),
        ("cumsum", "default_int"),
        ("mean", "error"),
    ),
)

#: NumPy 2 (NEP 50); ml_dtypes types join by the same "smallest type holding both" rule.
NUMPY = PromotionPolicy(name="NUMPY", int_to_float="safe_width", nary="main")

#: JAX in its default 32-bit mode (``jnp.result_type``; weak Python scalars).
JAX: PromotionPolicy  # set below

#: JAX with ``jax_enable_x64``.
JAX_X64 = PromotionPolicy(
    name="JAX_X64",
    islands=((_NARROW_INTS, ("bool",)), (_F8 + _NARROW_MORE, ("bool", "int"))),
    true_divide="float_of_width",
    true_divide_keeps=("int1", "int2", "uint1", "uint2"),
    u64_signed_weak=True,
    # jnp.cumsum keeps an integer type (and sums bool as the default int)
    reductions=(("sum", "widen"), ("prod", "widen"), ("cumsum", "keep_int"), ("mean", "divide")),
)
JAX = dataclasses.replace(
    JAX_X64,
    name="JAX",
    scalar_dtypes=("bool", "int32", "float32", "complex64"),
    canonical=(
        ("int64", "int32"),
        ("uint64", "uint32"),
        ("float64", "float32"),
        ("complex128", "complex64"),
    ),
)

#: The Array API standard 2025.12 (``array_api_strict``).
ARRAY_API = PromotionPolicy(
    name="ARRAY_API",
    dtypes=tuple(n for n in _NUMPY_OWN if n != "float16"),
    mixes=frozenset({"int+int", "float+float", "float+complex", "complex+complex"}),
    u64_signed="error",
    scalar_upcast="error",
    bool_scalar_mixes=False,
    true_divide="error",
    nary_scalars="each",
    # sum/prod/cumulative_sum: the default (unsigned) integer, bool refused; mean: floats only
    reductions=(("sum", "widen"), ("prod", "widen"), ("cumsum", "widen"), ("mean", "error")),
)

#: Paddle 3.3 dynamic mode (the spec's tensor-tensor and tensor-scalar tables).
PADDLE = PromotionPolicy(
    name="PADDLE",
    dtypes=(
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float8_e4m3fn",
        "float8_e5m2",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ),
    mixes=frozenset(
        {"float+float", "bool+complex", "int+complex", "float+complex", "complex+complex"}
    ),
    islands=(
        (("float8_e4m3fn", "float8_e5m2"), ()),
        (("uint16", "uint32", "uint64"), ()),  # paddle 3.3 promotes them with no other type
    ),
    islands_bind_zero_dim=True,
    zero_dim="weaker",
    scalar_dtypes=("bool", "int64", "float32", "complex64"),
    scalar_upcast="default",
    float_with_complex="join",
    true_divide="default_float_not_bool",
    nary="chain",
    # SumInferMeta: bool and int32 sum to int64, other types keep theirs; cumsum's kernel
    # casts integers to int64; prod and mean keep the type (mean of bool is bool)
    reductions=(("sum", "keep"), ("prod", "keep"), ("cumsum", "default_int"), ("mean", "keep")),
    reduction_types=(("sum", "bool", "int64"), ("sum", "int32", "int64")),
)

#: OneFlow 0.9.0 (its functors' TensorProcessor and scalar operations, eager mode on the CPU).
ONEFLOW = PromotionPolicy(
    name="ONEFLOW",
    dtypes=("bool", "int8", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64"),
    float_ranks=("float16", "float32", "float64", "bfloat16"),  # promoteTypes' lookup table
    zero_dim="ignored",
    # a Python bool is an integer scalar: a bool tensor + True is int64
    scalar_dtypes=("int64", "int64", "float32", None),
    true_divide="default_float_not_bool",
    divide_checks_zero_dim=True,
    divide_bool_scalars=False,
    reductions=(
        ("sum", "default_int"),
        ("prod", "keep_int"),
        ("cumsum", "default_int"),
        ("mean", "error"),  # "Can only calculate the mean of floating types"
    ),
    reduction_types=(("mean", "bfloat16", "error"),),  # bfloat16 is not "floating" there
    reductions_keep_zero_dim=("sum", "prod"),
    # TensorProcessor converts an op's tensors at once, but only binary operators take
    # Python scalars: a + b + c (equal to TensorProcessor's fold where there are no scalars)
    nary="chain",
)


#: OpenVINO element types that ConvertPromoteTypes-14 refuses with every type, themselves
#: included (u3, u6 and nf4 too, which fp8kit cannot represent).
_OV_UNPROMOTABLE = ("uint2", "float4_e2m1fn", "float8_e8m0fnu")


def openvino(
    promote_unsafe: bool = False,
    pytorch_scalar_promotion: bool = False,
    u64_integer_promotion_target: Any = "f32",
) -> PromotionPolicy:
    """The policy of OpenVINO's ConvertPromoteTypes-14 with the given attributes.

    Parameters
    ----------
    promote_unsafe : bool, default False
        False refuses promotions that widen past both inputs, put integers into floats
        narrower than twice their width, mix uint64 with signed integers, or narrow a 0-d
        operand.
    pytorch_scalar_promotion : bool, default False
        A 0-d tensor meeting a tensor of the same kind (both integer or both float) takes
        the tensor's type.
    u64_integer_promotion_target : dtype or str, default "f32"
        The type of uint64 with a signed integer (used when promote_unsafe is True).

    Returns
    -------
    PromotionPolicy
        Named ``OPENVINO`` with the attributes that differ from the defaults, e.g.
        ``OPENVINO(promote_unsafe=True)``.

    Raises
    ------
    TypeError
        If ``u64_integer_promotion_target`` is not a type fp8kit promotes.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> P.result_type("int8", "uint8", policy=P.openvino(promote_unsafe=True))
    dtype('int16')
    >>> P.result_type("uint64", "int8", policy=P.openvino(True, False, "f64"))
    dtype('float64')
    """
    target = _name(u64_integer_promotion_target, "u64_integer_promotion_target")
    attrs = []
    if promote_unsafe:
        attrs.append("promote_unsafe=True")
    if pytorch_scalar_promotion:
        attrs.append("pytorch_scalar_promotion=True")
    if target != "float32":
        attrs.append(f"u64_integer_promotion_target={target}")
    return PromotionPolicy(
        name="OPENVINO" + (f"({', '.join(attrs)})" if attrs else ""),
        dtypes=tuple(n for n in ALL_DTYPES if n in _OV_NAMES.values()),
        unpromotable=_OV_UNPROMOTABLE,
        u64_signed=target,
        lossy="allow" if promote_unsafe else "error",
        zero_dim="same_kind" if pytorch_scalar_promotion else "tensor",
        python_scalars="zero_dim",
        scalar_dtypes=("bool", "int64", "float64", None),
        true_divide="common",
        nary="chain",
        # ReduceSum/ReduceProd/ReduceMean take numeric types (not boolean); CumSum any
        reductions=(("sum", "keep"), ("prod", "keep"), ("cumsum", "keep"), ("mean", "keep")),
        reduction_types=(
            ("sum", "bool", "error"),
            ("prod", "bool", "error"),
            ("mean", "bool", "error"),
        ),
    )


OPENVINO = openvino()

#: The presets by name.
PRESETS: dict[str, PromotionPolicy] = {
    p.name: p for p in (OPENVINO, TORCH, NUMPY, JAX, JAX_X64, ARRAY_API, PADDLE, ONEFLOW)
}
