"""Issue 20, rounding side: to_odd, nearest_zero, the stochastic variants (stochastic_c,
stochastic_b, stochastic_odd, stochastic_half) and the flush options (flush_subnormals,
flush_subnormal_inputs), against the exact rational oracle, gfloat 0.5.2 and pychop 0.6.2;
their random streams (reproducible, independent of chunking and Dask blocks) and their means;
one compiled kernel per kind of mode."""

import zlib

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import _args, get_format
from fp8kit._kernels import codec as kcodec
from fp8kit._kernels.rounding import MODES, is_stochastic, random_words
from fp8kit._reference import encode_value
from fp8kit.formats import BUILTIN_FORMATS, MORE_FORMATS

pytestmark = pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered")

NEW_DET = ["to_odd", "nearest_zero"]
NEW_STOCH = ["stochastic_c", "stochastic_b", "stochastic_odd", "stochastic_half"]
NEW = NEW_DET + NEW_STOCH
SIGNED = [f.name for f in (*BUILTIN_FORMATS, *MORE_FORMATS) if f.specials != "unsigned"]
RB = 7  # random bits of the default tests (one compiled kernel per value)


def boundary_points(fmt, rng=None, per_kind=None):
    """Every finite value of the format (or a sample of ``per_kind`` of each kind for 16-bit
    formats), every midpoint and quarter point, their float64 and float32 neighbours, both
    signs, far-out magnitudes and the specials (float64)."""
    codes = np.arange(1 << fmt.bits, dtype=fmt.code_dtype)
    vals = np.abs(fp8kit.decode(codes, fmt, dtype=np.float64))
    vals = np.unique(vals[np.isfinite(vals)])
    mids = (vals[:-1] + vals[1:]) / 2
    quarter = vals[:-1] + (vals[1:] - vals[:-1]) / 4
    kinds = [vals, mids, quarter]
    if per_kind is not None:
        kinds = [a if a.size <= per_kind else rng.choice(a, per_kind, replace=False) for a in kinds]
    pts = np.concatenate([*kinds, vals[-2:], mids[-2:], vals[:3], mids[:3], [1e-300, 1e30]])
    f32 = pts.astype(np.float32)
    pts = np.concatenate(
        [
            pts, np.nextafter(pts, np.inf), np.nextafter(pts, 0),
            np.nextafter(f32, np.float32(np.inf)).astype(np.float64),
            np.nextafter(f32, np.float32(0)).astype(np.float64),
        ]
    )  # fmt: skip
    return np.concatenate([pts, -pts, [np.inf, -np.inf, np.nan, 0.0, -0.0]])


def check_oracle(x, fmt, mode, saturate, random_bits=RB, seed=2024, flush=False):
    kw = {"seed": seed} if is_stochastic(MODES[mode]) else {}
    got = fp8kit.encode(
        x, fmt, saturate=saturate, rounding=mode, random_bits=random_bits,
        flush_subnormals=flush, **kw,
    )  # fmt: skip
    rnd = random_words(x.size, seed, random_bits)
    xs = np.asarray(x).astype(np.float64).ravel()
    want = np.array(
        [
            encode_value(
                float(v),
                fmt,
                saturate=saturate,
                rounding=mode,
                rnd=int(r),
                random_bits=random_bits,
                flush_subnormals=flush,
            )  # fmt: skip
            for v, r in zip(xs, rnd, strict=True)
        ]
    )
    bad = np.flatnonzero(got.ravel() != want)
    assert bad.size == 0, [(xs[i], int(got.ravel()[i]), int(want[i])) for i in bad[:5]]


def _case(name, mode, saturate, flush=False, per_kind=None):
    fmt = get_format(name)
    rng = np.random.default_rng(zlib.crc32(f"{name}{mode}".encode()))
    x = boundary_points(fmt, rng, per_kind if fmt.bits > 8 else None)
    check_oracle(x, fmt, mode, saturate, flush=flush)
    check_oracle(x.astype(np.float32), fmt, mode, saturate, flush=flush)


def _default_cases():
    # every new mode on e4m3fn and e2m1fn; every signed format in one new mode (rotating)
    cases = {(n, m, s) for m in NEW for n, s in [("float8_e4m3fn", False), ("float4_e2m1fn", True)]}
    for i, name in enumerate(SIGNED):
        cases.add((name, NEW[i % len(NEW)], bool(i % 2)))
    return sorted(cases)


