"""fp8kit.cast against ONNX Runtime (CPU) as an oracle, pair by pair: every (from, to) pair of
numeric ONNX types that ORT implements, both saturate settings where ORT takes the attribute
(float8 destinations), on edge values (every code of the 8- and 16-bit floats and of int4/uint4,
values around every overflow threshold and integer range, NaN, +-Inf, -0, values beyond the
int32 range) and random bit patterns.

The default rules ("conformance") must give ORT's bits everywhere except where ORT contradicts
the Cast text (and, where it has cases, ONNX's conformance suite); those elements are matched
by ``ort_contradicts_the_spec`` one pattern at a time, each pinned by its own test here and
listed in docs/cast.md.  Pairs with strings: numbers printed and strings parsed (valid and
fuzzed strings, ORT's errors matched by fp8kit's ValueError), one session per pair.

Sessions are cached per pair (tests/ort_cast_oracle.py); the default run uses edge values and
a few random values, the slow run many more.
"""

import zlib

import numpy as np
import pytest
from onnx_cast_oracle import edge_values, random_values

ort_oracle = pytest.importorskip("ort_cast_oracle")

import fp8kit  # noqa: E402
from fp8kit.cast import ALL_CAST_TYPES  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered")

NUMERIC = [n for n, t in ALL_CAST_TYPES.items() if t.onnx and t.kind != "string"]
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
PAIRS = [
    (s, d, sat)
    for s in NUMERIC
    for d in NUMERIC
    if s != d
    for sat in ((True, False) if d in FLOAT8 else (True,))
]


def _inputs(src, n_random):
    try:
        edge = edge_values(src)
    except KeyError:  # the types beyond Cast-21 with an ONNX name: every code
        dtype = ALL_CAST_TYPES[src].dtype
        if src in ("int2", "uint2"):
            lo = -2 if src == "int2" else 0
            return np.arange(lo, lo + 4).astype(dtype)
        return np.arange(256, dtype=np.uint8).view(dtype)
    if n_random == 0 or edge.dtype.itemsize == 1 and src not in ("int8", "uint8", "bool"):
        return edge
    rng = np.random.default_rng(zlib.crc32(src.encode()))
    return np.concatenate([edge, random_values(src, n_random, rng)])


def _as_f64(x):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(x).astype(np.float64)


def ort_contradicts_the_spec(x, src, dst, sat, ours, theirs):
    """Elements where ORT's answer contradicts the Cast text (fp8kit follows the text)."""
    mask = np.zeros(x.shape, bool)
    if dst == "uint32" and src in ("bfloat16", "float32", "float64"):
        # ORT's (and numpy's) float -> uint32 loop is vectorised 4 elements at a time; the
        # last n % 4 elements of the array take its scalar loop, which gives other bits out
        # of range.  fp8kit gives the vector loop's bits everywhere; there, the scalar ones
        # are rules="reference-int"'s.
        tail = np.zeros(x.shape, bool)
        tail[x.size - x.size % 4 :] = True
        scalar = fp8kit.cast(x, "uint32", rules="reference-int")
        assert (theirs[tail] == scalar[tail]).all()
        mask |= tail
    if src in NUMERIC and ALL_CAST_TYPES[src].kind == "float":
        f = _as_f64(x)
        o, t = _as_f64(ours), _as_f64(theirs)
        if dst == "float8_e4m3fn" and not sat:
            # ORT rounds values from 464 (the tie above 448) on to +-448; the table: NaN
            mask |= np.isfinite(f) & np.isnan(o) & (np.abs(t) == 448.0)
        if dst == "float8_e5m2" and not sat:
            # ORT gives NaN from 61440 (the tie above 57344) on; the table and suite: +-Inf
            mask |= np.isfinite(f) & np.isinf(o) & np.isnan(t)
        if dst == "bool" and src in ("float8_e4m3fn", "float8_e5m2"):
            # ORT: float8 -0 -> True; the text: "+/- 0.0 to False"
            mask |= (f == 0) & np.signbit(f) & ~ours & theirs
    elif dst in ("float8_e4m3fn", "float8_e5m2") and not sat:  # integer sources
        f = _as_f64(x)
        o, t = _as_f64(ours), _as_f64(theirs)
        if dst == "float8_e4m3fn":
            mask |= np.isnan(o) & (np.abs(t) == 448.0)
        else:
            mask |= np.isinf(o) & np.isnan(t)
    return mask


