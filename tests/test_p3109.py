"""IEEE P3109 binaryKpP formats (issue 20 part 1): the registry, every code against gfloat,
boundary sweeps against gfloat, fp8kit's exact oracle and pychop in every rounding mode
they share (saturating and not), the rule for negative input to unsigned formats, packing
of 3- to 7-bit codes, and no new compiled kernels per format.

The facts where the libraries differ are pinned here (docs/formats.md, "P3109 formats"):
gfloat leaves negative input to unsigned formats undefined (pychop: NaN, 0 when saturating
or rounding toward zero or +Inf, -Inf NaN unless saturating; fp8kit follows pychop).  The
signed finite formats (``specials="signed_finite"``) follow P3109's SatFinite as gfloat and
pychop do (+-Inf -> +-max with ``saturate=True``), while the float8 fnuz formats with the
same codes keep ONNX Cast-21's rule (NaN).
"""

import math

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import get_format
from fp8kit._kernels.codec import compiled_count
from fp8kit._kernels.tables import code_values
from fp8kit._reference import encode_value
from fp8kit.formats import P3109_FORMATS, p3109_name

gfloat = pytest.importorskip("gfloat")
from gfloat import Domain, RoundMode, Signedness  # noqa: E402
from gfloat.formats import format_info_p3109  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered")

#: fp8kit's rounding modes and gfloat's (pychop's P3109 API uses fp8kit's names)
GFLOAT_MODES = {
    "nearest_even": RoundMode.TiesToEven,
    "nearest_away": RoundMode.TiesToAway,
    "toward_zero": RoundMode.TowardZero,
    "toward_positive": RoundMode.TowardPositive,
    "toward_negative": RoundMode.TowardNegative,
}


def parts(fmt):
    """(k, p, signed, extended) from a format's P3109 name."""
    name = p3109_name(fmt)
    k, rest = name.removeprefix("p3109_k").split("p")
    return int(k), int(rest[:-2]), rest[-2] == "s", rest[-1] == "e"


def gfloat_format(fmt):
    k, p, signed, extended = parts(fmt)
    return format_info_p3109(
        k,
        p,
        Signedness.Signed if signed else Signedness.Unsigned,
        Domain.Extended if extended else Domain.Finite,
    )


def by_bits(k):
    return [pytest.param(f, id=p3109_name(f)) for f in P3109_FORMATS if f.bits == k]


def sweep(fmt, negatives=True):
    """Every finite value, every midpoint, their float64 neighbours, +-0, +-Inf, NaN and
    values beyond max (negated too, for signed formats or with ``negatives``)."""
    v = code_values(fmt)
    v = np.unique(v[np.isfinite(v)])
    mids = (v[1:] + v[:-1]) / 2
    pts = np.concatenate([v, mids, [fmt.max * 1.5, fmt.max * 2, 1e300, np.inf, np.nan, 0.0]])
    pts = np.concatenate([pts, np.nextafter(pts, np.inf), np.nextafter(pts, -np.inf)])
    if fmt.signed or negatives:
        return np.concatenate([pts, -pts])
    return pts[~(pts < 0)]


