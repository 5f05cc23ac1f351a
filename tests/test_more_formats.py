"""The OCP MX formats and the other float8 variants of ml_dtypes (issue 8): registry, finfo,
decode, encode and round_to bit-exact against ml_dtypes, the exact oracle, FakeConvert to the
new 8-bit formats, and dense packing of sub-byte codes against ONNX."""

import math
import zlib

import ml_dtypes
import numpy as np
import pytest
from conftest import OUTPUT_DTYPES, bits_of, peer_encode
from hypothesis import given
from hypothesis import strategies as st
from test_codec_vs_ml_dtypes import assert_same_bits, float32_boundaries

import fp8kit
from fp8kit import get_format
from fp8kit._reference import encode_value
from fp8kit.formats import MORE_FORMATS

pytestmark = pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered")

NAMES = [f.name for f in MORE_FORMATS]
SUB_BYTE = ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]


# ---------------------------------------------------------------------------- registry
@pytest.mark.parametrize("name", NAMES)
def test_registered_with_their_ml_dtypes_dtype(name):
    fmt = get_format(name)
    assert fmt.dtype == np.dtype(getattr(ml_dtypes, name))
    assert get_format(getattr(ml_dtypes, name)) is fmt
    assert fp8kit.registered_formats()[name] is fmt


@pytest.mark.parametrize(
    "alias, name",
    [
        pytest.param("FLOAT8E8M0", "float8_e8m0fnu", id="onnx-e8m0"),
        pytest.param("f8e8m0", "float8_e8m0fnu", id="openvino-e8m0"),
        pytest.param("FLOAT4E2M1", "float4_e2m1fn", id="onnx-e2m1"),
        pytest.param("f4e2m1", "float4_e2m1fn", id="openvino-e2m1"),
        pytest.param("FLOAT6E2M3", "float6_e2m3fn", id="onnx-e2m3"),
        pytest.param("FLOAT6E3M2", "float6_e3m2fn", id="onnx-e3m2"),
    ],
)
def test_onnx_and_openvino_names(alias, name):
    assert get_format(alias).name == name


FINFO = ["max", "min", "smallest_normal", "smallest_subnormal", "eps", "epsneg"]
FINFO += ["minexp", "maxexp", "machep", "negep", "nmant", "nexp", "bits"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("field", FINFO)
def test_derived_limits_match_ml_dtypes_finfo(name, field):
    fmt, ref = get_format(name), ml_dtypes.finfo(getattr(ml_dtypes, name))
    assert float(getattr(fmt, field)) == float(getattr(ref, field))


def test_docs_table_is_generated_from_the_registry():
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "formats.md").read_text()
    table = fp8kit.format_table(NAMES)
    assert f"<!-- more-formats-table -->\n{table}\n<!-- /more-formats-table -->" in text


def test_layouts():
    e8m0 = get_format("float8_e8m0fnu")
    assert (e8m0.bits, e8m0.signed, e8m0.has_zero, e8m0.nan_code, e8m0.max_code) == (
        8,
        False,
        False,
        0xFF,
        0xFE,
    )
    e2m1 = get_format("float4_e2m1fn")
    assert (e2m1.bits, e2m1.has_nan, e2m1.has_inf, e2m1.nan_code, e2m1.max) == (
        4,
        False,
        False,
        None,
        6.0,
    )
    with pytest.raises(ValueError, match="mantissa_bits=0"):
        fp8kit.FloatFormat(name="u", exponent_bits=5, mantissa_bits=2, bias=15, specials="unsigned")


