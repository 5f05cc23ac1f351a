"""Promotion: the spec texts' examples and tables, operand forms, errors, custom policies,
properties, convert_promote_types and the generated docs page.

The full tables of every framework are checked in test_promotion_tables.py."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fp8kit
from fp8kit import promotion as P
from fp8kit.promotion import _engine, _types

OV_SAFE = P.OPENVINO
OV_UNSAFE = P.openvino(promote_unsafe=True)
OV_PT_SAFE = P.openvino(pytorch_scalar_promotion=True)
OV_PT_UNSAFE = P.openvino(promote_unsafe=True, pytorch_scalar_promotion=True)


def rt(a, b, policy, op="add"):
    try:
        return str(P.result_type(a, b, policy=policy, op=op))
    except P.PromotionError:
        return "error"


# ------------------------------------------------------------- ConvertPromoteTypes-14 spec
# ../shared/specs/openvino-ConvertPromoteTypes-14.txt, "Examples" and "Example 1..3".
OV_SPEC = [
    # "ConvertPromoteTypes(i8, f32) -> f32 - floating has higher priority than integer"
    pytest.param("i8", "f32", OV_SAFE, "float32", id="i8,f32->f32"),
    # "ConvertPromoteTypes(i32, u8) -> i32 - ... signed integer has enough bit-width"
    pytest.param("i32", "u8", OV_SAFE, "int32", id="i32,u8->i32"),
    # "Promotions that will cause exceptions when promote_unsafe will be set to false:"
    # "ConvertPromoteTypes(f16, i64) -> f16"
    pytest.param("f16", "i64", OV_UNSAFE, "float16", id="unsafe:f16,i64->f16"),
    pytest.param("f16", "i64", OV_SAFE, "error", id="safe:f16,i64->error"),
    # "ConvertPromoteTypes(f64, u64) -> f64 - ... precision loss might be significant"
    pytest.param("f64", "u64", OV_UNSAFE, "float64", id="unsafe:f64,u64->f64"),
    pytest.param("f64", "u64", OV_SAFE, "error", id="safe:f64,u64->error"),
    # "ConvertPromoteTypes(i8, u8) -> i16 - ... bit-widening was necessary"
    pytest.param("i8", "u8", OV_UNSAFE, "int16", id="unsafe:i8,u8->i16"),
    pytest.param("i8", "u8", OV_SAFE, "error", id="safe:i8,u8->error"),
    # "ConvertPromoteTypes(f16, bf16) -> f32"
    pytest.param("f16", "bf16", OV_UNSAFE, "float32", id="unsafe:f16,bf16->f32"),
    pytest.param("f16", "bf16", OV_SAFE, "error", id="safe:f16,bf16->error"),
    # "ConvertPromoteTypes(f8m4e3, f8m5e3) -> f16 ... f16 was selected"
    pytest.param("f8e4m3", "f8e5m2", OV_UNSAFE, "float16", id="unsafe:f8e4m3,f8e5m2->f16"),
    pytest.param("f8e4m3", "f8e5m2", OV_SAFE, "error", id="safe:f8e4m3,f8e5m2->error"),
    # "ConvertPromoteTypes(u64, i8) -> f32 - ... according to u64_integer_promotion_target"
    pytest.param("u64", "i8", OV_UNSAFE, "float32", id="unsafe:u64,i8->f32"),
    pytest.param("u64", "i8", OV_SAFE, "error", id="safe:u64,i8->error"),
    # "ConvertPromoteTypes(S(i64), D(u8)) -> u8 - ... Rules of safe promotion (controlled by
    # promote_unsafe) apply in Pytorch-like conversion."
    pytest.param("0d:i64", "u8", OV_PT_UNSAFE, "uint8", id="pt-unsafe:S(i64),D(u8)->u8"),
    pytest.param("0d:i64", "u8", OV_PT_SAFE, "error", id="pt-safe:S(i64),D(u8)->error"),
    # "ConvertPromoteTypes(S(f16), D(i8)) -> f16 - ... dimensions of inputs does not affect"
    pytest.param("0d:f16", "i8", OV_PT_SAFE, "float16", id="pt:S(f16),D(i8)->f16"),
    # Example 1: FP16 with FP32 -> FP32 (defaults)
    pytest.param("f16", "f32", OV_SAFE, "float32", id="example1:f16,f32->f32"),
    # Example 2: "Promote integers unsafe": I16 with U32 -> I64
    pytest.param("i16", "u32", OV_UNSAFE, "int64", id="example2:i16,u32->i64"),
    # Example 3: "Promote u64 and signed integer unsafe": I16 with U64 -> FP32
    pytest.param("i16", "u64", OV_UNSAFE, "float32", id="example3:i16,u64->f32"),
]


@pytest.mark.parametrize("a,b,policy,want", OV_SPEC)
def test_convert_promote_types_spec_examples(a, b, policy, want):
    assert rt(a, b, policy) == want
    # "Promotion rules does not depend on order of inputs"
    assert rt(b, a, policy) == want


@pytest.mark.parametrize(
    "target", ["f64", "f16", "bf16", "f8e4m3", "i64", "u64", "boolean", np.int32, "float8_e5m2"]
)
def test_u64_integer_promotion_target(target):
    policy = P.openvino(promote_unsafe=True, u64_integer_promotion_target=target)
    want = str(np.dtype(target)) if not isinstance(target, str) else None
    got = P.result_type("uint64", "int32", policy=policy)
    assert want is None or str(got) == want
    assert P.result_type("int8", "uint64", policy=policy) == got
    assert str(P.result_type("uint32", "int8", policy=policy)) == "int64"  # not affected


def test_openvino_errors_say_why():
    with pytest.raises(P.PromotionError, match=r"OPENVINO: int8 and uint8 .*promote_unsafe=False"):
        P.result_type("int8", "uint8")
    with pytest.raises(P.PromotionError, match=r"float16 cannot hold every int16"):
        P.result_type("float16", "int16")
    with pytest.raises(P.PromotionError, match=r"uint64 and int8 would need int128"):
        P.result_type("uint64", "int8")
    with pytest.raises(P.PromotionError, match=r"0-d int16 does not fit int8"):
        P.result_type("0d:int16", "int8", policy=OV_PT_SAFE)
    with pytest.raises(P.PromotionError, match=r"float8_e4m3fnuz is not a type of OPENVINO"):
        P.result_type("float8_e4m3fnuz", "float16")
    with pytest.raises(P.PromotionError, match=r"no type for a Python complex"):
        P.result_type("float32", 1j)


def test_openvino_runtime_where_the_spec_text_is_loose():
    # Pinned facts of the openvino 2026.4 runtime (docs/promotion.md, "OpenVINO").
    # The safe PyTorch-like check lets an unsigned scalar into a signed tensor of half its
    # width: S(u16) with D(i8) -> i8, while S(i16) with D(i8) is refused.
    assert rt("0d:uint16", "int8", OV_PT_SAFE) == "int8"
    assert rt("0d:int16", "int8", OV_PT_SAFE) == "error"
    # Floats of one width are "wide enough" for each other: S(bf16) with D(f16) -> f16.
    assert rt("0d:bfloat16", "float16", OV_PT_SAFE) == "float16"
    # An integer with any float takes the float, float8 included (unsafe).
    assert rt("int64", "float8_e5m2", OV_UNSAFE) == "float8_e5m2"
    # uint4 and int4 need int8.
    assert rt("uint4", "int4", OV_UNSAFE) == "int8"


# ------------------------------------------------------------------------- Paddle's spec
# ../shared/specs/paddle-type-promotion.txt, "Type Promotion Rules in Tensor-to-Tensor"
# (+/-/*; rows a, columns b; "-": no promotion: the same type, else an error).
PADDLE_TT_COLS = "bf16 f16 f32 f64 bool u8 i8 i16 i32 i64 c64 c128".split()
PADDLE_TT = """
bf16 bf16 f32 f32 f64 - - - - - - c64 c128
f16 f32 f16 f32 f64 - - - - - - c64 c128
f32 f32 f32 f32 f64 - - - - - - c64 c128
f64 f64 f64 f64 f64 - - - - - - c128 c128
bool - - - - - - - - - - c64 c128
u8 - - - - - - - - - - c64 c128
i8 - - - - - - - - - - c64 c128
i16 - - - - - - - - - - c64 c128
i32 - - - - - - - - - - c64 c128
i64 - - - - - - - - - - c64 c128
c64 c64 c64 c64 c64 c64 c64 c64 c64 c64 c128 c64 c128
c128 c128 c128 c128 c128 c128 c128 c128 c128 c128 c128 c128 c128
"""
# The spec's complex64 row says (c64, f64) -> c64 and (c64, i64) -> c128, against its own
# f64 and i64 rows ("c128" and "c64"); paddle 3.3 gives c128 and c64: fp8kit follows it.
PADDLE_SPEC_TYPOS = {("c64", "f64"): "c128", ("c64", "i64"): "c64"}
_LONG = {
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "bool": "bool",
    "u8": "uint8",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "c64": "complex64",
    "c128": "complex128",
}


def _paddle_tt_params():
    for line in PADDLE_TT.strip().splitlines():
        a, *cells = line.split()
        for b, cell in zip(PADDLE_TT_COLS, cells, strict=True):
            cell = PADDLE_SPEC_TYPOS.get((a, b), cell)
            want = (_LONG[a] if a == b else "error") if cell == "-" else _LONG[cell]
            yield pytest.param(_LONG[a], _LONG[b], want, id=f"{a},{b}")


@pytest.mark.parametrize("a,b,want", list(_paddle_tt_params()))
def test_paddle_spec_tensor_to_tensor(a, b, want):
    assert rt(a, b, P.PADDLE) == want


# "Type Promotion Rules in Tensor-to-Scalar ... The scalar operand has default dtype: int ->
# int64, float -> float32, bool -> bool, complex -> complex64."
PADDLE_TS = """
bool bool i64 f32 c64
u8 u8 u8 f32 c64
i8 i8 i8 f32 c64
i16 i16 i16 f32 c64
i32 i32 i32 f32 c64
i64 i64 i64 f32 c64
bf16 bf16 bf16 bf16 c64
f16 f16 f16 f16 c64
f32 f32 f32 f32 c64
f64 f64 f64 f64 c128
c64 c64 c64 c64 c64
c128 c128 c128 c128 c128
"""


@pytest.mark.parametrize(
    "tensor,scalar,want",
    [
        pytest.param(_LONG[t], s, _LONG[w], id=f"{t},py:{s}")
        for line in PADDLE_TS.strip().splitlines()
        for t, *ws in [line.split()]
        for s, w in zip(["bool", "int", "float", "complex"], ws, strict=True)
    ],
)
def test_paddle_spec_tensor_to_scalar(tensor, scalar, want):
    assert rt(tensor, f"py:{scalar}", P.PADDLE) == want
    assert rt(f"py:{scalar}", tensor, P.PADDLE) == want


def test_paddle_spec_divide_and_logic_rules():
    # "Divide Rule: For divide API, it will not return dtype smaller than float. Such as
    # int32 / Scalar returns float32."
    assert rt("int32", 1, P.PADDLE, op="divide") == "float32"
    assert rt("int8", "int8", P.PADDLE, op="divide") == "float32"
    assert rt("float16", 2, P.PADDLE, op="divide") == "float16"
    # paddle 3.3 keeps bool / bool as bool (the spec's rule would give float32)
    assert rt("bool", True, P.PADDLE, op="divide") == "bool"
    # "Logic Rule: ... all results return bool"; complex compares give bool in paddle 3.3
    assert rt("float32", "float16", P.PADDLE, op="compare") == "bool"
    assert rt("complex64", "float32", P.PADDLE, op="compare") == "bool"
    # "a = paddle.ones([3,3], dtype = 'int64'); b = paddle.rand([3,3], dtype = 'float32');
    # c = a + b # ... TypeError will be raised"
    assert rt("int64", "float32", P.PADDLE) == "error"
    assert rt("int64", "float32", P.PADDLE, op="compare") == "error"


# ---------------------------------------------------------- the PyTorch/Array API article
# ../shared/specs/oneflow-pytorch-type-promotion.txt
def test_oneflow_article_statements():
    # "int8 and uint8, both of which eventually point to int16"
    for policy in (P.TORCH, P.NUMPY, P.JAX, P.ARRAY_API, OV_UNSAFE):
        assert rt("int8", "uint8", policy) == "int16"
    # "Boolean, integer and float types are not connected, indicating mixed-kind promotion
    # is undefined" (array api)
    assert rt("bool", "int8", P.ARRAY_API) == "error"
    assert rt("int8", "float32", P.ARRAY_API) == "error"
    # "If they both belong to the same data type family ... follows the data type of the
    # array"; "If they do not belong to the same data type family ... type promotion"
    assert rt("int8", 1, P.TORCH) == "int8"
    assert rt("int32", 1.0, P.TORCH) == "float32"
    # "the behavior of Array and Scalar will be consistent with the behavior of Array and 0d
    # Array" (PyTorch)
    for d in ("int8", "uint8", "float16"):
        assert rt(d, "0d:int64", P.TORCH) == rt(d, 1, P.TORCH) == d
    # "Numpy is different in that it will take a reasonable type promotion based on the range
    # of data of scalar" -- that was NumPy 1; NumPy 2 (NEP 50) looks at types only
    assert rt("int8", 300, P.NUMPY) == "int8"


# --------------------------------------------------------------------- modes and levels
def test_jax_modes():
    assert rt("int64", "uint64", P.JAX_X64) == "float64"
    assert rt("int64", "uint64", P.JAX) == "int32"  # both canonicalized to 32 bits first
    assert rt("int8", 1.0, P.JAX_X64) == "float64"
    assert rt("int8", 1.0, P.JAX) == "float32"
    assert rt("int64", "int64", P.JAX_X64, op="divide") == "float64"
    assert rt("int16", "int16", P.JAX_X64, op="divide") == "float32"
    assert rt("float8_e4m3fn", "float16", P.JAX) == "error"
    assert rt("int4", "int8", P.JAX) == "error"
    assert rt("int4", True, P.JAX) == "int4"


@pytest.mark.parametrize(
    "policy,tensor_0d,tensor_py",
    [
        # (int8 tensor with a 0-d int64, int8 tensor with a Python int), then float/int
        pytest.param(P.TORCH, "int8", "int8", id="TORCH"),
        pytest.param(P.PADDLE, "int8", "int8", id="PADDLE"),
        pytest.param(P.NUMPY, "int64", "int8", id="NUMPY"),
        pytest.param(P.JAX_X64, "int64", "int8", id="JAX_X64"),
        pytest.param(P.ARRAY_API, "int64", "int8", id="ARRAY_API"),
        pytest.param(OV_SAFE, "int64", "int64", id="OPENVINO"),
        pytest.param(OV_PT_UNSAFE, "int8", "int8", id="OPENVINO-pt-unsafe"),
    ],
)
def test_zero_dim_and_python_scalars(policy, tensor_0d, tensor_py):
    assert rt("int8", np.zeros((), np.int64), policy) == tensor_0d
    assert rt("int8", np.int64(3), policy) == tensor_0d  # numpy scalars are 0-d tensors
    assert rt("int8", 3, policy) == tensor_py
    assert rt("int8", "int64", policy) in ("int64", "error")  # tensors are never weaker


# --------------------------------------------------------------------------- operand forms
@pytest.mark.parametrize(
    "spelling",
    [
        "float8_e4m3fn",
        "f8e4m3",
        "FLOAT8E4M3FN",
        ml_dtypes.float8_e4m3fn,
        np.dtype(ml_dtypes.float8_e4m3fn),
        np.zeros(3, ml_dtypes.float8_e4m3fn),
    ],
)
def test_operand_spellings(spelling):
    assert str(P.result_type(spelling, "int8", policy=P.JAX)) == "float8_e4m3fn"


def test_python_scalar_spellings():
    for value, typ, name in [(True, bool, "bool"), (2, int, "int"), (2.0, float, "float")]:
        want = rt("float16", f"py:{name}", P.NUMPY)
        assert rt("float16", value, P.NUMPY) == rt("float16", typ, P.NUMPY) == want
    assert rt("uint8", np.zeros((), np.int64), P.TORCH) == rt("uint8", "0d:int64", P.TORCH)
    assert rt("i8", ">f4", P.NUMPY) == "float32"  # byte order does not matter


def test_bad_arguments():
    with pytest.raises(TypeError, match=r"a: 'float7' is not a type fp8kit promotes; valid: bool"):
        P.result_type("float7", "int8")
    with pytest.raises(TypeError, match=r"b: .*not a type fp8kit promotes"):
        P.result_type("int8", np.dtype("U3"))
    with pytest.raises(TypeError, match=r"b: \[1\] is not an array, dtype"):
        P.result_type("int8", [1])
    with pytest.raises(ValueError, match=r"op: 'mul' is not allowed; valid: add, divide"):
        P.result_type("int8", "int8", op="mul")
    with pytest.raises(TypeError, match=r"policy must be a PromotionPolicy"):
        P.result_type("int8", "int8", policy="TORCH")
    with pytest.raises(ValueError, match=r"int_to_float: 'wide' is not allowed; valid: float"):
        dataclasses.replace(P.TORCH, int_to_float="wide")
    with pytest.raises(ValueError, match=r"mixes: 'int\+str' is not allowed"):
        dataclasses.replace(P.TORCH, mixes=frozenset({"int+str"}))
    with pytest.raises(TypeError, match=r"u64_integer_promotion_target: 'x12'"):
        P.openvino(u64_integer_promotion_target="x12")
    with pytest.raises(ValueError, match=r"policy= or the OpenVINO attributes"):
        fp8kit.convert_promote_types(1, 2, promote_unsafe=True, policy=P.TORCH)


# ------------------------------------------------------------------------ custom policies
def test_custom_policy_from_a_preset():
    my = dataclasses.replace(P.TORCH, name="MY", int_to_float="safe_width")
    assert rt("int16", "float16", P.TORCH) == "float16"
    assert rt("int16", "float16", my) == "float32"
    assert rt("int64", "bfloat16", my) == "float64"
    assert rt("float8_e4m3fn", "float16", my) == "error"  # still an island
    bf = dataclasses.replace(P.NUMPY, float_tie="bfloat16")
    assert rt("float8_e4m3fn", "float8_e5m2", P.NUMPY) == "float16"
    assert rt("float8_e4m3fn", "float8_e5m2", bf) == "bfloat16"
    strict = dataclasses.replace(P.JAX_X64, name="JAX_STRICT", mixes=frozenset())
    assert rt("int8", "int16", strict) == "error"
    assert rt("int8", 1, strict) == "int8"
    with pytest.raises(P.PromotionError, match=r"JAX_STRICT: int8 and int16 .*int and int"):
        P.result_type("int8", "int16", policy=strict)


def test_presets_are_policies_of_one_engine():
    assert all(isinstance(p, P.PromotionPolicy) for p in P.PRESETS.values())
    assert set(P.PRESETS) == {
        *("OPENVINO", "TORCH", "NUMPY", "JAX", "JAX_X64", "ARRAY_API", "PADDLE", "ONEFLOW")
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        P.TORCH.lossy = "error"
    assert hash(P.TORCH) == hash(dataclasses.replace(P.TORCH))
    assert P.TORCH == dataclasses.replace(P.TORCH)


def test_result_type_is_cached():
    _engine._cached.cache_clear()
    first = P.result_type("int8", "float8_e5m2", policy=P.JAX)
    for _ in range(3):
        assert P.result_type(np.dtype(np.int8), "f8e5m2", policy=P.JAX) is first
    info = _engine._cached.cache_info()
    assert info.misses == 1 and info.hits == 3


# ----------------------------------------------------------------------------- properties
def _all_operands(policy):
    return P.operands_of(policy)


@pytest.mark.parametrize("policy", list(P.PRESETS.values()) + [OV_UNSAFE, OV_PT_SAFE, OV_PT_UNSAFE])
def test_order_does_not_matter(policy):
    ops = _all_operands(policy)
    for op in ("add", "divide", "compare"):
        for a, b in itertools.combinations(ops, 2):
            assert rt(a, b, policy, op) == rt(b, a, policy, op), (a, b, op)


def test_numpy_preset_holds_both_operands_exactly():
    """NUMPY's join is the smallest type into which both cast exactly (Cast-21 rule "E" or
    "="), except numpy's own cap: 64-bit integers with floats give float64/complex128."""
    for a, b in itertools.combinations_with_replacement(P.NUMPY.dtypes, 2):
        c = str(P.result_type(a, b, policy=P.NUMPY))
        for x in (a, b):
            if "complex" in c:
                continue  # Cast-21 has no complex types; see the tables test
            if {x, c} & {"int1", "uint1"}:  # no cast types: every value of x round-trips
                info = ml_dtypes.iinfo(_types._DTYPES[x]) if x != "bool" else None
                v = np.arange(int(info.min), int(info.max) + 1) if info else np.arange(2)
                assert (v.astype(_types._DTYPES[c]).astype(np.float64) == v).all(), (a, b, c)
                continue
            rule = fp8kit.cast_rule(x, c)
            capped = x in ("int64", "uint64") and c == "float64"
            assert rule in ("=", "E", "01") or capped, (a, b, c, x, rule)


