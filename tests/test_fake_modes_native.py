"""FakeConvert in the other rounding modes: stochastic rounding in three native passes (``x *
scale - shift`` clamped, by the row-walking kernel; round_to's stochastic kernel in place;
``(q + shift) / scale``), wherever round_to rounds the format natively; the deterministic
modes in the same three passes (round_to's kernel of the mode). They must give the
general (Numba) kernel's bits: the same float32 operations and the same random word per
element (its flat index, plus a Dask block's offset). Both run here on every float32
boundary pattern and every 16-bit pattern, the scales of test_fake_one_scale, with and
without shifts, in each layout."""

import ml_dtypes
import numpy as np
import pytest
from test_fake_one_scale import SCALES, X, general_kernel, module
from test_fake_openvino_native import layouts, one_scales, scale_layouts

import fp8kit
from fp8kit import _args

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]
IDS = ["float32", "float16", "bfloat16"]
ALL16 = np.arange(1 << 16, dtype=np.uint16)
FORMATS = ["f8e4m3", "f8e5m2", "float8_e4m3fnuz", "float8_e3m4", "p3109_k8p3se"]
STOCHASTIC = [dict(rounding="stochastic", seed=5), dict(rounding="stochastic", seed=7,
              random_bits=8), dict(rounding="stochastic_c", seed=9),
              dict(rounding="stochastic_half", seed=11, random_bits=8)]  # fmt: skip


def data(dt):
    return X if dt == np.float32 else ALL16.view(dt)


def both(x, scale, shift, fmt, **kw):
    """(native passes' bits, general kernel's bits)."""
    u = f"u{x.dtype.itemsize}"
    with np.errstate(over="ignore", invalid="ignore"):
        got = fp8kit.fake_convert(x, scale, shift, destination_type=fmt, **kw)
        with general_kernel():
            want = fp8kit.fake_convert(x, scale, shift, destination_type=fmt, **kw)
    return got.view(u), want.view(u)


def native_rounding(fmt, kw):
    rmode, _, rbits = _args.rounding(kw["rounding"], kw.get("seed"), kw.get("random_bits", 16), "t")
    return module()._rounds_natively(fp8kit.get_format(_args.destination(fmt).name), rmode,
                                     rbits, False)  # fmt: skip


def test_stochastic_rounding_of_the_formats_is_native_where_the_cpu_has_vbmi():
    if not fp8kit._kernels.bits.cpu_has("avx512vbmi"):
        pytest.skip("no AVX512-VBMI: round_to's stochastic kernel does not look values up")
    assert all(native_rounding(fmt, kw) for fmt in FORMATS for kw in STOCHASTIC)
    # (the variants too since the fifteenth pass, where a bit of the fraction lies below
    # the random bits: float32 drops 20 for float8_e4m3fn; since the eighteenth with more
    # random bits too, while the fixed point below the smallest normal holds the mantissa
    # and the random bits plus one within 30 bits)
    for mode in ("stochastic_c", "stochastic_b", "stochastic_odd", "stochastic_half"):
        assert native_rounding("f8e4m3", dict(rounding=mode, seed=1))
        assert native_rounding("f8e4m3", dict(rounding=mode, seed=1, random_bits=20))
        assert native_rounding("f8e4m3", dict(rounding=mode, seed=1, random_bits=26))
        # (the Numba-written kernel of issue 42 takes any count of random bits natively)
        assert native_rounding("f8e4m3", dict(rounding=mode, seed=1, random_bits=27))


@pytest.mark.parametrize(
    "dt", [DTYPES[0]] + [pytest.param(d, marks=pytest.mark.slow) for d in DTYPES[1:]], ids=IDS
)
def test_variants_with_as_many_random_bits_as_dropped_give_the_general_kernels_bits(dt):
    """The variants with 20 and 24 random bits (float32 drops 20 for float8_e4m3fn): the
    native passes' bits, every scale."""
    options = [dict(rounding="stochastic_b", seed=3, random_bits=20),
               dict(rounding="stochastic_odd", seed=4, random_bits=24)]  # fmt: skip
    assert_every_scale(data(dt), dt, "f8e4m3", options)


