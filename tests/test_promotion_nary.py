"""More than two operands, and reductions, against the tables the libraries produced.

tests/data/promotion/<lib>_nary.json were written by scripts/oracles/<lib>_table.py
(``build_nary``; oneflow_table.py for OneFlow 0.9.0, which runs on Python 3.10 only) from
torch 2.13, numpy 2, jax (x64 and not), array-api-strict, paddlepaddle 3.3 and oneflow 0.9.0:

- ``reductions``: sum, prod, cumsum and mean of one tensor or 0-d tensor of each type;
- ``mixes``: random lists of 3 to 6 operands (tensors, 0-d tensors, Python scalars) and the
  library's answer: ``elementwise_dtypes`` and ``cat`` (torch), ``result_type`` (numpy, jax,
  array-api-strict), ``cat`` (oneflow's TensorProcessor), ``chain`` (``a + b + c + ...``:
  paddle and oneflow promote only in binary operators).

A cell is a dtype, ``"error"`` (fp8kit must raise PromotionError), ``"nokernel"`` or
``"crash"`` (the library chose a type and failed to compute it: fp8kit must give a type;
in a chain the step that failed hides the rest, and a crash is oneflow's SIGSEGV on a Python
complex: no answer to compare), or ``"complex32"`` (torch's ComplexHalf, which fp8kit
cannot represent: an error).
tests/test_promotion_live.py regenerates the tables where the libraries are installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fp8kit
from fp8kit import promotion as P

DATA = Path(__file__).parent / "data" / "promotion"
PRESET_OF_TABLE = {
    "torch_nary": P.TORCH,
    "numpy_nary": P.NUMPY,
    "jax_nary": P.JAX,
    "jax_x64_nary": P.JAX_X64,
    "array_api_nary": P.ARRAY_API,
    "paddle_nary": P.PADDLE,
    "oneflow_nary": P.ONEFLOW,
}
TABLES = {name: json.loads((DATA / f"{name}.json").read_text()) for name in PRESET_OF_TABLE}


def outcome(policy, operands, op="add") -> str:
    try:
        return str(P.result_type(*operands, policy=policy, op=op))
    except P.PromotionError:
        return "error"


def agrees(want: str, got: str, kind: str = "") -> bool:
    if kind == "chain" and want in ("nokernel", "crash"):
        return True
    if want in ("nokernel", "crash"):
        return got != "error"
    if want == "complex32":  # torch's ComplexHalf: no numpy dtype, fp8kit refuses
        return got == "error"
    return want == got


MIX_PARAMS = [
    pytest.param(table, kind, id=f"{table}-{kind}")
    for table, t in TABLES.items()
    for kind in t["mixes"]
]


@pytest.mark.parametrize("table,kind", MIX_PARAMS)
def test_mixes_against_the_library(table, kind):
    policy = PRESET_OF_TABLE[table]
    rows = TABLES[table]["mixes"][kind]
    assert len(rows) >= 300
    wrong = []
    for row in rows:
        operands, want = row[:-1], row[-1]
        got = outcome(policy, operands)
        if not agrees(want, got, kind):
            wrong.append(f"{operands}: library {want}, fp8kit {got}")
    assert not wrong, f"{len(wrong)} of {len(rows)}:\n" + "\n".join(wrong[:30])


REDUCTION_PARAMS = [
    pytest.param(table, op, id=f"{table}-{op}")
    for table, t in TABLES.items()
    for op in t["reductions"]["ops"]
]


@pytest.mark.parametrize("table,op", REDUCTION_PARAMS)
def test_reductions_against_the_library(table, op):
    policy = PRESET_OF_TABLE[table]
    red = TABLES[table]["reductions"]
    wrong = []
    for a, want in zip(red["operands"], red["ops"][op], strict=True):
        got = outcome(policy, [a], op)
        if not agrees(want, got):
            wrong.append(f"{op}({a}): library {want}, fp8kit {got}")
    assert not wrong, "\n".join(wrong)


def test_tables_cover_the_presets_types():
    for table, policy in PRESET_OF_TABLE.items():
        red = set(TABLES[table]["reductions"]["operands"])
        tensors = {o for o in red if ":" not in o}
        if table == "numpy_nary":
            assert len(tensors) == 14  # numpy's own types; ml_dtypes ones follow fp8kit's rule
        else:
            assert tensors == set(policy.dtypes) or table == "paddle_nary", table
        assert {f"0d:{d}" for d in tensors} <= red, table
        assert set(TABLES[table]["reductions"]["ops"]) == set(P.REDUCTIONS), table


# ----------------------------------------------------------------- folding pairs is wrong
def fold(policy, operands):
    """The pairwise answer folded left to right, each result a tensor of that type."""
    acc = operands[0]
    for x in operands[1:]:
        acc = str(P.result_type(acc, x, policy=policy))
    return acc


# (policy, operands, n-ary answer, folded pairs); docs/promotion.md quotes them
FOLD_IS_WRONG = [
    # PyTorch: a tensor of another category wins; 0-d float16 decides within floats
    pytest.param(P.TORCH, ["int8", "py:float", "0d:float16"], "float16", "float32", id="torch"),
    # OneFlow (a chain): 0-d uint8 + 1.0 is a 0-d float32, which a bool tensor ignores
    pytest.param(P.ONEFLOW, ["0d:uint8", "py:float", "bool"], "bool", "float32", id="oneflow"),
    # NumPy: float16 promotes int8 and uint8 one by one (int16 never forms)
    pytest.param(P.NUMPY, ["int8", "uint8", "float16"], "float16", "float32", id="numpy"),
    # JAX: int8 with a weak float is a weak float, which float16 absorbs
    pytest.param(P.JAX, ["int8", "py:float", "float16"], "float16", "float32", id="jax"),
    # the Array API: a Python bool meets an integer array on its own and is refused
    pytest.param(P.ARRAY_API, ["py:bool", "py:int", "int8"], "error", "int64", id="array_api"),
]


@pytest.mark.parametrize("policy,operands,nary,folded", FOLD_IS_WRONG)
def test_folding_pairs_is_not_nary_promotion(policy, operands, nary, folded):
    assert outcome(policy, operands) == nary
    try:
        got = fold(policy, operands)
    except P.PromotionError:
        got = "error"
    assert got == folded


def test_folding_differs_in_the_recorded_mixes():
    """Folding the pairwise answers (each intermediate a tensor) is wrong for some recorded
    mixes of every library but torch.cat's tensors, so the n-ary rules are needed
    (docs/promotion.md quotes these counts)."""
    counts = {}
    for table, kind, want_count in [
        ("torch_nary", "elementwise_dtypes", 31),
        ("torch_nary", "cat", 0),
        ("numpy_nary", "result_type", 10),
        ("jax_nary", "result_type", 11),
        ("jax_x64_nary", "result_type", 20),
        ("array_api_nary", "result_type", 1),
        ("paddle_nary", "chain", 15),
        ("oneflow_nary", "chain", 29),
    ]:
        policy = PRESET_OF_TABLE[table]
        n = 0
        for row in TABLES[table]["mixes"][kind]:
            want = row[-1]
            if want in ("nokernel", "crash"):
                continue
            try:
                folded = fold(policy, row[:-1])
            except P.PromotionError:
                folded = "error"
            n += folded != ("error" if want == "complex32" else want)
        counts[table, kind] = (n, want_count)
    assert all(n == want for n, want in counts.values()), counts


def test_two_operands_keep_the_pairwise_answers():
    """n-ary promotion of two operands is the pairwise rule (which the pair tables check)."""
    for policy in P.PRESETS.values():
        ops = P.operands_of(policy)
        for a in ops[:: max(1, len(ops) // 12)]:
            for b in ops:
                assert outcome(policy, [a, b]) == outcome(policy, [b, a]), (policy.name, a, b)


def test_numpy_main_operand_is_order_independent():
    import itertools

    ops = ["int8", "uint16", "float16", "py:float", "0d:uint64", "py:complex"]
    for combo in itertools.combinations(ops, 3):
        answers = {outcome(P.NUMPY, list(p)) for p in itertools.permutations(combo)}
        assert len(answers) == 1, combo


def test_torch_cat_is_order_dependent_like_torch():
    # torch.cat folds at::result_type in order: uint16 meets int8 first and is refused
    assert outcome(P.TORCH, ["uint16", "int8", "float16"]) == "error"
    assert outcome(P.TORCH, ["uint16", "float16", "int8"]) == "float16"


# -------------------------------------------------------------------------- OneFlow facts
def test_oneflow_issue_examples():
    of = P.ONEFLOW
    assert outcome(of, ["float16", "bfloat16"]) == "bfloat16"  # torch: float32
    assert outcome(P.TORCH, ["float16", "bfloat16"]) == "float32"
    assert outcome(of, ["float32", "bfloat16"]) == "bfloat16"
    assert outcome(of, ["int8", "0d:float64"]) == "int8"  # the 0-d tensor is skipped
    assert outcome(P.TORCH, ["int8", "0d:float64"]) == "float64"
    assert outcome(of, ["0d:int8", "0d:float64"]) == "float64"  # all 0-d: they promote
    assert outcome(of, ["int8"], "prod") == "int8"
    assert outcome(of, ["int8"], "sum") == "int64"
    assert outcome(of, ["int8"], "mean") == "error"
    assert outcome(of, ["bool", "py:bool"]) == "int64"  # a Python bool is an int scalar
    assert outcome(of, ["bool", "0d:uint8"], "divide") == "float32"
    assert outcome(of, ["bool", "0d:float16"], "divide") == "bool"
    for x in ("float32", "0d:int8"):  # no complex type: oneflow 0.9.0 segfaults
        for a, b in ((x, "py:complex"), ("py:complex", x)):
            with pytest.raises(P.PromotionError, match="ONEFLOW has no type for a Python complex"):
                P.result_type(a, b, policy=of)


# -------------------------------------------------------------------------- reductions
@pytest.mark.parametrize(
    "policy,x,op,want",
    [
        # "sum ... any int series ... int64" (the OneFlow article on PyTorch)
        pytest.param(P.TORCH, "uint8", "sum", "int64", id="torch-sum-u8"),
        pytest.param(P.TORCH, "int16", "mean", "error", id="torch-mean-int"),
        pytest.param(P.NUMPY, "uint8", "sum", "uint64", id="numpy-sum-u8"),
        pytest.param(P.NUMPY, "int8", "mean", "float64", id="numpy-mean-int"),
        pytest.param(P.JAX, "int8", "sum", "int32", id="jax-sum"),
        pytest.param(P.JAX_X64, "int8", "cumsum", "int8", id="jax-cumsum-keeps"),
        pytest.param(P.JAX_X64, "int4", "sum", "error", id="jax-sum-int4"),
        pytest.param(P.JAX_X64, "int64", "mean", "float64", id="jax-mean-i64"),
        pytest.param(P.ARRAY_API, "bool", "sum", "error", id="array_api-sum-bool"),
        pytest.param(P.PADDLE, "int8", "sum", "int8", id="paddle-sum-i8"),
        pytest.param(P.PADDLE, "int32", "sum", "int64", id="paddle-sum-i32"),
        pytest.param(P.PADDLE, "bool", "mean", "bool", id="paddle-mean-bool"),
        pytest.param(P.ONEFLOW, "0d:bool", "sum", "bool", id="oneflow-0d-sum"),
        pytest.param(P.ONEFLOW, "bfloat16", "mean", "error", id="oneflow-mean-bf16"),
        pytest.param(P.OPENVINO, "int8", "mean", "int8", id="openvino-mean"),
        pytest.param(P.OPENVINO, "bool", "sum", "error", id="openvino-sum-bool"),
        pytest.param(P.OPENVINO, "uint2", "sum", "uint2", id="openvino-sum-u2"),
    ],
)
def test_reduction_rules(policy, x, op, want):
    assert outcome(policy, [x], op) == want


def test_reduction_errors_say_why():
    with pytest.raises(P.PromotionError, match=r"TORCH: mean of int8: mean of int8 is not"):
        P.result_type("int8", policy=P.TORCH, op="mean")
    with pytest.raises(ValueError, match=r"op='sum' reduces one operand; got 2"):
        P.result_type("int8", "int8", policy=P.TORCH, op="sum")
    with pytest.raises(TypeError, match=r"a: 3 is a Python scalar; op='mean' reduces a tensor"):
        P.result_type(3, policy=P.NUMPY, op="mean")
    with pytest.raises(ValueError, match=r"op: 'max' is not allowed; valid: add, divide, compare"):
        P.result_type("int8", op="max")
    with pytest.raises(ValueError, match=r"at least one operand"):
        P.result_type(policy=P.NUMPY)
    with pytest.raises(TypeError, match=r"c: 'float7' is not a type fp8kit promotes"):
        P.result_type("int8", "int8", "float7")


def test_bad_policy_fields():
    import dataclasses

    with pytest.raises(ValueError, match=r"nary: 'tree' is not allowed; valid: levels, main"):
        dataclasses.replace(P.TORCH, nary="tree")
    with pytest.raises(ValueError, match=r"reductions \(sum\): 'max' is not allowed; valid: keep"):
        dataclasses.replace(P.TORCH, reductions=(("sum", "max"),))
    with pytest.raises(ValueError, match=r"reductions must give one rule for each of sum"):
        dataclasses.replace(P.TORCH, reductions=(("sum", "keep"),))
    with pytest.raises(ValueError, match=r"float_ranks: 'int8' is not allowed"):
        dataclasses.replace(P.TORCH, float_ranks=("int8",))


# ------------------------------------------------------------------------ promote_inputs
def test_promote_inputs_converts_all_at_once():
    a = np.array([1, -2], np.int8)
    b = np.array([200, 3], np.uint8)
    c = np.ones(3, np.float16)
    a2, b2, c2 = fp8kit.promote_inputs(a, b, c, policy=P.NUMPY)
    assert a2.dtype == b2.dtype == c2.dtype == np.float16  # not float32 (the fold)
    assert a2.tolist() == [1.0, -2.0] and b2.tolist() == [200.0, 3.0] and c2 is c
    # PyTorch: the 0-d float16 decides the float type (folding pairs gives float32)
    out = fp8kit.promote_inputs(a, 2.5, np.array(1.0, np.float16), policy=P.TORCH)
    assert [x.dtype for x in out] == [np.float16] * 3 and out[1].shape == ()


def test_promote_inputs_reductions_and_errors():
    (s,) = fp8kit.promote_inputs(np.array([1, 2], np.int8), policy=P.TORCH, op="sum")
    assert s.dtype == np.int64 and s.tolist() == [1, 2]
    with pytest.raises(P.PromotionError, match="promote_unsafe=False"):
        fp8kit.promote_inputs(np.ones(2, np.int8), np.ones(2, np.uint8), np.ones(2, np.int16))
    # a comparison compares in the common type (its result, bool, is not the inputs' type)
    x, y = fp8kit.promote_inputs(np.ones(2, np.int8), 1.5, policy=P.TORCH, op="compare")
    assert x.dtype == y.dtype == np.float32
    with pytest.raises(ValueError, match=r"op: 'max' is not allowed; valid: add, divide"):
        fp8kit.promote_inputs(np.ones(2), np.ones(2), op="max")
    with pytest.raises(ValueError, match=r"promote_inputs needs at least one array"):
        fp8kit.promote_inputs(policy=P.NUMPY)
