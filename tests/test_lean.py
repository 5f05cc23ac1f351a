"""encode (nearest-even) to the formats off the byte lanes by the native kernel of
fp8kit._kernels.lean: the general kernel's codes (itself checked against the exact oracle,
ml_dtypes and the onnx reference elsewhere) for every format and saturation it takes, from
float32, float64 and (every bit pattern) bfloat16 and float16 data; at every length and
alignment, streamed, on every thread count; and fp8kit.encode runs it."""

import sys

import ml_dtypes
import numpy as np
import pytest
from conftest import ALL_FORMATS, CAST_WARNINGS, FLOAT_DTYPES, boundary_probes

import fp8kit
from fp8kit import get_format
from fp8kit._kernels import lean
from fp8kit._kernels.codec import compiled_count, dummy, encode_kernel, f16_lut, plan
from fp8kit._kernels.decode import format_planes
from fp8kit._kernels.encode16 import encode16_kernel
from fp8kit._kernels.tables import decode_table

DTYPES = FLOAT_DTYPES
FORMATS = ALL_FORMATS
SATURATE = (True, False, "propagate")
D32, D8 = dummy(np.uint32), dummy(np.uint8)
pytestmark = CAST_WARNINGS

CASES = [(f, d) for d in DTYPES for f in FORMATS if lean.lean_kernel(f, d, True) is not None]


def general_codes(fmt, x, sat):
    """The general (Numba-lowered) kernel's codes of x (widened first where its plan says
    so: P3109's precision-1 formats)."""
    kernel, pl = encode_kernel(fmt, x.dtype, sat)
    if pl.widen_first:
        x = x.astype(np.float64)
    lut = f16_lut() if x.dtype == np.float16 else D32
    xb = x.view(f"u{x.itemsize}")
    out = np.empty(x.size, fmt.code_dtype)
    kernel.serial(xb, lut, D8, out)
    return out


def lean_codes(kernel, x, code_dtype):
    out = np.empty(x.size, code_dtype)
    kernel.serial(x.view(f"u{x.itemsize}"), D32, D8, out)
    return out


@pytest.mark.parametrize(("fmt", "dtype"), CASES, ids=str)
def test_the_general_kernels_codes(fmt, dtype):
    x = boundary_probes(fmt, dtype)
    for sat in SATURATE:
        kernel = lean.lean_kernel(fmt, dtype, sat)
        if kernel is None:  # (that saturation's rules are not encode_lean's)
            continue
        want = general_codes(fmt, x, sat)
        got = lean_codes(kernel, x, fmt.code_dtype)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (sat, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]])
        np.testing.assert_array_equal(fp8kit.encode(x, fmt, saturate=sat), want, str(sat))


def test_it_takes_the_formats_the_byte_lanes_do_not():
    """Every format whose general kernel rounds by encode_lean has the native kernel on
    float32 and float64 data, among them float8_e3m4, the float6 and float4 formats,
    bfloat16 and float16; bfloat16 and float16 data too where the general kernel rounds
    them as float32 bits; fp8kit.encode takes it wherever no byte-lane kernel does."""
    names = ["float8_e3m4", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "bfloat16",
             "float16", "p3109_k8p6sf", "p3109_k5p2se"]  # fmt: skip
    codec = sys.modules["fp8kit.codec"]
    for name in names:
        fmt = get_format(name)
        for dtype in DTYPES[:2]:
            kernel = lean.lean_kernel(fmt, dtype, True)
            assert kernel is not None, (name, dtype)
            assert encode16_kernel(fmt, dtype, True) is None
            x = np.linspace(-3, 3, 5001).astype(dtype)
            fp8kit.encode(x, name)
            if not (name == "bfloat16" and dtype == np.float32):  # (small calls: its own)
                plan_ = codec._FAST_ENCODE[(name, dtype, True)]
                assert plan_[1] is kernel.build().args[0], (name, dtype)
    assert lean.lean_kernel(get_format("float8_e8m0fnu"), DTYPES[0], True) is None
    # P3109's precision-1 formats, which the general kernel's plan widens to float64 first
    # (ties to the even code): this kernel on float32 bits, and encode does not widen
    for name in ("p3109_k8p1se", "p3109_k7p1uf", "p3109_k3p1se"):
        odd = get_format(name)
        assert plan(odd, np.dtype(np.float32)).widen_first
        kernel = lean.lean_kernel(odd, np.dtype(np.float32), True)
        assert kernel is not None and kernel._key[7]  # (the flipped tie test)
        fp8kit.encode(np.linspace(-3, 3, 5001, dtype=np.float32), name)
        assert codec._FAST_ENCODE[(name, np.dtype(np.float32), True)][1] is kernel.build().args[0]
    # (a smallest normal below float32's, 2**-127: float32's subnormals by the tiny step)
    for name in ("p3109_k8p1ue", "p3109_k8p1uf"):
        for dtype in (np.float32, ml_dtypes.bfloat16):
            kernel = lean.lean_kernel(get_format(name), np.dtype(dtype), True)
            assert kernel._key[9], name  # (bfloat16's subnormals widened: the same)


