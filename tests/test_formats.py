import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import BUILTIN, USER_FORMATS, ml_dtype

import fp8kit
from fp8kit import FloatFormat, get_format

FINFO_FIELDS = [
    "bits",
    "eps",
    "epsneg",
    "iexp",
    "machep",
    "max",
    "maxexp",
    "min",
    "minexp",
    "negep",
    "nexp",
    "nmant",
    "smallest_normal",
    "smallest_subnormal",
    "tiny",
]


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("field", FINFO_FIELDS)
def test_derived_limits_match_finfo(name, field):
    fmt = get_format(name)
    dt = ml_dtype(name)
    ref = ml_dtypes.finfo(dt) if name != "float16" else np.finfo(np.float16)
    assert getattr(fmt, field) == pytest.approx(float(getattr(ref, field)), rel=0, abs=0)


@pytest.mark.parametrize("name", BUILTIN)
def test_precision_is_numpys_formula(name):
    # numpy.finfo defines precision = int(-log10(eps)).  ml_dtypes hard-codes its float8
    # values instead (1 for float8_e4m3fn although -log10(0.125) = 0.9), so we follow numpy.
    fmt = get_format(name)
    assert fmt.precision == int(-math.log10(fmt.eps))
    assert fmt.resolution == 10.0**-fmt.precision
    if name in ("bfloat16", "float16"):
        ref = ml_dtypes.finfo(ml_dtype(name)) if name == "bfloat16" else np.finfo(np.float16)
        assert fmt.precision == ref.precision


def test_issue_example_limits():
    fmt = fp8kit.get_format("float8_e4m3fn")
    assert (fmt.max, fmt.smallest_normal, fmt.smallest_subnormal, fmt.eps) == (
        448.0,
        2**-6,
        2**-9,
        0.125,
    )


@pytest.mark.parametrize(
    "spec, name",
    [
        pytest.param("float8_e4m3fn", "float8_e4m3fn", id="canonical"),
        pytest.param("FLOAT8E4M3FN", "float8_e4m3fn", id="onnx"),
        pytest.param("f8e4m3", "float8_e4m3fn", id="openvino-e4m3"),
        pytest.param("F8E4M3", "float8_e4m3fn", id="case-insensitive"),
        pytest.param("FLOAT8E4M3FNUZ", "float8_e4m3fnuz", id="onnx-e4m3fnuz"),
        pytest.param("FLOAT8E5M2", "float8_e5m2", id="onnx-e5m2"),
        pytest.param("f8e5m2", "float8_e5m2", id="openvino-e5m2"),
        pytest.param("FLOAT8E5M2FNUZ", "float8_e5m2fnuz", id="onnx-e5m2fnuz"),
        pytest.param("BFLOAT16", "bfloat16", id="onnx-bf16"),
        pytest.param("bf16", "bfloat16", id="openvino-bf16"),
        pytest.param("FLOAT16", "float16", id="onnx-f16"),
        pytest.param("f16", "float16", id="openvino-f16"),
        pytest.param(ml_dtypes.float8_e5m2, "float8_e5m2", id="ml_dtypes-type"),
        pytest.param(np.dtype(ml_dtypes.bfloat16), "bfloat16", id="ml_dtypes-dtype"),
        pytest.param(np.float16, "float16", id="numpy-type"),
        pytest.param(np.zeros(2, ml_dtypes.float8_e4m3fnuz), "float8_e4m3fnuz", id="array"),
    ],
)
def test_get_format_names(spec, name):
    fmt = get_format(spec)
    assert fmt.name == name
    assert fmt is fp8kit.registered_formats()[name]


def test_get_format_torch_dtypes():
    torch = pytest.importorskip("torch")
    assert get_format(torch.float8_e4m3fn).name == "float8_e4m3fn"
    assert get_format(torch.bfloat16).name == "bfloat16"
    with pytest.raises(ValueError, match="torch.float32"):
        get_format(torch.float32)


def test_get_format_instance_and_user_format():
    fmt = USER_FORMATS[0]
    assert get_format(fmt) is fmt


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown format 'e4m3'; valid: float8_e4m3fn, "):
        get_format("e4m3")


@pytest.mark.parametrize("spec", [3, 1.5, None, True, object()])
def test_get_format_bad_type(spec):
    with pytest.raises(TypeError, match="format name, FloatFormat, dtype or array"):
        get_format(spec)


