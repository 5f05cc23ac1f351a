"""encode in the deterministic rounding modes (and nearest-even with flush_subnormals) by
the native kernel of fp8kit._kernels.modes: the Numba mode kernel's codes (itself checked
against the exact oracle in test_rounding_modes and test_p3109_modes) for every format but
float8_e8m0fnu, every mode, saturation and input dtype it takes (every bit pattern of the
16-bit types); at every length and alignment; and fp8kit.encode runs it."""

import numpy as np
import pytest
from conftest import (
    ALL_FORMATS,
    CAST_WARNINGS,
    FLOAT_DTYPES,
    USER_FORMATS,
    boundary_probes,
    refuse_numba,
)

import fp8kit
from fp8kit import get_format
from fp8kit._kernels import modes
from fp8kit._kernels.codec import LOAD_LUT, compiled_count, dummy, encode_mode_kernel, f16_lut
from fp8kit._kernels.decode import format_planes
from fp8kit._kernels.rounding import MODES, NEAREST_EVEN, mode_kind
from fp8kit._kernels.tables import decode_table

DTYPES = FLOAT_DTYPES
FORMATS = ALL_FORMATS
DET = [name for name, m in MODES.items() if mode_kind(m) == 0]
D8 = dummy(np.uint8)
pytestmark = CAST_WARNINGS
CASES = [(f, d) for d in DTYPES for f in FORMATS
         if modes.mode_kernel(f, d, True, MODES["toward_zero"], False) is not None]  # fmt: skip


def numba_codes(fmt, x, sat, mode, flush):
    kernel, pl = encode_mode_kernel(fmt, x.dtype, sat, mode, 32, flush=flush)
    lut = f16_lut() if pl.load == LOAD_LUT else dummy(np.uint32)
    out = np.empty(x.size, fmt.code_dtype)
    key = np.zeros(2, np.uint32)
    kernel.build()(x.view(f"u{x.itemsize}"), lut, D8, out, key, 0, 1)
    return out


def native_codes(kernel, x, code_dtype):
    out = np.empty(x.size, code_dtype)
    kernel.serial(x.view(f"u{x.itemsize}"), dummy(np.uint32), D8, out)
    return out


def mode_cases(fmt):
    """(mode name, saturate, flush): every deterministic mode and saturation, and
    nearest-even with flushing; for P3109's precision-1 formats of odd bias (widened to
    float64 where a tie's parity decides: the Numba kernel) the modes without ties'
    parity."""
    sats = [True, False] + (["propagate"] if fmt.has_inf else [])
    cases = [(name, sat, False) for name in DET for sat in sats] + [
        ("nearest_even", sat, True) for sat in sats
    ]
    if fp8kit._kernels.codec._odd_parity(fmt, "float32"):
        cases = [c for c in cases if c[0] not in ("nearest_even", "to_odd")]
    return cases


@pytest.mark.parametrize(("fmt", "dtype"), CASES, ids=str)
def test_the_numba_kernels_codes(fmt, dtype):
    x = boundary_probes(fmt, dtype)
    for name, sat, flush in mode_cases(fmt):
        mode = MODES[name]
        kernel = modes.mode_kernel(fmt, dtype, sat, mode, flush)
        assert kernel is not None, (name, sat)
        want = numba_codes(fmt, x, sat, mode, flush)
        got = native_codes(kernel, x, fmt.code_dtype)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (name, sat, flush, [(x[i], got[i], want[i]) for i in bad[:4]])
    got = fp8kit.encode(x, fmt, rounding="toward_positive", saturate=False)
    want = numba_codes(fmt, x, False, MODES["toward_positive"], False)
    np.testing.assert_array_equal(got, want)


def test_it_takes_every_format_but_float8_e8m0fnu():
    for fmt in FORMATS:
        for dtype in DTYPES[:2]:
            kernel = modes.mode_kernel(fmt, dtype, True, MODES["toward_zero"], False)
            widened = fp8kit._kernels.codec.mode_plan(fmt, dtype, MODES["toward_zero"]).widen_first
            # (the unsigned P3109 formats take the signed path and its rule for negative
            # values; float8_e8m0fnu a path of its own; precision 1 is widened only where a
            # tie's parity decides, and where its smallest normal is a float32 subnormal)
            assert (kernel is not None) == (fmt.specials != "unsigned" and not widened), (
                fmt.name,
                dtype,
            )
    assert modes.mode_kernel(FORMATS[0], DTYPES[0], True, MODES["stochastic"], False) is None