def same(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


K8 = by_bits(8)
SMALL = [f for k in range(3, 8) for f in by_bits(k)]


# ---------------------------------------------------------------------------- registry
def test_registry_has_every_binary_k_p():
    # signed p in 1..k-1, unsigned p in 1..k, extended and finite, k = 3..8
    assert len(P3109_FORMATS) == sum(2 * (k - 1) + 2 * k for k in range(3, 9)) == 120
    assert len(set(P3109_FORMATS)) == 120
    for fmt in P3109_FORMATS:
        k, p, signed, extended = parts(fmt)
        draft = f"binary{k}p{p}{'s' if signed else 'u'}{'e' if extended else 'f'}"
        assert get_format(draft) is fmt is get_format(p3109_name(fmt))
        assert (fmt.bits, fmt.mantissa_bits, fmt.signed, fmt.has_inf) == (
            k,
            p - 1,
            signed,
            extended,
        )


@pytest.mark.parametrize(
    "p3109, name",
    [("p3109_k8p4sf", "float8_e4m3fnuz"), ("p3109_k8p3sf", "float8_e5m2fnuz")],
)
def test_signed_finite_binary8_have_the_codes_of_the_fnuz_formats(p3109, name):
    fmt, fnuz = get_format(p3109), get_format(name)
    assert fmt is not fnuz and fmt.name == p3109 and fmt.specials == "signed_finite"
    assert p3109_name(fnuz) is None and p3109 not in fp8kit.formats.aliases_of(fnuz)
    codes = np.arange(256, dtype=np.uint8)
    assert same(fp8kit.decode(codes, fmt), fp8kit.decode(codes, fnuz)).all()
    assert (fmt.nan_code, fmt.max_code, fmt.has_inf) == (fnuz.nan_code, fnuz.max_code, False)
    # same ml_dtypes dtype; the dtype still names the fnuz format
    assert fmt.dtype == fnuz.dtype and get_format(fnuz.dtype) is fnuz
    x = np.array([np.inf, -np.inf, 1e30, -np.nan, -0.0, 1.0])
    a = fp8kit.astype(x, fmt)
    assert a.dtype == fnuz.dtype and same(fp8kit.decode(a, fmt), fp8kit.decode(a)).all()
    assert fp8kit.decode(a).tolist()[:3] == [fmt.max, -fmt.max, fmt.max]
    # the sweeps' values go the same way but +-Inf with saturate=True
    s = sweep(fmt)
    for sat in (True, False):
        ok = fp8kit.encode(s, fmt, saturate=sat) == fp8kit.encode(s, fnuz, saturate=sat)
        assert (ok | (np.isinf(s) & sat)).all() and ok[~np.isinf(s)].all()


def test_unknown_name_lists_p3109_pattern_not_all_names():
    with pytest.raises(ValueError, match=r"valid: float8_e4m3fn, .* or a P3109 name") as e:
        get_format("p3109_k9p4se")
    assert "p3109_k8p5se" not in str(e.value)


@pytest.mark.parametrize("fmt", [pytest.param(f, id=p3109_name(f)) for f in P3109_FORMATS])
def test_limits_and_special_codes_match_gfloat(fmt):
    fi = gfloat_format(fmt)
    assert (fmt.max, fmt.smallest_subnormal, fmt.bias) == (fi.max, fi.smallest_subnormal, fi.bias)
    assert fmt.smallest_normal == fi.smallest_normal
    assert fmt.nan_code == fi.code_of_nan
    assert fmt.has_negative_zero is False and fmt.has_zero
    if fmt.has_inf:
        assert fmt.inf_code == fi.code_of_posinf
    assert fmt.min == (-fi.max if fmt.signed else 0.0)


@pytest.mark.parametrize("k", range(3, 9))
def test_every_code_decodes_as_gfloat(k):
    for fmt in P3109_FORMATS:
        if fmt.bits != k:
            continue
        codes = np.arange(1 << k, dtype=np.uint8)
        want = gfloat.decode_ndarray(gfloat_format(fmt), codes.astype(np.int64))
        for dtype in (np.float64, np.float32):
            got = fp8kit.decode(codes, fmt, dtype=dtype)
            assert same(got, want.astype(dtype)).all(), p3109_name(fmt)
        exact = [fmt.code_value(c) for c in range(1 << k)]
        assert same(np.array([float(v) for v in exact]), want).all()


# ---------------------------------------------------------------------------- vs gfloat
def check_gfloat(fmt, dtype=np.float64):
    fi = gfloat_format(fmt)
    x = sweep(fmt, negatives=False).astype(dtype)
    for mode, rnd in GFLOAT_MODES.items():
        for sat in (True, False):
            got = fp8kit.round_to(x, fmt, saturate=sat, rounding=mode)
            want = gfloat.round_ndarray(fi, x.astype(np.float64), rnd, sat)
            # (round_to's values are in the data's dtype: float16 holds every value of the
            # 8-bit formats' precision, not all of their range)
            with np.errstate(over="ignore"):
                in_dtype = want.astype(dtype).astype(np.float64)
            ok = same(got.astype(np.float64), in_dtype)
            assert ok.all(), (p3109_name(fmt), mode, sat, x[~ok][:4], got[~ok][:4], want[~ok][:4])
            codes = fp8kit.encode(x, fmt, saturate=sat, rounding=mode)
            assert (codes == gfloat.encode_ndarray(fi, want)).all()


@pytest.mark.parametrize("fmt", K8)
def test_binary8_round_and_encode_match_gfloat(fmt):
    check_gfloat(fmt)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16], ids=str)
