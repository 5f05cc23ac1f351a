"""The rules of ONNX Cast-21 (../shared/specs/onnx-Cast-21.txt), one test per sentence, and
the behaviours fp8kit defines where the spec leaves room."""

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx_cast_oracle import onnx_cast

import fp8kit
from fp8kit.cast import CAST_TYPES, RULES, cast_rule, cast_table, cast_type

INT_TYPES = [
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint4",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


def test_issue_examples():
    assert fp8kit.cast(np.array([200], np.int16), np.int8).tolist() == [-56]
    got = fp8kit.cast(np.array(["3.14", "-INF", "nan", "1E8"]), np.float32)
    assert got[0] == np.float32(3.14) and got[1] == -np.inf and np.isnan(got[2])
    assert got[3] == 1e8
    codes = np.array([0x38, 0x7E, 0xFF], np.uint8).view(ml_dtypes.float8_e4m3fn)
    assert fp8kit.cast(codes, "bfloat16").astype(np.float32).tolist()[:2] == [1.0, 448.0]
    x = np.array([1e9, -np.inf], np.float32)
    assert fp8kit.cast(x, "float8_e5m2fnuz", saturate=False).view(np.uint8).tolist() == [
        0x80,
        0x80,
    ]


@pytest.mark.parametrize(
    "x, to, want",
    [
        # "floating point: +/- infinity if OOR (out of range)."
        pytest.param(np.array([1e300, -1e300]), "float32", [np.inf, -np.inf], id="f64-f32"),
        pytest.param(np.array([1e6, -1e6], np.float32), "float16", [np.inf, -np.inf], id="f16"),
        pytest.param(np.array([1e39]), "bfloat16", [np.inf], id="bf16"),
        # "fixed point: +/- infinity if OOR. (+ infinity in the case of uint)"
        pytest.param(
            np.array([70000, -70000], np.int32), "float16", [np.inf, -np.inf], id="int-f16"
        ),
        pytest.param(np.array([2**64 - 1], np.uint64), "float16", [np.inf], id="uint-f16"),
        # "bool: +/- 0.0 to False; all else to True."
        pytest.param(
            np.array([0.0, -0.0, np.nan, 1e-45, -np.inf], np.float32),
            "bool",
            [False, False, True, True, True],
            id="float-bool",
        ),
        # "bool: zero to False; nonzero to True."
        pytest.param(np.array([0, 36, -1], np.int64), "bool", [False, True, True], id="int-bool"),
        # "Casting from bool to: floating point: {1.0, 0.0}. fixed point: {1, 0}."
        pytest.param(np.array([True, False]), "float8_e5m2", [1.0, 0.0], id="bool-f8"),
        pytest.param(np.array([True, False]), "int4", [1, 0], id="bool-int4"),
        # "discard higher bits and reinterpret ... For example, 200 (int16) -> -56 (int8)."
        pytest.param(np.array([200], np.int16), "int8", [-56], id="int16-int8"),
        pytest.param(
            np.array([2**40 + 5, -1], np.int64), "uint32", [5, 2**32 - 1], id="int64-uint32"
        ),
        pytest.param(np.array([-9, 2**40 + 3], np.int64), "int4", [7, 3], id="int64-int4"),
        pytest.param(np.array([-1], np.int64), "uint4", [15], id="int64-uint4"),
        pytest.param(np.array([-8, 7], ml_dtypes.int4), "uint4", [8, 7], id="int4-uint4"),
    ],
)
def test_spec_sentences(x, to, want):
    got = fp8kit.cast(x, to)
    assert got.dtype == CAST_TYPES[cast_type(to).name].dtype
    assert got.astype(np.float64).tolist() == np.array(want, np.float64).tolist()


@pytest.mark.parametrize("to", INT_TYPES)
@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, ml_dtypes.float8_e5m2]
)
@pytest.mark.parametrize("saturate", [True, False])
def test_float_to_int_clamps_and_nan_is_zero_under_int_clamp(to, dtype, saturate):
    t = cast_type(to)
    lo, hi = (
        (-8, 7)
        if to == "int4"
        else (0, 15)
        if to == "uint4"
        else (int(np.iinfo(t.dtype).min), int(np.iinfo(t.dtype).max))
    )
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 2.9, -2.9, 0.5], np.float64)
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    y = fp8kit.cast(x, to, saturate=saturate, rules="int-clamp")
    got = [int(v) for v in y.astype(np.int64 if to != "uint64" else np.uint64)]
    assert got[:5] == [0, hi, lo, hi, lo]
    assert got[5:] == [min(max(int(np.trunc(float(v))), lo), hi) for v in x[5:].astype(float)]


