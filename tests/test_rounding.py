"""Rounding modes (issue 8): directed and nearest-away modes against the exact rational
oracle, stochastic rounding's generator, reproducibility and statistics, and the modes in
round_to, astype, cast and fake_convert; Cast-24/25's e8m0 round_mode against onnx."""

import math
import zlib

import ml_dtypes
import numpy as np
import pytest
from conftest import USER_FORMATS
from numba import njit

import fp8kit
from fp8kit import get_format
from fp8kit._kernels.rounding import STOCHASTIC, encode_mode, parts, philox4x32_10, random_word
from fp8kit._reference import encode_value
from fp8kit.formats import BUILTIN_FORMATS, MORE_FORMATS

pytestmark = pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered")

DETERMINISTIC = ["nearest_away", "toward_zero", "toward_positive", "toward_negative"]
MODES = [*DETERMINISTIC, "stochastic"]
FORMATS = [f.name for f in (*BUILTIN_FORMATS, *MORE_FORMATS)]


@njit
def _words(n, k0, k1, split):
    out = np.empty(n, np.uint32)
    for i in range(n):
        out[i] = random_word(np.uint64(i), k0, k1, split)
    return out


def words(n, seed, random_bits=32):
    return _words(n, np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32), parts(random_bits))


def sweep(fmt, rng, per_kind=60):
    """A sample of the format's values, the midpoints between them, their float64 neighbours,
    random magnitudes far outside the range, both signs and the specials."""
    codes = np.arange(1 << fmt.bits, dtype=fmt.code_dtype)
    vals = np.abs(fp8kit.decode(codes, fmt, dtype=np.float64))
    vals = np.unique(vals[np.isfinite(vals)])
    mids = (vals[:-1] + vals[1:]) / 2
    quarter = vals[:-1] + (vals[1:] - vals[:-1]) / 4

    def pick(a):
        return a if a.size <= per_kind else rng.choice(a, per_kind, replace=False)

    pts = np.concatenate(
        [pick(vals), pick(mids), pick(quarter), vals[-2:], mids[-2:], vals[:2], mids[:2]]
    )
    pts = np.concatenate([pts, 2.0 ** rng.uniform(-160, 140, per_kind)])
    pts = np.concatenate([pts, np.nextafter(pts, np.inf), np.nextafter(pts, 0)])
    return np.concatenate([pts, -pts, [np.inf, -np.inf, np.nan, 0.0, -0.0]])


def check_against_oracle(x, fmt, mode, saturate, random_bits=32, seed=2024):
    got = fp8kit.encode(
        x,
        fmt,
        saturate=saturate,
        rounding=mode,
        seed=seed if mode == "stochastic" else None,
        random_bits=random_bits,
    )
    rnd = words(x.size, seed, random_bits)
    xs = np.asarray(x).astype(np.float64).ravel()
    want = [
        encode_value(
            float(v), fmt, saturate=saturate, rounding=mode, rnd=int(r), random_bits=random_bits
        )  # fmt: skip
        for v, r in zip(xs, rnd, strict=True)
    ]
    bad = np.flatnonzero(got.ravel() != np.array(want))
    assert bad.size == 0, [(xs[i], got.ravel()[i], want[i]) for i in bad[:5]]


# ------------------------------------------------------------------ every mode vs the oracle
# Every (format, mode, saturate) compiles its own kernels, so the default run takes every
# format with two modes (rotating) and every mode with two formats; the full cross product
# is the slow test below.
def _default_cases():
    cases = set()
    for i, name in enumerate(FORMATS):
        for k in range(2):
            cases.add((name, MODES[(2 * i + k) % len(MODES)], bool((i + k) % 2)))
    for mode in MODES:
        cases.update({("float8_e4m3fn", mode, False), ("float8_e8m0fnu", mode, True)})
    return sorted(cases)


def _oracle_case(name, mode, saturate):
    fmt = get_format(name)
    x = sweep(fmt, np.random.default_rng(zlib.crc32(f"{name}{mode}".encode())))
    check_against_oracle(x, fmt, mode, saturate, random_bits=7)
    check_against_oracle(x.astype(np.float32), fmt, mode, saturate, random_bits=7)


