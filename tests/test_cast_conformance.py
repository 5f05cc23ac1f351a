"""fp8kit.cast against ONNX's own conformance suite: every Cast and CastLike node case that
the installed onnx wheel ships (tests/onnx_cast_oracle.py: ``conformance_cases``; a newer
onnx brings its new cases), one test per case, bit for bit (NaN payloads aside)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx_cast_oracle import conformance_cases  # noqa: E402

import fp8kit  # noqa: E402

CASES = conformance_cases()


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def run_case(case, **kw):
    """(fp8kit's answer, the suite's expected output) of one conformance case."""
    (node,) = case.model.graph.node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    ((inputs, outputs),) = case.data_sets
    x = numpy_helper.to_array(inputs[0])
    want = numpy_helper.to_array(outputs[0])
    to = onnx.TensorProto.DataType.Name(case.model.graph.output[0].type.tensor_type.elem_type)
    if "saturate" in attrs:
        kw["saturate"] = bool(attrs["saturate"])
    if "round_mode" in attrs:
        kw["round_mode"] = attrs["round_mode"].decode()
    return fp8kit.cast(x, to, **kw), want


def same(got, want):
    if want.dtype == object or want.dtype.kind in "US":
        return got.shape == want.shape and [str(v) for v in got.ravel()] == [
            str(v) for v in want.ravel()
        ]
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    equal = _bits(got) == _bits(want)
    if want.dtype.kind in "fV" and want.dtype.itemsize > 1:  # NaN payloads aside
        with np.errstate(invalid="ignore"):
            equal |= np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return bool(equal.all())


def test_the_suite_is_there():
    # onnx 1.23 ships 172 Cast/CastLike cases; a newer onnx has at least as many
    assert len(CASES) >= 172


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance_case(case):
    got, want = run_case(case)
    assert same(got, want), (got, want)


_DISPUTED_TARGETS = {
    # target: the rule that gives the other reading there
    "FLOAT8E4M3FNUZ": "fnuz-inf-nan",  # +-Inf with saturate: NaN (the Cast table)
    "FLOAT8E5M2FNUZ": "fnuz-inf-nan",
    "FLOAT4E2M1": "float4-nan-six",  # NaN: +6 (ONNX's float4 page)
    "INT4": "int-clamp",  # the suite feeds -9..15 and -3..3: clamped
    "UINT4": "int-clamp",
    "INT2": "int-clamp",
    "UINT2": "int-clamp",
}


def _disputed(case):
    """The rule under which ``case`` has another answer, or None: the suite's FLOAT and
    FLOAT16 inputs (with saturate) into the disputed targets."""
    source, target = (
        case.name.removeprefix("test_cast_").removeprefix("test_castlike_").split("_to_")
    )
    target = target.removesuffix("_expanded")
    if source not in ("FLOAT", "FLOAT16"):  # no_saturate_FLOAT... fall out here too
        return None
    return _DISPUTED_TARGETS.get(target)


def test_the_disputed_cases_are_found():
    assert sum(_disputed(c) is not None for c in CASES) >= 42  # 42 in onnx 1.23


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_legacy_rules_differ_from_the_suite_exactly_on_the_disputed_cases(case):
    got, want = run_case(case, rules="legacy")
    assert same(got, want) == (_disputed(case) is None)
    rule = _disputed(case)
    if rule is not None:  # one named rule alone gives the other reading
        got, want = run_case(case, rules=rule)
        assert not same(got, want)