@given(st.sampled_from(list(P.PRESETS.values())), st.sampled_from(P.ALL_DTYPES))
def test_weak_scalars_of_the_same_kind_never_change_a_tensor(policy, a):
    """The category rule: a Python scalar of the tensor's own category leaves it alone."""
    if a not in policy.dtypes or policy.python_scalars != "weak":
        return
    kind = ("bool", "int", "float", "complex")[_types._CATEGORY[a]]
    if kind == "bool" and policy.scalar_dtypes[0] != "bool":
        return  # ONEFLOW: a Python bool is an integer scalar (a bool tensor + True: int64)
    want = str(_types._DTYPES[policy._canon.get(a, a)])
    assert rt(a, f"py:{kind}", policy) == rt(f"py:{kind}", a, policy) == want


# -------------------------------------------------------------------- convert_promote_types
def test_convert_promote_types_issue_example():
    a = np.array([[1, -2, 3]], np.int8)
    b = np.array([0.5, 1.5], np.float32)
    a2, b2 = fp8kit.convert_promote_types(
        a,
        b,
        promote_unsafe=False,
        pytorch_scalar_promotion=False,
        u64_integer_promotion_target="f32",
    )
    assert a2.dtype == b2.dtype == np.float32
    assert a2.shape == a.shape and b2.shape == b.shape
    assert a2.tolist() == [[1.0, -2.0, 3.0]]
    assert b2 is b  # already the common type: no copy


