"""bfloat16/float16 -> 8-bit formats rounded on 16-bit lanes (fp8kit._kernels.encode16) give
exactly the codes of the float32 kernels, on all 65,536 inputs, for every registered format
and saturation the 16-bit kernel takes."""

import sys

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._kernels.bits import cpu_has
from fp8kit._kernels.codec import LOAD_LUT, dummy, encode_kernel, f16_lut
from fp8kit._kernels.encode16 import encode16_kernel
from fp8kit.formats import registered_formats

DTYPES = [np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)]
SATURATE = [True, False, "propagate"]
ALL16 = np.arange(1 << 16, dtype=np.uint16)


def _code(fmt):
    return np.uint8 if fmt.bits <= 8 else np.uint16


def _old(fmt, dt, sat, bits):
    kernel, pl = encode_kernel(fmt, dt, sat)
    assert not pl.widen_first
    out = np.empty(bits.size, _code(fmt))
    lut = f16_lut() if pl.load == LOAD_LUT else dummy(np.uint32)
    kernel.serial(bits, lut, dummy(np.uint8), out)
    return out


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("fmt", list(registered_formats().values()), ids=lambda f: f.name)
def test_every_16bit_input_matches_the_float32_kernel(fmt, dt):
    for sat in SATURATE:
        kernel = encode16_kernel(fmt, dt, sat)
        if kernel is None:
            continue
        got = np.empty(ALL16.size, _code(fmt))
        kernel.serial(ALL16, dummy(np.uint32), dummy(np.uint8), got)
        np.testing.assert_array_equal(got, _old(fmt, dt, sat, ALL16), err_msg=str(sat))


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize(
    "name",
    ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e4m3",
     "float4_e2m1fn", "float6_e3m2fn", "p3109_k8p4se", "p3109_k8p3ue"],
)  # fmt: skip
def test_common_formats_take_the_16bit_kernel_through_encode(name, dt):
    """The common formats are routed to it, and fp8kit.encode on a threaded array (several
    chunks) gives the float32 kernel's codes."""
    fmt = fp8kit.get_format(name)
    kernel = encode16_kernel(fmt, dt, True)
    if name in ("float8_e5m2fnuz", "p3109_k8p3ue") and dt == np.float16:
        # (range beyond float16's: the lean kernel's 16-bit lanes, test_lean)
        assert kernel is None
        return
    assert kernel is not None
    bits = np.tile(ALL16, 5)[: (1 << 18) + 7]
    got = fp8kit.encode(bits.view(dt), fmt)
    np.testing.assert_array_equal(got, _old(fmt, dt, True, bits))
    out = np.empty(bits.size, np.uint8)
    fp8kit.encode(bits.view(dt), fmt, saturate=False, out=out)
    np.testing.assert_array_equal(out, _old(fmt, dt, False, bits))


def test_float16_to_bfloat16_takes_its_kernel():
    """float16 -> bfloat16 (covered exhaustively above) has a kernel of its own."""
    for sat in SATURATE:
        assert encode16_kernel(fp8kit.get_format("bfloat16"), np.float16, sat) is not None
    x = np.tile(ALL16, 5).view(np.float16)
    want = _old(fp8kit.get_format("bfloat16"), np.dtype(np.float16), True, x.view(np.uint16))
    np.testing.assert_array_equal(fp8kit.encode(x, "bfloat16"), want)


def test_other_options_keep_the_float32_kernels():
    x = np.linspace(-500, 500, 10001).astype(ml_dtypes.bfloat16)
    want = fp8kit.encode(x.astype(np.float32), "float8_e4m3fn", rounding="toward_zero")
    np.testing.assert_array_equal(fp8kit.encode(x, "float8_e4m3fn", rounding="toward_zero"), want)
    want = fp8kit.encode(x.astype(np.float32), "float8_e4m3fn", flush_subnormals=True)
    np.testing.assert_array_equal(fp8kit.encode(x, "float8_e4m3fn", flush_subnormals=True), want)


