"""Device-array calls that fp8kit refuses, each with a clear error (never a silent copy
between host and device, never a Numba typing traceback)."""

import numpy as np
import pytest
from numba import cuda

import fp8kit
import fp8kit.cuda

from .simdata import to_device


def d32(shape=(4, 6), order="C"):
    return cuda.to_device(np.ones(shape, np.float32, order=order))


def dev(dtype, n=3):
    return to_device(np.zeros(n, dtype))


E4 = "float8_e4m3fn"
CASES = [
    # host/device mixtures
    pytest.param(lambda: fp8kit.fake_convert(d32(), np.ones((4, 1), np.float32)),
                 TypeError, "scale is a host array .* numba.cuda.to_device", id="host-scale"),
    pytest.param(lambda: fp8kit.fake_convert(np.ones(3, np.float32), dev(np.float32, 1)),
                 TypeError, "data is a host object", id="host-data-device-scale"),
    pytest.param(lambda: fp8kit.encode(d32(), E4, out=np.empty((4, 6), np.uint8)),
                 TypeError, "out is a host object", id="host-out"),
    pytest.param(lambda: fp8kit.decode(dev(np.uint8), E4, out=np.empty(3, np.float32)),
                 TypeError, "out is a host object", id="decode-host-out"),
    # dtypes
    pytest.param(lambda: fp8kit.fake_convert(d32(), 1.0, np.ones((), np.float16)),
                 TypeError, "shift has dtype float16 but data has float32", id="shift-dtype"),
    pytest.param(lambda: fp8kit.encode(dev(np.int32), E4),
                 TypeError, "x must have dtype", id="int-data"),
    pytest.param(lambda: fp8kit.encode(dev(np.uint8), E4),
                 TypeError, "decode them first", id="codes-to-encode"),
    pytest.param(lambda: fp8kit.fake_convert(dev(np.float64), 1.0),
                 TypeError, "float32, float16 or bfloat16; got float64", id="fake-f64"),
    pytest.param(lambda: fp8kit.decode(dev(np.uint16), E4),
                 TypeError, "must have dtype uint8", id="decode-dtype"),
    pytest.param(lambda: fp8kit.decode(dev(np.uint8)),
                 TypeError, "fmt is required", id="decode-no-fmt"),
    pytest.param(lambda: fp8kit.decode(dev(np.uint8), E4, dtype=np.int8),
                 TypeError, "dtype must be float16, bfloat16, float32", id="decode-int-dtype"),
    pytest.param(lambda: fp8kit.astype(d32(), E4),
                 TypeError, "use fp8kit.encode", id="astype"),
    pytest.param(lambda: fp8kit.encode(d32(), E4, out=cuda.device_array((4, 6), np.uint16)),
                 TypeError, "out has dtype uint16", id="out-dtype"),
    pytest.param(lambda: fp8kit.encode(d32(), E4, saturate="no"),
                 TypeError, "saturate must be True or False", id="saturate"),
    # shapes and layouts
    pytest.param(lambda: fp8kit.encode(d32((8, 6))[::2], E4),
                 ValueError, "not contiguous .* make a contiguous copy", id="strided"),
    pytest.param(lambda: fp8kit.fake_convert(d32(order="F"), 1.0),
                 ValueError, "C-contiguous", id="fake-fortran"),
    pytest.param(lambda: fp8kit.encode(d32(), E4, out=cuda.device_array((6, 4), np.uint8)),
                 ValueError, "no broadcasting", id="out-shape"),
    pytest.param(lambda: fp8kit.round_to(d32(), E4, out=d32(order="F")),
                 ValueError, "memory layout", id="out-layout"),
    pytest.param(lambda: fp8kit.fake_convert(d32(), dev(np.float32, 4)),
                 ValueError, "does not broadcast", id="scale-shape"),
    pytest.param(lambda: fp8kit.fake_convert(d32(), 1.0, destination_type="f8e3m4"),
                 ValueError, "unknown destination_type", id="destination"),
    pytest.param(lambda: fp8kit.fake_convert(d32(), 1.0, None, "float8_e5m2fnuz", mode="openvino"),
                 ValueError, "supports f8e4m3 and f8e5m2", id="openvino-format"),
    # cast's further formats (issue 8) are host-only
    pytest.param(lambda: fp8kit.cast(d32(), "FLOAT4E2M1"),
                 ValueError, "Cast-21 types only; got float32 -> float4_e2m1fn", id="cast-to-f4"),
    pytest.param(lambda: fp8kit.cast(dev(np.float16), "float8_e4m3"),
                 ValueError, "Cast-21 types only; got float16 -> float8_e4m3", id="cast-to-e4m3"),
    pytest.param(lambda: fp8kit.cuda.cast(dev(np.uint8), "float32", source="float8_e3m4"),
                 ValueError, "Cast-21 types only; got float8_e3m4 -> float32", id="cast-from-e3m4"),
    pytest.param(lambda: fp8kit.cast(d32(), "FLOAT8E8M0"),
                 ValueError, "only rounding='nearest_even' to Cast-21 types", id="cast-to-e8m0"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, match", CASES)
def test_refused_with_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()
