"""Decoding uint8 codes by byte permutes of the table (fp8kit._kernels.decode.plane_kernel,
AVX512-VBMI): the table's bits for every code of every format up to 8 bits, to every float
dtype, in every block position and tail length; and the same bits where the CPU lacks
VBMI (the formula and table kernels)."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
import fp8kit.codec as public_codec
from fp8kit._kernels import decode as kd
from fp8kit._kernels.bits import cpu_has, table_planes
from fp8kit._kernels.tables import decode_table
from fp8kit.formats import FloatFormat, registered_formats

SMALL = [f for f in registered_formats().values() if f.bits <= 8]
DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]
needs_vbmi = pytest.mark.skipif(
    not cpu_has("avx512vbmi"), reason="the byte-permute kernel needs AVX512-VBMI"
)


def _clear_plane_caches():
    """Forget the planes and plane kernels built so far (for a patched ``cpu_has``)."""
    kd.format_planes.cache_clear()
    kd.plane_kernel.cache_clear()


def _want(fmt, dtype, codes):
    table = decode_table(fmt, np.dtype(dtype))
    return table[codes]


@needs_vbmi
@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_every_format_and_dtype_takes_the_plane_kernel(fmt):
    """Every format up to 8 bits fits two byte planes for the 16-bit dtypes and float32
    (at most 7 mantissa bits), and for float64 up to 4 mantissa bits (the rest keep the
    table); fp8kit.decode gives the table's bits on every code, repeated past the threading
    threshold."""
    codes = np.tile(np.arange(1 << fmt.bits, dtype=np.uint8), (1 << 18) >> fmt.bits)
    codes = np.concatenate([codes, codes[:77]])
    for dt in DTYPES:
        fits = np.dtype(dt) != np.float64 or fmt.mantissa_bits <= 4
        assert (kd.plane_kernel(fmt, np.dtype(dt)) is not None) == fits
        want = _want(fmt, dt, codes)
        with fp8kit.num_threads(2):
            got = fp8kit.decode(codes, fmt, dtype=dt)
        np.testing.assert_array_equal(got.view(want.dtype), want)


@needs_vbmi
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_block_tails_and_offsets(dtype):
    """Lengths 0..200 (whole 64-code blocks and every tail, masked loads and stores) at
    unaligned starts of both arrays, with out= and without: no element outside [0, n)
    written."""
    fmt = fp8kit.get_format("float8_e4m3fn")
    rng = np.random.default_rng(7)
    pool = rng.integers(0, 256, 300).astype(np.uint8)
    table = decode_table(fmt, np.dtype(dtype))
    for n in range(201):
        for start in (0, 1, 3):
            codes = pool[start : start + n]
            got = fp8kit.decode(codes, fmt, dtype=dtype)
            np.testing.assert_array_equal(got.view(table.dtype), table[codes])
            buf = np.full(n + 4, 0x5A5A, table.dtype)
            fp8kit.decode(codes, fmt, out=buf[2 : 2 + n].view(dtype))
            np.testing.assert_array_equal(buf[2 : 2 + n], table[codes])
            assert (buf[:2] == 0x5A5A).all() and (buf[2 + n :] == 0x5A5A).all()


@needs_vbmi
def test_plane_constants():
    """Two 256-byte planes (high bytes, then low bytes, of each entry's top 16 bits); a table
    with bits below them gets no plane kernel."""
    fmt = fp8kit.get_format("float8_e5m2")
    prm = table_planes(decode_table(fmt, np.dtype(np.float32)))
    assert prm.shape == (512,) and prm.dtype == np.uint8 and not prm.flags.writeable
    # code 0x3C is 1.0: float32 bits 0x3F800000
    assert (prm[0x3C], prm[256 + 0x3C]) == (0x3F, 0x80)
    low_bits = np.array([0x3F800001] * 256, np.uint32)
    assert table_planes(low_bits) is None
    f16 = FloatFormat(name="t_e5m10", exponent_bits=5, mantissa_bits=10, bias=15)
    assert kd.plane_kernel(f16, np.dtype(np.float32)) is None  # (wider than 8 bits)


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn"])
def test_without_vbmi_same_bits(fresh_kernels, fmt):
    """Where the CPU has no VBMI (here: made to say so), the formula kernel (float32) and
    the table kernel (other dtypes) decode, with the same bits and the same range check."""
    fresh_kernels(kd, "cpu_has", lambda name: False)
    fresh_kernels(public_codec, "_FAST_DECODE", {})
    _clear_plane_caches()
    try:
        f = fp8kit.get_format(fmt)
        codes = np.tile(np.arange(1 << f.bits, dtype=np.uint8), 3)
        for dt in DTYPES:
            assert kd.plane_kernel(f, np.dtype(dt)) is None
            want = _want(f, dt, codes)
            np.testing.assert_array_equal(fp8kit.decode(codes, f, dtype=dt).view(want.dtype), want)
        if f.bits < 8:
            with pytest.raises(ValueError, match=r"codes\[1\] = 200 is not a code"):
                fp8kit.decode(np.uint8([1, 200]), f)
    finally:
        _clear_plane_caches()


@needs_vbmi
def test_public_decode_uses_it(monkeypatch):
    """fp8kit.decode of uint8 codes (and of an ml_dtypes array of them) runs the plane
    kernel: the exhaustive decode tests elsewhere then test it on this CPU."""
    calls = []

    def spy(fmt, dtype):
        kernel = kd.plane_kernel(fmt, dtype)
        calls.append(kernel is not None)
        return kernel

    monkeypatch.setattr(public_codec, "plane_kernel", spy)
    monkeypatch.setattr(public_codec, "_FAST_DECODE", {})
    codes = np.arange(256, dtype=np.uint8)
    fp8kit.decode(codes, "float8_e4m3fn")
    fp8kit.decode(codes.view(ml_dtypes.float8_e5m2), dtype=np.float64)
    assert calls == [True, True]


def _round_inputs(fmt, dtype):
    """Every value of the format, the midpoints between neighbours and their float
    neighbours, beyond the range, zeros, Inf and NaN, with both signs."""
    vals = np.unique(decode_table(fmt, np.dtype(np.float64)).view(np.float64))
    vals = vals[np.isfinite(vals)]
    mids = (vals[1:] + vals[:-1]) / 2
    x = np.concatenate([vals, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf)])
    x = np.concatenate([x, [vals.max() * 4, 0.0, np.inf, np.nan], -x])
    with np.errstate(over="ignore"):  # (beyond float16's range: Inf)
        x = x.astype(dtype)
    return np.concatenate([x] * ((1 << 18) // x.size + 1))  # (past the threading threshold)


@needs_vbmi
@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_round_to_reads_the_planes(fmt):
    """round_to (nearest-even) of every format up to 8 bits takes its values from the byte
    planes where they fit: the table's entry of encode(x), for every dtype."""
    for dt in DTYPES:
        x = _round_inputs(fmt, dt)
        planes = kd.format_planes(fmt, np.dtype(dt))
        fits = np.dtype(dt) != np.float64 or fmt.mantissa_bits <= 4
        assert (planes is not None) == fits
        with fp8kit.num_threads(2):
            got = fp8kit.round_to(x, fmt)
        want = decode_table(fmt, np.dtype(dt))[fp8kit.encode(x, fmt)]  # (the table itself)
        np.testing.assert_array_equal(got.view(want.dtype), want)


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float6_e3m2fn"])
def test_round_to_without_vbmi_same_bits(fresh_kernels, fmt):
    """Without VBMI (made to say so) round_to reads the table element by element: the same
    bits."""
    f = fp8kit.get_format(fmt)
    xs = {dt: _round_inputs(f, dt) for dt in DTYPES}
    want = {dt: fp8kit.round_to(x, f) for dt, x in xs.items()}
    fresh_kernels(kd, "cpu_has", lambda name: False)
    fresh_kernels(public_codec, "_FAST_ROUND", {})
    _clear_plane_caches()
    try:
        for dt, x in xs.items():
            assert kd.format_planes(f, np.dtype(dt)) is None
            bits = f"u{np.dtype(dt).itemsize}"
            np.testing.assert_array_equal(fp8kit.round_to(x, f).view(bits), want[dt].view(bits))
    finally:
        _clear_plane_caches()


@needs_vbmi
@pytest.mark.parametrize(
    "rounding, random_bits",
    [("toward_zero", 16), ("toward_negative", 16), ("stochastic", 16), ("stochastic", 8),
     ("stochastic", 32), ("stochastic_c", 16)],
)  # fmt: skip
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn"])
def test_round_to_modes_read_the_planes(fmt, rounding, random_bits):
    """The directed and stochastic modes of round_to: the table's entry of encode(x) with
    the same mode and seed (the random words are counted by index), through the planes
    where the kernel takes them (the deterministic modes, fused stochastic rounding and the
    vector kernel of float32 data)."""
    from fp8kit._kernels.codec import encode_mode_kernel
    from fp8kit._kernels.rounding import MODES

    f = fp8kit.get_format(fmt)
    for dt in DTYPES:
        x = _round_inputs(f, dt)
        kw = dict(rounding=rounding)
        if rounding.startswith("stochastic"):
            kw.update(seed=3, random_bits=random_bits)
            x = x[np.isfinite(x.astype(np.float64))]  # (no Inf rounds stochastically)
        with fp8kit.num_threads(2):
            got = fp8kit.round_to(x, f, **kw)
            codes = fp8kit.encode(x, f, **kw)
        want = decode_table(f, np.dtype(dt))[codes]
        np.testing.assert_array_equal(got.view(want.dtype), want)
        table = decode_table(f, np.dtype(dt))
        k, _ = encode_mode_kernel(
            f, np.dtype(dt), True, MODES[rounding], random_bits, table.dtype, planes=True
        )
        vector = k._key[0] == "sr"  # (fp8kit._kernels.stochastic: the planes, per run)
        assert k.planes == (vector or (rounding != "stochastic_c" and random_bits > 8))