@pytest.mark.parametrize(
    "name, dt",
    [("float8_e4m3fn", DTYPES[0]), ("float8_e4m3fnuz", DTYPES[1]), ("bfloat16", DTYPES[1])],
    ids=lambda v: getattr(v, "name", v),
)
def test_every_length_and_offset_takes_the_tail_block(name, dt):
    """The vector kernels run whole blocks of 32 elements and the rest through a block on
    the stack: every length up to 100 and every start offset within a block agree with the
    float32 kernel."""
    fmt = fp8kit.get_format(name)
    kernel = encode16_kernel(fmt, dt, True)
    rng = np.random.default_rng(16)
    bits = rng.integers(0, 1 << 16, 200, dtype=np.uint16)
    want = _old(fmt, dt, True, bits)
    for start in range(33):
        for n in list(range(0, 70)) + [95, 96, 97, 100]:
            x = bits[start : start + n]
            got = np.empty(n, _code(fmt))
            kernel.serial(x, dummy(np.uint32), dummy(np.uint8), got)
            np.testing.assert_array_equal(got, want[start : start + n], err_msg=f"{start} {n}")


def test_float16_to_bfloat16_without_hardware_conversion(monkeypatch):
    """On CPUs without a float32 -> bfloat16 instruction the integer kernel runs: same bits
    on all 65,536 inputs."""
    from fp8kit._kernels import encode16

    monkeypatch.setattr(encode16, "_bf16_convert", lambda: False)
    bf16 = fp8kit.get_format("bfloat16")
    for sat in SATURATE:
        kernel = encode16.f16_to_bf16_kernel.__wrapped__(sat)
        assert kernel._key[0] == "f16_to_bf16"
        got = np.empty(ALL16.size, np.uint16)
        kernel.serial(ALL16, dummy(np.uint32), dummy(np.uint8), got)
        np.testing.assert_array_equal(got, _old(bf16, np.dtype(np.float16), sat, ALL16))


def test_float16_input_without_avx512bw(monkeypatch):
    """Without vpmaddwd, float16 input is placed in the 32-bit lanes by shifts and masks:
    same bits on all 65,536 inputs."""
    from fp8kit._kernels import encode16

    monkeypatch.setattr(encode16, "cpu_has", lambda name: False)
    f16 = np.dtype(np.float16)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "p3109_k8p4se"):
        fmt = fp8kit.get_format(name)
        for sat in SATURATE:
            kernel = encode16.encode16_kernel.__wrapped__(fmt, f16, sat)
            assert kernel._key[:2] == ("encode16_words", False)  # (no vpmaddwd)
            got = np.empty(ALL16.size, np.uint8)
            kernel.serial(ALL16, dummy(np.uint32), dummy(np.uint8), got)
            np.testing.assert_array_equal(got, _old(fmt, f16, sat, ALL16), err_msg=name)


def test_half_to_single_bits_without_hardware_conversion(monkeypatch):
    """Where LLVM has no hardware float16 -> float32 conversion (an x86 CPU without F16C) it
    would call a library function the JIT does not resolve: the intrinsic then moves the
    fields itself.  Every float16 gives numpy's float32 (NaN: a NaN of the same sign with
    the payload kept)."""
    import numba

    from fp8kit._kernels import bits

    monkeypatch.setattr(bits, "_hardware_half", lambda: False)

    @numba.njit(cache=False)
    def widen(h, out):
        for i in range(h.size):
            out[i] = bits.half_to_single_bits(h[i])

    got = np.empty(ALL16.size, np.uint32)
    widen(ALL16, got)
    want = ALL16.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(got[~nan], want[~nan].view(np.uint32))
    assert np.isnan(got[nan].view(np.float32)).all()
    np.testing.assert_array_equal(got[nan] >> 31, ALL16[nan] >> 15)
    np.testing.assert_array_equal(got[nan] & 0x7FFFFF, (ALL16[nan].astype(np.uint32) & 0x3FF) << 13)


