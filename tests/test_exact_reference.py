"""float64 inputs and user-defined formats against the exact rational oracle."""

import math
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from conftest import BUILTIN, INPUT_DTYPES, USER_FORMATS, bits_of

import fp8kit
from fp8kit import _reference as ref
from fp8kit import get_format
from fp8kit._kernels.codec import encode_kernel, plan
from fp8kit._kernels.tables import code_values

# ml_dtypes warns when casting bfloat16 NaN to float64 (test-side conversions only)
pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast"),
    pytest.mark.filterwarnings("ignore:overflow encountered in cast"),
]

ALL_FORMATS = [get_format(n) for n in BUILTIN] + USER_FORMATS


def oracle_codes(x, fmt, saturate):
    return np.array(
        [ref.encode_value(float(v), fmt, saturate=saturate) for v in x], dtype=fmt.code_dtype
    )


def float64_boundaries(fmt):
    """Representable values, midpoints, and the float64 *and* float32 neighbours of each
    midpoint: the float32 neighbours are exactly where rounding through float32 first
    (double rounding) lands on the tie."""
    vals = np.unique(np.abs(code_values(fmt)))
    vals = vals[np.isfinite(vals)]
    step = np.ldexp(1.0, int(np.floor(np.log2(vals[-1]))) - fmt.mantissa_bits)
    with np.errstate(over="ignore", under="ignore"):  # formats reaching float64's max
        grid = np.concatenate([vals, [vals[-1] + step, vals[-1] + 2 * step]])
        mids = grid[:-1] / 2 + grid[1:] / 2
        pts = np.concatenate([grid, mids])
        f32 = pts.astype(np.float32)
        near = [np.nextafter(pts, np.inf), np.nextafter(pts, 0)]
        if fmt.maxexp <= 128 and fmt.minexp - fmt.mantissa_bits >= -149:
            near += [
                np.nextafter(f32, np.float32(np.inf)).astype(np.float64),
                np.nextafter(f32, np.float32(0)).astype(np.float64),
            ]
        # halfway +- one float32 ulp / 2**k: inside the float32 rounding interval of the tie
        for k in (1, 20):
            ulp32 = np.spacing(np.abs(f32)).astype(np.float64) / 2.0**k
            near += [mids + ulp32[len(grid) :], mids - ulp32[len(grid) :]]
    pts = np.concatenate([pts, *near])
    pts = pts[np.isfinite(pts)]
    return np.concatenate([pts, -pts, [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0]])


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=str)
@pytest.mark.parametrize("saturate", [False, True])
def test_float64_boundaries_match_exact_oracle(fmt, saturate):
    x = float64_boundaries(fmt)
    if x.size > 40_000:  # 16-bit formats: a deterministic subsample of the sweep
        x = x[np.random.default_rng(0).choice(x.size, 40_000, replace=False)]
    got = fp8kit.encode(x, fmt, saturate=saturate)
    want = oracle_codes(x, fmt, saturate)
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=str)
def test_random_float64_match_exact_oracle(fmt):
    rng = np.random.default_rng(zlib.crc32(fmt.name.encode()))
    lo, hi = max(fmt.minexp - fmt.mantissa_bits - 3, -1074), min(fmt.maxexp + 2, 1023)
    scale = np.exp2(rng.uniform(lo, hi, 3000))
    with np.errstate(over="ignore", under="ignore"):
        normal = rng.standard_normal(3000) * scale
    x = np.concatenate(
        [
            normal,
            rng.integers(0, 1 << 64, 2000, dtype=np.uint64).view(np.float64),
        ]
    )
    for saturate in (False, True):
        got = fp8kit.encode(x, fmt, saturate=saturate)
        assert (got == oracle_codes(x, fmt, saturate)).all()


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_ml_dtypes_double_rounds_float64_and_fp8kit_does_not(name):
    # ml_dtypes converts float64 through float32: 1 + 2**-k + 2**-40 becomes the exact tie
    # 1 + 2**-k in float32, which then rounds to even (down).  The exact value is above the
    # tie and must round up.
    fmt = get_format(name)
    k = fmt.mantissa_bits + 1
    x = np.array([1 + 2.0**-k + 2.0**-40, -(1 + 2.0**-k + 2.0**-40)])
    exact = oracle_codes(x, fmt, False)
    assert fmt.code_value(int(exact[0])) == 1 + Fraction(2) ** -fmt.mantissa_bits
    assert (fp8kit.encode(x, fmt, saturate=False) == exact).all()
    peer = bits_of(x.astype(fmt.dtype))
    assert (peer != exact).all()
    assert (peer == bits_of(x.astype(np.float32).astype(fmt.dtype))).all()