@pytest.mark.parametrize("name, mode, saturate", _default_cases())
def test_float64_and_float32_inputs_agree_with_the_exact_oracle(name, mode, saturate):
    _oracle_case(name, mode, saturate)


@pytest.mark.slow
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("saturate", [False, True])
def test_every_format_mode_and_saturate_agree_with_the_exact_oracle(name, mode, saturate):
    _oracle_case(name, mode, saturate)


@pytest.mark.parametrize(
    "name, mode",
    [*(("float8_e4m3fn", m) for m in MODES), ("float4_e2m1fn", "stochastic"),
     ("float8_e8m0fnu", "toward_positive"), ("float8_e5m2fnuz", "toward_negative")],
)  # fmt: skip
@pytest.mark.parametrize("source", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_every_16bit_input_rounds_as_its_float32_value(name, mode, source):
    # float16/bfloat16 load through their own paths; float32 is checked against the oracle
    x = np.arange(1 << 16, dtype=np.uint16).view(source)
    kw = {"rounding": mode, "seed": 5 if mode == "stochastic" else None, "random_bits": 5}
    want = fp8kit.encode(x.astype(np.float32), name, **kw)
    assert np.array_equal(fp8kit.encode(x, name, **kw), want)


@pytest.mark.parametrize(
    "fmt, mode",
    [(f, MODES[i % len(MODES)]) for i, f in enumerate(USER_FORMATS)],
    ids=lambda v: getattr(v, "name", v),
)
def test_user_formats_in_every_mode(fmt, mode):
    x = sweep(fmt, np.random.default_rng(zlib.crc32(fmt.name.encode())), per_kind=40)
    check_against_oracle(x, fmt, mode, saturate=False, random_bits=9)


@pytest.mark.parametrize(
    "mode, want",
    [
        # 1.0625 is the tie between 1.0 and 1.125 in float8_e4m3fn; 500 overflows
        pytest.param("nearest_even", [1.0, -1.0, np.nan, np.nan], id="nearest-even"),
        pytest.param("nearest_away", [1.125, -1.125, np.nan, np.nan], id="nearest-away"),
        pytest.param("toward_zero", [1.0, -1.0, 448.0, -448.0], id="toward-zero"),
        pytest.param("toward_positive", [1.125, -1.0, np.nan, -448.0], id="toward-positive"),
        pytest.param("toward_negative", [1.0, -1.125, 448.0, np.nan], id="toward-negative"),
    ],
)
def test_hand_worked_modes_without_saturation(mode, want):
    x = np.float32([1.0625, -1.0625, 500.0, -500.0])
    got = fp8kit.round_to(x, "float8_e4m3fn", rounding=mode, saturate=False)
    np.testing.assert_array_equal(got, np.float32(want))


def test_directed_modes_reach_the_smallest_subnormal():
    tiny = np.float64([1e-300, -1e-300])
    up = fp8kit.round_to(tiny, "float8_e5m2", rounding="toward_positive")
    down = fp8kit.round_to(tiny, "float8_e5m2", rounding="toward_negative")
    assert up.tolist() == [2.0**-16, -0.0] and down.tolist() == [0.0, -(2.0**-16)]
    assert np.signbit(up[1]) and not np.signbit(down[0])


def test_e8m0_modes():
    x = np.float32([1.5, 3.0, 1.0000001, 2.0**-127 * 1.5, 1.0, 2.0**-140])
    up = fp8kit.round_to(x, "float8_e8m0fnu", rounding="toward_positive")
    down = fp8kit.round_to(x, "float8_e8m0fnu", rounding="toward_zero")
    assert up.tolist() == [2.0, 4.0, 2.0, 2.0**-126, 1.0, 2.0**-127]
    assert down.tolist() == [1.0, 2.0, 1.0, 2.0**-127, 1.0, 2.0**-127]


# ------------------------------------------------------------------ the generator
@pytest.mark.parametrize(
    "counter, key, want",
    [
        # Known-answer vectors of Random123 (kat_vectors, "philox4x32 10")
        pytest.param(
            (0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8), id="zeros"
        ),
        pytest.param(
            (0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
            id="ones",
        ),
        pytest.param(
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1), id="pi",
        ),
    ],
)  # fmt: skip
def test_philox4x32_10_known_answers(counter, key, want):
    run = njit(lambda c, k: philox4x32_10(c[0], c[1], c[2], c[3], k[0], k[1]))
    got = run(np.array(counter, np.uint32), np.array(key, np.uint32))
    assert tuple(int(w) for w in got) == want


# ------------------------------------------------------------------ stochastic rounding
def test_stochastic_depends_only_on_seed_index_and_value(monkeypatch):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((300, 700)) * 10).astype(np.float32)
    ref = fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=7)
    with fp8kit.num_threads(1):
        assert np.array_equal(fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=7), ref)
    for chunks in (3, 17):
        monkeypatch.setattr(fp8kit._parallel, "chunks_for", lambda n, c=chunks: c)
        again = fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=7)
        assert np.array_equal(again, ref)
    monkeypatch.undo()
    # layout: a Fortran-ordered copy and a strided view hold the same elements in C order
    fortran = np.asfortranarray(x)
    assert np.array_equal(
        fp8kit.encode(fortran, "float8_e4m3fn", rounding="stochastic", seed=7), ref
    )
    out = np.empty((300, 700), np.uint8, order="F")
    fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=7, out=out)
    assert np.array_equal(out, ref)
    # the element's index, not its position in a temporary, draws the random word
    assert np.array_equal(
        fp8kit.encode(x[:, :350], "float8_e4m3fn", rounding="stochastic", seed=7),
        fp8kit.encode(np.ascontiguousarray(x[:, :350]), "float8_e4m3fn", rounding="stochastic",
                      seed=7),
    )  # fmt: skip
    other = fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=8)
    assert (other != ref).mean() > 0.1


