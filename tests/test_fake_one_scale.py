"""FakeConvert of float32 data with one scale (and shift), or scales broadcast in any other
layout (per row, per column, per element, MX blocks), spec mode, nearest-even, runs kernels
of their own (fp8kit._kernels.encode16.fake_kernel, a plain Numba loop, and
fake_walk_kernel, LLVM vector code), and so does bfloat16 and float16 data (fake16_kernel
with one scale, fake_walk_kernel's 16-bit build otherwise).  They must
give the general kernel's bits: that kernel is run here on the same data, with the vector
kernels switched off."""

import contextlib
import sys

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._args import rounds_in_place
from fp8kit.formats import registered_formats

#: Every top-16-bit pattern with low bits zero, one, around half and all ones: ties, their
#: neighbours, every NaN payload kind, Inf, zeros, subnormals, both signs.
ALL16 = np.arange(1 << 16, dtype=np.uint32)
LOW16 = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
ALL32 = ((ALL16[:, None] << 16) | LOW16).ravel()
X = ALL32.view(np.float32)
FORMATS = [n for n, f in registered_formats().items() if rounds_in_place(f)]
SCALES = [
    (1.0, None), (2.0, None), (0.37, 0.125), (3e-5, -1.5), (np.inf, None), (-2.0, 0.0),
    (1e30, 1e30), (0.0, None), (-0.0, -0.0), (448.0, 1e-40), (2.0**-130, None),
    (2.0, -0.0), (0.5, 0.0), (1.0, 8256.0),
]  # fmt: skip


def module():
    return sys.modules["fp8kit.fake_convert"]


@contextlib.contextmanager
def general_kernel():
    """fake_convert with the kernels of vector code switched off: the general kernel."""
    module()._VECTOR_KERNELS = False
    try:
        yield
    finally:
        module()._VECTOR_KERNELS = True


def convert(x, scale, shift, fmt):
    """FakeConvert's kernels for any format they round in place: fake_convert's 8-bit
    destinations and the study's narrower ones (fp4, fp6, P3109), which reach them through
    fp8kit.fake_convert.quantize_dequantize."""
    try:
        fmt = fp8kit._args.destination(fmt)
    except ValueError:
        fmt = fp8kit.get_format(fmt)
    return module()._fake_convert(x, scale, shift, fmt)