def _same(ours, theirs):
    if theirs.dtype.kind == "f":
        ob = ours.view(f"u{ours.dtype.itemsize}")
        tb = theirs.view(f"u{theirs.dtype.itemsize}")
        return (ob == tb) | (np.isnan(ours) & np.isnan(theirs))
    return ours == theirs


def compare(src, dst, sat, n_random):
    x = _inputs(src, n_random)
    theirs = ort_oracle.ort_cast(x, src, dst, sat)
    ours = ort_oracle.widen(fp8kit.cast(x, dst, saturate=sat), dst)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    same = _same(ours, theirs)
    mask = ort_contradicts_the_spec(x, src, dst, sat, ours, theirs)
    bad = np.flatnonzero(~same & ~mask)
    assert not bad.size, [(x[i], ours[i], theirs[i]) for i in bad[:6]]
    return mask


#: the pairs ORT (CPU) builds a session for; the others are left out (counted by test_coverage)
SUPPORTED = [p for p in PAIRS if ort_oracle.supports(*p)]
IDS = [f"{s}-{d}-{int(t)}" for s, d, t in SUPPORTED]


@pytest.mark.parametrize("src, dst, sat", SUPPORTED, ids=IDS)
def test_pairs_match_onnxruntime(src, dst, sat):
    compare(src, dst, sat, n_random=64)


@pytest.mark.slow
@pytest.mark.parametrize("src, dst, sat", SUPPORTED, ids=IDS)
def test_pairs_match_onnxruntime_many_random(src, dst, sat):
    compare(src, dst, sat, n_random=200_000)


def test_coverage():
    # ORT 1.32 implements the Cast-21 types among themselves (int4/uint4 included); not the
    # float4/float6/e8m0/int2/uint2 pairs.  A newer ORT may implement more, never fewer.
    assert len(SUPPORTED) >= 414
    assert ("float32", "float8_e4m3fnuz", True) in SUPPORTED
    assert ("float32", "uint4", True) in SUPPORTED
    assert ("float8_e5m2", "uint64", True) in SUPPORTED


@pytest.mark.parametrize(
    "x, src, dst, sat, fp8kit_says, ort_says",
    [
        (480.0, "float32", "float8_e4m3fn", False, "nan", 448.0),
        (61440.0, "float32", "float8_e5m2", False, np.inf, "nan"),
        (480, "int32", "float8_e4m3fn", False, "nan", 448.0),
        (-0.0, "float8_e4m3fn", "bool", True, False, True),
        (-0.0, "float8_e5m2", "bool", True, False, True),
    ],
)
def test_where_onnxruntime_contradicts_the_spec(x, src, dst, sat, fp8kit_says, ort_says):
    a = np.array([x]).astype(ort_oracle.NUMPY_DTYPE[src])
    theirs = ort_oracle.ort_cast(a, src, dst, sat)[0]
    ours = ort_oracle.widen(fp8kit.cast(a, dst, saturate=sat), dst)[0]
    for got, want in ((ours, fp8kit_says), (theirs, ort_says)):
        if want == "nan":
            assert np.isnan(got)
        else:
            assert got == want and np.signbit(got) == np.signbit(want)
    assert ort_contradicts_the_spec(a, src, dst, sat, np.array([ours]), np.array([theirs]))[0]


# -------------------------------------------------------------------- strings
TO_STRING = [s for s in NUMERIC if ort_oracle.supports(s, "string")]
FROM_STRING = [d for d in NUMERIC if ort_oracle.supports("string", d)]
#: strings ONNX Runtime reads (std::stod, stoll, stoull: a prefix after white space) or refuses
TRICKY = [
    "1e3", "inf", "-inf", "INF", "Infinity", "infinit", "nan", "NaN", "-nan", "nan(123)",
    "nanxyz", " 1", "1 ", "\t\n 5", "1_000", "0x10", "0x1p3", "0x1.8", "0x", "0x1p-1074",
    "1.5", "-2.7", "+5", "007", "12abc", "  -3", "-0", "1e", "1e+", "3.14", "300", "0.5",
    "-0.5", "2.5", "-2.5", "7.5", "-8.5", "1e5", "65519.99", "464", "61440", "240.1",
    "2.4999999999", "1.000000059604644775390625000000001", "1.0004882819", "1e39", "-1e10",
    "1e-40", "1.4e-45", "7e-46", "2.2250738585072014e-308", "2147483648", "4294967296",
    "-9223372036854775808", "9223372036854775808", "18446744073709551615",
    "-18446744073709551615", "-18446744073709551616", "99999999999999999999", "abc", "",
    "in", "- 5", "+-1", ".", "e5", "1e400", "-1e400", "1e-400", "1e-310",
    "4.9406564584124654e-324", "2.2250738585072012e-308", "2.2250738585072013e-308",
    "0x1.fffffffffffff8p-1023", "0x1.fffffffffffff7p-1023", "0x1.8p-1074", "nan(0x7b)",
    "1.7976931348623158e308", "1.7976931348623159e308", "0x1.fffffffffffff8p1023", "0X.8P1",
]  # fmt: skip