def test_modes_share_nothing_but_formats_share_the_kernel():
    x = np.linspace(-300, 300, 5001, dtype=np.float32)
    fp8kit.encode(x, "float8_e4m3fn", rounding="toward_zero")
    before = compiled_count()
    for name in ("float8_e5m2", "float8_e3m4", "float4_e2m1fn", "float6_e3m2fn"):
        fp8kit.encode(x, name, rounding="toward_zero")
    assert compiled_count() == before


def test_every_length_and_alignment_and_nothing_outside():
    fmt = get_format("float8_e4m3fnuz")
    kernel = modes.mode_kernel(fmt, DTYPES[0], False, MODES["nearest_away"], True)
    x = boundary_probes(fmt, DTYPES[0])[:5000].copy()
    want = numba_codes(fmt, x, False, MODES["nearest_away"], True)
    assert_lengths_and_alignments(kernel, x, D8, want, 0xA5)


def assert_lengths_and_alignments(kernel, x, table, want, fill):
    """The kernel's results on x[start:start + n] for every offset and length, and nothing
    written outside them (the buffer's other entries keep ``fill``)."""
    for start in (0, 1, 3, 63):
        for n in [*range(0, 140, 7), 128, 1029]:
            buf = np.full(n + 80, fill, want.dtype)
            kernel.serial(x[start : start + n].view(np.uint32), dummy(np.uint32), table,
                          buf[start : start + n])  # fmt: skip
            np.testing.assert_array_equal(buf[start : start + n], want[start : start + n])
            assert (buf[:start] == fill).all() and (buf[start + n :] == fill).all()


def test_encode_runs_it_threaded_with_the_same_codes():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(300_001) * np.exp2(rng.integers(-20, 20, 300_001))).astype(np.float32)
    fmt = get_format("float8_e5m2")
    want = numba_codes(fmt, x, True, MODES["toward_negative"], False)
    for threads in (1, 2):
        with fp8kit.num_threads(threads):
            got = fp8kit.encode(x, fmt, rounding="toward_negative")
        np.testing.assert_array_equal(got, want)
    assert NEAREST_EVEN == 0


# ------------------------------------------------------------------ round_to in the modes
ROUND_CASES = [
    (f, d) for f, d in CASES if modes.round_mode_kernel(f, d, True, MODES["toward_zero"], False)
]


def numba_rounded(fmt, x, sat, mode, flush):
    """round_to by the Numba mode kernel (codes, then their values from the table)."""
    table = decode_table(fmt, x.dtype)
    kernel, pl = encode_mode_kernel(fmt, x.dtype, sat, mode, 32, table_dtype=table.dtype,
                                    flush=flush)  # fmt: skip
    lut = f16_lut() if pl.load == LOAD_LUT else dummy(np.uint32)
    out = np.empty(x.size, table.dtype)
    kernel.build()(x.view(table.dtype), lut, table, out, np.zeros(2, np.uint32), 0, 1)
    return out


def native_rounded(kernel, fmt, x):
    out = np.empty(x.size, f"u{x.itemsize}")
    # (bfloat16, float16: no table read; round_to passes the decode table)
    table = format_planes(fmt, x.dtype) if kernel.planes else decode_table(fmt, x.dtype)
    kernel.serial(x.view(out.dtype), dummy(np.uint32), table, out)
    return out


def test_round_to_in_the_modes_is_native_wherever_there_are_planes():
    # every 8-bit format the mode kernel takes, every dtype, where the CPU has VBMI and the
    # values fit the planes (not float64 values of P3109 formats with 5-7 mantissa bits);
    # bfloat16 and float16 with no planes (their codes widened, or rounded to the other
    # 16-bit dtype: float32 -> float16 where the CPU converts it)
    from fp8kit._kernels.bits import _hardware_half

    for fmt, dtype in CASES:
        planes = format_planes(fmt, dtype)
        kernel = modes.round_mode_kernel(fmt, dtype, True, MODES["toward_zero"], False)
        wide = fmt.name in ("bfloat16", "float16") and fmt == get_format(fmt.name)
        to_half = fmt.name == "bfloat16" and np.dtype(dtype) == np.float16
        native = (fmt.bits <= 8 and planes is not None) or (
            wide and (_hardware_half() or not to_half)
        )
        assert (kernel is not None) == native, (fmt, dtype)
        assert kernel is None or kernel.planes == (fmt.bits <= 8), (fmt, dtype)
    if fp8kit._kernels.bits.cpu_has("avx512vbmi"):
        assert len(ROUND_CASES) >= 3 * len(ALL_FORMATS)