# ---------------------------------------------------------------------------- decode
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("out_dtype", OUTPUT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_decode_every_code(name, out_dtype):
    fmt = get_format(name)
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    got = fp8kit.decode(codes, name, dtype=out_dtype)
    want = codes.view(fmt.dtype).astype(out_dtype)
    assert_same_bits(bits_of(got), bits_of(want), codes)


# ---------------------------------------------------------------------------- encode
def peer(x, name, saturate):
    return peer_encode(x, name, saturate)


@pytest.mark.parametrize("source", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_every_16bit_input(source, name, saturate):
    x = np.arange(1 << 16, dtype=np.uint16).view(source)
    assert_same_bits(fp8kit.encode(x, name, saturate=saturate), peer(x, name, saturate), x)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_float32_midpoints_and_neighbours(name, saturate):
    x = float32_boundaries(name)
    extra = [2.0**-127, 1.5 * 2.0**-127, 3 * 2.0**-127, 2.0**-128, 1.5 * 2.0**127, 1e-45]
    x = np.concatenate([x, np.float32(extra)])
    for data in (x, x.astype(np.float64)):
        got = fp8kit.encode(data, name, saturate=saturate)
        assert_same_bits(got, peer(x, name, saturate), x)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_two_million_random_float32_bit_patterns(name, saturate):
    rng = np.random.default_rng(zlib.crc32(f"{name}{saturate}".encode()))
    x = rng.integers(0, 1 << 32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    assert_same_bits(fp8kit.encode(x, name, saturate=saturate), peer(x, name, saturate), x)


@pytest.mark.parametrize("name", NAMES)
def test_round_to_equals_ml_dtypes_round_trip(name):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(100_000) * np.exp(rng.uniform(-90, 90, 100_000))).astype(np.float32)
    want = x.astype(getattr(ml_dtypes, name)).astype(np.float32)
    assert_same_bits(bits_of(fp8kit.round_to(x, name, saturate=False)), bits_of(want), x)
    a = fp8kit.astype(x, name, saturate=False)
    assert a.dtype == get_format(name).dtype
    assert_same_bits(a.view(np.uint8), x.astype(a.dtype).view(np.uint8), x)


# ml_dtypes' rules for the formats without NaN or without a sign, pinned one by one.
@pytest.mark.parametrize(
    "name, x, code",
    [
        # no NaN: NaN becomes zero of the *opposite* sign (ml_dtypes; the ONNX reference too)
        pytest.param("float4_e2m1fn", np.nan, 0x8, id="e2m1-nan-to-neg-zero"),
        pytest.param("float4_e2m1fn", -np.nan, 0x0, id="e2m1-negnan-to-zero"),
        pytest.param("float6_e2m3fn", np.nan, 0x20, id="e2m3-nan-to-neg-zero"),
        # no Inf: Inf and overflow saturate whatever saturate says
        pytest.param("float4_e2m1fn", np.inf, 0x7, id="e2m1-inf-to-max"),
        pytest.param("float6_e3m2fn", -1e9, 0x3F, id="e3m2-overflow-to-min"),
        # e8m0: no sign, no zero; 0, negatives, NaN and (without saturate) overflow are NaN
        pytest.param("float8_e8m0fnu", 0.0, 0xFF, id="e8m0-zero-is-nan"),
        pytest.param("float8_e8m0fnu", -0.0, 0xFF, id="e8m0-negzero-is-nan"),
        pytest.param("float8_e8m0fnu", -1.0, 0xFF, id="e8m0-negative-is-nan"),
        pytest.param("float8_e8m0fnu", 1.5, 128, id="e8m0-tie-up-1.5-to-2"),
        pytest.param("float8_e8m0fnu", 3.0, 129, id="e8m0-tie-up-3-to-4"),
        pytest.param("float8_e8m0fnu", 1.4999999, 127, id="e8m0-below-tie"),
        pytest.param("float8_e8m0fnu", 2.0**-127, 0, id="e8m0-smallest"),
        pytest.param("float8_e8m0fnu", 2.0**-127 * 1.0000002, 1, id="e8m0-above-smallest"),
        pytest.param("float8_e8m0fnu", 2.0**-140, 0, id="e8m0-tiny-to-smallest"),
        pytest.param("float8_e8m0fnu", 1.5 * 2.0**127, 0xFF, id="e8m0-overflow-nan"),
    ],
)
def test_ml_dtypes_rules_for_formats_without_nan_or_sign(name, x, code):
    data = np.float32([x])
    assert fp8kit.encode(data, name, saturate=False).tolist() == [code]
    assert data.astype(getattr(ml_dtypes, name)).view(np.uint8).tolist() == [code]


def test_e8m0_saturate_clamps_overflow_and_inf_only():
    x = np.float32([1.5 * 2.0**127, np.inf, -np.inf, np.nan, 0.0, -2.0])
    assert fp8kit.encode(x, "float8_e8m0fnu").tolist() == [0xFE, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("saturate", [False, True])
def test_float64_agrees_with_the_exact_oracle(name, saturate):
    fmt = get_format(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    vals = np.abs(fp8kit.decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64))
    vals = np.unique(vals[np.isfinite(vals)])
    mids = (vals[:-1] + vals[1:]) / 2
    pts = np.concatenate([vals, mids, 2.0 ** rng.uniform(-140, 130, 3000)])
    pts = np.concatenate([pts, np.nextafter(pts, np.inf), np.nextafter(pts, 0)])
    pts = np.concatenate([pts, -pts, [np.inf, -np.inf, np.nan, 0.0, -0.0]])
    got = fp8kit.encode(pts, name, saturate=saturate)
    want = np.array([encode_value(float(v), fmt, saturate=saturate) for v in pts])
    assert_same_bits(got, want, pts)


# ---------------------------------------------------------------------------- FakeConvert
@pytest.mark.parametrize("dest", ["float8_e4m3", "float8_e3m4", "float8_e4m3b11fnuz"])
def test_fake_convert_to_the_new_float8_formats(dest):
    from test_fake_convert import oracle, same

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 500)) * np.exp(rng.uniform(-8, 8, (64, 500)))).astype(np.float32)
    scale = rng.uniform(0.5, 2, (64, 1)).astype(np.float32)
    assert same(fp8kit.fake_convert(x, scale, destination_type=dest), oracle(x, scale, None, dest))


