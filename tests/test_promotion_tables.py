"""Every preset against the table its framework produced (tests/data/promotion/*.json).

The tables were written by scripts/oracles/*.py from the real libraries (torch 2.13, numpy 2,
jax with and without x64, array-api-strict, paddlepaddle 3.3, openvino 2026.4, oneflow 0.9.0);
these tests need none of them.  tests/test_promotion_live.py regenerates the tables where the
libraries are installed (always in CI; oneflow only where it is importable) and checks they
have not changed.

Every ordered pair of a framework's types is covered, as tensors, 0-d tensors and Python
scalars, for addition (any arithmetic operator), true division and (Paddle) comparison.  A
cell is a dtype, ``"error"`` (the library refuses: fp8kit must raise PromotionError),
``"nokernel"`` (the library decided a type but has no CPU kernel to show it: fp8kit must give
a type), ``"crash"`` (the library died: oneflow 0.9.0 segfaults on a Python complex scalar;
no answer to compare: test_promotion_nary.py checks that fp8kit refuses it) or ``null`` (not
asked).  The n-ary tables (random mixes and reductions) are checked in test_promotion_nary.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8kit import promotion as P

DATA = Path(__file__).parent / "data" / "promotion"
PRESET_OF_TABLE = {
    "torch": P.TORCH,
    "numpy": P.NUMPY,
    "jax": P.JAX,
    "jax_x64": P.JAX_X64,
    "array_api": P.ARRAY_API,
    "paddle": P.PADDLE,
    "oneflow": P.ONEFLOW,
    "openvino": None,  # one policy per attribute set: the op key
    "openvino_u64_targets": None,
}
TABLES = {name: json.loads((DATA / f"{name}.json").read_text()) for name in PRESET_OF_TABLE}

# Where fp8kit knowingly differs from the library (docs/promotion.md lists them too):
# (table, op, a, b) -> (what fp8kit gives, why).
KNOWN_DIFFERENCES = {
    **{
        ("paddle", "divide", a, b): (
            "complex128",
            "paddle 3.3 divides a 0-d float64/complex128 tensor and a Python complex in "
            "complex64 (addition gives complex128); fp8kit keeps the addition's type",
        )
        for x in ("0d:float64", "0d:complex128")
        for a, b in ((x, "py:complex"), ("py:complex", x))
    },
    # oneflow 0.9.0's scalar_div casts a bool tensor to int64 for an int scalar and divides
    # in int64 (``x / 2``), while ``2 / x`` is float32: fp8kit keeps one (symmetric) answer,
    # the true division of the common type int64
    **{
        ("oneflow", "divide", x, "py:int"): (
            "float32",
            "oneflow 0.9.0 divides a bool tensor by a Python int in int64 (the reversed "
            "division gives float32); fp8kit gives float32 both ways",
        )
        for x in ("bool", "0d:bool")
    },
    # oneflow refuses a Python bool in division ("should be float or int") except that
    # True / float16 reaches a missing kernel; fp8kit refuses it everywhere
    **{
        ("oneflow", "divide", "py:bool", x): (
            "error",
            "oneflow 0.9.0 refuses a Python bool in division but for True / float16, which "
            "has no CPU kernel; fp8kit refuses it everywhere",
        )
        for x in ("float16", "0d:float16")
    },
}


def policy_for(table: str, op: str) -> tuple[P.PromotionPolicy, str]:
    """The policy and the result_type op of one grid of a table."""
    preset = PRESET_OF_TABLE[table]
    if preset is not None:
        return preset, op
    attrs = dict(kv.split("=") for kv in op.split(","))
    policy = P.openvino(
        promote_unsafe=bool(int(attrs["promote_unsafe"])),
        pytorch_scalar_promotion=bool(int(attrs["pytorch_scalar_promotion"])),
        u64_integer_promotion_target=attrs["u64_integer_promotion_target"],
    )
    return policy, "add"


def outcome(policy, a, b, op) -> str:
    try:
        return str(P.result_type(a, b, policy=policy, op=op))
    except P.PromotionError:
        return "error"


def expected(table: str, op: str, i: int, j: int) -> str | None:
    t = TABLES[table]
    cell = t["ops"][op][i][j]
    if cell == "crash":
        return None
    if cell == "nokernel":
        # torch has no kernel for complex32 (ComplexHalf) division; complex32 is no numpy dtype
        add_cell = t["ops"]["add"][i][j] if "add" in t["ops"] else None
        return "error" if add_cell == "complex32" else "a dtype"
    if cell == "complex32":  # torch's ComplexHalf has no numpy dtype: fp8kit refuses
        return "error"
    return cell


def _grid_id(table: str, op: str) -> str:
    if table.startswith("openvino"):
        attrs = dict(kv.split("=") for kv in op.split(","))
        return "unsafe{promote_unsafe}-pt{pytorch_scalar_promotion}-{target}".format(
            target=attrs["u64_integer_promotion_target"], **attrs
        )
    return op


ROWS = [
    pytest.param(table, op, i, id=f"{table}-{_grid_id(table, op)}-{a}")
    for table, t in TABLES.items()
    for op in t["ops"]
    for i, a in enumerate(t["operands"])
]


@pytest.mark.parametrize("table,op,i", ROWS)
def test_row_against_the_library(table, op, i):
    t = TABLES[table]
    policy, rt_op = policy_for(table, op)
    a = t["operands"][i]
    wrong = []
    for j, b in enumerate(t["operands"]):
        want = expected(table, op, i, j)
        if want is None:
            continue
        got = outcome(policy, a, b, rt_op)
        known = KNOWN_DIFFERENCES.get((table, op, a, b))
        if known is not None:
            assert got == known[0], (a, b, got, known)
            assert want != known[0], f"{(a, b)} is no longer a difference: drop it"
            continue
        if want == "a dtype" and got != "error":
            continue
        if got != want:
            wrong.append(f"{a} with {b}: library {want}, fp8kit {got}")
    assert not wrong, "\n".join(wrong)


def test_every_known_difference_is_in_a_table():
    for table, op, a, b in KNOWN_DIFFERENCES:
        operands = TABLES[table]["operands"]
        assert a in operands and b in operands and op in TABLES[table]["ops"]


def test_tables_cover_every_type_of_each_preset():
    for table, preset in PRESET_OF_TABLE.items():
        if preset is None:
            preset = P.OPENVINO
        operands = TABLES[table]["operands"]
        dtypes = preset.dtypes
        if table == "numpy":  # numpy's own types; ml_dtypes ones: test_promotion.py
            dtypes = [d for d in dtypes if d in operands]
            assert len(dtypes) == 14
        assert set(dtypes) <= set(operands), table
        if table != "openvino_u64_targets":
            assert {f"0d:{d}" for d in dtypes} <= set(operands), table
            assert {"py:bool", "py:int", "py:float", "py:complex"} <= set(operands), table


def test_each_preset_has_every_type_its_library_has_that_fp8kit_represents():
    for table in ("torch", "jax", "jax_x64", "paddle", "openvino", "array_api", "oneflow"):
        preset = PRESET_OF_TABLE[table] or P.OPENVINO
        tensors = [o for o in TABLES[table]["operands"] if ":" not in o]
        assert set(tensors) == set(preset.dtypes), table
    assert set(TABLES["jax_x64"]["operands"]) >= set(P.ALL_DTYPES)  # every ml_dtypes type


@pytest.mark.parametrize("table", ["torch", "jax_x64", "openvino"])
def test_types_fp8kit_cannot_represent_are_clear_errors(table):
    """complex32, torch's shell and quantized types, OpenVINO's u3/u6/nf4: a TypeError that
    names the type and says fp8kit cannot represent it (never a PromotionError)."""
    names = TABLES[table]["not_represented"]
    if table == "torch":
        assert "complex32" in names and "float4_e2m1fn_x2" in names
    if table == "openvino":
        assert {"u3", "u6", "nf4"} <= set(names)
    for name in names:
        assert name in P.UNREPRESENTED, name
        for a, b in ((name, "int8"), ("int8", name)):
            with pytest.raises(TypeError, match=rf"'{name}' is .*cannot represent") as e:
                P.result_type(
                    a, b, policy=P.PRESETS["OPENVINO" if table == "openvino" else "TORCH"]
                )
            assert not isinstance(e.value, P.PromotionError)


def test_issue_18_examples():
    """The pairs the issue quotes: fp8kit now answers as the libraries do."""
    assert rt("bool", "float8_e4m3b11fnuz", P.JAX_X64) == "float8_e4m3b11fnuz"
    assert rt("int8", "float4_e2m1fn", P.JAX) == "float4_e2m1fn"
    assert rt("py:float", "float6_e3m2fn", P.JAX_X64) == "float6_e3m2fn"
    assert rt("float8_e4m3", "float8_e3m4", P.JAX_X64) == "error"
    assert rt("uint1", "int1", P.JAX_X64) == "error"
    assert rt("int2", "py:int", P.JAX_X64, "divide") == "int2"  # jax keeps it integral
    assert rt("float8_e8m0fnu", "float8_e8m0fnu", P.TORCH) == "float8_e8m0fnu"
    assert rt("float8_e8m0fnu", "0d:float32", P.TORCH) == "float8_e8m0fnu"
    assert rt("float8_e8m0fnu", "float32", P.TORCH) == "error"
    assert rt("uint2", "bfloat16", P.TORCH) == "bfloat16"
    assert rt("int1", "py:float", P.TORCH) == "error"
    assert rt("uint16", "py:int", P.PADDLE) == "uint16"  # paddle: no CPU kernel
    assert rt("uint32", "int64", P.PADDLE) == "error"
    assert rt("uint64", "py:complex", P.PADDLE) == "error"
    assert rt("u1", "i4", P.OPENVINO) == "int4"
    assert rt("u1", "f8e4m3", P.OPENVINO) == "float8_e4m3fn"
    assert rt("u1", "boolean", P.OPENVINO) == "uint1"
    for t in ("u2", "f4e2m1", "f8e8m0"):
        assert rt(t, t, P.openvino(True, True)) == "error"


def rt(a, b, policy, op="add"):
    try:
        return str(P.result_type(a, b, policy=policy, op=op))
    except P.PromotionError:
        return "error"


def test_openvino_tables_cover_all_three_attributes():
    keys = set(TABLES["openvino"]["ops"]) | set(TABLES["openvino_u64_targets"]["ops"])
    attrs = [dict(kv.split("=") for kv in k.split(",")) for k in keys]
    assert {(a["promote_unsafe"], a["pytorch_scalar_promotion"]) for a in attrs} == {
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    }
    assert len({a["u64_integer_promotion_target"] for a in attrs}) >= 8


def test_numpy_own_answers_for_ml_dtypes_depend_on_operand_order():
    """Why fp8kit's NUMPY preset does not copy numpy for ml_dtypes types (docs/promotion.md)."""
    ml = json.loads((DATA / "numpy_ml_dtypes.json").read_text())
    ops, grid = ml["operands"], ml["ops"]["operator"]
    i, j = ops.index("int4"), ops.index("float8_e4m3fn")
    assert (grid[i][j], grid[j][i]) == ("int4", "float8_e4m3fn")
    i, j = ops.index("float8_e4m3fn"), ops.index("float8_e5m2fnuz")
    assert ml["ops"]["result_type"][i][j] == "float8_e4m3fn"  # cannot hold 2**-17 or 57344
    # fp8kit is order-independent and gives the smallest type that holds both
    for a, b in [("int4", "float8_e4m3fn"), ("float8_e4m3fn", "float8_e5m2fnuz")]:
        assert P.result_type(a, b, policy=P.NUMPY) == P.result_type(b, a, policy=P.NUMPY)
    assert str(P.result_type("int4", "float8_e4m3fn", policy=P.NUMPY)) == "float8_e4m3fn"
    assert str(P.result_type("float8_e4m3fn", "float8_e5m2fnuz", policy=P.NUMPY)) == "float16"
