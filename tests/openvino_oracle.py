"""Oracle for FakeConvert-13: OpenVINO's CPU device and OpenVINO core's reference ``evaluate``.

A helper module for the tests, not a test file.

``fake_convert_ov`` builds a one-node opset-13 ``FakeConvert`` model whose Parameters have the
exact shapes and element type (f32, f16 or bf16) of the arrays given, compiles it for the
``"CPU"`` device and runs it.  ``fake_convert_evaluate`` calls the node's own ``evaluate`` (the
reference implementation in OpenVINO core) on the same inputs, without any device.  The two
differ (evaluate divides by scale, keeps NaN for f8e5m2 and maps it to +-max for f8e4m3, loses the
sign of zero, and flushes f8e4m3 results below 2**-9 to zero), so tests must pick one.

bfloat16 arrays are ``ml_dtypes.bfloat16`` on the numpy side (OpenVINO's Python API cannot wrap
them directly, so they travel as their uint16 bits).

The CPU plugin decomposes FakeConvert into one Eltwise ``clamp(data*scale - shift)``, Convert to
float8, Convert back and ``(q - (0 - shift)) * Power(scale, -1)``.  ``INFERENCE_PRECISION_HINT``
is set to the data's own type: f32 then stays f32, and f16 runs on f16 nodes where the CPU has
avx512_core_fp16 (without it the plugin runs the graph in f32 and converts the result to f16).
bf16 data runs on bf16 nodes whatever the hint.  Every Eltwise computes in f32 and rounds to the
node type when it stores.
"""

import functools

import ml_dtypes
import numpy as np
import pytest

ov = pytest.importorskip("openvino")
from openvino import opset13 as ops  # noqa: E402

_BF16 = np.dtype(ml_dtypes.bfloat16)

# numpy dtype -> (OpenVINO element type, INFERENCE_PRECISION_HINT)
_TYPES = {
    np.dtype(np.float32): (ov.Type.f32, "f32"),
    np.dtype(np.float16): (ov.Type.f16, "f16"),
    _BF16: (ov.Type.bf16, "bf16"),
}

# fp8kit and OpenVINO names of the two destination types -> OpenVINO's name
DESTINATIONS = {
    "f8e4m3": "f8e4m3",
    "float8_e4m3fn": "f8e4m3",
    "f8e5m2": "f8e5m2",
    "float8_e5m2": "f8e5m2",
}


def _prepare(data, scale, shift):
    data = np.asarray(data)
    if data.dtype not in _TYPES:
        raise TypeError(f"FakeConvert data must be float32, float16 or bfloat16; got {data.dtype}")
    scale = np.asarray(scale, dtype=data.dtype)
    if shift is not None:
        shift = np.asarray(shift, dtype=data.dtype)
    return data, scale, shift


def _destination(destination_type):
    try:
        return DESTINATIONS[destination_type]
    except KeyError:
        raise ValueError(f"unknown destination_type {destination_type!r}") from None


def _to_tensor(a: np.ndarray):
    shape = list(a.shape)
    a = np.ascontiguousarray(a)  # (0-d arrays come back 1-d; the Tensor gets the true shape)
    if a.dtype == _BF16:
        return ov.Tensor(a.view(np.uint16), shape, ov.Type.bf16)
    return ov.Tensor(a.reshape(-1), shape, _TYPES[a.dtype][0])


def _from_tensor(t, dtype: np.dtype) -> np.ndarray:
    out = np.array(t.data, copy=True)
    if dtype == _BF16:
        # OpenVINO exposes bf16 tensors as a 16-bit view of the raw bits
        return out.view(np.uint16).view(_BF16)
    return out.astype(dtype, copy=False)


def _node(data_shape, scale_shape, shift_shape, dtype, destination):
    et = _TYPES[dtype][0]
    params = [
        ops.parameter(list(data_shape), et, name="data"),
        ops.parameter(list(scale_shape), et, name="scale"),
    ]
    if shift_shape is not None:
        params.append(ops.parameter(list(shift_shape), et, name="shift"))
    node = ops.fake_convert(*params, destination_type=destination)
    return node, params


@functools.lru_cache(maxsize=1)
def _core():
    return ov.Core()


@functools.lru_cache(maxsize=64)
def _compiled(data_shape, scale_shape, shift_shape, dtype, destination):
    node, params = _node(data_shape, scale_shape, shift_shape, dtype, destination)
    model = ov.Model([node.output(0)], params, "fake_convert")
    config = {"INFERENCE_PRECISION_HINT": _TYPES[dtype][1]}
    return _core().compile_model(model, "CPU", config)


def _model_inputs(data, scale, shift, destination_type):
    """(data, model key, input tensors) for one FakeConvert call."""
    data, scale, shift = _prepare(data, scale, shift)
    shift_shape = None if shift is None else shift.shape
    key = (data.shape, scale.shape, shift_shape, data.dtype, _destination(destination_type))
    inputs = [_to_tensor(data), _to_tensor(scale)]
    if shift is not None:
        inputs.append(_to_tensor(shift))
    return data, key, inputs


def fake_convert_ov(data, scale, shift=None, destination_type="f8e4m3") -> np.ndarray:
    """FakeConvert-13 of ``data`` run by OpenVINO's CPU device; the result has ``data``'s dtype.

    ``scale`` and ``shift`` are cast to ``data``'s dtype and keep their own shapes (numpy
    broadcastable to ``data``'s).  ``destination_type`` is ``"f8e4m3"``/``"float8_e4m3fn"`` or
    ``"f8e5m2"``/``"float8_e5m2"``.
    """
    data, key, inputs = _model_inputs(data, scale, shift, destination_type)
    compiled = _compiled(*key)
    request = compiled.create_infer_request()
    request.infer(inputs)
    return _from_tensor(request.get_output_tensor(0), data.dtype).reshape(data.shape)


def fake_convert_evaluate(data, scale, shift=None, destination_type="f8e4m3") -> np.ndarray:
    """FakeConvert-13 of ``data`` by the node's ``evaluate`` (OpenVINO core's reference code)."""
    data, key, inputs = _model_inputs(data, scale, shift, destination_type)
    node, _ = _node(*key)
    out = ov.Tensor(_TYPES[data.dtype][0], list(data.shape))
    if not node.evaluate([out], inputs):
        raise RuntimeError("FakeConvert.evaluate returned False")
    return _from_tensor(out, data.dtype).reshape(data.shape)