@pytest.mark.parametrize(("fmt", "dtype"), ROUND_CASES, ids=str)
def test_round_to_in_the_modes_matches_the_numba_kernel(fmt, dtype):
    x = boundary_probes(fmt, dtype)
    for name, sat, flush in mode_cases(fmt):
        mode = MODES[name]
        kernel = modes.round_mode_kernel(fmt, dtype, sat, mode, flush)
        want = numba_rounded(fmt, x, sat, mode, flush)
        got = native_rounded(kernel, fmt, x)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (name, sat, flush, [(x[i], got[i], want[i]) for i in bad[:4]])
    # and round_to runs it, threaded
    with fp8kit.num_threads(2):
        got = fp8kit.round_to(x, fmt, rounding="toward_negative", saturate=False)
    want = numba_rounded(fmt, x, False, MODES["toward_negative"], False)
    np.testing.assert_array_equal(got.view(want.dtype), want)


def test_round_to_in_the_modes_every_length_and_alignment():
    fmt = get_format("float8_e5m2")
    if format_planes(fmt, np.float32) is None:
        pytest.skip("no AVX512-VBMI: round_to in the modes runs the Numba kernel")
    kernel = modes.round_mode_kernel(fmt, DTYPES[0], True, MODES["nearest_away"], True)
    x = boundary_probes(fmt, DTYPES[0])[:5000].copy()
    want = numba_rounded(fmt, x, True, MODES["nearest_away"], True)
    assert_lengths_and_alignments(kernel, x, format_planes(fmt, np.float32), want, 0xA5A5A5A5)


def test_round_to_bfloat16_and_float16_in_the_modes_every_length_and_alignment():
    """The 16-bit formats' values widened in the kernel: float64 results (64-bit lanes)
    and 16-bit ones at every length and offset, nothing written outside."""
    bf16 = get_format("bfloat16").dtype
    for name, dtype, fill in (("float16", np.float64, 0xA5A5A5A5A5A5A5A5),
                              ("bfloat16", bf16, 0xA5A5)):  # fmt: skip
        fmt = get_format(name)
        x = boundary_probes(fmt, dtype)[:5000].copy()
        kernel = modes.round_mode_kernel(fmt, x.dtype, True, MODES["to_odd"], True)
        want = numba_rounded(fmt, x, True, MODES["to_odd"], True)
        bits = f"u{x.itemsize}"
        for start in (0, 1, 3, 63):
            for n in [*range(0, 140, 7), 128, 1029]:
                buf = np.full(n + 80, fill, bits)
                kernel.serial(x[start : start + n].view(bits), dummy(np.uint32), dummy(bits),
                              buf[start : start + n])  # fmt: skip
                np.testing.assert_array_equal(buf[start : start + n], want[start : start + n])
                assert (buf[:start] == fill).all() and (buf[start + n :] == fill).all()


def test_round_to_in_the_modes_formats_share_the_kernels():
    x = np.linspace(-300, 300, 5001, dtype=np.float32)
    if format_planes(get_format("float8_e4m3fn"), np.float32) is None:
        pytest.skip("no AVX512-VBMI: round_to in the modes runs the Numba kernel")

    def every_mode(name):
        for mode in DET:
            for data in (x, x.astype(np.float64)):
                assert modes.round_mode_kernel(get_format(name), data.dtype, True,
                                               MODES[mode], False)  # fmt: skip
                fp8kit.round_to(data, name, rounding=mode)
        fp8kit.round_to(x, name, flush_subnormals=True)

    every_mode("float8_e4m3fn")
    before = compiled_count()
    for name in ("float8_e5m2", "float8_e3m4", "float4_e2m1fn", "float6_e3m2fn"):
        every_mode(name)
    assert compiled_count() == before


# ------------------------------- nearest-even where no other native kernel takes a format
def fallback_cases():
    """(fmt, dtype, saturate) that encode rounds by the mode kernel in nearest-even: no
    byte-lane, encode_lean or unsigned kernel takes them (P3109's precision-1 formats, the
    unsigned P3109 formats saturating)."""
    from fp8kit._kernels.encode16 import encode16_kernel
    from fp8kit._kernels.lean import lean_kernel, unsigned_kernel

    for fmt in FORMATS:
        for dtype in DTYPES:
            for sat in (True, False, "propagate"):
                if sat == "propagate" and not fmt.has_inf:
                    continue
                if not (encode16_kernel(fmt, dtype, sat) or lean_kernel(fmt, dtype, sat)
                        or unsigned_kernel(fmt, dtype, sat)):  # fmt: skip
                    yield fmt, dtype, sat


