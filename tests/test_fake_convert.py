"""FakeConvert-13 (../shared/specs/openvino-FakeConvert-13.txt), default mode: the spec
formula computed exactly once per step, against a plain numpy float32 oracle."""

import importlib

import ml_dtypes
import numpy as np
import pytest

import fp8kit

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid|divide)")

DESTS = ["f8e4m3", "f8e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]
DATA = [np.float32, np.float16, ml_dtypes.bfloat16]


def oracle(x, scale, shift, dest):
    """data = data * scale - shift; ConvertLike(Convert(data, destination_type), data);
    data = (data + shift) / scale -- each step an IEEE float32 operation, the conversion a
    single nearest-even rounding saturating to +-max (Inf too)."""
    fmt = fp8kit.get_format(dest)
    x32 = np.asarray(x).astype(np.float32)
    s = np.asarray(scale).astype(np.float32)
    y = x32 * s
    if shift is not None:
        y = y - np.asarray(shift).astype(np.float32)
    y = np.where(np.isinf(y), np.sign(y) * np.float32(fmt.max), y).astype(np.float32)
    q = fp8kit.round_to(y, fmt, saturate=True)
    if shift is not None:
        q = q + np.asarray(shift).astype(np.float32)
    r = (q / s).astype(np.float32)
    return r.astype(np.asarray(x).dtype)


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return ((bits(a) == bits(b)) | nan).all()


def sample(dtype, shape, rng):
    x = rng.standard_normal(shape) * np.exp(rng.uniform(-12, 12, shape))
    x = x.astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3e38][: flat.size]
    return x.astype(dtype)


@pytest.mark.parametrize("dest", DESTS)
@pytest.mark.parametrize("dtype", DATA, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "shape, scale_shape",
    [
        ((1000,), ()),
        ((64, 300), (64, 1)),
        ((2, 3, 40, 5), (1, 3, 1, 1)),
        ((60_000,), (1,)),
        ((3, 4, 5, 6, 7, 2), (3, 1, 5, 1, 7, 1)),
        ((80, 700), (700,)),
    ],
)
@pytest.mark.parametrize("with_shift", [False, True])
def test_matches_the_float32_oracle(dest, dtype, shape, scale_shape, with_shift):
    rng = np.random.default_rng(sum(shape) + len(scale_shape))
    x = sample(dtype, shape, rng)
    scale = np.exp2(rng.integers(-6, 6, scale_shape)).astype(np.float32)
    scale = (scale * rng.uniform(0.5, 2.0, scale_shape)).astype(dtype)
    shift = rng.standard_normal(scale_shape).astype(dtype) if with_shift else None
    got = fp8kit.fake_convert(x, scale, shift, destination_type=dest)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert same(got, oracle(x, scale, shift, dest))


# (sizes above stay below fp8kit._parallel.PARALLEL_THRESHOLD: each parallel kernel build
# takes seconds, so the threaded kernels are checked once per data type and layout here)
@pytest.mark.parametrize("dtype", DATA, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "shape, scale_shape", [((70_000,), (1,)), ((200, 700), (700,))], ids=["outer", "inner-runs"]
)
@pytest.mark.parametrize("with_shift", [False, True])
def test_threaded_kernels_match_the_float32_oracle(dtype, shape, scale_shape, with_shift):
    rng = np.random.default_rng(sum(shape))
    x = sample(dtype, shape, rng)
    scale = np.exp2(rng.integers(-6, 6, scale_shape)).astype(np.float32)
    scale = (scale * rng.uniform(0.5, 2.0, scale_shape)).astype(dtype)
    shift = rng.standard_normal(scale_shape).astype(dtype) if with_shift else None
    got = fp8kit.fake_convert(x, scale, shift, destination_type="f8e5m2")
    assert same(got, oracle(x, scale, shift, "f8e5m2"))


def test_large_array_uses_threads_and_matches_serial():
    rng = np.random.default_rng(1)
    x = sample(np.float32, (300_000,), rng)
    s = np.float32(0.37)
    with fp8kit.num_threads(1):
        one = fp8kit.fake_convert(x, s)
    assert same(fp8kit.fake_convert(x, s), one)


