"""round_to float32 and float64 (nearest-even) by the native kernel that rounds the bits in
place (fp8kit._kernels.inplace): every signed format and saturation against the codes'
values (encode is checked against the exact oracle in test_exact_reference and against
ml_dtypes), against the general kernel it replaces, at every length and alignment,
streamed, and run by fp8kit.round_to."""

import sys

import ml_dtypes
import numpy as np
import pytest
from conftest import ALL_FORMATS, CAST_WARNINGS, FLOAT_DTYPES, boundary_probes

import fp8kit
from fp8kit import get_format
from fp8kit._kernels import inplace
from fp8kit._kernels.codec import LOAD_LUT, compiled_count, dummy, encode_kernel, f16_lut
from fp8kit._kernels.tables import code_values, decode_table

F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
DTYPES = FLOAT_DTYPES
FORMATS = ALL_FORMATS
SATURATE = (True, False, "propagate")
D32, D8 = dummy(np.uint32), dummy(np.uint8)
pytestmark = CAST_WARNINGS


def values_of_codes(x, fmt, saturate):
    """The bits round_to must give: the decode table at x's codes."""
    return decode_table(fmt, x.dtype)[fp8kit.encode(x, fmt, saturate=saturate)]


def kernel_run(kernel, x):
    u = np.dtype(f"u{x.itemsize}")
    out = np.empty(x.size, u)
    kernel.serial(x.view(u), D32, dummy(u), out)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_signed_format_has_the_kernel_and_no_unsigned_one(dtype):
    """Unsigned formats keep the general kernel; so do the formats whose subnormals reach
    below the type's smallest normal (a flush-to-zero mode could change their results)
    unless their smallest normal is the type's, or whose range exceeds it; bfloat16 data
    (rounded as float32) also the formats whose values bfloat16 does not hold."""
    emin, emax = (-1022, 1023) if dtype == F64 else (-126, 127)
    for fmt in FORMATS:
        low = fmt.minexp - fmt.mantissa_bits - 1 >= emin or fmt.minexp == emin
        in_range = low and fmt.maxexp - 1 <= emax
        if dtype == BF16:  # (narrowed by truncation: formats whose values it holds)
            vals = code_values(fmt)
            vals = vals[np.isfinite(vals)]
            with np.errstate(over="ignore"):
                in_range = in_range and (vals.astype(dtype).astype(np.float64) == vals).all()
        for sat in SATURATE:
            has = inplace.round_kernel(fmt, dtype, sat) is not None
            want = fmt.signed and in_range
            assert has == want, (fmt.name, sat)


CASES = [(f, d) for d in DTYPES for f in FORMATS if inplace.round_params(f, d, True) is not None]


@pytest.mark.parametrize(("fmt", "dtype"), CASES, ids=lambda c: str(c))
def test_round_to_gives_the_codes_values(fmt, dtype):
    """Against the codes' values and against the general kernel (codes into a buffer, then
    the table; float32 data widened first where its plan says so), each saturation;
    fp8kit.round_to gives them."""
    x = boundary_probes(fmt, dtype)
    u = np.dtype(f"u{dtype.itemsize}")
    for sat in SATURATE:
        kernel = inplace.round_kernel(fmt, dtype, sat)
        want = values_of_codes(x, fmt, sat)
        got = kernel_run(kernel, x)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (sat, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]])
        general, pl = encode_kernel(fmt, dtype, sat, table_dtype=u)
        xg = x.astype(np.float64) if pl.widen_first else x
        old = np.empty(x.size, u)
        lut = f16_lut() if pl.load == LOAD_LUT else D32
        general.serial(xg.view(f"u{xg.itemsize}"), lut, decode_table(fmt, dtype), old)
        np.testing.assert_array_equal(got, old, err_msg=str(sat))
        np.testing.assert_array_equal(fp8kit.round_to(x, fmt, saturate=sat).view(u), want,
                                      err_msg=str(sat))  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_to_runs_the_kernel_and_formats_share_it(dtype):
    """fp8kit.round_to's cached call plan binds this kernel's parameters (float32 data: for
    the formats off the byte lanes); the formats whose rules take no extra step share one
    compiled function (a further format compiles nothing), as do fnuz formats among
    themselves."""
    x = np.linspace(-600, 600, 5001).astype(dtype)
    codec = sys.modules["fp8kit.codec"]
    for name in ("float8_e3m4", "float4_e2m1fn", "p3109_k8p6sf"):
        fmt = get_format(name)
        fp8kit.round_to(x, name)
        plan = codec._FAST_ROUND[(name, dtype, True)]
        assert plan[1] is inplace.round_kernel(fmt, dtype, True).build().args[0]
    before = compiled_count()
    names = ["float6_e2m3fn", "float6_e3m2fn", "p3109_k8p7sf"]
    if dtype != BF16:  # (float16's values: not all bfloat16 values)
        names.append("float16")
    if dtype == F64:  # (float32 data to bfloat16: its subnormals would reach float32's)
        names += ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3"]
    for name in names:
        fp8kit.round_to(x, name)
    assert compiled_count() == before
    if dtype.itemsize >= 4:  # (16-bit data: the fnuz formats are on the byte lanes)
        fp8kit.round_to(x, "float8_e4m3fnuz")
        before = compiled_count()
        fp8kit.round_to(x, "float8_e5m2fnuz")
        fp8kit.round_to(x, "float8_e4m3b11fnuz")
        assert compiled_count() == before


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_length_and_alignment_and_nothing_outside(dtype):
    fmt = get_format("float8_e4m3fnuz")
    kernel = inplace.round_kernel(fmt, dtype, False)
    x = boundary_probes(fmt, dtype)[:5000].copy()
    want = values_of_codes(x, fmt, False)
    u = want.dtype
    fill = u.type(0xA5A5A5A5A5A5A5A5 & ((1 << (8 * u.itemsize)) - 1))
    for start in (0, 1, 3, 7):
        for n in [*range(0, 70, 3), 128, 1029]:
            buf = np.full(n + 16, fill, u)
            kernel.serial(x[start : start + n].view(u), D32, dummy(u), buf[start : start + n])
            np.testing.assert_array_equal(buf[start : start + n], want[start : start + n])
            assert (buf[:start] == fill).all() and (buf[start + n :] == fill).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_arrays_stream_the_same_bits(dtype):
    """From inplace.STREAM_MIN elements the kernel writes with non-temporal stores (an
    unaligned head first); on every thread count."""
    rng = np.random.default_rng(5)
    n = inplace.STREAM_MIN[dtype.itemsize * 8] + 77
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(dtype)
    x[::1001] = np.nan
    for name in ("float4_e2m1fn", "bfloat16"):
        want = values_of_codes(x, get_format(name), True)
        for threads in (1, 2):
            with fp8kit.num_threads(threads):
                got = fp8kit.round_to(x[1:], name).view(want.dtype)
            np.testing.assert_array_equal(got, want[1:], err_msg=f"{name} {threads}")
    # out off its element alignment (numpy allows it): written in place, no line boundary
    # falls on an element there (non-temporal stores fault)
    raw = np.zeros(n * dtype.itemsize + 1, np.uint8)
    out = raw[1:].view(dtype)
    assert not out.flags.aligned
    fp8kit.round_to(x, "float4_e2m1fn", out=out)
    want = values_of_codes(x, get_format("float4_e2m1fn"), True)
    np.testing.assert_array_equal(out.view(want.dtype), want)