@pytest.mark.parametrize("name, mode, saturate", _default_cases())
def test_new_modes_agree_with_the_exact_oracle(name, mode, saturate):
    _case(name, mode, saturate, per_kind=40)


@pytest.mark.slow
@pytest.mark.parametrize("name", SIGNED)
@pytest.mark.parametrize("mode", NEW + ["nearest_even", "toward_zero", "stochastic"])
@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("flush", [False, True])
def test_every_format_new_mode_and_flush_agree_with_the_exact_oracle(name, mode, saturate, flush):
    _case(name, mode, saturate, flush=flush, per_kind=400)


@pytest.mark.parametrize(
    "name, mode",
    [("float8_e4m3fn", "nearest_even"), ("float8_e5m2fnuz", "to_odd"),
     ("float6_e3m2fn", "stochastic_c"), ("float16", "toward_positive"),
     ("bfloat16", "nearest_even")],
)  # fmt: skip
def test_flush_subnormals_agrees_with_the_oracle(name, mode):
    _case(name, mode, False, flush=True, per_kind=60)


@pytest.mark.parametrize(
    "x, mode, want",
    [
        # to_odd: truncate, then an inexact result takes the odd neighbour (e4m3fn: 1.125
        # is 1 + 2**-3, mantissa 001)
        (1.0, "to_odd", 1.0), (1.01, "to_odd", 1.125), (1.125, "to_odd", 1.125),
        (1.13, "to_odd", 1.125), (1.26, "to_odd", 1.375), (-1.01, "to_odd", -1.125),
        (1e-9, "to_odd", 2.0**-9), (460.0, "to_odd", np.nan),  # 480 > max: overflow
        # nearest_zero: ties toward zero, others to nearest
        (1.0625, "nearest_zero", 1.0), (-1.0625, "nearest_zero", -1.0),
        (1.0626, "nearest_zero", 1.125), (2.0**-10, "nearest_zero", 0.0),
    ],
)  # fmt: skip
def test_hand_worked_values(x, mode, want):
    got = fp8kit.round_to(np.array([x]), "float8_e4m3fn", rounding=mode, saturate=False)[0]
    assert got == want or (np.isnan(want) and np.isnan(got))


def test_stochastic_variants_keep_exact_values_and_round_between_neighbours():
    fmt = get_format("float8_e4m3fn")
    vals = fp8kit.decode(np.arange(256, dtype=np.uint8), fmt, dtype=np.float32)
    vals = np.tile(vals[np.isfinite(vals)], 64)
    x = np.nextafter(vals, np.float32(np.inf))
    for mode in NEW_STOCH:
        assert np.array_equal(
            fp8kit.round_to(vals, fmt, rounding=mode, seed=1, random_bits=RB), vals
        )
        got = fp8kit.round_to(x[np.abs(x) < 448], fmt, rounding=mode, seed=1, random_bits=RB)
        lo = fp8kit.round_to(x[np.abs(x) < 448], fmt, rounding="toward_zero")
        hi = fp8kit.round_to(x[np.abs(x) < 448], fmt, rounding="to_odd")  # (next code up)
        assert np.all((got == lo) | (np.abs(got) >= np.abs(hi)))


# ------------------------------------------------------------------------ against gfloat
_GFLOAT = {
    "float8_e4m3fn": "format_info_ocp_e4m3",
    "float8_e5m2": "format_info_ocp_e5m2",
    "float6_e2m3fn": "format_info_ocp_e2m3",
    "float4_e2m1fn": "format_info_ocp_e2m1",
    "bfloat16": "format_info_bfloat16",
}
_GMODES = {
    "stochastic": "StochasticFastest",
    "stochastic_c": "Stochastic",
    "stochastic_b": "StochasticFast",
    "stochastic_odd": "StochasticOdd",
}