@pytest.mark.parametrize("nchunks", [2, 7, 61])
@pytest.mark.parametrize(
    "shape, scale_shape",
    [((3, 4, 5, 6, 7, 2), (3, 1, 5, 1, 7, 1)), ((5, 7, 11, 13), (5, 1, 11, 1)), ((9, 31), (9, 1))],
)
def test_chunks_starting_mid_row_walk_every_dimension(monkeypatch, nchunks, shape, scale_shape):
    # Chunks start anywhere in a row and carry into outer dimensions: force many of them.
    rng = np.random.default_rng(nchunks)
    x = sample(np.float32, shape, rng)
    scale = np.exp2(rng.integers(-6, 6, scale_shape)) * rng.uniform(0.5, 2, scale_shape)
    scale = scale.astype(np.float32)
    shift = rng.standard_normal(scale_shape).astype(np.float32)
    monkeypatch.setattr(fp8kit._parallel, "chunks_for", lambda n: nchunks)
    got = fp8kit.fake_convert(x, scale, shift)
    assert same(got, oracle(x, scale, shift, "float8_e4m3fn"))


# (the stochastic kernels take 30-45 s each to build: one data type; the stores and the
# staging are the same code for every rounding and data type)
@pytest.mark.parametrize(
    "dtype, kw",
    [pytest.param(d, {}, id=f"spec-{np.dtype(d).name}") for d in DATA]
    + [pytest.param(np.float32, {"rounding": "stochastic", "seed": 5}, id="stochastic-float32")],
)
def test_streaming_stores_write_the_same_bits(monkeypatch, dtype, kw):
    # Large outputs are written through a block buffer with non-temporal stores of whole
    # aligned cache lines: rows longer than a block and of odd lengths, chunks starting
    # mid-row, an output 4 bytes off a line boundary, and in place (out=data).
    fc = importlib.import_module("fp8kit.fake_convert")  # (the package exports the function)

    rng = np.random.default_rng(11)
    x = sample(dtype, (7, 2500), rng)
    scale = (rng.uniform(0.5, 2, (7, 1)) * 2.0 ** rng.integers(-4, 4, (7, 1))).astype(dtype)
    shift = rng.standard_normal((7, 1)).astype(dtype)
    monkeypatch.setattr(fp8kit._parallel, "chunks_for", lambda n: 3)
    want = fp8kit.fake_convert(x, scale, shift, **kw)
    monkeypatch.setattr(fc, "STREAM_MIN_BYTES", 0)
    assert same(fp8kit.fake_convert(x, scale, shift, **kw), want)
    raw = np.empty(x.size + 64, dtype)
    off = (-raw.ctypes.data % 64) // raw.itemsize + 1
    out = raw[off : off + x.size].reshape(x.shape)
    assert out.ctypes.data % 64 != 0 and out.flags.c_contiguous
    fp8kit.fake_convert(x, scale, shift, out=out, **kw)
    assert same(out, want)
    inplace = x.copy()
    fp8kit.fake_convert(inplace, scale, shift, out=inplace, **kw)
    assert same(inplace, want)


def test_spec_rules_nan_saturation_and_zero_sign():
    x = np.array([np.nan, np.inf, -np.inf, 1e9, -0.0, 0.0], np.float32)
    y = fp8kit.fake_convert(x, np.float32(1.0))
    assert np.isnan(y[0])
    assert y[1:4].tolist() == [448.0, -448.0, 448.0]
    assert np.signbit(y[4]) and not np.signbit(y[5])


def test_zero_scale_follows_ieee():
    # x * 0 = 0, round(0) = 0, 0 / 0 = NaN; documented
    y = fp8kit.fake_convert(np.array([1.0, -2.0], np.float32), np.float32(0.0))
    assert np.isnan(y).all()


def test_out_and_python_scalar_scale():
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    out = np.empty_like(x)
    assert fp8kit.fake_convert(x, 2.0, out=out) is out
    assert same(out, oracle(x, np.float32(2.0), None, "f8e4m3"))


def test_invalid_inputs_are_refused():
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="unknown destination_type 'f8e3m4'; valid: f8e4m3"):
        fp8kit.fake_convert(x, 1.0, destination_type="f8e3m4")
    with pytest.raises(ValueError, match="unknown destination_type 'bfloat16'"):
        fp8kit.fake_convert(x, 1.0, destination_type="bfloat16")
    with pytest.raises(TypeError, match="data must be float32, float16 or bfloat16; got int32"):
        fp8kit.fake_convert(np.zeros(4, np.int32), 1.0)
    with pytest.raises(TypeError, match="scale has dtype float64 but data has float32"):
        fp8kit.fake_convert(x, np.ones(4))
    with pytest.raises(ValueError, match=r"scale of shape \(3,\) does not broadcast"):
        fp8kit.fake_convert(x, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="shift has shape"):
        fp8kit.fake_convert(x, np.ones(4, np.float32), np.ones(1, np.float32))


