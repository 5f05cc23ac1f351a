"""round_to float64 (nearest-even) by the native kernel that rounds the bits in place
(fp8kit._kernels.round64): every signed format and saturation against the codes' values
(encode float64 is checked against the exact oracle in test_exact_reference), against the
general kernel it replaces, at every length and alignment, streamed, and run by
fp8kit.round_to."""

import sys
import zlib

import numpy as np
import pytest
from conftest import USER_FORMATS

import fp8kit
from fp8kit import get_format
from fp8kit._kernels import round64
from fp8kit._kernels.codec import compiled_count, dummy, encode_kernel
from fp8kit._kernels.tables import code_values, decode_table

F64 = np.dtype(np.float64)
FORMATS = [get_format(n) for n in fp8kit.formats.registered_formats()] + USER_FORMATS
SATURATE = (True, False, "propagate")
D32, D8 = dummy(np.uint32), dummy(np.uint8)

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered")


def probes(fmt):
    """Every finite value of ``fmt``, the midpoints between neighbours (and beyond the
    largest), the float64 neighbours of both, halves and quarters (subnormal ties), specials,
    NaN payloads, random bit patterns and random normals over the format's range; both
    signs."""
    vals = np.unique(np.abs(code_values(fmt)))
    vals = vals[np.isfinite(vals)]
    top = vals[-1]
    step = np.ldexp(1.0, int(np.floor(np.log2(top))) - fmt.mantissa_bits)
    grid = np.concatenate([vals, [top + step, top + 2 * step, top * 2, top * 4]])
    mids = grid[:-1] / 2 + grid[1:] / 2
    pts = np.concatenate([grid, mids])
    pts = np.concatenate([pts, np.nextafter(pts, np.inf), np.nextafter(pts, 0), vals / 2,
                          vals / 4, vals * 0.75])  # fmt: skip
    rng = np.random.default_rng(zlib.crc32(fmt.name.encode()))
    nan_bits = [0x7FF0000000000001, 0x7FF8000000000000, 0x7FFFFFFFFFFFFFFF, 0x7FF4000000000000]
    rnd = rng.integers(0, 1 << 64, 3000, dtype=np.uint64).view(np.float64)
    lo, hi = fmt.minexp - fmt.mantissa_bits - 3, min(fmt.maxexp + 2, 1023)
    normal = rng.standard_normal(3000) * np.exp2(rng.uniform(lo, hi, 3000))
    special = [np.inf, 0.0, 5e-324, 2.2250738585072014e-308, sys.float_info.max, 1e300]
    pts = np.concatenate([pts, np.array(nan_bits, np.uint64).view(np.float64), special, rnd,
                          normal])  # fmt: skip
    pts = np.abs(pts[~np.isnan(pts)])
    if pts.size > 40_000:  # 16-bit formats: a deterministic subsample of the sweep
        pts = pts[np.random.default_rng(0).choice(pts.size, 40_000, replace=False)]
    pts = np.concatenate([pts, np.array(nan_bits, np.uint64).view(np.float64), [np.nan]])
    return np.concatenate([pts, -pts])


def values_of_codes(x, fmt, saturate):
    """The float64 bits round_to must give: the decode table at x's codes."""
    return decode_table(fmt, F64)[fp8kit.encode(x, fmt, saturate=saturate)]


def kernel_run(kernel, x):
    out = np.empty(x.size, np.uint64)
    kernel.serial(x.view(np.uint64), D32, D8, out)
    return out


def test_every_signed_format_has_the_kernel_and_no_unsigned_one():
    """Unsigned formats keep the general kernel; so do the two formats whose subnormals reach
    below float64's smallest normal (a flush-to-zero mode could change their results)."""
    for fmt in FORMATS:
        for sat in SATURATE:
            has = round64.round64_kernel(fmt, sat) is not None
            want = fmt.signed and fmt.minexp - fmt.mantissa_bits - 1 >= -1022
            assert has == want, (fmt.name, sat)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if round64.round64_params(f, True) is not None],
                         ids=str)  # fmt: skip
def test_round_to_float64_gives_the_codes_values(fmt):
    """Against the codes' values and against the general kernel (codes into a buffer, then
    the table), each saturation; fp8kit.round_to runs the kernel."""
    x = probes(fmt)
    for sat in SATURATE:
        kernel = round64.round64_kernel(fmt, sat)
        want = values_of_codes(x, fmt, sat)
        got = kernel_run(kernel, x)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (sat, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]])
        general, _ = encode_kernel(fmt, F64, sat, table_dtype=np.dtype(np.uint64))
        old = np.empty(x.size, np.uint64)
        general.serial(x.view(np.uint64), D32, decode_table(fmt, F64), old)
        np.testing.assert_array_equal(got, old, err_msg=str(sat))
        np.testing.assert_array_equal(fp8kit.round_to(x, fmt, saturate=sat).view(np.uint64),
                                      want, err_msg=str(sat))  # fmt: skip


def test_round_to_runs_the_kernel_and_formats_share_it():
    """fp8kit.round_to's cached call plan binds this kernel's parameters; the formats whose
    rules take no extra step share one compiled function (a further format compiles
    nothing), as do fnuz formats among themselves."""
    x = np.linspace(-600, 600, 5001)
    codec = sys.modules["fp8kit.codec"]
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"):
        fmt = get_format(name)
        fp8kit.round_to(x, name)
        plan = codec._FAST_ROUND[(name, F64, True)]
        assert plan[1] is round64.round64_kernel(fmt, True).build().args[0]
    before = compiled_count()
    for name in ("float8_e4m3", "float8_e3m4", "float6_e2m3fn", "float4_e2m1fn", "bfloat16",
                 "float16", "float8_e5m2fnuz"):  # fmt: skip
        fp8kit.round_to(x, name)
    assert compiled_count() == before


def test_every_length_and_alignment_and_nothing_outside():
    fmt = get_format("float8_e4m3fnuz")
    kernel = round64.round64_kernel(fmt, False)
    x = probes(fmt)[:5000].copy()
    want = values_of_codes(x, fmt, False)
    fill = 0xA5A5A5A5A5A5A5A5
    for start in (0, 1, 3, 7):
        for n in [*range(0, 70, 3), 128, 1029]:
            buf = np.full(n + 16, fill, np.uint64)
            kernel.serial(x[start : start + n].view(np.uint64), D32, D8, buf[start : start + n])
            np.testing.assert_array_equal(buf[start : start + n], want[start : start + n])
            assert (buf[:start] == fill).all() and (buf[start + n :] == fill).all()


def test_large_arrays_stream_the_same_bits():
    """From round64.STREAM_MIN elements the kernel writes with non-temporal stores (an
    unaligned head first); on every thread count."""
    rng = np.random.default_rng(5)
    n = round64.STREAM_MIN + 77
    x = rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))
    x[::1001] = np.nan
    for name in ("float8_e4m3fn", "bfloat16"):
        want = values_of_codes(x, get_format(name), True)
        for threads in (1, 2):
            with fp8kit.num_threads(threads):
                got = fp8kit.round_to(x[1:], name).view(np.uint64)
            np.testing.assert_array_equal(got, want[1:], err_msg=f"{name} {threads}")
