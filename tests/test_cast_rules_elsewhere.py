"""Cast's new default (issue 19) changes nothing outside fp8kit.cast: FakeConvert keeps its
own saturation (spec mode is not Cast: no fnuz Inf rule, no saturate argument), and
convert_promote_types keeps the Cast rules it had (``rules="legacy"``)."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit.promotion._convert import _convert


@pytest.mark.parametrize(
    "dst, top", [("float8_e4m3fnuz", 240.0), ("float8_e5m2fnuz", 57344.0), ("f8e4m3", 448.0)]
)
def test_fake_convert_spec_mode_saturates_inf_and_keeps_nan(dst, top):
    x = np.float32([np.inf, -np.inf, np.nan, 1e6, -1e6])
    got = fp8kit.fake_convert(x, np.float32(1.0), destination_type=dst)
    assert got[:2].tolist() == [top, -top]
    assert np.isnan(got[2])  # FakeConvert: "NaN stays NaN"; Cast gives the NaN code too
    assert got[3:].tolist() == [top, -top]


def test_fake_convert_is_not_cast_under_any_rules():
    # Cast's fnuz-inf-nan reading gives NaN for +-Inf; FakeConvert never does
    x = np.float32([np.inf])
    assert np.isnan(fp8kit.cast(x, "float8_e4m3fnuz", rules="fnuz-inf-nan").astype(float)[0])
    fake = fp8kit.fake_convert(x, np.float32(1.0), destination_type="float8_e4m3fnuz")
    assert fake.tolist() == [240.0]


@pytest.mark.parametrize("saturate", [True, False])
def test_convert_promote_types_keeps_the_legacy_cast_rules(saturate):
    f8 = np.dtype(ml_dtypes.float8_e4m3fnuz)
    got = _convert(np.float32([np.inf, -np.inf]), f8, saturate)
    assert got.view(np.uint8).tolist() == [0x80, 0x80]  # the Cast table: NaN
    x = np.float32([300.0, np.nan, -1e10])
    ints = _convert(x, np.dtype(np.int8), saturate)
    want = [127, 0, -128] if saturate else [44, 0, 0]  # clamped, or onnx.reference's bits
    assert ints.tolist() == want
    assert fp8kit.cast(x, np.int8, saturate=saturate).tolist() == [44, 0, 0]  # Cast's default
    wide = np.array([2**24 + 2**16 + 1], np.int64)
    once = _convert(wide, np.dtype(ml_dtypes.bfloat16), saturate).astype(np.float64)
    assert once.tolist() == [2**24 + 2**17]  # rounded once (Cast's default: through float32)