@pytest.mark.parametrize("dtype", DATA, ids=str)
def test_zero_dimensional_data_keeps_its_shape(dtype):
    """0-d data gives a 0-d result (it gave shape (1,): np.ascontiguousarray makes 0-d
    arrays 1-d), in every path, NaN scales and ``out`` included."""
    dt = np.dtype(dtype)
    x = np.array(3.3, dt)
    for scale in (np.array(2.0, dt), np.array(np.nan, dt)):
        for kw in ({}, dict(rounding="toward_zero"), dict(rounding="stochastic", seed=1),
                   dict(mode="openvino-f32"), dict(shift=np.array(0.5, dt))):  # fmt: skip
            got = fp8kit.fake_convert(x, scale, **kw)
            assert got.shape == () and got.dtype == dt, kw
            want = fp8kit.fake_convert(x.reshape(1), scale, **kw)
            assert bits(got).reshape(1).tolist() == bits(want).tolist(), kw
            out = np.zeros((), dt)
            assert fp8kit.fake_convert(x, scale, out=out, **kw) is out


#: The study's narrower destinations (fake_convert itself takes 8-bit ones): fp4, fp6 and
#: the signed P3109 formats of 3-7 bits with a mantissa bit.
NARROW = sorted(
    n for n, f in fp8kit.formats.registered_formats().items()
    if f.bits < 8 and f.signed and f.mantissa_bits > 0
)  # fmt: skip


@pytest.mark.parametrize("dest", NARROW)
@pytest.mark.parametrize(
    "rnd", [{}, {"rounding": "toward_zero"}, {"rounding": "nearest_away"},
            {"flush_subnormals": True}], ids=lambda r: "-".join(map(str, r.values())) or "ne",
)  # fmt: skip
def test_narrow_formats_match_the_oracle_through_the_kernels(dest, rnd):
    """Every float32 top half (with low halves 0, half and all ones: ties, NaN, Inf,
    subnormals), scales that saturate, flush and shift: round_to's values, NaN kept (also
    in the formats without NaN, where round_to gives a code's value: -0)."""
    from fp8kit.fake_convert import _fake_convert, quantize_dequantize

    fmt = fp8kit.get_format(dest)
    top = np.arange(1 << 16, dtype=np.uint32) << 16
    x = (top[:, None] | np.uint32([0, 0x8000, 0xFFFF])).ravel().view(np.float32)
    for scale, shift in [(1.0, None), (0.37, None), (2.0**-20, 0.125), (1e6, -1.5)]:
        s, h = np.float32(scale), None if shift is None else np.float32(shift)
        if h is None:
            got = quantize_dequantize(x, s, fmt, **rnd)
        else:
            got = _fake_convert(x, s, h, fmt, **rnd)
        with np.errstate(all="ignore"):
            y = x * s if h is None else x * s - h
            y = np.clip(y, -fmt.max, fmt.max)
            q = fp8kit.round_to(y, fmt, saturate=True, **rnd)
            want = (q if h is None else q + h) / s
        want[np.isnan(y)] = np.nan
        assert same(got, want), (dest, scale, shift)


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero", "stochastic"])
def test_narrow_formats_keep_nan_in_place_too(rounding):
    # (where NaN is put back after the code-rounding steps, the mask is read before the
    # kernels run: out may be the data itself)
    from fp8kit.fake_convert import quantize_dequantize

    fmt = fp8kit.get_format("float4_e2m1fn")
    x = np.float32([np.nan, -np.nan, 1.3, -7.0, 0.0, np.inf])
    kw = {"rounding": rounding, "seed": 1 if rounding == "stochastic" else None}
    want = quantize_dequantize(x, np.float32(2.0), fmt, **kw)
    got = quantize_dequantize(x, np.float32(2.0), fmt, out=x, **kw)
    assert got is x
    assert np.isnan(got[:2]).all() and np.signbit(got[1]) and not np.signbit(got[0])
    assert same(got, want)