@pytest.mark.parametrize(
    "name",
    # (precision 1: ties to the even code from float32 bits, 2**-127 below float32's
    # normals; unsigned; normals below float16's: each on its own kernel path)
    ["p3109_k8p4se", "p3109_k8p3ue", "p3109_k8p1se", "p3109_k8p1ue", "p3109_k8p3uf",
     "p3109_k7p2se"],
)  # fmt: skip
def test_float32_and_16_bit_input_matches_gfloat(name, dtype):
    check_gfloat(get_format(name), dtype)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", SMALL)
def test_small_formats_match_gfloat(fmt):
    check_gfloat(fmt)
    check_gfloat(fmt, np.float32)


@pytest.mark.parametrize("name", ["p3109_k8p4sf", "p3109_k8p3sf", "p3109_k6p3sf"])
def test_inf_with_saturate_into_signed_finite_is_max_as_gfloat(name):
    fmt = get_format(name)
    x = np.array([np.inf, -np.inf])
    for dtype in (np.float64, np.float32):
        got = fp8kit.round_to(x.astype(dtype), fmt, saturate=True)
        assert got.tolist() == [fmt.max, -fmt.max]
        assert np.isnan(fp8kit.round_to(x.astype(dtype), fmt, saturate=False)).all()
    assert gfloat.round_ndarray(gfloat_format(fmt), x, sat=True).tolist() == [fmt.max, -fmt.max]
    # beyond max (finite) saturates as in gfloat
    assert fp8kit.round_to(np.array([1e30, -1e30]), fmt).tolist() == [fmt.max, -fmt.max]


def test_inf_with_saturate_into_fnuz_is_still_nan():
    # ONNX Cast-21's table for its FNUZ types: +-Inf -> NaN when saturating (the codec;
    # fp8kit.cast's conformance rules give +-max, see test_cast21_tables)
    x = np.array([np.inf, -np.inf, 1e30], np.float32)
    for name in ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"):
        got = fp8kit.round_to(x, name, saturate=True)
        assert np.isnan(got[:2]).all() and got[2] == get_format(name).max
        assert fp8kit.encode(x[:2], name).tolist() == [0x80, 0x80]
        assert np.isnan(fp8kit.round_to(x, name, saturate="propagate")[:2]).all()


@pytest.mark.parametrize("name", ["p3109_k8p4se", "p3109_k8p3ue", "p3109_k8p4uf"])
def test_inf_input(name):
    fmt = get_format(name)
    x = np.array([np.inf])
    assert fp8kit.round_to(x, fmt, saturate=True).tolist() == [fmt.max]
    want = math.inf if fmt.has_inf else math.nan
    assert same(fp8kit.round_to(x, fmt, saturate=False), np.array([want])).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_precision_one_ties_go_to_the_even_code(dtype):
    # p = 1: the values are powers of two and the code is the biased exponent; a tie (1.5 *
    # 2**e) goes to the neighbour with the even code (gfloat, the draft), which is the
    # lower one when e + bias is even
    fmt = get_format("p3109_k8p1se")  # bias 64: code(1.0) = 64
    x = np.array([1.5, 3.0, 6.0, 12.0, 1.5 * 2.0**-63, 2.0**-64], dtype)
    assert fp8kit.round_to(x, fmt).tolist() == [1.0, 4.0, 4.0, 16.0, 2.0**-62, 0.0]
    assert fp8kit.encode(x, fmt).tolist() == [64, 66, 66, 68, 2, 0]