def _fuzz(n, seed):
    rng = np.random.default_rng(seed)
    alphabet = np.array(list(" +-.0123456789eExXpPinfaINFA_("))
    return ["".join(rng.choice(alphabet, rng.integers(1, 9))) for _ in range(n)]


def _valid_numbers(n, seed):
    """Number strings every ORT parser reads (finite, normal or zero float64 repr, int64)."""
    rng = np.random.default_rng(seed)
    f = random_values("float64", n, rng)
    f = f[np.isfinite(f) & ((np.abs(f) >= 2.2250738585072014e-308) | (f == 0))]
    ints = random_values("int64", n, rng)
    return [repr(float(v)) for v in f] + [str(int(v)) for v in ints] + [f"{v:.8g}" for v in f]


def _one_by_one(strings, dst):
    """(ORT's answers, fp8kit's answers) element by element; None where it raises."""
    theirs, ours = [], []
    for s in strings:
        a = np.array([s], dtype=object)
        try:
            theirs.append(ort_oracle.ort_cast(a, "string", dst)[0])
        except Exception:  # noqa: BLE001 - ORT raises its own exception classes
            theirs.append(None)
        try:
            ours.append(ort_oracle.widen(fp8kit.cast(a, dst), dst)[0])
        except ValueError as e:
            assert "std::sto" in str(e) and "x[0] = " in str(e)
            ours.append(None)
    return theirs, ours


def compare_strings(dst, n_valid, n_fuzz):
    theirs, ours = _one_by_one(TRICKY + _fuzz(n_fuzz, len(dst)), dst)
    refused = [t is None for t in theirs]
    assert refused == [o is None for o in ours]
    read = [s for s, r in zip(TRICKY, refused[: len(TRICKY)], strict=True) if not r]
    x = np.array(_valid_numbers(n_valid, 7) + read, object)
    t = ort_oracle.ort_cast(x, "string", dst)
    o = ort_oracle.widen(fp8kit.cast(x, dst), dst)
    bad = np.flatnonzero(~_same(o, t))
    assert not bad.size, [(x[i], o[i], t[i]) for i in bad[:6]]


@pytest.mark.parametrize("dst", FROM_STRING)
def test_strings_to_numbers_match_onnxruntime(dst):
    compare_strings(dst, n_valid=200, n_fuzz=40)


@pytest.mark.slow
@pytest.mark.parametrize("dst", FROM_STRING)
def test_strings_to_numbers_match_onnxruntime_many(dst):
    compare_strings(dst, n_valid=50_000, n_fuzz=3000)


def compare_to_string(src, n_random):
    x = _inputs(src, n_random)
    assert fp8kit.cast(x, "string").tolist() == ort_oracle.ort_cast(x, src, "string").tolist()


@pytest.mark.parametrize("src", TO_STRING)
def test_numbers_to_strings_match_onnxruntime(src):
    compare_to_string(src, n_random=256)


@pytest.mark.slow
@pytest.mark.parametrize("src", TO_STRING)
def test_numbers_to_strings_match_onnxruntime_many(src):
    compare_to_string(src, n_random=100_000)


def test_string_coverage():
    # ORT 1.32 reads and prints every Cast-21 numeric type (int4/uint4 included)
    assert len(TO_STRING) >= 19 and len(FROM_STRING) >= 19
    x = np.array(["1e3", "12abc", " -2.7", "0x10"], dtype=object)
    assert fp8kit.cast(x, "int8").tolist() == [1, 12, -2, 0]
    assert fp8kit.cast(x, "float32").tolist() == [1000.0, 12.0, np.float32(-2.7), 16.0]
    assert fp8kit.cast(np.float64([1 / 3, -0.0, np.nan]), "string").tolist() == [
        "0.33333333", "-0", "NaN"]  # fmt: skip