def test_stochastic_seed_from_a_generator_and_fresh_seeds():
    x = np.full(1000, 1.03, np.float32)
    a = fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=np.random.default_rng(5))
    b = fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=np.random.default_rng(5))
    assert np.array_equal(a, b)
    c = fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic")
    d = fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic")
    assert not np.array_equal(c, d)


@pytest.mark.parametrize("random_bits", [1, 3, 8, 32])
@pytest.mark.parametrize("position", [0.0, 0.1, 0.25, 0.5, 0.8, 0.999])
def test_probability_of_rounding_up_is_the_truncated_fraction(random_bits, position):
    # e4m3fn's neighbours 1.0 and 1.125; the value at `position` between them
    n = 400_000
    v = np.float64(1.0 + 0.125 * position)
    f = (v - 1.0) / 0.125
    expected = math.floor(f * 2**random_bits) / 2**random_bits
    got = fp8kit.round_to(
        np.full(n, v), "float8_e4m3fn", rounding="stochastic", seed=11, random_bits=random_bits
    )
    assert set(np.unique(got)) <= {1.0, 1.125}
    p = (got == 1.125).mean()
    sigma = math.sqrt(max(expected * (1 - expected), 1e-12) / n)
    assert abs(p - expected) <= 5 * sigma + 1e-9