def test_double_rounding_cases_in_the_sweep_are_exactly_the_ml_dtypes_differences():
    fmt = get_format("float8_e4m3fn")
    x = float64_boundaries(fmt)
    x = x[np.isfinite(x) & (np.abs(x) <= fmt.max)]
    ours = fp8kit.encode(x, fmt, saturate=False)
    with np.errstate(invalid="ignore"):
        peer = bits_of(x.astype(ml_dtypes.float8_e4m3fn))
        via32 = bits_of(x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn))
    differ = ours != peer
    assert differ.sum() > 100
    assert (peer == via32).all()  # every difference is explained by the float32 detour
    assert (ours == oracle_codes(x, fmt, False)).all()


@pytest.mark.parametrize("fmt", USER_FORMATS, ids=str)
def test_user_format_decode_every_code_is_exact(fmt):
    codes = np.arange(1 << fmt.bits, dtype=fmt.code_dtype)
    got = fp8kit.decode(codes, fmt, dtype=np.float64)
    for c in range(1 << fmt.bits) if fmt.bits <= 8 else range(0, 1 << fmt.bits, 97):
        want = fmt.code_value(c)
        if isinstance(want, float) and math.isnan(want):
            assert math.isnan(got[c])
        else:
            assert got[c] == want and math.copysign(1, got[c]) == (-1 if c >> (fmt.bits - 1) else 1)


@pytest.mark.parametrize("fmt", USER_FORMATS, ids=str)
@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_user_formats_from_every_input_dtype(fmt, dtype):
    rng = np.random.default_rng(zlib.crc32((fmt.name + np.dtype(dtype).name).encode()))
    n = 4000
    bits = np.dtype(dtype).itemsize * 8
    x = rng.integers(0, 1 << bits, n, dtype=np.uint64).astype(f"u{bits // 8}").view(dtype)
    x = np.concatenate([x, float64_boundaries(fmt)[:3000].astype(dtype)]) if bits >= 32 else x
    for saturate in (False, True):
        got = fp8kit.encode(x, fmt, saturate=saturate)
        want = oracle_codes(x.astype(np.float64), fmt, saturate)
        bad = np.flatnonzero(got != want)
        assert not bad.size, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_generic_integer_kernel_agrees_with_fast_kernel(fmt, dtype):
    """The integer-only algorithm and the FPU-assisted one are independent implementations."""
    pl = plan(fmt, np.dtype(dtype))
    if pl.widen_first:
        dtype = np.float64
    x = float64_boundaries(fmt).astype(dtype)
    xb = x.view(f"u{x.itemsize}")
    from fp8kit._kernels.codec import dummy

    for saturate in (False, True):
        outs = []
        for strategy in ("fast", "generic"):
            k, _ = encode_kernel(fmt, np.dtype(dtype), saturate, strategy)
            out = np.empty(x.size, fmt.code_dtype)
            k.serial(xb, dummy(np.uint32), dummy(np.uint8), out)
            outs.append(out)
        assert (outs[0] == outs[1]).all()
        sample = np.random.default_rng(1).choice(x.size, min(x.size, 5000), replace=False)
        want = oracle_codes(x[sample].astype(np.float64), fmt, saturate)
        assert (outs[0][sample] == want).all()