def general(x, scale, shift, fmt):
    """The general kernel's result: the same scale (and shift) given per row."""
    rows = x.reshape(-1, 2)
    s = np.full((rows.shape[0], 1), scale, x.dtype)
    h = None if shift is None else np.full((rows.shape[0], 1), shift, x.dtype)
    with general_kernel():
        return convert(rows, s, h, fmt).reshape(-1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_scale_gives_the_general_kernels_bits(fmt, monkeypatch):
    calls = []
    real = module().fake_kernel
    monkeypatch.setattr(module(), "fake_kernel", lambda: calls.append(1) or real())
    for scale, shift in SCALES:
        s = np.float32(scale)
        h = None if shift is None else np.float32(shift)
        got = convert(X, s, h, fmt)
        want = general(X, scale, shift, fmt)
        np.testing.assert_array_equal(
            got.view(np.uint32), want.view(np.uint32), err_msg=f"{fmt} {scale} {shift}"
        )
    assert len(calls) == len(SCALES)


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, np.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_one_scale_on_16_bit_data_gives_the_general_kernels_bits(fmt, dt, monkeypatch):
    """Every bfloat16/float16 code (NaN, Inf, subnormals, both signs), the scales and shifts
    above in the data's type: the float32 steps, then the result rounded once to the type
    (overflow to Inf, float16 subnormals, NaN of its sign)."""
    calls = []
    real = module().fake16_kernel
    monkeypatch.setattr(module(), "fake16_kernel", lambda dt: calls.append(1) or real(dt))
    x = np.arange(1 << 16, dtype=np.uint16).view(dt)
    with np.errstate(over="ignore"):
        for scale, shift in SCALES:
            s = np.array(scale, dt)
            h = None if shift is None else np.array(shift, dt)
            if np.isnan(s) or (h is not None and np.isnan(h)):
                continue  # pragma: no cover - (none here)
            got = convert(x, s, h, fmt)
            want = general(x, s, h, fmt)
            np.testing.assert_array_equal(
                got.view(np.uint16), want.view(np.uint16), err_msg=f"{fmt} {scale} {shift}"
            )
    assert len(calls) == len(SCALES)


def test_what_takes_the_one_scale_kernel(monkeypatch):
    """Only float32 data (16-bit data: fake16_kernel), spec mode, nearest-even, no flush and
    one scale that is not NaN (a NaN scale or shift: the walking kernel's NaN build, so that
    this one spends no instruction on x86's NaN rule)."""
    calls = []
    real = module().fake_kernel
    monkeypatch.setattr(module(), "fake_kernel", lambda: calls.append(1) or real())
    x = X[:1000]
    one = np.float32(3.0)
    fp8kit.fake_convert(x, one)
    assert len(calls) == 1
    fp8kit.fake_convert(x.reshape(10, 100), np.float32([[3.0]]))  # (a 1x1 scale: one)
    assert len(calls) == 2
    for kwargs in (
        dict(scale=one, mode="openvino-f32"),
        dict(scale=one, rounding="toward_zero"),
        dict(scale=one, flush_subnormals=True),
        dict(scale=np.full((1000,), 3.0, np.float32)),
    ):
        fp8kit.fake_convert(x, **kwargs)
    fp8kit.fake_convert(x.astype(np.float16), np.float16(3.0))
    assert len(calls) == 2
    calls16 = []
    real16 = module().fake16_kernel
    monkeypatch.setattr(module(), "fake16_kernel", lambda dt: calls16.append(1) or real16(dt))
    for dt in (np.float16, ml_dtypes.bfloat16):
        fp8kit.fake_convert(x.astype(dt), np.array(3.0, dt))
        fp8kit.fake_convert(x.astype(dt), np.array(3.0, dt), mode="openvino-f32")
        fp8kit.fake_convert(x.astype(dt), np.full((1000,), 3.0, dt))
    assert len(calls16) == 2
    # a NaN scale or shift: the walking kernel's NaN build (the general kernel's bits: x86's
    # rule, x's NaN where x is one; test_nan_scales_and_shifts_take_the_native_kernels_...)
    walks = []
    real_walk = module().fake_walk_kernel
    monkeypatch.setattr(
        module(), "fake_walk_kernel", lambda *a, **k: walks.append(k) or real_walk(*a, **k)
    )
    got = fp8kit.fake_convert(x, np.float32(np.nan))
    assert np.isnan(got).all()
    fp8kit.fake_convert(x, one, np.float32(np.nan))
    fp8kit.fake_convert(x.astype(np.float16), np.float16(np.nan))
    assert len(calls) == 2 and len(calls16) == 2 and walks == [{"fix_nan": True}] * 3


@pytest.mark.parametrize("threads", [1, 2])
def test_16_bit_lengths_offsets_and_threads(threads):
    """bfloat16/float16 data: lengths around the 64-element blocks at unaligned starts,
    nothing outside written, and an array large enough to stream (8M elements), threaded."""
    rng = np.random.default_rng(5)
    with fp8kit.num_threads(threads):
        for dt in (ml_dtypes.bfloat16, np.float16):
            s, h = np.array(0.75, dt), np.array(0.5, dt)
            codes = rng.integers(0, 1 << 16, 1 << 23, dtype=np.uint16)
            x = codes.view(dt)
            want = general(x, s, h, "float8_e4m3fn").view(np.uint16)
            np.testing.assert_array_equal(fp8kit.fake_convert(x, s, h).view(np.uint16), want)
            for start in (0, 1, 17, 63):
                for n in [*range(0, 200, 7), 64, 128, 4111]:
                    buf = np.full(n + 128, 0xA5A5, np.uint16)
                    out = buf[start : start + n].view(dt)
                    fp8kit.fake_convert(x[:n], s, h, out=out)
                    np.testing.assert_array_equal(out.view(np.uint16), want[:n])
                    assert (buf[:start] == 0xA5A5).all() and (buf[start + n :] == 0xA5A5).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_lengths_offsets_out_and_threads(threads):
    """Lengths around the 64-element blocks at unaligned starts, nothing outside written,
    out= (also not contiguous: a copy), 2-D data, a threaded large array (streamed from
    8M elements: the tests of encode16 cover those stores)."""
    s, h = np.float32(0.75), np.float32(0.5)
    want = general(X, 0.75, 0.5, "float8_e4m3fn").view(np.uint32)
    with fp8kit.num_threads(threads):
        for start in (0, 1, 17, 63):
            for n in [*range(0, 200, 7), 64, 128, 4111]:
                buf = np.full(n + 128, 0xA5A5A5A5, np.uint32)
                out = buf[start : start + n].view(np.float32)
                fp8kit.fake_convert(X[start : start + n], s, h, out=out)
                np.testing.assert_array_equal(buf[start : start + n], want[start : start + n])
                assert (buf[:start] == 0xA5A5A5A5).all() and (buf[start + n :] == 0xA5A5A5A5).all()
        big = np.tile(X, 2)
        got = fp8kit.fake_convert(big.reshape(2, -1), s, h)
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint32), np.tile(want, 2))
        strided = np.empty((X.size, 2), np.float32)[:, 0]
        fp8kit.fake_convert(X, s, h, out=strided)
        np.testing.assert_array_equal(strided.view(np.uint32), want)


