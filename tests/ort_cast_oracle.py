"""Oracle for ``fp8kit.cast``: ONNX Runtime's (CPU) Cast, plus the pairs it implements.

A helper module for the tests and scripts/oracles/onnx_cast_disputes.py, not a test file.
``ort_cast`` builds a small model around one ``Cast`` node and runs it with an
``onnxruntime.InferenceSession`` (cached per type pair and ``saturate``).  ORT's Python API
only takes and returns types numpy holds, so the model is a chain: a source type numpy does
not hold (bfloat16, the float8/float6/float4 types, int4/uint4/int2/uint2) is fed as float32
(floats, decoded exactly) or int8 (integers) and cast to the source type first, and such a
destination is cast back to float32 or int8 (exactly) after the node under test.  Callers
compare with ``widen`` applied to fp8kit's answer.

Type names are fp8kit's (see tests/onnx_cast_oracle.py).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx_cast_oracle import FLOAT8, NUMPY_DTYPE, ONNX_TYPE  # noqa: E402

ort.set_default_logger_severity(3)

#: the types ORT's Python API can feed and return as they are
NUMPY_HELD = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "string",
)  # fmt: skip
#: the opset of the models: the newest Cast that ORT 1.32 implements for every type
OPSET = 23
_SUB_BYTE_INTS = ("int4", "uint4", "int2", "uint2")


def carrier(name: str) -> str:
    """The numpy-held type a value of ``name`` travels as (itself, float32 or int8)."""
    if name in NUMPY_HELD:
        return name
    return "int8" if name in _SUB_BYTE_INTS else "float32"


def widen(y: np.ndarray, name: str) -> np.ndarray:
    """``y`` (of type ``name``) as its carrier type, exactly (what the oracle returns)."""
    c = carrier(name)
    if c == name:
        return y
    if c == "int8":
        return y.astype(np.int8)
    return y.astype(np.float32)


def _model(from_type: str, to_type: str, saturate: bool):
    nodes, cur = [], "x"
    src_c, dst_c = carrier(from_type), carrier(to_type)
    if src_c != from_type:
        # exact; saturate=0 keeps float8 infinities (saturate=1 would make them +-max)
        pre = {"saturate": 0} if from_type in FLOAT8 else {}
        nodes.append(helper.make_node("Cast", [cur], ["x1"], to=ONNX_TYPE[from_type], **pre))
        cur = "x1"
    # ORT refuses the saturate attribute unless the destination is a float8 type (Cast's
    # text: it "only applies for float 8 conversion"); elsewhere it ignores saturate.
    sat = {"saturate": int(saturate)} if to_type in FLOAT8 else {}
    nodes.append(helper.make_node("Cast", [cur], ["y0"], to=ONNX_TYPE[to_type], **sat))
    cur = "y0"
    if dst_c != to_type:
        nodes.append(helper.make_node("Cast", [cur], ["y1"], to=ONNX_TYPE[dst_c]))
        cur = "y1"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    graph = helper.make_graph(
        nodes,
        "cast",
        [helper.make_tensor_value_info("x", ONNX_TYPE[src_c], [None])],
        [helper.make_tensor_value_info("y", ONNX_TYPE[dst_c], [None])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)


def _session(from_type: str, to_type: str, saturate: bool):
    # one session when the attribute is left out
    return _cached_session(from_type, to_type, bool(saturate) or to_type not in FLOAT8)


@functools.cache
def _cached_session(from_type: str, to_type: str, saturate: bool):
    opts = ort.SessionOptions()
    # no graph optimisation: ORT would fold Cast chains (a -> b -> a) away
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    model = _model(from_type, to_type, saturate).SerializeToString()
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def supports(from_type: str, to_type: str, saturate: bool = True) -> bool:
    """Whether ORT (CPU) builds the chain for this pair."""
    try:
        _session(from_type, to_type, saturate)
    except Exception:  # noqa: BLE001 - ORT raises its own exception classes
        return False
    return True


def ort_cast(x, from_type: str, to_type: str, saturate: bool = True) -> np.ndarray:
    """Cast ``x`` (an array of ``NUMPY_DTYPE[from_type]``) to ``to_type`` with ONNX Runtime;
    the result comes back as ``carrier(to_type)``, shaped like ``x``."""
    x = np.asarray(x)
    feed = widen(x, from_type) if from_type != "string" else x.astype(object)
    (y,) = _session(from_type, to_type, bool(saturate)).run(None, {"x": feed.reshape(-1)})
    return np.asarray(y).reshape(x.shape)


__all__ = ["NUMPY_DTYPE", "NUMPY_HELD", "OPSET", "carrier", "ort_cast", "supports", "widen"]