@pytest.mark.parametrize("name", list(_GFLOAT))
@pytest.mark.parametrize("mode", list(_GMODES))
def test_stochastic_modes_equal_gfloat_with_the_same_random_bits(name, mode):
    gfloat = pytest.importorskip("gfloat")
    import gfloat.formats as gf

    fmt = get_format(name)
    fi = getattr(gf, _GFLOAT[name])
    rng = np.random.default_rng(zlib.crc32(f"g{name}{mode}".encode()))
    x = boundary_points(fmt, rng, per_kind=200 if fmt.bits > 8 else None)
    x = x[np.isfinite(x)]
    sat = not fmt.has_nan  # gfloat raises on overflow where there is no NaN or Inf
    seed, rb = 99, RB
    srbits = (random_words(x.size, seed, rb) >> np.uint32(32 - rb)).astype(np.int64)
    got = fp8kit.round_to(x, fmt, rounding=mode, seed=seed, random_bits=rb, saturate=sat)
    want = gfloat.round_ndarray(fi, x, getattr(gfloat.RoundMode, _GMODES[mode]), sat, srbits, rb)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


# ------------------------------------------------------------------------ against pychop
# P3109 binary8p4 and binary8p3 with the finite domain (no Inf; NaN at 0x80; bias 8 and 16)
# have the values of float8_e4m3fnuz and float8_e5m2fnuz.
_PYCHOP = {"float8_e4m3fnuz": (8, 4), "float8_e5m2fnuz": (8, 3)}
_PMODES = {
    "to_odd": "to_odd",
    "stochastic": "stochastic_a",
    "stochastic_b": "stochastic_b",
    "stochastic_c": "stochastic_c",
    "toward_zero": "toward_zero",
}


@pytest.mark.parametrize("name", list(_PYCHOP))
@pytest.mark.parametrize("mode", list(_PMODES))
@pytest.mark.parametrize("saturate", [False, True])
def test_modes_equal_pychop_p3109(name, mode, saturate):
    pychop = pytest.importorskip("pychop")
    fmt = get_format(name)
    x = boundary_points(fmt)
    x = x[np.isfinite(x)]
    seed, rb = 7, RB
    kw, pkw = {}, {}
    if is_stochastic(MODES[mode]):
        srbits = (random_words(x.size, seed, rb) >> np.uint32(32 - rb)).astype(np.uint32)
        kw, pkw = {"seed": seed, "random_bits": rb}, {"srbits": srbits, "srnumbits": rb}
    got = fp8kit.round_to(x, fmt, rounding=mode, saturate=saturate, **kw)
    k, p = _PYCHOP[name]
    want = pychop.p3109_quantize(
        x.copy(), pychop.P3109Format(k, p, True, "finite"), rounding=_PMODES[mode],
        saturate=saturate, **pkw,
    )  # fmt: skip
    # fnuz formats have no -0: pychop keeps the input's sign on zero
    want = np.where(want == 0, 0.0, want)
    assert np.array_equal(got, want, equal_nan=True)


def test_pychop_lightchop_facts():
    # pinned: where pychop 0.6.2's LightChop (numpy back end; IEEE-style E4M3, exp_bits=4,
    # sig_bits=3) disagrees with the definitions of its rounding modes; fp8kit gives the
    # definitions (float8_e4m3 has the same values)
    pytest.importorskip("pychop")
    from pychop.np.lightchop import LightChop_

    x = np.array([2.0, 1.0, 1.0625 + 1e-7, 1.0625 - 1e-7, -1.0625, 1.0625])

    def lc(rmode):
        return np.asarray(LightChop_(exp_bits=4, sig_bits=3, rmode=rmode)(x.copy()))

    def ours(mode):
        return fp8kit.round_to(x, "float8_e4m3", rounding=mode)

    # rmode 9 "round-to-odd" moves exact values whose last bit is even: 2 -> 2.25, 1 -> 1.125
    assert lc(9)[:2].tolist() == [2.25, 1.125]
    assert ours("to_odd")[:2].tolist() == [2.0, 1.0]
    # rmode 7 "nearest, ties to zero" takes values within 1e-6 of a tie for ties (1.0625 +
    # 1e-7 -> 1.0) and rounds negative ties away from zero (-1.0625 -> -1.125)
    assert lc(7)[[2, 4, 5]].tolist() == [1.0, -1.125, 1.0]
    assert ours("nearest_zero")[[2, 4, 5]].tolist() == [1.125, -1.0, 1.0]
    # rmode 8 "nearest, ties away": 1.0625 - 1e-7 -> 1.125, and -1.0625 -> -1.0
    assert lc(8)[[3, 4, 5]].tolist() == [1.125, -1.0, 1.125]
    assert ours("nearest_away")[[3, 4, 5]].tolist() == [1.0, -1.125, 1.125]