def sampled_options():
    """The option sets of a matrix test (each builds a general kernel per data type, ~0.5 s
    of Numba compile, which is the matrix's time): float32 data all of them, the 16-bit
    types alternate halves, in the default run; all of them for every type in the slow
    run."""
    return pytest.mark.parametrize(
        "every", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["sampled", "every"]
    )


def options_for(options, dt, every):
    if every or dt == np.float32:
        return options
    return options[DTYPES.index(dt) - 1 :: 2]


@sampled_options()
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_stochastic_one_scale_gives_the_general_kernels_bits(fmt, dt, every):
    assert_every_scale(data(dt), dt, fmt, options_for(STOCHASTIC, dt, every))


def assert_every_scale(x, dt, fmt, options):
    """Both kernels' bits agree for every scale (and shift) of SCALES and option set."""
    for kw in options:
        for scale, shift, s, h in one_scales(dt):
            got, want = both(x, s, h, fmt, **kw)
            bad = np.flatnonzero(got != want)
            assert not bad.size, (kw, scale, shift, [(x[i], got[i], want[i]) for i in bad[:4]])


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_stochastic_every_scale_layout_gives_the_general_kernels_bits(dt):
    x = data(dt)
    for xs, scale, shift in scale_layouts(x, dt, np.random.default_rng(5), layouts(x, 32)):
        got, want = both(xs, scale, shift, "f8e4m3", rounding="stochastic", seed=9)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
def test_stochastic_threads_offsets_and_out(threads):
    """Split between threads (rows, and single rows cut into rows), into a
    non-contiguous out, and a Dask block's offset keying the random stream."""
    x = np.tile(X, 2)[: 3001 * 97].reshape(3001, 97)
    scale = np.linspace(0.25, 4, 3001, dtype=np.float32)[:, None]
    kw = dict(rounding="stochastic", seed=11)
    with general_kernel():
        want = fp8kit.fake_convert(x, scale, -scale, **kw).view(np.uint32)
        flat_want = fp8kit.fake_convert(x.reshape(-1), 3.0, **kw).view(np.uint32)
    out = np.empty((3001, 194), np.float32)[:, ::2]
    with fp8kit.num_threads(threads):
        got = fp8kit.fake_convert(x, scale, -scale, out=out, **kw)
        np.testing.assert_array_equal(got.view(np.uint32), want)
        np.testing.assert_array_equal(
            fp8kit.fake_convert(x.reshape(-1), 3.0, **kw).view(np.uint32), flat_want
        )
        # the second half as a block of a larger array: the whole array's random words
        half = x.size // 2 + 13
        with _args.index_offset(half):
            got = fp8kit.fake_convert(x.reshape(-1)[half:], 3.0, **kw)
        np.testing.assert_array_equal(got.view(np.uint32), flat_want[half:])


def test_stochastic_rounding_takes_the_native_passes_nan_scales_too(monkeypatch):
    """Stochastic rounding's three native passes (_in_steps), NaN scales included (with the
    walking kernels' NaN builds); the deterministic modes too."""
    calls = []
    real = module()._in_steps
    monkeypatch.setattr(module(), "_in_steps", lambda *a: calls.append(a) or real(*a))
    x = X[:4096].reshape(64, 64)
    rows = np.full((64, 1), 2.0, np.float32)
    rows[3] = np.nan
    got = fp8kit.fake_convert(x, rows, rounding="stochastic", seed=1)
    assert np.isnan(got[3]).all() and not np.isnan(got[4]).any()
    vbmi = fp8kit._kernels.bits.cpu_has("avx512vbmi")
    assert len(calls) >= 1 or not vbmi
    del calls[:]
    fp8kit.fake_convert(x, 2.0, rounding="toward_zero")
    assert len(calls) == 1 or not vbmi
    del calls[:]
    fp8kit.fake_convert(x, 2.0, rounding="stochastic", seed=1)
    fp8kit.fake_convert(x, 2.0, rounding="stochastic_c", seed=1)
    assert len(calls) == 2 or not vbmi