FALLBACK = list(fallback_cases())


def test_every_format_and_dtype_encodes_natively_in_nearest_even():
    from fp8kit._kernels.codec import plan

    assert len(FALLBACK) > 100
    for fmt, dtype, sat in FALLBACK:
        data = np.float64 if plan(fmt, dtype).widen_first else dtype
        assert modes.mode_kernel(fmt, data, sat, NEAREST_EVEN, False) is not None, (fmt, dtype)


@pytest.mark.parametrize(("fmt", "dtype", "sat"), FALLBACK, ids=str)
def test_nearest_even_by_the_mode_kernel_gives_the_general_kernels_codes(fmt, dtype, sat):
    from fp8kit._kernels.codec import encode_kernel, plan

    x = boundary_probes(fmt, dtype)
    kernel, pl = encode_kernel(fmt, x.dtype, sat)
    lut = f16_lut() if pl.load == LOAD_LUT else dummy(np.uint32)
    data = x.astype(np.float64) if pl.widen_first else x
    want = np.empty(x.size, fmt.code_dtype)
    kernel.build()(data.view(f"u{data.itemsize}"), lut, D8, want, 1)
    got = native_codes(modes.mode_kernel(fmt, data.dtype, sat, NEAREST_EVEN, False), data,
                       fmt.code_dtype)  # fmt: skip
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(fp8kit.encode(x, fmt, saturate=sat), want)
    assert plan(fmt, dtype).strategy != "unsigned"


def round_fallback_cases():
    """(fmt, dtype, saturate) that round_to rounds by the mode kernel and the table's planes
    in nearest-even: no byte-lane, in-place or unsigned kernel takes them."""
    from fp8kit._kernels.encode16 import round16_kernel
    from fp8kit._kernels.inplace import round_kernel
    from fp8kit._kernels.lean import unsigned_kernel

    for fmt in FORMATS:
        for dtype in DTYPES:
            for sat in (True, False, "propagate"):
                if sat == "propagate" and not fmt.has_inf:
                    continue
                if format_planes(fmt, dtype) is None or (
                    dtype.itemsize == 2 and round16_kernel(fmt, dtype, sat)
                ):
                    continue
                if round_kernel(fmt, dtype, sat) or unsigned_kernel(fmt, dtype, sat, True):
                    continue
                if modes.round_mode_kernel(fmt, dtype, sat, NEAREST_EVEN, False):
                    yield fmt, dtype, sat


ROUND_FALLBACK = list(round_fallback_cases())


@pytest.mark.parametrize(("fmt", "dtype", "sat"), ROUND_FALLBACK, ids=str)
def test_round_to_nearest_even_by_the_mode_kernel_gives_the_numba_kernels_values(fmt, dtype, sat):
    x = boundary_probes(fmt, dtype)
    table = decode_table(fmt, x.dtype)
    kernel, pl = fp8kit._kernels.codec.encode_kernel(fmt, x.dtype, sat, table_dtype=table.dtype)
    lut = f16_lut() if pl.load == LOAD_LUT else dummy(np.uint32)
    want = np.empty(x.size, table.dtype)
    kernel.build()(x.view(table.dtype), lut, table, want, 1)
    np.testing.assert_array_equal(fp8kit.round_to(x, fmt, saturate=sat).view(table.dtype), want)


def test_round_to_nearest_even_fallbacks_exist_where_the_cpu_has_vbmi():
    if fp8kit._kernels.bits.cpu_has("avx512vbmi"):
        assert len(ROUND_FALLBACK) >= 40  # (the unsigned P3109 formats)


# ----------------------- every format and dtype without a Numba kernel: round_to's fallback
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_format_rounds_and_encodes_without_numba_in_nearest_even(dtype, monkeypatch):
    """round_to, encode, decode and astype of every format, both saturations, nearest-even:
    native kernels only (a first call of a further format or dtype compiles no Numba
    kernel).  round_to of the unsigned P3109 formats from float32/16-bit data at precision
    1 and float64 data at precision 6 or more (no planes) runs encode's kernel, then
    decode's."""
    x = np.array([1.5, -2.25, 3e-39, 1e30, np.inf, np.nan, 0.0, 65504.0], np.float32)
    x = x.astype(dtype)
    refuse_numba(monkeypatch)
    for fmt in FORMATS:
        for sat in (True, False):
            codes = fp8kit.encode(x, fmt, saturate=sat)
            fp8kit.round_to(x, fmt, saturate=sat)
        fp8kit.decode(codes, fmt, dtype=dtype)
        if fmt.dtype is not None:
            fp8kit.astype(x, fmt)