# ---------------------------------------------------------------- a scale per row

ROW_SHAPES = [
    ((X.size // 32, 32), (X.size // 32, 1)),  # block scaling along the last axis
    ((X.size // 1024, 1024), (X.size // 1024, 1)),  # per channel
    ((16, X.size // 512, 32), (16, X.size // 512, 1)),
    ((X.size // 64, 2, 32), (1, 2, 1)),  # a scale broadcast along the first axis
    ((X.size // 32, 2, 16), (X.size // 32, 1, 1)),  # rows of 32 merged from 2 x 16
]


def general_rows(x, scale, shift, fmt, monkeypatch):
    """The general kernel's result for the same call (the vector kernels turned off)."""
    with general_kernel():
        return convert(x, scale, shift, fmt)


@pytest.mark.parametrize(
    "fmt", ["f8e4m3", "f8e5m2", "float8_e4m3fnuz", "p3109_k8p3se", "float4_e2m1fn", "p3109_k6p3sf"]
)
@pytest.mark.parametrize("shapes", ROW_SHAPES, ids=lambda s: "x".join(map(str, s[0])))
def test_a_scale_per_row_gives_the_general_kernels_bits(fmt, shapes, monkeypatch):
    """Scales (and shifts) constant along rows of 16 elements or more, with powers of two,
    zeros and odd values among them: the general kernel's bits on every boundary input,
    through the kernel walking the rows."""
    calls = []
    real = module().fake_walk_kernel
    monkeypatch.setattr(
        module(), "fake_walk_kernel", lambda *a, **k: calls.append(a[0]) or real(*a, **k)
    )
    shape, sshape = shapes
    x = X.reshape(shape)
    rng = np.random.default_rng(7)
    scale = np.exp2(rng.integers(-30, 30, sshape)).astype(np.float32)
    scale *= rng.choice(np.float32([1, -1, 0.37, 0.0, 3e5]), sshape)
    for shift in (None, (rng.standard_normal(sshape) * 4).astype(np.float32)):
        got = convert(x, scale, shift, fmt)
        want = general_rows(x, scale, shift, fmt, monkeypatch)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert len(calls) == 2


def test_what_takes_the_walk_kernel(monkeypatch):
    """Scales in any layout (rows of any length, along the last axis) and 16-bit data (the
    other build), NaN scales or shifts too (their NaN build: x86's NaN rule); the other
    rounding modes and flushing its steps around round_to (tests/test_fake_modes_native.py);
    mode="openvino" none (the general kernel: tests/test_fake_openvino_native.py)."""
    calls = []
    real = module().fake_walk_kernel

    alongs = []  # (the stages' scales-along-rows flag, compiled in)

    def record(w, stage=None, fix_nan=False, along=None):
        if fix_nan:
            calls.append((w, None, stage, "fix_nan"))
        else:
            calls.append(w if stage is None else (w, None, stage))
        alongs.append(along)
        return real(w, stage, fix_nan, along)

    monkeypatch.setattr(module(), "fake_walk_kernel", record)
    x = X[: 64 * 40].reshape(64, 40)
    rows = np.full((64, 1), 2.0, np.float32)
    fp8kit.fake_convert(x, rows)
    fp8kit.fake_convert(X[: 64 * 8].reshape(64, 8), rows)
    fp8kit.fake_convert(x, np.full((1, 40), 2.0, np.float32))
    fp8kit.fake_convert(x.astype(np.float16), rows.astype(np.float16))
    assert calls == [32, 32, 32, 16]
    nan_rows = rows.copy()
    nan_rows[5] = np.nan
    fp8kit.fake_convert(x, nan_rows)
    fp8kit.fake_convert(x, rows, nan_rows)
    assert calls[4:] == [(32, None, None, "fix_nan")] * 2
    assert alongs == [None] * 6  # (the whole walk reads the flag at run time)
    del calls[4:], alongs[4:]
    for args, kwargs in (
        ((x, rows), dict(rounding="toward_zero")),
        ((x, rows), dict(flush_subnormals=True)),
    ):
        fp8kit.fake_convert(*args, **kwargs)
    vbmi = fp8kit._kernels.bits.cpu_has("avx512vbmi")
    # (the deterministic modes and flushing: the walk's steps around round_to's kernel)
    assert [c[2] for c in calls[4:]] == ["pre", "post"] * 2 * vbmi
    assert alongs[4:] == [False] * 4 * vbmi  # (a scale per row: constant along it)
    del calls[4:], alongs[4:]
    fp8kit.fake_convert(x, np.full((1, 40), 2.0, np.float32), rounding="toward_zero")
    assert alongs[4:] == [True] * 2 * vbmi  # (a scale per column: varies along rows)
    del calls[4:], alongs[4:]
    fp8kit.fake_convert(x, rows, mode="openvino-fp16")
    assert calls[4:] == []
    fp8kit.fake_convert(x, rows, rounding="stochastic", seed=1)  # (its native passes)
    assert calls[4:] == [(32, None, "pre"), (32, None, "post")] * vbmi
    got = fp8kit.fake_convert(x, nan_rows)
    assert np.isnan(got[5]).all() and not np.isnan(got[4]).any()
    assert fp8kit.fake_convert(
        np.empty((0, 32), np.float32), np.ones((0, 1), np.float32)
    ).shape == (0, 32)


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize(
    "kw", [{}, dict(rounding="toward_zero"), dict(rounding="stochastic", seed=2)],
    ids=["nearest_even", "toward_zero", "stochastic"],
)  # fmt: skip
def test_long_rows_start_their_blocks_on_a_line_of_out(dt, kw):
    """Rows of 4 blocks or more start their blocks at the row's first cache line of out (a
    masked block of the elements before it), so that large outputs stream whatever out's
    offset from a line: every offset, rows whose starts drift across lines (1000
    elements), rows around the threshold, small (plain stores) and large (streamed)
    outputs, in the fused modes and the passes of stochastic rounding; nothing outside
    written, the general kernel's bits."""
    dt = np.dtype(dt)
    u = f"u{dt.itemsize}"
    per_line = 64 // dt.itemsize
    data = X if dt == np.float32 else ALL16.astype(np.uint16).view(dt)  # (every code)

    def check(x, offsets):
        scale = np.linspace(0.25, 3, x.shape[0], dtype=np.float32).astype(dt)[:, None]
        with general_kernel():
            want = fp8kit.fake_convert(x, scale, **kw).view(u)
        for off in offsets:
            buf = np.full((x.size + 2 * per_line) * dt.itemsize, 0x5A, np.uint8).view(u)
            out = buf[off : off + x.size].view(dt).reshape(x.shape)
            fp8kit.fake_convert(x, scale, out=out, **kw)
            np.testing.assert_array_equal(out.view(u), want, err_msg=f"{x.shape} {off}")
            assert (buf[:off] == buf[-1]).all() and (buf[off + x.size :] == buf[-1]).all()

    for n in (31, 63, 64, 65, 100, 128, 129, 1000):
        check(data[: 7 * n].reshape(7, n), range(per_line))
    rows = (1 << 26) // (1000 * 2 * dt.itemsize) + 1  # (64 MiB of traffic: streamed)
    check(np.resize(data, (rows, 1000)), (0, 1, per_line - 1))


@pytest.mark.parametrize("threads", [1, 2])
def test_walk_kernel_threads_and_out_per_row(threads, monkeypatch):
    """A large array split between threads by rows, into a non-contiguous out."""
    x = np.tile(X, 3).reshape(-1, 48)
    rng = np.random.default_rng(3)
    scale = np.exp2(rng.integers(-8, 8, (x.shape[0], 1))).astype(np.float32)
    want = general_rows(x, scale, None, "f8e4m3", monkeypatch)
    out = np.empty((x.shape[0], 96), np.float32)[:, ::2]
    with fp8kit.num_threads(threads):
        got = fp8kit.fake_convert(x, scale, out=out)
    assert got is out
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


#: Data shapes and scale shapes: scales along rows, per element, rows shorter than a block,
#: a scale broadcast along a middle axis, per row, and rows of a block and one more.
WALK_SHAPES = [
    ((X.size // 48, 48), (1, 48)),  # per column
    ((X.size // 40, 40), (X.size // 40, 40)),  # per element
    ((X.size // 8, 8), (X.size // 8, 1)),  # rows of 8
    ((X.size // 96, 3, 32), (1, 3, 32)),  # along a middle axis and the last
    ((X.size // 96, 3, 32), (X.size // 96, 1, 32)),
    ((X.size // 1024, 1024), (X.size // 1024, 1)),  # per row
    ((X.size // 33, 33), (1, 33)),  # rows of a block and one more, masked
]


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.float16],
                         ids=["float32", "bfloat16", "float16"])  # fmt: skip
@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2", "float8_e4m3fnuz", "p3109_k8p3se"])
@pytest.mark.parametrize("shapes", WALK_SHAPES, ids=lambda s: "x".join(map(str, s[1])))
def test_every_scale_layout_gives_the_general_kernels_bits(fmt, shapes, dt, monkeypatch):
    """Scales (and shifts) in any broadcast layout, with powers of two, zeros and odd
    values among them: the general kernel's bits on every boundary input (float32) or
    code (16-bit data), through the kernel walking the rows (fake_walk_kernel)."""
    calls = []
    real = module().fake_walk_kernel
    monkeypatch.setattr(
        module(), "fake_walk_kernel", lambda *a, **k: calls.append(a[0]) or real(*a, **k)
    )
    shape, sshape = shapes
    if dt == np.float32:
        x = X[: np.prod(shape)].reshape(shape)
    else:
        bits = np.tile(np.arange(1 << 16, dtype=np.uint16), X.size // (1 << 16) + 1)
        x = bits[: np.prod(shape)].view(dt).reshape(shape)
    rng = np.random.default_rng(11)
    lim = 12 if dt == np.float16 else 20
    scale = np.exp2(rng.integers(-lim, lim, sshape)).astype(dt)
    scale *= rng.choice(np.array([1, -1, 0.37, 0.0, 3.0], dt), sshape)
    with np.errstate(over="ignore"):
        for shift in (None, (rng.standard_normal(sshape) * 4).astype(dt)):
            got = fp8kit.fake_convert(x, scale, shift, destination_type=fmt)
            want = general_rows(x, scale, shift, fmt, monkeypatch)
            ubits = np.uint32 if dt == np.float32 else np.uint16
            np.testing.assert_array_equal(got.view(ubits), want.view(ubits))
    assert calls == [8 * np.dtype(dt).itemsize] * 2


@pytest.mark.parametrize("threads", [1, 2])
def test_walk_kernel_threads_and_out(threads, monkeypatch):
    """A large array split between threads by rows (rows not a multiple of the threads'
    share), per-column scales, into a non-contiguous out, each dtype."""
    for dt in (np.float32, ml_dtypes.bfloat16):
        x = np.tile(X, 4)[: 4099 * 301].reshape(4099, 301).astype(np.float32)
        x = np.where(np.isfinite(x), x, 0).astype(dt) if dt != np.float32 else x
        rng = np.random.default_rng(3)
        scale = np.exp2(rng.integers(-8, 8, (1, 301))).astype(dt)
        want = general_rows(x, scale, None, "f8e4m3", monkeypatch)
        out = np.empty((x.shape[0], 602), dt)[:, ::2]
        with fp8kit.num_threads(threads):
            got = fp8kit.fake_convert(x, scale, out=out)
        assert got is out
        ubits = np.uint32 if dt == np.float32 else np.uint16
        np.testing.assert_array_equal(out.view(ubits), want.view(ubits))


#: (layouts, (mode, rounding, flush) of the default run: each general-kernel build it is
#: compared with compiles in Numba (~0.4 s); every combination in the slow run.
_NAN_FAST = (
    [(), (64, 1), (64, 3, 1)],
    [("spec", "nearest_even", False), ("spec", "stochastic", False)],
)
_NAN_ALL = (
    [(), (64, 1), (1, 96), (64, 96), (64, 3, 1)],
    [("spec", "nearest_even", False), ("spec", "toward_zero", False),
     ("spec", "stochastic", False), ("spec", "nearest_even", True),
     ("openvino-fp16", "nearest_even", False), ("openvino-f32", "nearest_even", False)],
)  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=str)
def test_nan_scales_and_shifts_take_the_native_kernels_with_the_general_kernels_bits(dtype):
    """Scales or shifts that are NaN (one, per row, blocks; per column, per element and the
    other modes in the slow run) run the walking kernels' NaN builds (x86's NaN rule fixed
    in their vector code; 0.57 s of Numba compile on a first call before): every bit of the
    general kernel's result, NaN payloads and signs included."""
    _check_nan_operands(dtype, *_NAN_FAST)


@pytest.mark.parametrize("mode", ["openvino-fp16", "openvino-f32"])
def test_nan_scales_and_shifts_in_the_openvino_arithmetic(mode):
    """mode="openvino": the general (Numba) kernel, x86's NaN rule included (per row; every
    layout and data type in the slow run)."""
    _check_nan_operands(np.float32, [(64, 1)], [(mode, "nearest_even", False)])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=str)
def test_nan_scales_and_shifts_in_every_layout_and_mode(dtype):
    """As above, every layout (one, per row, per column, per element, blocks) in
    nearest-even, a deterministic mode, stochastic rounding, with flush_subnormals and in
    both OpenVINO arithmetics."""
    _check_nan_operands(dtype, *_NAN_ALL)


def _check_nan_operands(dtype, layouts, modes):
    from numba.core import event

    rng = np.random.default_rng(7)
    dt = np.dtype(dtype)
    x = (rng.standard_normal((64, 96)) * 30).astype(dt)
    x.flat[::37], x.flat[::41], x.flat[::43], x.flat[::47] = np.nan, -np.nan, np.inf, 0
    ub = f"u{dt.itemsize}"
    x.view(ub).flat[37] |= 1  # (a NaN with a payload: the first NaN operand's bits)
    for shape in layouts:
        xs = x if shape != (64, 3, 1) else x.reshape(64, 3, 32)
        sc = np.array((rng.random(shape) * 2 + 0.1).astype(dt))
        sc.flat[::3] = np.nan
        if sc.size > 4:
            sc.flat[1], sc.flat[2], sc.flat[4] = -np.nan, 0, np.inf
        sh = np.array(rng.standard_normal(shape).astype(dt))
        sh.flat[1 if sh.size > 2 else 0] = np.nan
        for shift in (None, sh):
            for mode, rounding, ftz in modes:
                kw = dict(mode=mode, rounding=rounding, flush_subnormals=ftz)
                kw["seed"] = 3 if rounding == "stochastic" else None
                with event.install_recorder("numba:compile") as compiles:
                    got = fp8kit.fake_convert(xs, sc, shift, "f8e4m3", **kw)
                # (no Numba kernel, but in the OpenVINO arithmetic: the general kernel's)
                assert not compiles.buffer or mode.startswith("openvino"), kw
                with general_kernel():
                    want = fp8kit.fake_convert(xs, sc, shift, "f8e4m3", **kw)
                np.testing.assert_array_equal(got.view(ub), want.view(ub), err_msg=str(kw))
    # out= keeps working: a NaN scale for every element
    out = np.full(x.shape, 7, dt)
    res = fp8kit.fake_convert(x, np.array(np.nan, dt), out=out)
    assert res is out and np.isnan(out.astype(np.float32)).all()


def test_many_nan_operands_take_the_native_kernels_too():
    """However many elements have a NaN scale or shift (every 7th row of 1M elements, or
    all of them), the walking kernels' NaN builds: no Numba compile, the general kernel's
    bits, on 2 threads."""
    from numba.core import event

    rng = np.random.default_rng(8)
    x = (rng.standard_normal((4096, 256)) * 50).astype(np.float32)
    x[::5, ::3] = np.nan
    rows = (rng.random((4096, 1)) + 0.5).astype(np.float32)
    rows[::7] = np.nan
    rows[1::7] = -np.nan
    everywhere = np.array(np.nan, np.float32)
    for scale, shift in ((rows, None), (rows, rows[::-1] - 1), (everywhere, None),
                         (np.float32(2.0), everywhere)):  # fmt: skip
        with fp8kit.num_threads(2), event.install_recorder("numba:compile") as compiles:
            got = fp8kit.fake_convert(x, scale, shift, "f8e4m3")
        assert not compiles.buffer
        with general_kernel():
            want = fp8kit.fake_convert(x, scale, shift, "f8e4m3")
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