# ------------------------------------------------------------------ streams and statistics
@pytest.mark.parametrize("mode", NEW_STOCH)
def test_variants_are_reproducible_and_independent_of_blocks_and_threads(mode):
    x = np.random.default_rng(3).standard_normal(3 * 8192 * 2 + 77).astype(np.float32) * 30
    kw = {"rounding": mode, "seed": 11, "random_bits": RB}
    whole = fp8kit.encode(x, "float8_e4m3fn", **kw)
    assert np.array_equal(whole, fp8kit.encode(x, "float8_e4m3fn", **kw))
    assert not np.array_equal(
        whole, fp8kit.encode(x, "float8_e4m3fn", **{**kw, "seed": 12})
    )  # fmt: skip
    for lo in (0, 5, 8192, 20000):
        with _args.index_offset(lo):
            part = fp8kit.encode(x[lo:], "float8_e4m3fn", **kw)
        assert np.array_equal(part, whole[lo:]), lo
    with fp8kit.num_threads(1):
        assert np.array_equal(fp8kit.encode(x, "float8_e4m3fn", **kw), whole)


def test_variants_through_dask_equal_numpy():
    da = pytest.importorskip("dask.array")
    x = np.random.default_rng(5).standard_normal((300, 70)).astype(np.float32)
    kw = {"rounding": "stochastic_c", "seed": 4, "random_bits": RB}
    want = fp8kit.round_to(x, "float8_e5m2", **kw)
    got = fp8kit.round_to(da.from_array(x, chunks=(77, 33)), "float8_e5m2", **kw).compute()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("mode", ["stochastic", *NEW_STOCH])
def test_stochastic_modes_are_unbiased_where_defined(mode):
    # f = 5/16 of the way from 1.0 to 1.125: exact in RB = 7 random bits, so every mode but
    # stochastic_half rounds up with probability 5/16; stochastic_half with 1/2
    n = 1 << 16
    x = np.full(n, 1.0 + 5 / 16 * 0.125)
    got = fp8kit.round_to(x, "float8_e4m3fn", rounding=mode, seed=2026, random_bits=RB)
    p = 0.5 if mode == "stochastic_half" else 5 / 16
    up = np.mean(got == 1.125)
    assert set(np.unique(got)) <= {1.0, 1.125}
    assert abs(up - p) < 5 * np.sqrt(p * (1 - p) / n), up


# ------------------------------------------------------------------------ flush options
def test_flush_subnormals_examples():
    x = np.array([2.0**-6, 0.99 * 2**-6, 0.9 * 2**-6, -(2.0**-8), 1e-30, -1e-30])
    got = fp8kit.round_to(x, "float8_e4m3fn", flush_subnormals=True)
    # tininess after rounding: 0.99 * 2**-6 rounds up to the smallest normal and stays
    want = np.array([2.0**-6, 2.0**-6, 0.0, -0.0, 0.0, -0.0])
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))
    got = fp8kit.round_to(x, "float8_e4m3fnuz", flush_subnormals=True)  # no -0
    assert not np.signbit(got).any()
    assert fp8kit.encode(-(2.0**-8), "float8_e4m3fnuz", flush_subnormals=True) == 0
    # directed modes too: toward_positive of a tiny positive value gives +0
    assert fp8kit.round_to(np.array([1e-30]), "float8_e4m3fn", rounding="toward_positive",
                           flush_subnormals=True)[0] == 0  # fmt: skip
    # astype, fake_convert and cast take it
    a = fp8kit.astype(x, "float8_e4m3fn", flush_subnormals=True)
    assert np.array_equal(a.astype(np.float64), want)
    f = fp8kit.fake_convert(x.astype(np.float32), np.float32(1.0), flush_subnormals=True)
    assert np.array_equal(f, want.astype(np.float32))
    c = fp8kit.cast(x, "FLOAT8E4M3FN", flush_subnormals=True)
    assert np.array_equal(c.astype(np.float64), want)