@pytest.mark.parametrize(
    "a_dtype,b_dtype,policy,common",
    [
        ("float8_e4m3fn", "float8_e5m2", OV_UNSAFE, "float16"),
        ("float16", "bfloat16", OV_UNSAFE, "float32"),
        ("float8_e5m2fnuz", "bfloat16", P.NUMPY, "bfloat16"),
        ("int4", "float8_e4m3fn", P.NUMPY, "float8_e4m3fn"),
        ("uint8", "int8", OV_UNSAFE, "int16"),
        ("float8_e4m3fn", "complex64", P.NUMPY, "complex64"),
        ("int16", "float16", P.NUMPY, "float32"),
        # the formats ml_dtypes added (issue 18)
        ("int4", "float4_e2m1fn", P.NUMPY, "float6_e3m2fn"),
        ("uint2", "float8_e3m4", P.NUMPY, "float8_e3m4"),
        ("float8_e8m0fnu", "int8", P.NUMPY, "bfloat16"),
        ("uint1", "float16", OV_SAFE, "float16"),
        ("int1", "int2", P.NUMPY, "int2"),
    ],
)
def test_convert_promote_types_is_exact_when_the_common_type_holds_both(
    a_dtype, b_dtype, policy, common
):
    rng = np.random.default_rng(0)

    def sample(name):
        dt = np.dtype(_types._DTYPES[name])
        if _types._CATEGORY[name] == 1:
            info = ml_dtypes.iinfo(dt)
            return rng.integers(int(info.min), int(info.max) + 1, (4, 5)).astype(dt)
        if dt.kind == "c":
            return (rng.standard_normal((4, 5)) + 1j).astype(dt)
        bits = _types._bits(name)
        codes = np.arange(2**bits if bits <= 8 else 4096, dtype=f"u{dt.itemsize}")
        return codes.view(dt)

    a, b = sample(a_dtype), sample(b_dtype)
    a2, b2 = fp8kit.convert_promote_types(a, b, policy=policy)
    assert str(a2.dtype) == str(b2.dtype) == common
    for x, x2 in ((a, a2), (b, b2)):
        assert x2.shape == x.shape
        wide = np.complex128 if "complex" in common else np.float64
        xv = x.astype(np.float64).astype(wide) if x.dtype.kind not in "c" else x.astype(wide)
        np.testing.assert_array_equal(x2.astype(wide), xv)