@pytest.mark.parametrize(
    "x, want_int4, want_uint4",
    [(7.9, 7, 7), (-8.5, -8, 8), (9.0, -7, 9), (17.0, 1, 1), (-17.3, -1, 15), (-0.9, 0, 0)],
)
def test_int4_wraps_like_the_reference_under_reference_int(x, want_int4, want_uint4):
    # "truncate toward zero, then modulo 16"
    a = np.array([x])
    assert int(fp8kit.cast(a, "int4", rules="reference-int")[0]) == want_int4
    assert int(fp8kit.cast(a, "uint4", rules="reference-int")[0]) == want_uint4
    assert int(fp8kit.cast(a, "int4", saturate=False, rules="legacy")[0]) == want_int4
    assert int(onnx_cast(a, "float64", "int4", False)[0]) == want_int4


@pytest.mark.parametrize(
    "x, want_int4, want_uint4",
    [(7.9, -8, 8), (-8.5, 7, 7), (9.0, -7, 9), (17.0, 1, 1), (-17.3, -1, 15), (-0.4, 0, 0)],
)
@pytest.mark.parametrize("saturate", [True, False])
def test_int4_by_default_rounds_half_away_then_wraps_as_onnxruntime(
    x, want_int4, want_uint4, saturate
):
    # ONNX Runtime (CPU): std::round, then the low 4 bits (saturate is ignored)
    a = np.array([x])
    assert int(fp8kit.cast(a, "int4", saturate=saturate)[0]) == want_int4
    assert int(fp8kit.cast(a, "uint4", saturate=saturate)[0]) == want_uint4


@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz"])
def test_inf_into_fnuz_with_saturate_is_nan_under_fnuz_inf_nan(name):
    x = np.array([np.inf, -np.inf], np.float32)
    assert fp8kit.cast(x, name, rules="fnuz-inf-nan").view(np.uint8).tolist() == [0x80, 0x80]
    # onnx.reference 1.23 (and the conformance suite, and ONNX Runtime) saturate instead:
    # the default
    assert onnx_cast(x, "float32", name, True).view(np.uint8).tolist() == [0x7F, 0xFF]
    assert fp8kit.cast(x, name).view(np.uint8).tolist() == [0x7F, 0xFF]


def test_shapes_are_kept():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, ::2].transpose(2, 0, 1)
    for to in ["int8", "float8_e4m3fn", "string", "bool", "bfloat16", "uint4"]:
        assert fp8kit.cast(x, to).shape == x.shape
    assert fp8kit.cast(np.float32(2.5), "int8").shape == ()


@pytest.mark.parametrize("bad", [np.array([1j]), np.array([1 + 2j], np.complex64)])
def test_complex_input_is_refused(bad):
    with pytest.raises(TypeError, match="complex"):
        fp8kit.cast(bad, np.float32)


def test_bad_saturate():
    with pytest.raises(TypeError, match="cast: saturate must be True or False"):
        fp8kit.cast(np.zeros(2), "int8", saturate="no")


def test_big_endian_input():
    x = np.array([1.5, -300.0], ">f8")
    assert fp8kit.cast(x, "int8").tolist() == [1, -44]  # x86's low bits
    assert fp8kit.cast(x, "int8", rules="int-clamp").tolist() == [1, -128]
    assert fp8kit.cast(x, "float8_e4m3fn").astype(float).tolist() == [1.5, -288.0]


def test_bad_destinations():
    with pytest.raises(TypeError, match="complex"):
        fp8kit.cast(np.zeros(2), np.complex128)
    with pytest.raises(ValueError, match="unknown to type 'float7'; valid: bool, int4"):
        fp8kit.cast(np.zeros(2), "float7")
    with pytest.raises(TypeError, match="not a Cast-21 type"):
        fp8kit.cast(np.zeros(2), np.longdouble)
    with pytest.raises(TypeError, match="object arrays must hold only str"):
        fp8kit.cast(np.array([1, "a"], dtype=object), np.float32)