def test_float16_input_on_a_generic_cpu(tmp_path):
    """With ``NUMBA_CPU_NAME=generic`` (no F16C, as for caches shared between machines)
    float16 input to every kernel kind gives the same codes as here (it crashed the
    process before)."""
    import os
    import subprocess
    import sys

    x = np.linspace(-500, 500, 1001, dtype=np.float32).astype(np.float16)
    x[:4] = [np.nan, np.inf, -np.inf, 6e-8]
    names = ["float8_e4m3fn", "float8_e5m2fnuz", "bfloat16", "float8_e8m0fnu"]
    np.save(tmp_path / "x.npy", x)
    code = (
        "import numpy as np, fp8kit, sys\n"
        f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
        f"for i, n in enumerate({names!r}):\n"
        f"    np.save({str(tmp_path)!r} + f'/{{i}}.npy', fp8kit.encode(x, n).view(np.uint8))\n"
    )
    env = dict(os.environ, NUMBA_CPU_NAME="generic", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for i, name in enumerate(names):
        want = fp8kit.encode(x, name).view(np.uint8)
        np.testing.assert_array_equal(np.load(tmp_path / f"{i}.npy"), want, err_msg=name)


BYTE_LANES = {
    DTYPES[0]: [
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e4m3",
        "float8_e4m3b11fnuz", "p3109_k8p2se", "p3109_k8p2sf", "p3109_k8p3se", "p3109_k8p3sf",
        "p3109_k8p4se", "p3109_k8p4sf",
    ],
    DTYPES[1]: [
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e4m3",
        "float8_e4m3b11fnuz", "p3109_k8p4se", "p3109_k8p4sf",
    ],
}  # fmt: skip
BYTE_KEYS = {DTYPES[0]: "encode16_bytes", DTYPES[1]: "encode16_half_bytes"}


@pytest.mark.skipif(not cpu_has("avx512vbmi"), reason="the byte-lane kernel needs AVX512-VBMI")
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_exactly_these_formats_take_the_byte_lane_kernel(dt):
    """bfloat16 input to the float8 formats and the P3109 8-bit ones with 2-4 mantissa bits,
    and float16 input to those float8 and P3109 formats whose range is within float16's,
    runs on byte lanes, 64 elements a vector (the tests above check it on every input and
    length on this CPU); every other format the 16-bit kernel takes keeps its 16-bit lanes
    (the tables do not fit: sub-byte formats, P3109 with 5 or more mantissa bits, and
    float8_e3m4)."""
    taken = []
    for fmt in registered_formats().values():
        for sat in SATURATE:
            kernel = encode16_kernel(fmt, dt, sat)
            if kernel is not None and kernel._key[0] == BYTE_KEYS[dt]:
                taken.append(fmt.name)
            elif kernel is not None:
                names = ("encode16_words", "f16_to_bf16")
                assert kernel._key[0] in names, kernel._key
    assert sorted(set(taken)) == sorted(BYTE_LANES[dt])
    assert taken.count("float8_e4m3fn") == len(SATURATE)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_byte_lane_tables_reproduce_the_16bit_kernel(dt):
    """The byte-lane scheme in numpy (what the tables are checked with) gives the 16-bit
    kernel's formula on every input where its tables exist, and none where they cannot
    (a sub-byte format: its subnormal rows do not fit one 128-byte table; float16 to
    float8_e3m4: neither do they)."""
    from fp8kit._kernels import encode16

    half = dt == np.float16
    for name in BYTE_LANES[dt]:
        fmt = fp8kit.get_format(name)
        for sat in SATURATE:
            prm = encode16._prm(fmt, dt, sat)
            bp = encode16._byte_params(prm)
            np.testing.assert_array_equal(
                encode16._byte_codes(bp, half), encode16._word_codes(prm), err_msg=name
            )
            want = _old(fmt, dt, sat, ALL16)
            np.testing.assert_array_equal(encode16._word_codes(prm), want, err_msg=name)
    for name in ("float4_e2m1fn", "float8_e3m4"):
        prm = encode16._prm(fp8kit.get_format(name), dt, True)
        assert encode16._byte_params(prm) is None


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_without_vbmi_the_16bit_lanes_run(monkeypatch, dt):
    """Where the CPU has no VBMI (made to say so), bfloat16 and float16 run on the 16-bit
    lanes: the same bits on all 65,536 inputs."""
    from fp8kit._kernels import encode16

    monkeypatch.setattr(encode16, "cpu_has", lambda name: name != "avx512vbmi" and cpu_has(name))
    for name in ("float8_e4m3fn", "float8_e5m2"):
        fmt = fp8kit.get_format(name)
        for sat in SATURATE:
            kernel = encode16.encode16_kernel.__wrapped__(fmt, dt, sat)
            assert kernel._key[0] == "encode16_words"
            got = np.empty(ALL16.size, np.uint8)
            kernel.serial(ALL16, dummy(np.uint32), dummy(np.uint8), got)
            np.testing.assert_array_equal(got, _old(fmt, dt, sat, ALL16), err_msg=name)


@pytest.mark.skipif(not cpu_has("avx512vbmi"), reason="the byte-lane kernel needs AVX512-VBMI")
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_byte_lanes_with_non_temporal_stores(dt):
    """From encode16.STREAM_MIN elements the byte-lane kernels write whole cache lines with
    non-temporal stores, from the first one the output starts (a masked block before it):
    a kernel built to stream from 0 elements gives the plain kernel's bits at every start
    within a line and lengths around the blocks, writes nothing outside the output, and
    threads (each chunk aligns its own start) change nothing."""
    from fp8kit import _parallel
    from fp8kit._kernels import encode16, native

    fmt = fp8kit.get_format("float8_e4m3fn")
    plain = encode16_kernel(fmt, dt, True)
    which = encode16._HALF_BYTES if dt == np.float16 else encode16._BYTES
    streamed = encode16.byte_kernel(which, plain._params, stream_min=0)
    assert "vmovnt" in native.assembly(streamed._emit).lower()
    bits = np.tile(ALL16, 3)
    d32, d8 = dummy(np.uint32), dummy(np.uint8)
    for start in [*range(0, 64, 5), 63]:
        for n in (0, 1, 2, 63, 64, 65, 127, 128, 129, 200, 4096 + 17):
            x = bits[start * 3 : start * 3 + n]
            want = np.empty(n, np.uint8)
            plain.serial(x, d32, d8, want)
            buf = np.full(n + 128, 0xA5, np.uint8)
            streamed.serial(x, d32, d8, buf[start : start + n])
            np.testing.assert_array_equal(buf[start : start + n], want, err_msg=f"{start} {n}")
            assert (buf[:start] == 0xA5).all() and (buf[start + n :] == 0xA5).all()
    x = np.tile(ALL16, 9)[5:]
    want = np.empty(x.size, np.uint8)
    plain.serial(x, d32, d8, want)
    got = np.empty(x.size + 1, np.uint8)[1:]
    with fp8kit.num_threads(2):
        _parallel.launch(streamed, x.size, x, d32, d8, got)
    np.testing.assert_array_equal(got, want)
    # and fp8kit.encode's kernel streams (from STREAM_MIN elements: the bits above)
    assert "vmovnt" in native.assembly(plain._emit).lower()


# ---------------------------------------------------------------- float32 on byte lanes

#: Every float32 whose low 16 bits are one of these: with the top 16 bits, all that decides
#: a rounding to a format of at most 5 mantissa bits (its rounding bit is in the top 16).
LOW16 = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
ALL32 = ((ALL16.astype(np.uint32)[:, None] << 16) | LOW16).ravel()


def test_float32_byte_lanes_for_exactly_the_bfloat16_formats():
    """float32 input takes the bfloat16 byte-lane tables (its top 16 bits with a sticky
    bit) for the formats that have them (all keep at most 5 mantissa bits), and the float32
    kernels elsewhere; without VBMI, never."""
    from fp8kit._kernels import encode16

    for fmt in registered_formats().values():
        for sat in SATURATE:
            kernel = encode16.f32_byte_kernel(fmt, sat)
            bf16 = encode16_kernel(fmt, DTYPES[0], sat)
            expect = cpu_has("avx512vbmi") and fmt.name in BYTE_LANES[DTYPES[0]]
            assert (kernel is not None) == expect, fmt.name
            if kernel is not None:
                assert kernel._key[0] == "encode32_bytes" and bf16._key[0] == "encode16_bytes"
                assert fmt.mantissa_bits <= 5
    real = encode16.cpu_has
    try:
        encode16.cpu_has = lambda name: name != "avx512vbmi" and real(name)
        fmt = fp8kit.get_format("float8_e4m3fn")
        assert encode16.f32_byte_kernel.__wrapped__(fmt, True) is None
    finally:
        encode16.cpu_has = real


@pytest.mark.skipif(not cpu_has("avx512vbmi"), reason="the byte-lane kernel needs AVX512-VBMI")
@pytest.mark.parametrize("name", BYTE_LANES[DTYPES[0]])
def test_float32_byte_lanes_match_the_float32_kernel(name):
    """Every top-16-bit pattern with low bits zero, one, just below, at and above half, and
    all ones (every tie and its neighbours, every NaN payload kind, Inf, zeros and
    subnormals, both signs), each saturation: the float32 kernel's codes; and
    fp8kit.encode runs the byte-lane kernel."""
    from fp8kit._kernels import encode16

    check_byte_kernel(encode16.f32_byte_kernel, fp8kit.get_format(name), ALL32, np.float32)


def check_byte_kernel(make, fmt, bits, dtype):
    """``make(fmt, sat)``'s codes of ``bits`` are the general kernel's for ``dtype``, each
    saturation, and fp8kit.encode gives them and records a plan of that kernel; returns
    the kernel and the codes of the last saturation."""
    dtype = np.dtype(dtype)
    for sat in SATURATE:
        kernel = make(fmt, sat)
        got = np.empty(bits.size, np.uint8)
        kernel.serial(bits, dummy(np.uint32), dummy(np.uint8), got)
        want = _old(fmt, dtype, sat, bits)
        np.testing.assert_array_equal(got, want, err_msg=f"{fmt.name} {sat}")
        np.testing.assert_array_equal(
            fp8kit.encode(bits.view(dtype), fmt, saturate=sat), want, err_msg=str(sat)
        )
        if sat is True or sat is False:
            # the plan fp8kit.encode recorded runs this kernel (its tables bound)
            plan = sys.modules["fp8kit.codec"]._FAST_ENCODE[(fmt, dtype, sat)]
            assert plan[1] is kernel.build().args[0]  # (the bound parameters)
    return kernel, want


@pytest.mark.skipif(not cpu_has("avx512vbmi"), reason="the byte-lane kernel needs AVX512-VBMI")
def test_float32_byte_lanes_every_length_and_offset():
    """Lengths 0-200 at every start within a cache line (the masked head and tail blocks),
    nothing outside the output written, streamed and not."""
    from fp8kit._kernels import encode16

    fmt = fp8kit.get_format("float8_e4m3fn")
    plain = encode16.f32_byte_kernel(fmt, True)
    streamed = encode16.byte_kernel(encode16._F32_BYTES, plain._params, stream_min=0)
    bits = ALL32[::7].copy()
    want = _old(fmt, np.dtype(np.float32), True, bits)
    d32, d8 = dummy(np.uint32), dummy(np.uint8)
    for kernel in (plain, streamed):
        check_spans(kernel, bits, d32, d8, want)


@pytest.mark.parametrize("name", BYTE_LANES[DTYPES[0]])
def test_float32_round_to_in_place_on_the_byte_lane_boundaries(name):
    """round_to float32 (nearest-even) rounds the bits in place
    (fp8kit._kernels.inplace, which replaced the byte-lane codes' values from the planes):
    the general round-to kernel's bits on this module's boundary inputs (ALL32), each
    saturation, lengths 0-200 at unaligned starts with nothing outside written; and
    fp8kit.round_to runs it."""
    from fp8kit._kernels import inplace
    from fp8kit._kernels.tables import decode_table

    fmt = fp8kit.get_format(name)
    f32 = np.dtype(np.float32)
    table = decode_table(fmt, f32)
    d32 = dummy(np.uint32)
    for sat in SATURATE:
        kernel = inplace.round_kernel(fmt, f32, sat)
        assert kernel._key[:2] == ("round_in_place", 32)
        old, _ = encode_kernel(fmt, f32, sat, table_dtype=np.dtype(np.uint32))
        want = np.empty(ALL32.size, np.uint32)
        old.serial(ALL32, d32, table, want)
        got = np.empty(ALL32.size, np.uint32)
        kernel.serial(ALL32, d32, table.view(np.uint32), got)
        np.testing.assert_array_equal(got, want, err_msg=str(sat))
        y = fp8kit.round_to(ALL32.view(np.float32), fmt, saturate=sat)
        np.testing.assert_array_equal(y.view(np.uint32), want, err_msg=str(sat))
        if sat is True or sat is False:
            plan = sys.modules["fp8kit.codec"]._FAST_ROUND[(fmt, f32, sat)]
            assert plan[1] is kernel.build().args[0]  # (the bound parameters)
    check_spans(kernel, ALL32, d32, table.view(np.uint32), want)


@pytest.mark.skipif(not cpu_has("avx512vbmi"), reason="the byte-lane kernel needs AVX512-VBMI")
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_16bit_round_to_on_byte_lanes(dt):
    """round_to bfloat16/float16 (nearest-even) in one pass: the byte-lane codes' values in
    the data's type from the planes give the Numba round-to kernel's bits on all 65,536
    inputs, each saturation, every format of the byte lanes; lengths 0-200 at unaligned
    starts with nothing outside written; and fp8kit.round_to runs it."""
    from fp8kit._kernels import encode16
    from fp8kit._kernels.decode import format_planes

    d32, u16 = dummy(np.uint32), np.dtype(np.uint16)
    lut = f16_lut() if dt == np.float16 else d32
    for name in BYTE_LANES[dt]:
        fmt = fp8kit.get_format(name)
        planes = format_planes(fmt, dt)
        for sat in SATURATE:
            kernel = encode16.round16_kernel(fmt, dt, sat)
            assert kernel._key[0] == BYTE_KEYS[dt].replace("encode", "round") and kernel.planes
            old, _ = encode_kernel(fmt, dt, sat, table_dtype=u16, planes=True)
            assert old._key[0] == "encode"
            want = np.empty(ALL16.size, np.uint16)
            old.serial(ALL16, lut, planes, want)
            got = np.empty(ALL16.size, np.uint16)
            kernel.serial(ALL16, lut, planes, got)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {sat}")
            y = fp8kit.round_to(ALL16.view(dt), fmt, saturate=sat)
            np.testing.assert_array_equal(y.view(np.uint16), want, err_msg=f"{name} {sat}")
            if sat is True or sat is False:
                plan = sys.modules["fp8kit.codec"]._FAST_ROUND[(fmt, dt, sat)]
                assert plan[1] is kernel.build().args[0]  # (the bound parameters)
        check_spans(kernel, ALL16, lut, planes, want)


#: float64 boundary inputs: ALL32's float32 values widened (exactly), and each with the
#: float64 bits below float32's precision set to the smallest, half and all-ones patterns
#: (a sticky bit only), plus what float32 cannot hold: beyond its range, below its smallest
#: subnormal, and float64's own NaN payloads, subnormals and extremes.
with np.errstate(invalid="ignore"):  # (signalling NaNs come out quiet)
    _WIDE = ALL32.view(np.float32).astype(np.float64).view(np.uint64)
_BELOW = np.array([0, 1, 1 << 28, (1 << 29) - 1], np.uint64)
_BEYOND = np.array(
    [0x7FF0000000000001, 0x7FF8000000000000, 0x7FF00000FFFFFFFF, 0x7FF7FFFFE0000000,
     0x7FEFFFFFFFFFFFFF, 0x47F0000000000000, 0x47EFFFFFFFFFFFFF, 0x47EFFFFFE0000000,
     0x47EFFFFFF0000000, 0x3810000000000000, 0x380FFFFFFFFFFFFF, 0x3690000000000000,
     0x36A0000000000001, 0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x0010000000000000],
    np.uint64,
)  # fmt: skip
ALL64 = np.concatenate([
    (_WIDE[:, None] | _BELOW).ravel(),
    np.concatenate([_BEYOND, _BEYOND | np.uint64(1 << 63)]),
    np.random.default_rng(64).integers(0, (1 << 64) - 1, 50_000, dtype=np.uint64, endpoint=True),
])  # fmt: skip


@pytest.mark.skipif(not cpu_has("avx512vbmi"), reason="the byte-lane kernel needs AVX512-VBMI")
@pytest.mark.parametrize("name", BYTE_LANES[DTYPES[0]])
def test_float64_byte_lanes_match_the_float64_kernel(name):
    """float64 input rounded to odd on float32, then on byte lanes: the float64 kernel's
    codes (rounded once) on ALL64, each saturation; fp8kit.encode runs it, and it exists
    exactly where float32's byte-lane kernel does."""
    from fp8kit._kernels import encode16

    fmt = fp8kit.get_format(name)
    kernel, want = check_byte_kernel(encode16.f64_byte_kernel, fmt, ALL64, np.float64)
    assert kernel._key[0] == "encode64_bytes"
    check_spans(kernel, ALL64[::5].copy(), dummy(np.uint32), dummy(np.uint8), want[::5])
    for other in registered_formats().values():
        for sat in SATURATE:
            has32 = encode16.f32_byte_kernel(other, sat) is not None
            assert (encode16.f64_byte_kernel(other, sat) is not None) == has32, other.name


def check_spans(kernel, bits, lut, table, want):
    """``kernel`` on ``bits[start:start + n]`` for starts within a cache line and lengths
    around the blocks gives ``want``'s slice and writes nothing outside it."""
    fill = {1: 0xA5, 2: 0xA5A5, 4: 0xA5A5A5A5}[want.itemsize]
    for start in (0, 1, 17, 63):
        for n in [*range(0, 200, 7), 64, 128, 4111]:
            buf = np.full(n + 128, fill, want.dtype)
            kernel.serial(bits[start : start + n], lut, table, buf[start : start + n])
            np.testing.assert_array_equal(buf[start : start + n], want[start : start + n])
            assert (buf[:start] == fill).all() and (buf[start + n :] == fill).all()


@pytest.mark.parametrize("name", ["float8_e5m2fnuz", "p3109_k8p3se", "p3109_k8p3sf"])
def test_float16_blocks_with_and_without_subnormals(name):
    """float16 to the formats one exponent below its normals (the lean kernel, widened to
    float32 bits): every float16 in order, shuffled, and normal data with a few
    subnormals and zeros strewn in give the float32 kernel's codes."""
    from fp8kit._kernels import lean

    fmt = fp8kit.get_format(name)
    assert encode16_kernel(fmt, np.dtype(np.float16), True) is None
    assert lean.lean_kernel(fmt, np.dtype(np.float16), True) is not None
    rng = np.random.default_rng(3)
    sparse = rng.standard_normal(20_000).astype(np.float16).view(np.uint16)
    sparse[rng.integers(0, sparse.size, 40)] = rng.integers(1, 0x400, 40) | 0x8000 * (
        rng.integers(0, 2, 40)
    )
    sparse[rng.integers(0, sparse.size, 40)] = 0x8000 * rng.integers(0, 2, 40)
    for sat in SATURATE:
        for bits in (ALL16, rng.permutation(ALL16), sparse):
            got = fp8kit.encode(bits.view(np.float16), fmt, saturate=sat)
            want = fp8kit.encode(bits.view(np.float16).astype(np.float32), fmt, saturate=sat)
            np.testing.assert_array_equal(got, want, err_msg=str(sat))
    if name == "float8_e5m2fnuz":  # (ml_dtypes' own cast: overflow to NaN, as saturate=False)
        with np.errstate(over="ignore", invalid="ignore"):
            oracle = ALL16.view(np.float16).astype(ml_dtypes.float8_e5m2fnuz).view(np.uint8)
        got = fp8kit.encode(ALL16.view(np.float16), fmt, saturate=False)
        np.testing.assert_array_equal(got, oracle)