def test_formats_share_one_compiled_function_per_data_kind():
    x = np.linspace(-3, 3, 5001, dtype=np.float32)
    fp8kit.encode(x, "float8_e3m4")
    before = compiled_count()
    for name in ("float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "p3109_k8p6se"):
        fp8kit.encode(x, name, saturate=False)
    assert compiled_count() == before


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_length_and_alignment_and_nothing_outside(dtype):
    for name in ("float4_e2m1fn", "float16"):
        fmt = get_format(name)
        kernel = lean.lean_kernel(fmt, dtype, False)
        x = boundary_probes(fmt, dtype)[:5000].copy()
        want = general_codes(fmt, x, False)
        fill = want.dtype.type(0xA5)
        for start in (0, 1, 3, 63):
            for n in [*range(0, 140, 7), 128, 1029]:
                buf = np.full(n + 80, fill, want.dtype)
                xs = x[start : start + n]
                kernel.serial(xs.view(f"u{x.itemsize}"), D32, D8, buf[start : start + n])
                np.testing.assert_array_equal(buf[start : start + n], want[start : start + n])
                assert (buf[:start] == fill).all() and (buf[start + n :] == fill).all()


@pytest.mark.parametrize("dtype", DTYPES[:3], ids=str)
def test_large_arrays_stream_the_same_codes(dtype):
    """From 64 MiB of traffic the kernel writes with non-temporal stores (an unaligned head
    first); on every thread count."""
    rng = np.random.default_rng(5)
    n = (64 << 20) // (dtype.itemsize + 1) + 77
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))).astype(dtype)
    x[::1001] = np.nan
    fmt = get_format("float4_e2m1fn")
    want = general_codes(fmt, x, True)
    for threads in (1, 2):
        with fp8kit.num_threads(threads):
            got = fp8kit.encode(x[1:], fmt)
        np.testing.assert_array_equal(got, want[1:], err_msg=str(threads))


# -------------------------------------------- float8_e8m0fnu (unsigned powers of two)
E8M0 = get_format("float8_e8m0fnu")


def unsigned_probes(dtype):
    """Every bit pattern of the 16-bit types; for float32 and float64 the boundary probes,
    every power of two, the midpoints between them (ties go up) and their neighbours,
    negatives, zeros, Inf and NaN."""
    dtype = np.dtype(dtype)
    if dtype.itemsize == 2:
        return np.arange(1 << 16, dtype=np.uint16).view(dtype)
    e = np.arange(-160, 140, dtype=np.float64)
    mids = np.concatenate([np.exp2(e), 1.5 * np.exp2(e)]).astype(dtype)
    u = f"u{dtype.itemsize}"
    bits = mids.view(u)
    near = np.concatenate([bits - 1, bits, bits + 1]).view(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, 3e38], dtype)
    return np.concatenate([near, -near, special, boundary_probes(E8M0, dtype)])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_float8_e8m0fnu_codes_and_values_of_the_general_kernel(dtype):
    x = unsigned_probes(dtype)
    table = decode_table(E8M0, x.dtype)
    planes = format_planes(E8M0, x.dtype)
    for sat in (True, False):
        kernel = lean.unsigned_kernel(E8M0, dtype, sat)
        want = general_codes(E8M0, x, sat)
        np.testing.assert_array_equal(lean_codes(kernel, x, np.uint8), want)
        np.testing.assert_array_equal(fp8kit.encode(x, E8M0, saturate=sat), want)
        rounded = fp8kit.round_to(x, E8M0, saturate=sat)
        np.testing.assert_array_equal(rounded.view(table.dtype), table[want])
        if planes is not None:
            kernel = lean.unsigned_kernel(E8M0, dtype, sat, round_to=True)
            got = np.empty(x.size, table.dtype)
            kernel.serial(x.view(table.dtype), D32, planes, got)
            np.testing.assert_array_equal(got, table[want])