@pytest.mark.parametrize("name", ["float8_e5m2", "bfloat16", "float4_e2m1fn", "float8_e8m0fnu"])
def test_stochastic_rounding_is_unbiased(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    fmt = get_format(name)
    lo, hi = (1.0, 2.0) if name == "float8_e8m0fnu" else (1.0, 1.0 + fmt.eps)
    values = rng.uniform(lo, hi, 8)
    n = 200_000
    for i, v in enumerate(values):
        got = fp8kit.round_to(np.full(n, v), name, rounding="stochastic", seed=i)
        # each draw is lo or hi: the mean's standard error is (hi - lo) * sqrt(p (1 - p) / n)
        bound = 5 * (hi - lo) * 0.5 / math.sqrt(n)
        assert abs(got.mean() - v) < bound, (v, got.mean())


def test_stochastic_rounding_of_values_far_below_the_smallest_subnormal():
    # 2**-40 is 2**-31 of e4m3fn's smallest subnormal: it must (almost) never round up
    got = fp8kit.round_to(np.full(1_000_000, 2.0**-40, np.float32), "float8_e4m3fn",
                          rounding="stochastic", seed=1)  # fmt: skip
    assert (got != 0).sum() <= 2
    got = fp8kit.round_to(np.full(400_000, 2.0**-12, np.float32), "float8_e4m3fn",
                          rounding="stochastic", seed=1)  # fmt: skip
    assert abs((got != 0).mean() - 0.125) < 5 * math.sqrt(0.125 * 0.875 / 400_000)


# Stochastic rounding of float32/float64 bits has two kernels: the integer path of every
# mode, and a constant-shift path (fp8kit._kernels.rounding.encode_stochastic_fast) that
# writes the value as a fixed-point number first, through one FPU add below the format's
# smallest normal.  Where the second is used it must give the first's bits: dense sweeps
# of every binade from far below the smallest subnormal to above the largest normal.
def _dense_bits(width, rng):
    src_m, one = (23, np.uint64(1)) if width == 32 else (52, np.uint64(1))
    bias = 127 if width == 32 else 1023
    exps = np.arange(bias - 40, bias + 20)
    mant = rng.integers(0, 1 << src_m, (exps.size, 3000), dtype=np.uint64)
    bits = (exps[:, None].astype(np.uint64) << np.uint64(src_m)) + mant
    extra = rng.integers(0, 1 << min(src_m, 40), 5000, dtype=np.uint64)  # source subnormals
    bits = np.concatenate([bits.ravel(), extra, (one << np.uint64(width - 1)) | bits.ravel()])
    return bits.astype(np.uint32 if width == 32 else np.uint64)


@pytest.mark.parametrize(
    "name, dtype, random_bits",
    [
        pytest.param("float8_e4m3fn", np.float32, 16, id="e4m3fn-f32-16"),
        pytest.param("float8_e5m2fnuz", np.float32, 21, id="e5m2fnuz-f32-21"),
        pytest.param("float4_e2m1fn", np.float32, 1, id="e2m1-f32-1"),
        pytest.param("bfloat16", np.float32, 16, id="bf16-f32-16"),
        pytest.param("float8_e3m4", np.float64, 32, id="e3m4-f64-32"),
    ],
)
def test_stochastic_constant_shift_path_gives_the_integer_paths_bits(
    name, dtype, random_bits, monkeypatch
):
    from fp8kit._kernels import codec as kernels
    from fp8kit._kernels.rounding import STOCHASTIC

    fmt = get_format(name)
    build = kernels.encode_mode_kernel.__wrapped__  # uncached: two variants of one kernel
    fast, pl = build(fmt, np.dtype(dtype), True, STOCHASTIC, random_bits)
    assert kernels.stochastic_params(fmt, pl.source, random_bits) is not None
    monkeypatch.setattr(kernels, "stochastic_params", lambda *args, **kwargs: None)
    slow, _ = build(fmt, np.dtype(dtype), True, STOCHASTIC, random_bits)
    x = _dense_bits(np.dtype(dtype).itemsize * 8, np.random.default_rng(random_bits))
    key = np.array([0x9E3779B9, 7], np.uint32)
    # Where the FPU's sum rounds up, the path must take it back: the first elements are
    # (t + 3/4) ulps of the fixed point, with t chosen from the element's own random word so
    # that t + 1 (the sum rounded to nearest) would carry into the kept bits and t does not.
    m, src_m = fmt.mantissa_bits, 23 if dtype == np.float32 else 52
    sh, b = src_m - m, random_bits
    r = _words(4096, key[0], key[1], parts(b)).astype(np.uint64) >> np.uint64(32 - b)
    t = (1 << sh) - 1 - (r << np.uint64(sh - b))
    edge = (t.astype(np.float64) + 0.75) * 2.0 ** (fmt.minexp - src_m)
    if name != "bfloat16":  # (which shares float32's smallest normal: no FPU add)
        assert (edge.astype(dtype).astype(np.float64) == edge).all()
        x[: edge.size] = edge.astype(dtype).view(x.dtype)
    lut, table = np.zeros(1, np.uint32), np.zeros(1, np.uint8)
    got, want = (np.empty(x.size, fmt.code_dtype) for _ in range(2))
    fast.build(False)(x, lut, table, got.view(np.uint8) if fmt.bits <= 8 else got, key, 0, 1)
    slow.build(False)(x, lut, table, want.view(np.uint8) if fmt.bits <= 8 else want, key, 0, 1)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(x[i]), got[i], want[i]) for i in bad[:5]]