# ------------------------------------------------- deterministic modes: the same passes
DETERMINISTIC = [dict(rounding="toward_zero"), dict(rounding="nearest_away"),
                 dict(rounding="to_odd", flush_subnormals=True),
                 dict(rounding="toward_negative"), dict(flush_subnormals=True)]  # fmt: skip


def fused_calls(monkeypatch):
    calls = []
    real = module().fake_walk_kernel

    def record(w, stage=None, fix_nan=False, along=None):
        calls.append(stage)
        return real(w, stage, fix_nan, along)

    monkeypatch.setattr(module(), "fake_walk_kernel", record)
    return calls


@sampled_options()
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_deterministic_modes_one_scale_give_the_general_kernels_bits(fmt, dt, every, monkeypatch):
    calls = fused_calls(monkeypatch)
    options = options_for(DETERMINISTIC, dt, every)
    assert_every_scale(data(dt), dt, fmt, options)
    if fp8kit._kernels.bits.cpu_has("avx512vbmi"):  # (round_to's planes: else the general)
        assert len(calls) == 2 * len(options) * len(SCALES)
        assert calls == ["pre", "post"] * (len(calls) // 2)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_deterministic_modes_every_scale_layout_and_threads(dt):
    x = data(dt)
    # (and rows of 33: a block of 64 lanes, most of it masked)
    shapes = layouts(x, 32) + [((x.size // 33, 33), (1, 33))]
    for xs, scale, shift in scale_layouts(x, dt, np.random.default_rng(8), shapes):
        for threads in (1, 2):
            with fp8kit.num_threads(threads):
                got, want = both(xs, scale, shift, "f8e5m2", rounding="nearest_away")
            np.testing.assert_array_equal(got, want)


def test_deterministic_modes_formats_share_the_kernel(monkeypatch):
    x = X[:4096].reshape(64, 64)
    fp8kit.fake_convert(x, 2.0, destination_type="f8e4m3", rounding="toward_zero")
    before = fp8kit._kernels.codec.compiled_count()
    for fmt in ("f8e5m2", "float8_e3m4"):  # (formats with -0, as f8e4m3: one kernel)
        fp8kit.fake_convert(x, 2.0, destination_type=fmt, rounding="toward_zero")
    if fp8kit._kernels.bits.cpu_has("avx512vbmi"):
        assert fp8kit._kernels.codec.compiled_count() == before


LARGE = [{}, dict(rounding="toward_zero"), dict(rounding="stochastic", seed=2)]


@pytest.mark.parametrize("kw", LARGE, ids=["nearest_even", "toward_zero", "stochastic"])
def test_large_outputs_streamed_keep_the_bits(kw):
    """Outputs of 64 MiB of traffic and more given as ``out`` are written with
    non-temporal stores where whole blocks cover whole cache lines: rows of 64 float32 and
    one long row, into a new array (plain stores), into an out that is not line-aligned
    (its rows then start off a line: plain stores; a long row starts its rows on one),
    and in place (plain stores)."""
    x = np.tile(X, 22)[: 1 << 23]
    rows = np.linspace(0.5, 3, 1 << 17, dtype=np.float32)[:, None]
    for data, scale in ((x.reshape(1 << 17, 64), rows), (x, np.float32(1.5))):
        with general_kernel():
            want = fp8kit.fake_convert(data, scale, **kw).view(np.uint32)
        np.testing.assert_array_equal(fp8kit.fake_convert(data, scale, **kw).view(np.uint32),
                                      want)  # fmt: skip
        raw = np.empty(data.size + 8, np.float32)
        skip = 1 if (raw.ctypes.data + 4) % 64 else 2  # (4 or 8 bytes past a line)
        out = raw[skip : skip + data.size].reshape(data.shape)
        fp8kit.fake_convert(data, scale, out=out, **kw)
        np.testing.assert_array_equal(out.view(np.uint32), want)
        fp8kit.fake_convert(out, scale, out=out, **kw)  # (in place: its own bits again)
        with general_kernel():
            twice = fp8kit.fake_convert(want.view(np.float32), scale, **kw)
        np.testing.assert_array_equal(out.view(np.uint32), twice.view(np.uint32))