def test_fake_convert_refuses_the_unsigned_scale_format():
    with pytest.raises(ValueError, match="destination_type 'float8_e8m0fnu'"):
        fp8kit.fake_convert(
            np.ones(3, np.float32), np.float32(1), destination_type="float8_e8m0fnu"
        )


# ---------------------------------------------------------------------------- packing
def _onnx_pack(codes, name):
    """ONNX's own packing: the raw data of a tensor of that type."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    dt = {"int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4}.get(name) or getattr(ml_dtypes, name)
    tensor = numpy_helper.from_array(codes.view(dt) if name not in ("int4",) else codes)
    assert tensor.data_type in (
        onnx.TensorProto.FLOAT4E2M1,
        onnx.TensorProto.FLOAT6E2M3,
        onnx.TensorProto.FLOAT6E3M2,
        onnx.TensorProto.INT4,
        onnx.TensorProto.UINT4,
    )
    return np.frombuffer(tensor.raw_data, np.uint8)


@pytest.mark.parametrize("name", [*SUB_BYTE, "uint4"])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6, 7, 8, 1001])
def test_pack_matches_onnx_raw_data(name, n):
    bits = 4 if name in ("float4_e2m1fn", "uint4") else 6
    codes = np.random.default_rng(n).integers(0, 1 << bits, n, dtype=np.uint8)
    packed = fp8kit.pack(codes, name)
    assert packed.dtype == np.uint8 and packed.size == math.ceil(n * bits / 8)
    assert packed.tolist() == _onnx_pack(codes, name).tolist()
    back = fp8kit.unpack(packed, name, n)
    assert back.view(np.uint8).tolist() == codes.tolist()


def test_pack_int4_values_like_onnx():
    values = np.array([-8, -1, 0, 7, 3], ml_dtypes.int4)
    packed = fp8kit.pack(values, "int4")
    assert packed.tolist() == _onnx_pack(values, "int4").tolist() == [0xF8, 0x70, 0x03]
    assert fp8kit.unpack(packed, "int4", 5).tolist() == [-8, -1, 0, 7, 3]


def test_pack_ml_dtypes_arrays_and_shapes():
    x = np.array([[0.5, -6.0], [1.5, 3.0]], ml_dtypes.float4_e2m1fn)
    packed = fp8kit.pack(x, "float4_e2m1fn")
    back = fp8kit.unpack(packed, "float4_e2m1fn", (2, 2))
    assert back.dtype == x.dtype and back.shape == (2, 2)
    assert back.astype(np.float32).tolist() == [[0.5, -6.0], [1.5, 3.0]]


@given(st.lists(st.integers(0, 63), max_size=64), st.sampled_from(SUB_BYTE))
def test_pack_unpack_round_trip(codes, name):
    bits = get_format(name).bits
    c = np.array(codes, np.uint8) & np.uint8((1 << bits) - 1)
    assert fp8kit.unpack(fp8kit.pack(c, name), name, c.size).view(np.uint8).tolist() == c.tolist()


def test_pack_refuses_bad_input_clearly():
    with pytest.raises(ValueError, match="codes\\[1\\] = 16 does not fit in 4 bits"):
        fp8kit.pack(np.array([1, 16], np.uint8), "float4_e2m1fn")
    with pytest.raises(ValueError, match="8-bit codes; packing is for 3- to 7-bit codes"):
        fp8kit.pack(np.zeros(2, np.uint8), "float8_e4m3fn")
    with pytest.raises(TypeError, match="codes must be unsigned integer codes"):
        fp8kit.pack(np.zeros(2, np.float32), "float4_e2m1fn")
    with pytest.raises(ValueError, match="need 3 bytes; packed has 2"):
        fp8kit.unpack(np.zeros(2, np.uint8), "float6_e2m3fn", 4)
    with pytest.raises(TypeError, match="packed must be an array of uint8"):
        fp8kit.unpack(np.zeros(2, np.int16), "float4_e2m1fn", 4)
