"""Facts about the ONNX reference implementation (onnx.reference.ReferenceEvaluator running a
one-node Cast-21 model) that fp8kit's codec documents as differences."""

import numpy as np
import pytest
from onnx_cast_oracle import onnx_cast as _onnx_cast

import fp8kit
from fp8kit import _reference as ref
from fp8kit import get_format

ONNX_TYPES = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]


def onnx_cast(x, name, saturate):
    return np.asarray(_onnx_cast(x, x.dtype.name, name, saturate)).view(np.uint8)


@pytest.mark.parametrize("name", ONNX_TYPES)
@pytest.mark.parametrize("saturate", [False, True])
def test_float32_agrees_with_onnx_reference_except_inf_into_fnuz(name, saturate):
    rng = np.random.default_rng(11)
    x = np.concatenate(
        [
            rng.standard_normal(20_000).astype(np.float32) * np.float32(300),
            np.float32([0, -0.0, np.nan, 1e9, -1e9, 464, 61440, 2**-10, -(2**-12)]),
        ]
    )
    assert (fp8kit.encode(x, name, saturate=saturate) == onnx_cast(x, name, saturate)).all()


@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz"])
def test_onnx_reference_saturates_inf_into_fnuz_but_the_spec_says_nan(name):
    # Cast-21 saturate table: "| +/- Inf | ... | NaN (E4M3FNUZ) | ... | NaN (E5M2FNUZ) |".
    # onnx's reference (1.23) gives +-FLT_MAX instead; fp8kit follows the spec.
    fmt = get_format(name)
    x = np.float32([np.inf, -np.inf])
    assert onnx_cast(x, name, True).tolist() == [fmt.max_code, fmt.max_code | 0x80]
    assert fp8kit.encode(x, name, saturate=True).tolist() == [0x80, 0x80]


@pytest.mark.parametrize("name", ONNX_TYPES)
def test_onnx_reference_double_rounds_float64(name):
    # The reference casts double to float first: 1 + 2**-k + 2**-40 becomes the tie 1 + 2**-k,
    # which rounds to even (1.0); the exact value is above the tie and rounds up.
    fmt = get_format(name)
    x = np.array([1 + 2.0 ** -(fmt.mantissa_bits + 1) + 2.0**-40])
    exact = ref.encode_value(float(x[0]), fmt)
    assert fp8kit.encode(x, name)[0] == exact
    assert onnx_cast(x, name, True)[0] == exact - 1
    assert onnx_cast(x.astype(np.float32), name, True)[0] == exact - 1