# ---------------------------------------------------------------------------- negatives
@pytest.mark.parametrize("name", ["p3109_k8p3ue", "p3109_k8p4uf", "p3109_k5p5uf"])
def test_negative_input_to_unsigned(name):
    # pychop's rule (gfloat leaves it undefined): NaN, or 0 when saturating, when rounding
    # toward zero or +Inf (the nearest value in that direction), or when |x| rounds to 0;
    # -Inf follows nearest-even's rule in every mode (NaN unless saturating)
    fmt = get_format(name)
    nan = fmt.nan_code
    x = np.array([-1.0, -fmt.max * 4, -np.inf, -0.0, -fmt.smallest_subnormal / 4, -np.nan])
    assert fp8kit.encode(x, fmt, saturate=False).tolist() == [nan, nan, nan, 0, 0, nan]
    assert fp8kit.encode(x, fmt, saturate=True).tolist() == [0, 0, 0, 0, 0, nan]
    for mode in ("toward_zero", "toward_positive"):
        for dtype in (np.float64, np.float32):
            got = fp8kit.encode(x.astype(dtype), fmt, saturate=False, rounding=mode)
            assert got.tolist() == [0, 0, nan, 0, 0, nan]
            assert fp8kit.encode(x.astype(dtype), fmt, saturate=True, rounding=mode)[2] == 0
    got = fp8kit.encode(x, fmt, saturate=False, rounding="toward_negative").tolist()
    assert got == [nan, nan, nan, 0, nan, nan]


# ---------------------------------------------------------------------------- vs oracle
def check_reference(fmt, x):
    for mode in GFLOAT_MODES:
        for sat in (True, False):
            got = fp8kit.encode(x, fmt, saturate=sat, rounding=mode)
            want = [encode_value(float(v), fmt, saturate=sat, rounding=mode) for v in x]
            bad = np.flatnonzero(got != np.array(want))
            assert bad.size == 0, (p3109_name(fmt), mode, sat, x[bad][:4], got[bad][:4])


REFERENCE = ["p3109_k8p1se", "p3109_k8p4se", "p3109_k8p3uf", "p3109_k8p8ue", "p3109_k4p1ue"]


@pytest.mark.parametrize("name", REFERENCE)
def test_kernels_match_exact_reference(name):
    fmt = get_format(name)
    x = sweep(fmt)
    if fmt.bits == 8:  # every third point keeps the default run short
        x = x[::3]
    check_reference(fmt, x)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [*SMALL, *K8])
def test_kernels_match_exact_reference_everywhere(fmt):
    check_reference(fmt, sweep(fmt))


# ---------------------------------------------------------------------------- vs pychop
def check_pychop(fmt):
    pychop = pytest.importorskip("pychop")
    k, p, signed, extended = parts(fmt)
    pf = pychop.P3109Format(k, p, signed, "extended" if extended else "finite")
    x = sweep(fmt)
    for mode in GFLOAT_MODES:
        for sat in (True, False):
            got = fp8kit.round_to(x, fmt, saturate=sat, rounding=mode)
            want = pychop.p3109_quantize(x, pf, rounding=mode, saturate=sat)
            ok = same(got, want)
            assert ok.all(), (p3109_name(fmt), mode, sat, x[~ok][:4])


@pytest.mark.parametrize("name", ["p3109_k8p1se", "p3109_k8p4sf", "p3109_k8p5ue", "p3109_k6p3uf"])
def test_matches_pychop(name):
    check_pychop(get_format(name))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [*SMALL, *K8])
def test_matches_pychop_everywhere(fmt):
    check_pychop(fmt)