def test_get_format_unsupported_dtype():
    with pytest.raises(ValueError, match="unsupported format dtype float32; valid: float8"):
        get_format(np.float32)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(exponent_bits=0, mantissa_bits=3, bias=1), ValueError, "exponent_bits must be"),
        (dict(exponent_bits=12, mantissa_bits=3, bias=1), ValueError, "exponent_bits must be"),
        (dict(exponent_bits=4, mantissa_bits=15, bias=1), ValueError, "mantissa_bits must be"),
        (dict(exponent_bits=8, mantissa_bits=8, bias=127), ValueError, "at most 16 bits"),
        (dict(exponent_bits=4, mantissa_bits=3, bias=7, specials="ocp"), ValueError, "specials"),
        (dict(exponent_bits=1, mantissa_bits=3, bias=0), ValueError, "'ieee' format needs"),
        (dict(exponent_bits=4, mantissa_bits=0, bias=7), ValueError, "'ieee' format needs"),
        (dict(exponent_bits=11, mantissa_bits=4, bias=10), ValueError, "float64's range"),
        (dict(exponent_bits=4, mantissa_bits=3, bias=2.0), TypeError, "bias must be an int"),
        (dict(exponent_bits=True, mantissa_bits=3, bias=2), TypeError, "exponent_bits must"),
    ],
)
def test_float_format_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        FloatFormat(name="bad", **kwargs)


def test_float_format_is_frozen_and_hashable():
    fmt = get_format("float8_e5m2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fmt.bias = 3
    twin = FloatFormat(name="float8_e5m2", exponent_bits=5, mantissa_bits=2, bias=15)
    assert twin == fmt and hash(twin) == hash(fmt)
    with pytest.raises(TypeError):
        FloatFormat("x", 4, 3, 7)  # keyword-only


@pytest.mark.parametrize("fmt", [get_format(n) for n in BUILTIN] + USER_FORMATS, ids=str)
def test_code_layout_consistency(fmt):
    assert fmt.code_value(fmt.max_code) == fmt.max
    assert math.isnan(fmt.code_value(fmt.nan_code))
    assert fmt.code_value(1) == fmt.smallest_subnormal
    assert fmt.code_value(1 << fmt.mantissa_bits) == fmt.smallest_normal
    assert fmt.max < Fraction(2) ** fmt.maxexp <= 2 * Fraction(fmt.max)
    if fmt.has_inf:
        assert fmt.code_value(fmt.inf_code) == math.inf
    finite = [fmt.code_value(c) for c in range(fmt.sign_mask)]
    finite = [v for v in finite if not isinstance(v, float) or math.isfinite(v)]
    assert max(finite) == fmt.max
    assert fmt.code_value(fmt.sign_mask) == (
        0.0 if fmt.has_negative_zero else fmt.code_value(0)
    ) or math.isnan(fmt.code_value(fmt.sign_mask))
    with pytest.raises(ValueError, match="outside"):
        fmt.code_value(1 << fmt.bits)


def test_dtype_property():
    assert get_format("float8_e4m3fn").dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert get_format("float16").dtype == np.dtype(np.float16)
    assert USER_FORMATS[0].dtype is None
    assert get_format("bfloat16").code_dtype == np.uint16
    assert USER_FORMATS[1].code_dtype == np.uint8


def test_register_format_and_conflicts():
    fmt = FloatFormat(name="test_e3m4_reg", exponent_bits=3, mantissa_bits=4, bias=3)
    assert fp8kit.register_format(fmt, aliases=["TEST_E3M4_ALIAS"]) is fmt
    assert get_format("test_e3m4_alias") is fmt
    other = FloatFormat(name="float8_e4m3fn", exponent_bits=4, mantissa_bits=3, bias=8)
    with pytest.raises(ValueError, match="already registered"):
        fp8kit.register_format(other)
    with pytest.raises(TypeError, match="must be a FloatFormat"):
        fp8kit.register_format("float8_e4m3fn")


def test_readme_format_table_is_generated_from_registry():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert fp8kit.format_table() in readme, "stale README table: paste fp8kit.format_table()"


@pytest.mark.parametrize("fmt", list(fp8kit.registered_formats().values()), ids=str)
def test_maxexp_is_the_first_power_of_two_that_overflows(fmt):
    # numpy.finfo's definition: 2**(maxexp - 1) <= max < 2**maxexp.  Issue 43: 24 P3109
    # formats (precision 1 but signed finite, unsigned extended precision 2) had it 1 too
    # large (2 for unsigned extended precision 1), their top exponent field holding only
    # Inf or NaN
    assert Fraction(2) ** (fmt.maxexp - 1) <= Fraction(fmt.max) < Fraction(2) ** fmt.maxexp
    assert fmt.maxexp == math.frexp(fmt.max)[1]


def test_maxexp_of_a_format_whose_max_is_subnormal():
    # one exponent code for finite values: its max is a subnormal
    fmt = FloatFormat(name="e1m3", exponent_bits=1, mantissa_bits=3, bias=1, specials="fn")
    assert Fraction(2) ** (fmt.maxexp - 1) <= Fraction(fmt.max) < Fraction(2) ** fmt.maxexp