def test_float8_e8m0fnu_runs_natively_and_shares_one_function_per_data_kind():
    x = np.geomspace(1e-30, 1e30, 3001, dtype=np.float32)
    for dtype in DTYPES:
        assert lean.unsigned_kernel(E8M0, dtype, True) is not None
        assert lean.unsigned_kernel(get_format("float8_e4m3fn"), dtype, True) is None
        fp8kit.encode(x.astype(dtype), E8M0)
    before = compiled_count()
    for dtype in DTYPES:
        fp8kit.encode(x.astype(dtype), E8M0, saturate=False)  # (other constants only)
    assert compiled_count() == before


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1029, 300_001])
def test_float8_e8m0fnu_every_length_threaded(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-140, 130, n))).astype(np.float32)
    want = general_codes(E8M0, x, True)
    for threads in (1, 2):
        with fp8kit.num_threads(threads):
            np.testing.assert_array_equal(fp8kit.encode(x, E8M0), want)
            got = fp8kit.round_to(x, E8M0)
        np.testing.assert_array_equal(got, decode_table(E8M0, x.dtype)[want].view(np.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_float8_e8m0fnu_in_the_deterministic_modes_gives_the_numba_kernels_bits(dtype):
    from fp8kit._kernels.codec import encode_mode_kernel
    from fp8kit._kernels.rounding import MODES

    x = unsigned_probes(dtype)
    table = decode_table(E8M0, x.dtype)
    lut = f16_lut() if x.dtype == np.float16 else D32
    key = np.zeros(2, np.uint32)
    for name in ("nearest_even", "nearest_away", "toward_zero", "toward_positive",
                 "toward_negative"):  # fmt: skip
        mode = MODES[name]
        for sat in (True, False):
            kernel = lean.unsigned_kernel(E8M0, dtype, sat, mode=mode)
            assert kernel is not None
            numba, _ = encode_mode_kernel(E8M0, x.dtype, sat, mode, 32)
            want = np.empty(x.size, np.uint8)
            numba.build()(x.view(f"u{x.itemsize}"), lut, D8, want, key, 0, 1)
            np.testing.assert_array_equal(lean_codes(kernel, x, np.uint8), want, (name, sat))
            got = fp8kit.encode(x, E8M0, saturate=sat, rounding=name)
            np.testing.assert_array_equal(got, want, (name, sat))
            rounded = fp8kit.round_to(x, E8M0, saturate=sat, rounding=name)
            np.testing.assert_array_equal(rounded.view(table.dtype), table[want], (name, sat))
    assert lean.unsigned_kernel(E8M0, dtype, True, mode=MODES["stochastic"]) is None


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero", "toward_positive"])
def test_float8_e8m0fnu_from_float16_blocks_with_and_without_subnormals(rounding):
    """float16 blocks without a subnormal round on 16-bit lanes, the others widened: data
    with subnormals, zeros, Inf and NaN strewn at random gives the codes of its float32
    values at every offset (blocks fall on either path)."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(5000) * np.exp2(rng.integers(-20, 16, 5000))).astype(np.float16)
    picks = rng.integers(0, x.size, 60)
    x[picks[:20]] = (rng.integers(1, 1024, 20).astype(np.uint16)).view(np.float16)
    x[picks[20:30]] = -x[picks[20:30]]
    x[picks[30:40]] = np.float16(0)
    x[picks[40:50]] = np.float16(np.inf)
    x[picks[50:]] = np.float16(np.nan)
    for start in (0, 1, 33, 64):
        part = x[start:]
        want = fp8kit.encode(part.astype(np.float32), E8M0, rounding=rounding)
        np.testing.assert_array_equal(fp8kit.encode(part, E8M0, rounding=rounding), want)
    if rounding == "nearest_even":  # (ml_dtypes' own cast, every float16, saturate=False)
        every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
        with np.errstate(over="ignore", invalid="ignore"):
            oracle = every.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
        np.testing.assert_array_equal(fp8kit.encode(every, E8M0, saturate=False), oracle)


# 16-bit data to the formats encode16's lanes do not take (P3109's precision-1 formats,
# unsigned ones, those one exponent below float16's normals), on the 16-bit lanes where
# they take them and widened to float32 bits where not (shuffled: most blocks and groups
# widened)
WIDENED16 = [
    ("p3109_k8p1se", ml_dtypes.bfloat16),  # flipped ties, the FPU step
    ("p3109_k8p8ue", ml_dtypes.bfloat16),  # no rounding (shift 0), unsigned
    ("p3109_k8p3uf", ml_dtypes.bfloat16),  # unsigned, saturating: negatives give 0
    ("p3109_k8p1se", np.float16),  # float16's subnormals
    ("p3109_k8p1ue", np.float16),  # normals reaching below float32's
    ("p3109_k7p2sf", np.float16),  # normals one exponent below float16's
    ("p3109_k8p4uf", np.float16),
]


@pytest.mark.parametrize(("name", "dtype"), WIDENED16, ids=str)
def test_16_bit_data_widened_in_the_kernel(name, dtype):
    """bfloat16 and float16 data widened to float32 bits in the kernel (where not on its
    own words): the general kernel's codes for every bit pattern with subnormals, zeros,
    Inf and NaN strewn at random, at every offset, in every saturation."""
    fmt, dtype = get_format(name), np.dtype(dtype)
    rng = np.random.default_rng(5)
    every = np.arange(1 << 16, dtype=np.uint16)
    x = rng.permutation(np.concatenate([every, every[rng.integers(0, 1 << 16, 5000)]]))
    x[rng.integers(0, x.size, 4000)] = 0
    x = x.view(dtype)
    for sat in SATURATE:
        kernel = lean.lean_kernel(fmt, dtype, sat)
        if kernel is None:  # (Inf's rule under "propagate": not encode_lean's)
            assert sat == "propagate"
            continue
        for start in (0, 1, 33, 64):
            part = x[start:]
            want = general_codes(fmt, part, sat)
            np.testing.assert_array_equal(lean_codes(kernel, part, np.uint8), want, str(sat))
        want = general_codes(fmt, x, sat)
        np.testing.assert_array_equal(fp8kit.encode(x, fmt, saturate=sat), want)


# bfloat16 data to formats of at most 6 mantissa bits: on its own 16-bit words where a block
# holds no value below the format's smallest normal but zeros, widened where it does
LANES16 = ["p3109_k8p1se", "p3109_k8p1ue", "p3109_k8p3uf", "p3109_k8p7sf", "p3109_k5p2se",
           "float8_e3m4", "float6_e3m2fn", "float4_e2m1fn", "float8_e5m2"]  # fmt: skip


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16], ids=str)
@pytest.mark.parametrize("name", LANES16)
def test_16_bit_data_rounds_on_16_bit_lanes(name, dtype):
    """The general kernel's codes for every bfloat16 or float16 bit pattern in order
    (whole blocks or groups of either kind), and again with one value below the smallest
    normal in each block of normals (bfloat16: the block redone widened) or one subnormal,
    Inf or NaN strewn every 97 words (float16: the group of 64 redone), at every offset, in
    every saturation; and the kernel is built with its 16-bit lanes."""
    fmt, dtype = get_format(name), np.dtype(dtype)
    every = np.arange(1 << 16, dtype=np.uint16)
    strewn = every.copy()
    strewn[1000::2048] = 0x0001  # (the smallest subnormal: below every format's normals)
    if dtype == np.float16:
        strewn[5::97], strewn[50::291], strewn[77::389] = 0x8001, 0x7C00, 0xFE01
    for x in (every.view(dtype), strewn.view(dtype)):
        for sat in SATURATE:
            kernel = lean.lean_kernel(fmt, dtype, sat)
            if kernel is None:  # (Inf's rule under "propagate": not encode_lean's)
                continue
            assert kernel._key[-1] is True  # (the 16-bit lanes)
            for start in (0, 1, 33):
                part = x[start:]
                want = general_codes(fmt, part, sat)
                got = lean_codes(kernel, part, fmt.code_dtype)
                bad = np.flatnonzero(got != want)
                assert not bad.size, (sat, start, [(hex(part.view(np.uint16)[i]), got[i],
                                                    want[i]) for i in bad[:5]])  # fmt: skip
    # (formats of 7 mantissa bits or more are widened)
    assert lean.lean_kernel(get_format("bfloat16"), dtype, True)._key[-1] is False


@pytest.mark.parametrize(("dtype", "layout"), [(ml_dtypes.bfloat16, "bfloat16"),
                                               (np.float16, "float16")], ids=str)  # fmt: skip
def test_float8_e8m0fnu_from_16_bit_data_on_its_own_words(dtype, layout):
    """bfloat16 and float16 data to float8_e8m0fnu round on their 16-bit words, with the
    constants of their own layout after the float32 ones (float16's rebias, negative,
    wrapped; every bit pattern, every mode: see
    test_float8_e8m0fnu_in_the_deterministic_modes_gives_the_numba_kernels_bits)."""
    from fp8kit._kernels.codec import _params

    kernel = lean.unsigned_kernel(E8M0, dtype, True)
    q32, q16 = _params(E8M0, "float32", True)[1], _params(E8M0, layout, True)[1]
    assert kernel._params.tolist() == [int(v) for v in q32 + q16]
    if layout == "float16":
        assert int(q16[4]) == (15 - 127) & 0xFFFF
    # ml_dtypes' own cast, every bit pattern, saturate=False
    every = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        oracle = every.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    np.testing.assert_array_equal(fp8kit.encode(every, E8M0, saturate=False), oracle)
    np.testing.assert_array_equal(lean_codes(lean.unsigned_kernel(E8M0, every.dtype, False),
                                             every, np.uint8), oracle)  # fmt: skip