def test_stochastic_constant_shift_path_is_refused_where_it_would_not_be_exact():
    from fp8kit._kernels.codec import stochastic_params

    # more random bits than the normal range drops (float32 -> e4m3fn drops 20)
    assert stochastic_params(get_format("float8_e4m3fn"), "float32", 21) is None
    # float32 -> float16 drops 13 bits: the default 16 takes the integer path in the Numba
    # kernel; the vector kernel takes it (``excess``: below float16's smallest normal its
    # fixed point keeps 16 fraction bits, within 30 with the 10 of the mantissa; 32 not)
    f16 = get_format("float16")
    assert stochastic_params(f16, "float32", 16) is None
    assert stochastic_params(f16, "float32", 13) is not None
    assert stochastic_params(f16, "float32", 16, excess=True) is not None
    assert stochastic_params(f16, "float32", 32, excess=True) is None
    # e8m0 has its own kernel
    assert stochastic_params(get_format("float8_e8m0fnu"), "float32", 1) is None


# ------------------------------------------------------------------ the other entry points
@pytest.mark.parametrize("mode", MODES)
def test_round_to_astype_and_cast_agree_with_encode(mode):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(5000) * 50).astype(np.float32)
    kw = {"rounding": mode, "seed": 9 if mode == "stochastic" else None}
    codes = fp8kit.encode(x, "float8_e4m3fn", **kw)
    table = fp8kit.decode(np.arange(256, dtype=np.uint8), "float8_e4m3fn", dtype=np.float32)
    np.testing.assert_array_equal(fp8kit.round_to(x, "float8_e4m3fn", **kw), table[codes])
    assert np.array_equal(fp8kit.astype(x, "float8_e4m3fn", **kw).view(np.uint8), codes)
    assert np.array_equal(fp8kit.cast(x, "FLOAT8E4M3FN", **kw).view(np.uint8), codes)
    b16 = fp8kit.cast(x, "bfloat16", **kw)
    assert np.array_equal(b16.view(np.uint16), fp8kit.encode(x, "bfloat16", saturate=False, **kw))


@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_cast_from_int64_rounds_once_in_every_mode(mode):
    # int64 -> float8 goes through a round-to-odd float64: exact for every mode
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.integers(-(2**62), 2**62, 2000), rng.integers(-300, 300, 500)])
    got = fp8kit.cast(x, "float8_e5m2", rounding=mode, saturate=False).view(np.uint8)
    fmt = get_format("float8_e5m2")
    want = [encode_value(__import__("fractions").Fraction(int(v)), fmt, saturate=False,
                         rounding=mode) for v in x]  # fmt: skip
    assert got.tolist() == want


@pytest.mark.parametrize("mode", MODES)
def test_fake_convert_in_every_mode(mode):
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((40, 300)) * np.exp(rng.uniform(-6, 6, (40, 300)))).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, np.nan, -0.0]
    scale = rng.uniform(0.5, 2, (40, 1)).astype(np.float32)
    shift = rng.standard_normal((40, 1)).astype(np.float32)
    kw = {"rounding": mode, "seed": 21 if mode == "stochastic" else None}
    got = fp8kit.fake_convert(x, scale, shift, "f8e5m2", **kw)
    y = (x * scale - shift).astype(np.float32)
    y = np.clip(y, -57344, 57344)  # FakeConvert saturates, Inf too
    q = fp8kit.round_to(y, "float8_e5m2", **kw)
    want = ((q + shift) / scale).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[0, 3]) == np.signbit(want[0, 3])


# ------------------------------------------------------------------ Cast-24/25 e8m0
@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_e8m0_matches_the_onnx_reference(round_mode, saturate):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    x = np.concatenate([
        np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32),
        np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32),
        rng.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.float32([2.0**-127, 1.5 * 2**-127, 0, -0.0, 1.5 * 2.0**127, 3e38]),
    ])  # fmt: skip
    node = helper.make_node(
        "Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=round_mode
    )
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, [None])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = fp8kit.cast(x, "FLOAT8E8M0", saturate=bool(saturate), round_mode=round_mode)
    assert got.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
    assert onnx.__version__


