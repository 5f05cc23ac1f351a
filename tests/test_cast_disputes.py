"""The disputed cases of ONNX Cast (docs/cast.md's generated table): the recorded answers of
ONNX's oracles are what the installed libraries give, and fp8kit's default follows the
conformance suite, then ONNX Runtime, except where ORT contradicts the Cast text."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import fp8kit
from fp8kit.cast import CAST_RULES

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "cast_disputes", ROOT / "scripts" / "oracles" / "cast_disputes.py"
)
DISPUTES = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(DISPUTES)
DATA = json.loads(DISPUTES.DATA.read_text())
ROWS = DATA["cases"]
#: where ONNX Runtime contradicts the Cast text (the suite has no case): fp8kit follows the text
ORT_AGAINST_THE_TEXT = {"e5m2-61440", "e4m3fn-480", "float8-minus-zero-bool"}


def test_the_file_is_what_the_libraries_say():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    live = DISPUTES.record()
    assert (live["onnx"], live["onnxruntime"]) == (DATA["onnx"], DATA["onnxruntime"]), (
        "other onnx/onnxruntime versions: run python scripts/oracles/cast_disputes.py"
    )
    assert live == DATA


def test_every_case_is_recorded_once():
    assert [r["id"] for r in ROWS] == [c[0] for c in DISPUTES.CASES]
    assert len({r["id"] for r in ROWS}) == len(ROWS)


def _ours(row, **kw):
    x = DISPUTES.value(row["x"], row["from"])
    with np.errstate(all="ignore"):
        return DISPUTES.show(fp8kit.cast(x, row["to"], saturate=row["saturate"], **kw)[0])


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_the_default_follows_the_suite_then_onnxruntime(row):
    ours = _ours(row)
    if row["suite"] is not None:
        assert ours == row["suite"]
    elif row["id"] in ORT_AGAINST_THE_TEXT:
        assert ours != row["onnxruntime"]
        assert ours == row["onnx_reference"]  # (and the Cast text)
    elif row["onnxruntime"] != "no kernel":
        assert ours == row["onnxruntime"]


@pytest.mark.parametrize("row", [r for r in ROWS if r["rule"]], ids=lambda r: r["id"])
def test_each_named_rule_gives_the_other_reading(row):
    assert row["rule"] in CAST_RULES
    assert _ours(row, rules=row["rule"]) != _ours(row)