@pytest.mark.parametrize(
    "dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2]
)
def test_flush_subnormal_inputs(dtype):
    fi = ml_dtypes.finfo(dtype)
    tiny, sub = float(fi.smallest_normal), float(fi.smallest_subnormal)
    x = np.array([tiny, sub, -sub, 3 * sub, -tiny, 1.0, 0.0, -0.0, np.inf, np.nan]).astype(dtype)
    mag = np.abs(x.astype(np.float64))
    is_sub = (mag > 0) & (mag < tiny)
    daz = np.where(is_sub, np.copysign(0.0, x.astype(np.float64)), x.astype(np.float64))
    fmt = "bfloat16" if np.dtype(dtype).itemsize > 2 else "float8_e5m2"
    for mode in ("nearest_even", "toward_positive"):
        got = fp8kit.encode(x, fmt, rounding=mode, flush_subnormal_inputs=True)
        want = fp8kit.encode(daz.astype(dtype) if np.dtype(dtype).itemsize > 1 else daz, fmt,
                             rounding=mode)  # fmt: skip
        assert np.array_equal(got, want), mode
    if np.dtype(dtype).itemsize > 1:
        # and it changes something: toward_positive of a positive subnormal is not zero
        assert fp8kit.encode(x, fmt, rounding="toward_positive")[1] != 0
        got = fp8kit.round_to(x, fmt, rounding="toward_positive", flush_subnormal_inputs=True)
        assert got[1] == 0 and np.signbit(got[2])


def test_bad_flush_arguments_name_the_argument():
    x = np.ones(3)
    for func in (fp8kit.encode, fp8kit.round_to, fp8kit.astype):
        with pytest.raises(TypeError, match="flush_subnormals must be True or False"):
            func(x, "float8_e4m3fn", flush_subnormals="yes")
        with pytest.raises(TypeError, match="flush_subnormal_inputs must be True or False"):
            func(x, "float8_e4m3fn", flush_subnormal_inputs=None)
    with pytest.raises(ValueError, match="rounding='to_odd' is not supported for the unsigned"):
        fp8kit.encode(x, "float8_e8m0fnu", rounding="to_odd")
    with pytest.raises(ValueError, match="seed is only used with rounding='stochastic'"):
        fp8kit.encode(x, "float8_e4m3fn", rounding="to_odd", seed=1)


# ------------------------------------------------------------------------ compiled kernels
def test_modes_compile_once_for_every_format():
    """A mode's kernels serve every format (its constants are run-time arguments); the
    Numba kernel (the native kernels' reference and fallback) serves every mode of a kind,
    the mode read at run time."""
    from fp8kit._kernels.codec import encode_mode_kernel

    x = np.linspace(-3, 3, 101, dtype=np.float32)
    det = ("to_odd", "nearest_zero", "nearest_away", "toward_negative")
    variants = ("stochastic_c", "stochastic_b", "stochastic_odd", "stochastic_half")
    for name in ("float6_e3m2fn", "float8_e4m3fn"):
        before = kcodec.compiled_count()
        for mode in det + variants:
            kw = {"seed": 1, "random_bits": RB} if mode in variants else {}
            fp8kit.encode(x, name, rounding=mode, **kw)
    assert kcodec.compiled_count() == before
    fmt = fp8kit.get_format("float8_e4m3fn")
    for modes, bits in ((det, 32), (variants, RB)):
        encode_mode_kernel(fmt, x.dtype, True, MODES[modes[0]], bits, vector=False)[0].build()
        before = kcodec.compiled_count()
        for mode in modes[1:]:
            encode_mode_kernel(fmt, x.dtype, True, MODES[mode], bits, vector=False)[0].build()
        assert kcodec.compiled_count() == before, modes


def test_new_modes_in_fake_convert_cast_and_astype():
    # (fake_convert compiles a kernel per mode: one stochastic variant, which also checks
    # that element i draws word i there)
    x = (np.random.default_rng(8).standard_normal(3000) * 40).astype(np.float32)
    for mode in ("to_odd", "stochastic_c"):
        kw = {"rounding": mode, "random_bits": RB} | ({"seed": 5} if mode != "to_odd" else {})
        want = fp8kit.round_to(x, "float8_e4m3fn", **kw)
        if mode == "stochastic_c":
            assert np.array_equal(fp8kit.fake_convert(x, np.float32(1.0), **kw), want)
        assert np.array_equal(fp8kit.cast(x, "FLOAT8E4M3FN", **kw).astype(np.float32), want)
        assert np.array_equal(fp8kit.astype(x, "float8_e4m3fn", **kw).astype(np.float32), want)