def two_pass_cases():
    """(fmt, dtype) that round_to rounds by encode's kernel, then decode's, in nearest-even."""
    from fp8kit._kernels.encode16 import round16_kernel
    from fp8kit._kernels.inplace import round_kernel
    from fp8kit._kernels.lean import unsigned_kernel

    for fmt in FORMATS:
        for dtype in DTYPES:
            planes = format_planes(fmt, dtype)
            if round_kernel(fmt, dtype, True) or (
                planes is not None and dtype.itemsize == 2 and round16_kernel(fmt, dtype, True)
            ):
                continue
            if planes is not None and (
                unsigned_kernel(fmt, dtype, True, True)
                or modes.round_mode_kernel(fmt, dtype, True, NEAREST_EVEN, False)
            ):
                continue
            if fmt.bits > 8 and modes.round_mode_kernel(fmt, dtype, True, NEAREST_EVEN, False):
                continue
            yield fmt, dtype


TWO_PASS = list(two_pass_cases())


def test_two_pass_round_to_cases_are_the_unsigned_p3109_and_users_formats():
    names = {(f.name, d.name) for f, d in TWO_PASS}
    assert ("p3109_k8p1ue", "float32") in names and ("p3109_k8p6ue", "float64") in names
    assert ("u_e11m4", "float32") in names
    assert all(f in USER_FORMATS or not f.signed and f.name.startswith("p3109")
               for f, _ in TWO_PASS), names  # fmt: skip


@pytest.mark.parametrize(("fmt", "dtype"), TWO_PASS[::3], ids=str)
def test_two_pass_round_to_gives_the_numba_kernels_values(fmt, dtype):
    """round_to by encode's codes, then decode: the bits of the one-pass Numba kernel it
    stands for (codes looked up in the decode table), every saturation, ``out`` too."""
    x = boundary_probes(fmt, dtype)
    table = decode_table(fmt, x.dtype)
    for sat in (True, False):
        kernel, pl = fp8kit._kernels.codec.encode_kernel(fmt, x.dtype, sat,
                                                         table_dtype=table.dtype)  # fmt: skip
        lut = f16_lut() if pl.load == LOAD_LUT else dummy(np.uint32)
        data = x.astype(np.float64) if pl.widen_first else x
        want = np.empty(x.size, table.dtype)
        kernel.build()(data.view(f"u{data.itemsize}"), lut, table, want, 1)
        got = fp8kit.round_to(x, fmt, saturate=sat)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got.view(table.dtype), want)
        out = np.full(x.shape, 7, x.dtype)
        assert fp8kit.round_to(x, fmt, saturate=sat, out=out) is out
        np.testing.assert_array_equal(out.view(table.dtype), want)
    assert fp8kit.round_to(x[5], fmt).shape == ()


@pytest.mark.parametrize("mode", ["toward_zero", "to_odd", "nearest_away"])
def test_widened_precision_1_formats_take_the_float64_mode_kernel(mode, monkeypatch):
    """P3109's precision-1 formats the plan widens to float64 (the unsigned ones, whose
    smallest normal is a float32 subnormal; the odd-bias signed ones in the modes a tie's
    parity decides): the float64 mode kernel on the widened data, the Numba kernel's codes."""
    m = MODES[mode]
    for name in ("p3109_k8p1ue", "p3109_k8p1uf", "p3109_k8p1se"):
        fmt = get_format(name)
        for dtype in (np.float32, np.float16):
            x = boundary_probes(fmt, dtype)
            want = numba_codes(fmt, x.astype(np.float64), True, m, False)
            with monkeypatch.context() as patch:
                refuse_numba(patch)
                got = fp8kit.encode(x, fmt, rounding=mode)
                values = fp8kit.round_to(x, fmt, rounding=mode)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {dtype} {mode}")
            np.testing.assert_array_equal(
                values.view(f"u{x.itemsize}"), decode_table(fmt, x.dtype)[want]
            )