def test_cast_to_e8m0_reference_facts():
    # The ONNX reference ignores the sign, maps 0 to 2**-127 and rounds 2**-127 itself "up"
    # (it works on float32's exponent field, where 2**-127 is subnormal); pinned here.
    x = np.float32([-4.0, 0.0, 2.0**-127, 3.0, np.inf])
    assert fp8kit.cast(x, "FLOAT8E8M0").view(np.uint8).tolist() == [129, 0, 1, 129, 255]
    assert fp8kit.cast(x, "FLOAT8E8M0", round_mode="down").view(np.uint8).tolist() == [
        129, 0, 0, 128, 255,
    ]  # fmt: skip
    # fp8kit's own modes treat e8m0 as ml_dtypes does (no sign, no zero)
    assert fp8kit.encode(x, "float8_e8m0fnu", rounding="toward_positive").tolist() == [
        255, 255, 0, 129, 254,
    ]  # fmt: skip


# ------------------------------------------------------------------ refusals
def test_bad_rounding_arguments_are_refused_clearly():
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="rounding must be one of nearest_even, nearest_away"):
        fp8kit.encode(x, "float8_e4m3fn", rounding="up")
    with pytest.raises(ValueError, match="seed is only used with rounding='stochastic'"):
        fp8kit.round_to(x, "float8_e4m3fn", seed=3)
    with pytest.raises(ValueError, match="random_bits must be an int in 1..32; got 33"):
        fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", random_bits=33)
    with pytest.raises(TypeError, match="seed must be an int in 0..2\\*\\*64-1 or a numpy"):
        fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=1.5)
    with pytest.raises(ValueError, match="seed must be in 0..2\\*\\*64-1; got -1"):
        fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=-1)
    with pytest.raises(ValueError, match="mode='openvino' rounds to nearest-even only"):
        fp8kit.fake_convert(x, np.float32(1), mode="openvino", rounding="toward_zero")
    with pytest.raises(ValueError, match="applies to casts from numbers to float16"):
        fp8kit.cast(x, "INT8", rounding="toward_zero")
    with pytest.raises(ValueError, match="'stochastic' from int64 is not supported"):
        fp8kit.cast(np.ones(3, np.int64), "FLOAT8E4M3FN", rounding="stochastic", seed=1)
    with pytest.raises(ValueError, match="round_mode must be 'up', 'down' or 'nearest'"):
        fp8kit.cast(x, "FLOAT8E8M0", round_mode="even")


@njit
def _stochastic_by_definition(x, p, q, o, k0, k1, split, random_bits, out):
    """Element by element from the definition: element i rounds with random_word(i)."""
    for i in range(x.size):
        rnd = random_word(np.uint64(i), k0, k1, split)
        out[i] = encode_mode(x[i], p, q, o, STOCHASTIC, rnd, random_bits)


@pytest.mark.parametrize(
    "name, random_bits",
    [("float8_e4m3fn", 16), ("float8_e4m3fn", 8), ("float8_e5m2", 32), ("bfloat16", 12)],
)
def test_stochastic_kernel_draws_each_elements_word_by_its_index(name, random_bits):
    """The kernel's whole blocks (Philox fused into the rounding loop, or through a buffer
    for 8-bit parts), its partial last block and its chunks all use random_word(index),
    checked against an element-by-element loop over the integer path."""
    from fp8kit._kernels import codec as kernels
    from fp8kit._kernels.rounding import K

    fmt = get_format(name)
    split = parts(random_bits)
    n = 3 * 4 * K * split + 5000  # three whole blocks and a partial one
    x = (np.random.default_rng(random_bits).standard_normal(n) * 3).astype(np.float32)
    x[:50] = np.float32(fmt.smallest_subnormal) * np.linspace(0.05, 3, 50, dtype=np.float32)
    seed = 0x1234_5678_9ABC
    with fp8kit.num_threads(2):
        got = fp8kit.encode(x, name, rounding="stochastic", seed=seed, random_bits=random_bits)
    p, q = kernels._params(fmt, "float32", True)
    o = kernels.mode_overflow(p, STOCHASTIC)
    want = np.empty(n, np.uint8 if fmt.bits <= 8 else np.uint16)
    k0, k1 = np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32)
    _stochastic_by_definition(x.view(np.uint32), p, q, o, k0, k1, split, random_bits, want)
    bad = np.flatnonzero(got.view(want.dtype) != want)
    assert bad.size == 0, bad[:10]
