"""Cast-21 strings under ``rules="exact-strings"`` (fp8kit's own reading, part of "legacy"):
parsing ("3.14", "1E8", "+INF", "INF", "-INF", "NaN" in any case, the decimal rounded once)
and formatting (shortest representation that round-trips).  The default reads and prints
strings as ONNX Runtime: tests/test_cast_onnxruntime.py."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from onnx_cast_oracle import edge_values, onnx_cast, random_values

import fp8kit
from fp8kit._reference import encode_value

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered")


def exact_cast(x, to, rules="exact-strings", **kw):
    """fp8kit.cast with rules="exact-strings" (joined to any other rules asked for)."""
    return fp8kit.cast(
        x, to, rules=rules if rules == "exact-strings" else rules + "+exact-strings", **kw
    )


GOOD = [
    "3.14",
    "-0",
    "1E8",
    "1e-5",
    "+INF",
    "INF",
    "-inf",
    "iNf",
    "NaN",
    "nan",
    "100",
    "-2.5",
    ".5",
    "5.",
    "1e400",
    "1e-400",
    "65519.99",
    " 7 ",
]


@pytest.mark.parametrize("dst", ["float64", "float32", "float16"])
def test_string_to_float_matches_reference_where_it_rounds_once(dst):
    x = np.array(GOOD, dtype=object)
    ours = exact_cast(x, dst)
    ref = onnx_cast(x, "string", dst, True)
    both_nan = np.isnan(ours.astype(np.float64)) & np.isnan(ref.astype(np.float64))
    assert ((ours.view(f"u{ours.itemsize}") == ref.view(f"u{ours.itemsize}")) | both_nan).all()


@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2fnuz", "bfloat16", "float32"])
@pytest.mark.parametrize("saturate", [True, False])
def test_string_to_narrow_floats_rounds_the_decimal_once(dst, saturate):
    # "1.000000059604644775390625000000001" is just above the float32 tie 1 + 2**-24: one
    # rounding gives 1 + 2**-23; onnx.reference parses to float64 first and gives 1.0.
    strings = [
        "1.000000059604644775390625000000001",
        "1.06250000000000000001",
        "464.0001",
        "-0.0009765625000001",
        "1e10",
        "-1e10",
        "0.1",
        "3.5",
    ]
    x = np.array(strings, dtype=object)
    got = exact_cast(x, dst, saturate=saturate)
    if dst == "float32":
        assert got[0] == np.float32(1 + 2**-23)
        assert onnx_cast(x[:1], "string", "float32", True)[0] == 1.0
        return
    fmt = fp8kit.get_format(dst)
    want = [encode_value(Fraction(s), fmt, saturate=saturate) for s in strings]
    assert got.view(fmt.code_dtype).tolist() == want


REFERENCE_STRING_TYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
]


@pytest.mark.parametrize("src", REFERENCE_STRING_TYPES)
def test_numbers_to_string_match_reference(src):
    rng = np.random.default_rng(len(src))
    x = np.concatenate([edge_values(src), random_values(src, 2000, rng)])
    ours = exact_cast(x, "string")
    ref = onnx_cast(x, src, "string", True)
    assert ours.dtype == object
    assert ours.tolist() == ref.tolist()


@pytest.mark.parametrize(
    "src", ["bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
)
def test_narrow_floats_to_string_are_shortest_round_trip(src):
    # onnx.reference cannot cast these to STRING; fp8kit gives the shortest decimal that
    # parses back to the same value.
    codes = np.arange(256 if src != "bfloat16" else 65536, dtype=np.uint16)
    codes = codes.astype(np.uint8) if src != "bfloat16" else codes
    x = codes.view(getattr(ml_dtypes, src))
    text = exact_cast(x, "string")
    back = exact_cast(text, src, saturate=False)
    vals = x.astype(np.float64)
    nan = np.isnan(vals)
    assert (back.view(codes.dtype)[~nan] == codes[~nan]).all()
    assert np.isnan(back.astype(np.float64)[nan]).all()
    for t, v in list(zip(text.tolist(), vals.tolist(), strict=True))[
        :: 1 if src != "bfloat16" else 97
    ]:
        digits = len(t.lstrip("-").split("e")[0].replace(".", "").strip("0"))
        if digits > 1 and np.isfinite(v):
            shorter = f"{v:.{digits - 1}g}"
            assert (
                exact_cast(np.array([shorter], object), src, saturate=False).astype(np.float64)[0]
                != v
                or shorter == t
            )


@pytest.mark.parametrize(
    "bad, index",
    [(["1.0", "abc"], "1"), (["0x10"], "0"), (["1_000"], "0"), ([""], "0"), (["Infinity"], "0")],
)
def test_non_numbers_raise_naming_element_and_index(bad, index):
    with pytest.raises(ValueError, match=rf"x\[{index}\] = .* is not a number"):
        exact_cast(np.array(bad, dtype=object), np.float32)


def test_string_to_int_and_bool():
    x = np.array(["100", "300", "-1", "100.5", "-2.7", "1e3"], dtype=object)
    assert exact_cast(x, np.int8).tolist() == [100, 44, -1, 100, -2, -24]
    assert exact_cast(x, np.int8, rules="int-clamp").tolist() == [100, 127, -1, 100, -2, 127]
    assert exact_cast(x[:3], np.int8, saturate=False).tolist() == [100, 44, -1]
    assert exact_cast(np.array(["18446744073709551615"], object), np.uint64)[0] == 2**64 - 1
    # strings are numbers: "0" is False (onnx.reference: any non-empty string is True)
    assert exact_cast(np.array(["0", "0.0", "nan", "2"], object), bool).tolist() == [
        False,
        False,
        True,
        True,
    ]
    assert onnx_cast(np.array(["0"], object), "string", "bool", True).tolist() == [True]


def test_numpy_unicode_arrays_are_strings():
    assert exact_cast(np.array(["1.5", "-INF"]), "float8_e4m3fn").astype(float).tolist() == [
        1.5,
        -448.0,
    ]


@pytest.mark.parametrize("dst", REFERENCE_STRING_TYPES[1:9])
def test_integer_strings_match_reference_in_range(dst):
    info = np.iinfo(np.dtype(dst))
    values = [int(info.min), int(info.max), 0, 1, -1, 7, 100, 2**31 - 1, 2**53 + 1]
    strings = [str(v) for v in values if info.min <= v <= info.max]
    strings += ["+5", "007", " 42 "]
    x = np.array(strings, dtype=object)
    for sat in (True, False):
        assert (
            exact_cast(x, dst, saturate=sat).tolist() == onnx_cast(x, "string", dst, sat).tolist()
        )


@pytest.mark.parametrize("dst", ["float64", "float32"])
def test_random_number_strings_match_reference(dst):
    rng = np.random.default_rng(3)
    x = random_values("string", 3000, rng)
    ours = exact_cast(x, dst)
    ref = onnx_cast(x, "string", dst, True)
    if dst == "float64":  # Python float() is correctly rounded: identical
        assert (ours.view(np.uint64) == ref.view(np.uint64)).all()
    else:  # repr(float64) strings: the float32 double rounding almost never shows
        assert (ours == ref).mean() > 0.999


def test_four_bit_integers_and_strings():
    # onnx.reference refuses int4/uint4 <-> string; fp8kit treats them like other integers
    x = np.arange(-8, 8, dtype=np.int8).astype(ml_dtypes.int4)
    text = exact_cast(x, "string")
    assert text.tolist() == [str(v) for v in range(-8, 8)]
    assert exact_cast(text, "int4").astype(np.int8).tolist() == list(range(-8, 8))
    s = np.array(["7", "-9", "3.9", "20"], dtype=object)
    assert exact_cast(s, "int4").astype(np.int8).tolist() == [7, 7, 3, 4]
    assert exact_cast(s, "int4", rules="int-clamp").astype(np.int8).tolist() == [7, -8, 3, 7]
    assert exact_cast(s, "int4", saturate=False).astype(np.int8).tolist() == [7, 7, 3, 4]
    assert exact_cast(s, "uint4", saturate=False).astype(np.int8).tolist() == [7, 7, 3, 4]


def test_integer_literals_stay_exact_beside_other_numbers():
    s = np.array(["18446744073709551615", "1.5", "abc"][:2], dtype=object)
    assert exact_cast(s, np.uint64).tolist() == [2**64 - 1, 1]
    assert exact_cast(np.array(["abc", "x"], object), "string").tolist() == ["abc", "x"]


def test_exact_strings_is_a_rule_and_part_of_legacy():
    x = np.array(["1e3", "1.000000059604644775390625000000001"], dtype=object)
    assert fp8kit.cast(x[:1], "int32").tolist() == [1]  # the default: std::stoll's prefix
    assert exact_cast(x[:1], "int32").tolist() == [1000]
    assert fp8kit.cast(x[:1], "int32", rules="legacy").tolist() == [1000]
    assert fp8kit.cast(x[1:], "float32")[0] == 1.0  # stod, then float32: two roundings
    assert exact_cast(x[1:], "float32")[0] == np.float32(1 + 2**-23)
    f = np.float64([0.1, np.inf])
    assert fp8kit.cast(f, "string").tolist() == ["0.1", "INF"]
    assert fp8kit.cast(f, "string", rules="legacy").tolist() == ["0.1", "inf"]