@pytest.mark.parametrize(
    "spec, name",
    [
        ("FLOAT", "float32"),
        ("DOUBLE", "float64"),
        ("INT4", "int4"),
        ("STRING", "string"),
        ("f8e4m3", "float8_e4m3fn"),
        (ml_dtypes.uint4, "uint4"),
        (str, "string"),
        ("FLOAT8E5M2FNUZ", "float8_e5m2fnuz"),
        (np.dtype(">i2"), "int16"),
    ],
)
def test_type_names(spec, name):
    assert cast_type(spec).name == name


def test_every_rule_is_explained_and_the_docs_table_is_generated():
    codes = {cast_rule(s, d) for s in CAST_TYPES for d in CAST_TYPES}
    assert codes <= set(RULES)
    doc = (Path(__file__).parents[1] / "docs" / "cast.md").read_text()
    assert cast_table() in doc, "stale docs/cast.md table: paste fp8kit.cast_table()"


EXACT = [(s, d) for s in CAST_TYPES for d in CAST_TYPES if cast_rule(s, d) == "E"]


@pytest.mark.parametrize("src, dst", EXACT, ids=[f"{s}-{d}" for s, d in EXACT])
def test_exact_rule_means_round_trip(src, dst):
    """Where the table says E (exact), casting there and back gives the input again."""
    from onnx_cast_oracle import edge_values

    x = edge_values(src)
    back = fp8kit.cast(fp8kit.cast(x, dst), src, saturate=False)
    a, b = np.asarray(x), np.asarray(back)
    if a.dtype.kind == "V" or a.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # ml_dtypes warns on NaN -> float64
            af, bf = a.astype(np.float64), b.astype(np.float64)
        assert ((af == bf) | (np.isnan(af) & np.isnan(bf))).all()
    else:
        assert (a.astype(np.int64) == b.astype(np.int64)).all()


def test_rules_names_combine():
    x = np.float32([np.inf, 300.0])
    fnuz = "float8_e4m3fnuz"
    assert fp8kit.cast(x[:1], fnuz).view(np.uint8).tolist() == [0x7F]
    for spelling in ("fnuz-inf-nan", ["fnuz-inf-nan"], ("conformance", "fnuz-inf-nan")):
        assert fp8kit.cast(x[:1], fnuz, rules=spelling).view(np.uint8).tolist() == [0x80]
    both = fp8kit.cast(x, np.int8, rules="fnuz-inf-nan + int-clamp")
    assert both.tolist() == [127, 127]
    assert fp8kit.cast(x, np.int8, rules="fnuz-inf-nan").tolist() == [0, 44]
    # legacy: int-clamp with saturate, reference-int without
    assert fp8kit.cast(x, np.int8, rules="legacy").tolist() == [127, 127]
    assert fp8kit.cast(x, np.int8, saturate=False, rules="legacy").tolist() == [0, 44]


@pytest.mark.parametrize(
    "rules, error, match",
    [
        ("strict", ValueError, "unknown rules name 'strict'.*valid: conformance, fnuz-inf-nan"),
        ("int-clamp+reference-int", ValueError, "both 'int-clamp' and 'reference-int'"),
        (["legacy", "int-clamp"], None, None),
        (3, TypeError, "rules must be a str or an iterable of str; got 3"),
        ([1], TypeError, r"rules must be a str or an iterable of str; got \[1\]"),
    ],
)
def test_rules_are_checked(rules, error, match):
    x = np.float32([1.0])
    if error is None:  # legacy with saturate=True already means int-clamp
        assert fp8kit.cast(x, np.int8, rules=rules).tolist() == [1]
        with pytest.raises(ValueError, match="both 'int-clamp' and 'reference-int'"):
            fp8kit.cast(x, np.int8, saturate=False, rules=rules)
        return
    with pytest.raises(error, match=match):
        fp8kit.cast(x, np.int8, rules=rules)


def test_every_rule_is_described():
    from fp8kit.cast import CAST_RULES

    assert list(CAST_RULES) == [
        "conformance",
        "fnuz-inf-nan",
        "float4-nan-six",
        "int-clamp",
        "reference-int",
        "round-once",
        "exact-strings",
        "legacy",
    ]
    assert all(len(text) > 30 for text in CAST_RULES.values())