# ---------------------------------------------------------------------------- speed, kernels
def test_new_formats_compile_no_new_kernels():
    """A further format compiles nothing once its code path has run: the byte lanes
    (k8p4se) and, for formats off them, encode_lean's kernel (k8p5se); round_to rounds in
    place for both (run alone, the test must not lean on kernels other tests built)."""
    x = np.linspace(-300, 300, 1001, dtype=np.float32)
    for name in ("p3109_k8p4se", "p3109_k8p5se"):
        fp8kit.encode(x, name)
        fp8kit.round_to(x, name)
    before = compiled_count()
    for name in ("p3109_k8p6se", "p3109_k8p3sf", "p3109_k7p3se", "p3109_k6p2se"):
        fp8kit.encode(x, name)
        fp8kit.round_to(x, name)
    assert compiled_count() == before


# ---------------------------------------------------------------------------- packing
@pytest.mark.parametrize("k", range(3, 8))
def test_pack_round_trip_and_little_endian_bit_order(k):
    fmt = get_format(f"p3109_k{k}p2se")
    rng = np.random.default_rng(k)
    for n in (0, 1, 7, 8, 9, 61):
        codes = rng.integers(0, 1 << k, n).astype(np.uint8)
        packed = fp8kit.pack(codes, fmt)
        assert packed.dtype == np.uint8 and packed.size == -(-n * k // 8)
        stream = sum(int(c) << (i * k) for i, c in enumerate(codes))  # code 0 lowest
        assert packed.tolist() == list(stream.to_bytes(packed.size, "little"))
        assert fp8kit.unpack(packed, fmt, n).tolist() == codes.tolist()
    x = np.array([[0.5, -1.0], [np.nan, 2.0]])
    packed = fp8kit.pack(fp8kit.encode(x, fmt), fmt)
    back = fp8kit.decode(fp8kit.unpack(packed, fmt, (2, 2)), fmt)
    assert same(back, fp8kit.round_to(x, fmt)).all()


def test_pack_rejects_codes_too_wide_for_the_format():
    with pytest.raises(ValueError, match="does not fit in 5 bits"):
        fp8kit.pack(np.array([32], np.uint8), "p3109_k5p3se")
    with pytest.raises(ValueError, match="packing is for 3- to 7-bit codes"):
        fp8kit.pack(np.array([1], np.uint8), "p3109_k8p3se")


# ---------------------------------------------------------------------------- elsewhere
@pytest.mark.parametrize("name", ["p3109_k8p4se", "binary8p5sf", "p3109_k8p2se"])
def test_fake_convert_to_signed_binary8(name):
    fmt = get_format(name)
    x = np.concatenate([sweep(fmt)[::5], [np.inf, -np.inf]]).astype(np.float32)
    got = fp8kit.fake_convert(x, np.float32(1.0), destination_type=name)
    # FakeConvert saturates: Inf and overflow -> +-max, as round_to with saturate (but for
    # Inf into a finite format, where FakeConvert gives +-max too)
    want = fp8kit.round_to(np.clip(x, -fmt.max, fmt.max), fmt, saturate=True)
    assert same(got, want).all()


@pytest.mark.parametrize("name", ["p3109_k8p1se", "p3109_k8p4ue"])
def test_fake_convert_and_study_take_unsigned_and_precision_one(name):
    x = np.array([-3.0, -0.1, 0.3, 3.0, 1e30, np.nan], np.float32)
    fmt = get_format(name)
    with np.errstate(invalid="ignore"):
        want = fp8kit.round_to(np.clip(x * 2, -fmt.max, fmt.max), fmt) / 2
    got = fp8kit.fake_convert(x, np.float32(2.0), destination_type=name)
    np.testing.assert_array_equal(got, want)
    # the study rounds them with round_to's kernels: quantize equals the steps by hand, and
    # sweep's rows equal quantize then error_metrics
    fmt = get_format(name)
    x = np.random.default_rng(5).standard_normal((16, 64)).astype(np.float32) * 3
    for scaling in ("tensor", "channel", "block"):
        sc = fp8kit.study.scale_for(x, fmt, scaling)
        sc = np.repeat(sc, 32, axis=-1) if scaling == "block" else sc  # (one per MX block)
        with np.errstate(over="ignore", invalid="ignore"):
            by_hand = fp8kit.round_to(np.clip(x * sc, -fmt.max, fmt.max), fmt) / sc
        q = fp8kit.study.quantize(x, fmt, scaling)
        np.testing.assert_array_equal(q, by_hand)
    rows = fp8kit.study.sweep({"x": x}, [name], ["tensor", "block"])
    for row, scaling in zip(rows, ["tensor", "block"], strict=True):
        sc = fp8kit.study.scale_for(x, fmt, scaling)
        sc = np.repeat(sc, 32, axis=-1) if scaling == "block" else sc
        m = fp8kit.study.error_metrics(x, fp8kit.study.quantize(x, fmt, scaling), fmt=fmt,
                                       scale=sc)  # fmt: skip
        assert (row.metrics.count, row.metrics.n_saturated, row.metrics.n_flushed) == (
            m.count, m.n_saturated, m.n_flushed)  # fmt: skip
        assert row.metrics.sqnr_db == pytest.approx(m.sqnr_db, rel=1e-12)


def test_study_sweep_and_quantize_with_p3109_formats():
    x = np.random.default_rng(3).standard_normal((32, 64)).astype(np.float32)
    names = ["p3109_k8p4se", "p3109_k6p3sf"]
    rows = fp8kit.study.sweep({"x": x}, names, ["tensor", "block:32"])
    assert sorted((r.format, r.scaling) for r in rows) == sorted(
        (n, s) for n in names for s in ("tensor", "block:32")
    )
    for name in names:
        fmt = get_format(name)
        scale = np.float32(fmt.max / np.abs(x).max())
        q = fp8kit.study.quantize(x, name, scale=scale)
        want = fp8kit.round_to(x * scale, fmt) / scale
        assert np.array_equal(q, want)
        row = next(r for r in rows if r.format == name and r.scaling == "tensor")
        err = (q.astype(np.float64) - x) ** 2
        assert row.metrics.sqnr_db == pytest.approx(
            10 * np.log10((x.astype(float) ** 2).sum() / err.sum()), rel=1e-6
        )


def test_cli_study_formats(capsys):
    from fp8kit.cli import main

    code = main(["study", "--formats", "p3109_k8p4se", "binary8p3se", "--scaling", "tensor"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "p3109_k8p4se" in out and "p3109_k8p3se" in out


def test_cast_to_p3109_gives_the_codes_of_encode():
    x = np.array([1.0, 300.0, np.inf, np.nan, -2.0, 11.5], np.float32)
    for name in ("p3109_k8p4se", "binary8p3ue", "p3109_k5p2sf"):
        for sat in (True, False):
            got = fp8kit.cast(x, name, saturate=sat)
            assert got.dtype == np.uint8
            assert got.tolist() == fp8kit.encode(x, name, saturate=sat).tolist()
    assert fp8kit.cast(np.array([3, -1], np.int64), "p3109_k8p3ue").tolist() == [134, 0]
    assert fp8kit.cast(np.array([True, False]), "p3109_k8p4se").tolist() == [64, 0]
    assert fp8kit.cast(np.float64([1.4]), "p3109_k8p4se", rounding="toward_zero").tolist() == [67]
    # the signed finite binary8 formats have the fnuz types' dtypes, and P3109's SatFinite
    got = fp8kit.cast(np.float32([1.0, np.inf, -np.inf]), "p3109_k8p4sf")
    assert got.dtype == np.dtype("float8_e4m3fnuz") and got.view(np.uint8).tolist() == [
        64,
        127,
        255,
    ]
    for rules in ("conformance", "fnuz-inf-nan"):
        got = fp8kit.cast(np.float32([np.inf]), "binary8p3sf", rules=rules)
        assert got.view(np.uint8).tolist() == [127]
    with pytest.raises(ValueError, match="takes numbers; got string"):
        fp8kit.cast(np.array(["1.0"]), "p3109_k8p4se")
    with pytest.raises(ValueError, match="2\\*\\*53 or more"):
        fp8kit.cast(np.array([2**60 + 1], np.int64), "p3109_k8p1ue")


@pytest.mark.parametrize("fmt", K8)
def test_saturate_propagate_matches_pychop(fmt):
    # P3109's SatPropagate: finite overflow -> +-max, +-Inf kept where the format has Inf
    pychop = pytest.importorskip("pychop")
    k, p, signed, extended = parts(fmt)
    pf = pychop.P3109Format(k, p, signed, "extended" if extended else "finite")
    x = sweep(fmt)
    for mode in ("nearest_even", "toward_zero", "toward_negative"):
        got = fp8kit.round_to(x, fmt, saturate="propagate", rounding=mode)
        want = pychop.p3109_quantize(x, pf, rounding=mode, saturate="propagate")
        assert same(got, want).all(), (p3109_name(fmt), mode)
        codes = fp8kit.encode(x, fmt, saturate="propagate", rounding=mode)
        ref = [encode_value(float(v), fmt, saturate="propagate", rounding=mode) for v in x[::7]]
        assert codes[::7].tolist() == ref
    assert fp8kit.round_to(np.float32([np.inf]), "float8_e5m2", saturate="propagate") == np.inf
    with pytest.raises(TypeError, match="saturate must be True or False"):
        fp8kit.cast(np.float32([1.0]), "float8_e5m2", saturate="propagate")


def test_astype_needs_an_ml_dtypes_type():
    with pytest.raises(TypeError, match="has no numpy/ml_dtypes dtype; use encode"):
        fp8kit.astype(np.float32([1.0]), "p3109_k8p4se")
    assert fp8kit.astype(np.float32([1.0]), "binary8p4sf").dtype == np.dtype("float8_e4m3fnuz")


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16], ids=str)
@pytest.mark.parametrize(
    "name", ["p3109_k8p1se", "p3109_k8p1sf", "p3109_k8p1ue", "p3109_k8p1uf", "float8_e8m0fnu"]
)
def test_stochastic_precision_1_and_e8m0_match_gfloat(name, dtype):
    """Stochastic rounding to P3109's precision-1 formats (from float32 bits: no ties, so
    none of nearest-even's widening; the unsigned 8-bit ones, smallest normal 2**-127,
    by integer steps below float32's smallest normal) and to float8_e8m0fnu (its powers of
    two) in the vector kernel: gfloat's StochasticFastest with the same random bits, every
    value, midpoint and a point between, both saturations, up to 23 random bits."""
    from gfloat.formats import format_info_ocp_e8m0

    from fp8kit._kernels.rounding import random_words

    fmt = get_format(name)
    fi = format_info_ocp_e8m0 if name == "float8_e8m0fnu" else gfloat_format(fmt)
    v = code_values(fmt)
    v = np.unique(v[np.isfinite(v)])
    x = np.concatenate([v, (v[1:] + v[:-1]) / 2, v[1:] * 0.3 + v[:-1] * 0.7])
    if fmt.signed:  # (gfloat leaves negative input to unsigned formats undefined)
        x = np.concatenate([x, -x])
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    x = x[np.isfinite(x.astype(np.float64))]
    if name == "float8_e8m0fnu":  # (no zero: 0 gives NaN as in ml_dtypes, gfloat 0; the
        x = x[x.astype(np.float64) != 0]  # powers below float16's underflow to it)
    for bits in (4, 9, 16, 23):
        srbits = (random_words(x.size, 3, bits) >> np.uint32(32 - bits)).astype(np.int64)
        for sat in (True, False):
            got = fp8kit.round_to(x, fmt, rounding="stochastic", seed=3, random_bits=bits,
                                  saturate=sat)  # fmt: skip
            want = gfloat.round_ndarray(
                fi, x.astype(np.float64), RoundMode.StochasticFastest, sat, srbits, bits
            )
            with np.errstate(over="ignore"):
                in_dtype = want.astype(dtype).astype(np.float64)
            ok = same(got.astype(np.float64), in_dtype)
            assert ok.all(), (name, bits, sat, x[~ok][:4], got[~ok][:4], want[~ok][:4])


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e8m0fnu", "p3109_k8p1ue"])
def test_stochastic_rounding_of_float64_data_matches_gfloat(name):
    """float64 data, stochastically (the vector kernel: truncated on float32 with the 32
    bits below staged beside where float16 reads 16 random bits and float8_e8m0fnu 23, a
    marker from 2**128 on, rounded to odd for float8_e8m0fnu up to 21 bits; p3109_k8p1ue
    by integer steps of 2**-127 below float32's smallest normal): gfloat's
    StochasticFastest on the float64 values with the same random bits, values with bits
    far below float32's precision, around the formats' subnormals, their largest and
    float32's range, both saturations; bfloat16 in the variants too (8 random bits:
    rounded to odd on float32, the marker)."""
    from gfloat.formats import format_info_bfloat16, format_info_binary16, format_info_ocp_e8m0

    from fp8kit._kernels.codec import encode_mode_kernel
    from fp8kit._kernels.rounding import MODES, random_words

    fmt = get_format(name)
    fi = {"float16": format_info_binary16, "bfloat16": format_info_bfloat16,
          "float8_e8m0fnu": format_info_ocp_e8m0}.get(name) or gfloat_format(fmt)  # fmt: skip
    rng = np.random.default_rng(21)
    v = code_values(fmt)
    v = np.unique(v[np.isfinite(v) & (v > 0)])
    frac = rng.uniform(0, 1, v.size - 1)
    low = rng.uniform(0, 2.0**-30, v.size - 1)  # (bits below float32's)
    x = np.concatenate([v, v[:-1] + (v[1:] - v[:-1]) * (frac + low), v * (1 + 2.0**-40),
                        [2.0**128, 1e39, 1e300, 3.4028235677973366e38, 1e-46, 1e-300]])  # fmt: skip
    if fmt.signed:
        x = np.concatenate([x, -x])
    if name == "float8_e8m0fnu":  # (gfloat returns values below 2**-127 unrounded; the
        x = x[x >= 2.0**-127]  # exact oracle's tests: 2**-127)
    most = {"float8_e8m0fnu": 23, "p3109_k8p1ue": 22}.get(name, 16)
    modes = [("stochastic", bits) for bits in sorted({4, 16, most})]
    if name == "bfloat16":
        modes += [("stochastic_c", 8), ("stochastic_b", 8), ("stochastic_odd", 8)]
    gmodes = {"stochastic": "StochasticFastest", "stochastic_c": "Stochastic",
              "stochastic_b": "StochasticFast", "stochastic_odd": "StochasticOdd"}  # fmt: skip
    for mode, bits in modes:
        kernel = encode_mode_kernel(fmt, np.dtype(np.float64), True, MODES[mode], bits)[0]
        assert kernel._key[0] == "sr", (mode, bits)
        srbits = (random_words(x.size, 5, bits) >> np.uint32(32 - bits)).astype(np.int64)
        for sat in (True, False):
            got = fp8kit.round_to(x, fmt, rounding=mode, seed=5, random_bits=bits,
                                  saturate=sat)  # fmt: skip
            want = gfloat.round_ndarray(fi, x, getattr(RoundMode, gmodes[mode]), sat, srbits,
                                        bits)  # fmt: skip
            ok = same(got, want)
            assert ok.all(), (name, mode, bits, sat, x[~ok][:4], got[~ok][:4], want[~ok][:4])
