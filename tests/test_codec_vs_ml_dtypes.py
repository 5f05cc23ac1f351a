"""Bit-exactness against ml_dtypes (and numpy for float16) on exhaustive and boundary inputs."""

import zlib

import ml_dtypes
import numpy as np
import pytest
from conftest import BUILTIN, OUTPUT_DTYPES, bits_of, canonical_nan, ml_dtype, peer_encode

import fp8kit
from fp8kit import get_format

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered")


def assert_same_bits(got, want, x):
    bad = np.flatnonzero(np.asarray(got).ravel() != np.asarray(want).ravel())
    if bad.size:
        xb = bits_of(np.asarray(x)).ravel()
        sample = [(hex(xb[i]), hex(got.ravel()[i]), hex(want.ravel()[i])) for i in bad[:8]]
        raise AssertionError(f"{bad.size} mismatches (input, fp8kit, peer): {sample}")


# ---------------------------------------------------------------------------- decode
@pytest.mark.parametrize("out_dtype", OUTPUT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_decode_every_float8_code_bit_identical(float8_name, out_dtype):
    codes = np.arange(256, dtype=np.uint8)
    got = fp8kit.decode(codes, float8_name, dtype=out_dtype)
    want = codes.view(ml_dtype(float8_name)).astype(out_dtype)
    assert got.dtype == np.dtype(out_dtype)
    assert_same_bits(bits_of(got), bits_of(want), codes)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float64])
def test_decode_every_16bit_code(name, out_dtype):
    codes = np.arange(1 << 16, dtype=np.uint16)
    got = fp8kit.decode(codes, name, dtype=out_dtype)
    want = codes.view(ml_dtype(name)).astype(out_dtype)
    nan = np.isnan(want)
    assert_same_bits(bits_of(got)[~nan], bits_of(want)[~nan], codes[~nan])
    # NaN payloads are not carried: every NaN decodes to the canonical quiet NaN with its sign
    # (ml_dtypes and numpy shift the payload; pinned here as a documented difference).
    width = np.dtype(out_dtype).itemsize * 8
    qnan = {32: 0x7FC00000, 64: 0x7FF8000000000000}[width]
    sign = (codes[nan] >> 15).astype(np.uint64) << np.uint64(width - 1)
    assert (bits_of(got)[nan] == (sign | np.uint64(qnan)).astype(bits_of(got).dtype)).all()
    assert (bits_of(want)[nan] != bits_of(got)[nan]).any()


def test_decode_accepts_ml_dtypes_arrays_without_fmt():
    a = np.array([1.5, -2.0, np.nan], dtype=ml_dtypes.float8_e5m2)
    got = fp8kit.decode(a)
    assert_same_bits(bits_of(got), bits_of(a.astype(np.float32)), a)


# ---------------------------------------------------------------------------- encode
ALL16 = np.arange(1 << 16, dtype=np.uint16)


@pytest.mark.parametrize("source", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_every_16bit_input(source, name, saturate):
    x = ALL16.view(ml_dtype(source))
    got = fp8kit.encode(x, name, saturate=saturate)
    want = peer_encode(x, name, saturate)
    want = canonical_nan(want, name, x.astype(np.float32))
    assert_same_bits(got, want, x)


def float32_boundaries(name):
    """Every finite value of the format, every midpoint between neighbours, and the float32
    neighbours of each (both signs), plus the overflow thresholds and specials."""
    fmt = get_format(name)
    codes = np.arange(1 << fmt.bits, dtype=fmt.code_dtype)
    vals = np.unique(np.abs(fp8kit.decode(codes, fmt, dtype=np.float64)))
    vals = vals[np.isfinite(vals)]
    # the grid continued one step past max: its midpoint is the overflow threshold
    top = vals[-1] + (vals[-1] - vals[-2]) * (2 if vals[-1] == 2 * vals[-2] else 1)
    step_up = np.ldexp(1.0, int(np.floor(np.log2(vals[-1]))) - fmt.mantissa_bits)
    grid = np.concatenate([vals, [vals[-1] + step_up, top]])
    mids = (grid[:-1] + grid[1:]) / 2
    with np.errstate(over="ignore"):  # bfloat16's grid continues past float32's max
        pts = np.concatenate([grid, mids]).astype(np.float32)
    pts = np.concatenate(
        [pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(0))]
    )
    pts = np.concatenate([pts, -pts, np.float32([np.inf, -np.inf, np.nan, -np.nan, 0, -0.0])])
    payloads = np.array(
        [0x7F800001, 0x7FBFFFFF, 0x7FC00001, 0xFFFFFFFF, 0xFF800001], dtype=np.uint32
    ).view(np.float32)
    return np.concatenate([pts, payloads])


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_float32_midpoints_and_neighbours(name, saturate):
    x = float32_boundaries(name)
    got = fp8kit.encode(x, name, saturate=saturate)
    want = canonical_nan(peer_encode(x, name, saturate), name, x)
    assert_same_bits(got, want, x)


def test_boundary_sweep_contains_the_ties():
    # e4m3fn: 464 is the tie between max 448 and the (NaN) next code -> rounds to even 448;
    # e5m2: 61440 is the tie between 57344 and 65536 -> rounds to odd-free 65536 -> overflow.
    assert 464.0 in float32_boundaries("float8_e4m3fn")
    assert 61440.0 in float32_boundaries("float8_e5m2")
    assert fp8kit.encode(
        np.float32([464, 464.00003]), "float8_e4m3fn", saturate=False
    ).tolist() == [0x7E, 0x7F]
    assert fp8kit.encode(
        np.float32([61439.996, 61440]), "float8_e5m2", saturate=False
    ).tolist() == [0x7B, 0x7C]


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_ten_million_random_float32_bit_patterns(name, saturate):
    rng = np.random.default_rng(zlib.crc32(f"{name}{saturate}".encode()))
    x = rng.integers(0, 1 << 32, 10_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    got = fp8kit.encode(x, name, saturate=saturate)
    want = canonical_nan(peer_encode(x, name, saturate), name, x)
    assert_same_bits(got, want, x)


@pytest.mark.parametrize("name", BUILTIN)
def test_round_to_equals_peer_round_trip(name):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(100_000) * np.exp(rng.uniform(-20, 20, 100_000))).astype(np.float32)
    got = fp8kit.round_to(x, name, saturate=False)
    with np.errstate(over="ignore"):
        want = x.astype(ml_dtype(name)).astype(np.float32)
    assert_same_bits(bits_of(got), bits_of(want), x)


def test_astype_matches_ml_dtypes_and_is_a_view():
    x = np.linspace(-500, 500, 1001, dtype=np.float32)
    a8 = fp8kit.astype(x, "float8_e4m3fn", saturate=False)
    assert a8.dtype == ml_dtypes.float8_e4m3fn
    assert_same_bits(bits_of(a8), bits_of(x.astype(ml_dtypes.float8_e4m3fn)), x)
    assert a8.base is not None  # a view of the code array, not a copy