def test_convert_promote_types_uses_cast_semantics():
    # unsafe int -> float8: fp8kit.cast rounds once and saturates (Cast-21) by default
    x = np.array([1000, 17, -3], np.int32)
    a2, b2 = fp8kit.convert_promote_types(
        x, np.zeros(2, ml_dtypes.float8_e4m3fn), promote_unsafe=True
    )
    np.testing.assert_array_equal(a2.view(np.uint8), fp8kit.cast(x, "float8_e4m3fn").view(np.uint8))
    assert a2.astype(np.float32).tolist() == [448.0, 16.0, -3.0]
    a3, _ = fp8kit.convert_promote_types(
        x, np.zeros(2, ml_dtypes.float8_e4m3fn), promote_unsafe=True, saturate=False
    )
    assert np.isnan(a3.astype(np.float32)[0])
    # pytorch_scalar_promotion narrows a 0-d operand to the tensor's type (wraps like Cast-21)
    s, t = fp8kit.convert_promote_types(
        np.array(300, np.int64),
        np.array([1, 2], np.uint8),
        promote_unsafe=True,
        pytorch_scalar_promotion=True,
    )
    assert s.dtype == t.dtype == np.uint8 and s.shape == () and int(s) == 44


@pytest.mark.slow
@pytest.mark.parametrize("policy", [P.NUMPY, P.TORCH, P.JAX_X64, P.PADDLE, OV_UNSAFE])
def test_convert_promote_types_to_every_result_type(policy):
    """Every pair of a preset's tensor types that promotes converts to the common type; under
    NUMPY (the smallest type that holds both) every value comes through exactly."""
    rng = np.random.default_rng(1)

    def sample(name):
        dt = _types._DTYPES[name]
        if _types._CATEGORY[name] <= 1:
            info = ml_dtypes.iinfo(dt) if name != "bool" else None
            lo, hi = (int(info.min), int(info.max)) if info else (0, 1)
            wide = np.uint64 if name == "uint64" else np.int64
            return rng.integers(lo, hi, 6, endpoint=True, dtype=wide).astype(dt)
        if dt.kind == "c":
            return (rng.standard_normal(6) + 1j).astype(dt)
        bits = _types._bits(name)
        return np.arange(2**bits if bits <= 8 else 4096, dtype=f"u{dt.itemsize}").view(dt)

    for a_name, b_name in itertools.combinations_with_replacement(policy.dtypes, 2):
        try:
            common = P.result_type(a_name, b_name, policy=policy)
        except P.PromotionError:
            continue
        a, b = sample(a_name), sample(b_name)
        a2, b2 = fp8kit.convert_promote_types(a, b, policy=policy)
        assert a2.dtype == b2.dtype == common and a2.shape == a.shape, (a_name, b_name)
        if policy is not P.NUMPY or "complex" in str(common):
            continue
        for name, x, x2 in ((a_name, a, a2), (b_name, b, b2)):
            if name in ("int64", "uint64") and common == np.float64:
                continue  # numpy's cap
            np.testing.assert_array_equal(
                x2.astype(np.float64), x.astype(np.float64), err_msg=f"{name} -> {common}"
            )


