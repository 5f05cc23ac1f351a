"""The float8 conversion tables of ONNX Cast-21 (../shared/specs/onnx-Cast-21.txt), row by
row, for the exact reference and the compiled kernels, from every input dtype."""

import math

import ml_dtypes
import numpy as np
import pytest
from conftest import FLOAT8, INPUT_DTYPES, bits_of

import fp8kit
from fp8kit import _reference as ref
from fp8kit import get_format

NAN, INF = math.nan, math.inf
MAX = "FLT_MAX"
NEG_MAX = "-FLT_MAX"
NEG_INF = "-Inf"
NEG_ZERO = "-0"
BIG = 65000.0  # [x] > FLT_MAX in every float8 format (e5m2 from 61440); finite in float16
ROUND = "RNE"

# "By default the conversion of a float x obeys to the following rules."
#        x       E4M3FN    E4M3FNUZ  E5M2     E5M2FNUZ
SATURATE = [
    pytest.param(0.0, (0.0, 0.0, 0.0, 0.0), id="0"),
    pytest.param(-0.0, (NEG_ZERO, 0.0, NEG_ZERO, 0.0), id="-0"),  # "|-0 | -0 | 0 | -0 | 0 |"
    pytest.param(NAN, (NAN, NAN, NAN, NAN), id="NaN"),
    pytest.param(INF, (MAX, NAN, MAX, NAN), id="+Inf"),  # "| +/- Inf | +/- FLT_MAX | NaN |..."
    pytest.param(-INF, (NEG_MAX, NAN, NEG_MAX, NAN), id="-Inf"),
    pytest.param(BIG, (MAX, MAX, MAX, MAX), id="[x]>FLT_MAX"),
    pytest.param(-BIG, (NEG_MAX, NEG_MAX, NEG_MAX, NEG_MAX), id="[x]<-FLT_MAX"),
    pytest.param(1.0625, (ROUND,) * 4, id="else-RNE"),
]
# "The behavior changes if the parameter 'saturate' is set to False."
NO_SATURATE = [
    pytest.param(0.0, (0.0, 0.0, 0.0, 0.0), id="0"),
    pytest.param(-0.0, (NEG_ZERO, 0.0, NEG_ZERO, 0.0), id="-0"),
    pytest.param(NAN, (NAN, NAN, NAN, NAN), id="NaN"),
    pytest.param(INF, (NAN, NAN, INF, NAN), id="+Inf"),  # "| +/- Inf | NaN | NaN | +/- Inf |"
    pytest.param(-INF, (NAN, NAN, NEG_INF, NAN), id="-Inf"),
    pytest.param(BIG, (NAN, NAN, INF, NAN), id="[x]>FLT_MAX"),
    pytest.param(-BIG, (NAN, NAN, NEG_INF, NAN), id="[x]<-FLT_MAX"),
    pytest.param(1.0625, (ROUND,) * 4, id="else-RNE"),
]


def _expected_code(fmt, x, want):
    if want == ROUND:
        # 1.0625 is the tie between 1 and 1.125 in the 3-bit mantissas (even: 1.0), and
        # exact in the 2-bit ones' neighbourhood: 1.0 and 1.25 -> 1.0.
        return ref.encode_value(x, fmt)
    if want == MAX:
        return fmt.max_code
    if want == NEG_MAX:
        return fmt.max_code | fmt.sign_mask
    if want == NEG_ZERO:
        return fmt.sign_mask
    if want == NEG_INF:
        return fmt.inf_code | fmt.sign_mask
    if isinstance(want, float) and math.isnan(want):
        return None  # any NaN code
    if want == INF:
        return fmt.inf_code
    assert want == 0.0
    return 0


def _check(x, row, saturate, dtype):
    for name, want in zip(FLOAT8, row, strict=True):
        fmt = get_format(name)
        expected = _expected_code(fmt, x, want)
        xa = np.array([x], dtype=dtype)
        got = int(fp8kit.encode(xa, fmt, saturate=saturate)[0])
        oracle = ref.encode_value(float(xa[0]), fmt, saturate=saturate)
        if expected is None:
            assert math.isnan(fmt.code_value(got)), (name, hex(got))
            assert math.isnan(fmt.code_value(oracle))
        else:
            assert got == expected, (name, hex(got), hex(expected))
            assert oracle == expected, (name, hex(oracle), hex(expected))


@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("x, row", SATURATE)
def test_saturate_table(x, row, dtype):
    _check(x, row, True, dtype)


@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("x, row", NO_SATURATE)
def test_no_saturate_table(x, row, dtype):
    _check(x, row, False, dtype)


@pytest.mark.parametrize("name", FLOAT8)
def test_nan_keeps_sign_where_the_format_can(name):
    # "NaN stays NaN (sign kept where the format can)": fnuz formats have a single NaN.
    fmt = get_format(name)
    codes = fp8kit.encode(np.array([np.nan, -np.nan], np.float32), fmt)
    if fmt.specials == "fnuz":
        assert codes.tolist() == [0x80, 0x80]
    else:
        assert codes.tolist() == [fmt.nan_code, fmt.nan_code | 0x80]


@pytest.mark.parametrize("name", FLOAT8)
def test_negative_underflow_in_fnuz_is_plus_zero(name):
    # In fnuz formats the -0 bit pattern is NaN, so negative values that round to zero must
    # become +0, never 0x80.
    fmt = get_format(name)
    tiny = -fmt.smallest_subnormal / 4
    code = fp8kit.encode(np.array([tiny], np.float32), fmt)[0]
    assert code == (0 if fmt.specials == "fnuz" else 0x80)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("saturate", [False, True])
def test_16bit_formats_overflow_like_ieee(name, saturate):
    # bfloat16 and float16 have Inf: saturate=False overflows to +-Inf as IEEE does; with
    # saturate=True they clamp like E5M2 (Inf -> +-max).
    fmt = get_format(name)
    x = np.array([1e39, -1e39, np.inf, -np.inf], np.float64)
    got = fp8kit.encode(x, fmt, saturate=saturate)
    big = fmt.max_code if saturate else fmt.inf_code
    assert got.tolist() == [big, big | fmt.sign_mask] * 2
    if not saturate:
        dt = np.float16 if name == "float16" else ml_dtypes.bfloat16
        with np.errstate(over="ignore"):
            assert bits_of(x.astype(np.float32).astype(dt)).tolist() == got.tolist()