def test_convert_promote_types_one_bit_types():
    """ml_dtypes' int1/uint1 (OpenVINO's u1), which fp8kit.cast does not take: in through
    int8, out by the lowest bit (integers wrap, as Cast-21 narrows integers)."""
    u1 = np.array([0, 1, 1], ml_dtypes.uint1)
    a, b = fp8kit.convert_promote_types(u1, np.array([True, False]))
    assert a is u1 and b.dtype == u1.dtype and b.astype(np.int8).tolist() == [1, 0]
    a, b = fp8kit.convert_promote_types(u1, np.array([-3, 5], np.int8))
    assert a.dtype == b.dtype == np.int8 and a.tolist() == [0, 1, 1] and b.tolist() == [-3, 5]
    i1 = np.array([0, -1], ml_dtypes.int1)
    a, b = fp8kit.convert_promote_types(i1, 3, policy=P.JAX_X64)  # weak int: int1
    assert a is i1 and b.dtype == i1.dtype and b.shape == () and int(b) == -1
    a, b = fp8kit.convert_promote_types(i1, np.array(2, np.int64), policy=P.TORCH)
    assert b.dtype == i1.dtype and int(b) == 0
    with pytest.raises(P.PromotionError, match="OPENVINO promotes uint2 with no type"):
        fp8kit.convert_promote_types(np.zeros(2, ml_dtypes.uint2), np.zeros(2, ml_dtypes.uint2))


def test_convert_promote_types_with_python_scalars_and_errors():
    a, b = fp8kit.convert_promote_types(np.ones(3, np.float16), 2.5, policy=P.TORCH)
    assert a.dtype == b.dtype == np.float16 and b.shape == () and float(b) == 2.5
    with pytest.raises(P.PromotionError, match="promote_unsafe=False"):
        fp8kit.convert_promote_types(np.ones(3, np.int8), np.ones(3, np.uint8))


# ---------------------------------------------------------------------------------- docs
DOC = Path(__file__).parents[1] / "docs" / "promotion.md"


def test_docs_page_is_generated_from_the_code():
    doc = DOC.read_text()
    blocks = re.findall(r"<!-- promotion:(\S+) -->\n(.*?)\n<!-- /promotion:\1 -->", doc, re.S)
    assert {name for name, _ in blocks} >= set(P.PRESETS) | {"disagreements"}
    for name, body in blocks:
        assert body == P.docs_block(name), (
            f"stale docs/promotion.md block {name}: run scripts/promotion_docs.py"
        )
