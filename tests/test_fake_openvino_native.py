"""FakeConvert in the OpenVINO CPU plugin's arithmetic (mode="openvino-fp16" and
"openvino-f32") runs the kernel of LLVM vector code that walks the rows
(fp8kit._kernels.encode16.fake_walk_kernel with ``ov``; its NaN build where a scale or shift
is NaN: test_fake_one_scale.py checks that one).
It must give the general (Numba) kernel's bits, which tests/test_fake_convert_openvino.py
checks against OpenVINO itself: here both run on every float32 boundary pattern and every
16-bit pattern, for both formats and variants, the scales of test_fake_one_scale (zeros,
infinities, subnormal and huge ones), with and without shifts, in each scale layout."""

import ml_dtypes
import numpy as np
import pytest
from test_fake_one_scale import SCALES, X, general_kernel, module

import fp8kit
from fp8kit._kernels import encode16, fake

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]
IDS = ["float32", "float16", "bfloat16"]
MODES = ["openvino-fp16", "openvino-f32"]
ALL16 = np.arange(1 << 16, dtype=np.uint16)


def data(dt):
    return X if dt == np.float32 else ALL16.view(dt)


def both(x, scale, shift, mode, fmt):
    """(vector kernel's bits, general kernel's bits)."""
    u = f"u{x.dtype.itemsize}"
    with np.errstate(over="ignore", invalid="ignore"):
        got = fp8kit.fake_convert(x, scale, shift, destination_type=fmt, mode=mode)
        with general_kernel():
            want = fp8kit.fake_convert(x, scale, shift, destination_type=fmt, mode=mode)
    return got.view(u), want.view(u)


def one_scales(dt):
    """(scale, shift, their arrays of dtype dt) for each of test_fake_one_scale's SCALES."""
    for scale, shift in SCALES:
        with np.errstate(over="ignore"):
            yield scale, shift, np.array(scale, dt), None if shift is None else np.array(shift, dt)


def scale_layouts(x, dt, rng, layouts):
    """(data, scale, shift) for x reshaped to each ``(shape, scale shape)`` of ``layouts``:
    powers of two, zeros, negative and odd scales, without a shift and with one."""
    for shape, sshape in layouts:
        xs = x[: np.prod(shape)].reshape(shape)
        lim = 12 if dt == np.float16 else 20
        scale = np.exp2(rng.integers(-lim, lim, sshape)).astype(dt)
        scale *= rng.choice(np.array([1, -1, 0.37, 0.0, 3.0], dt), sshape)
        for shift in (None, (rng.standard_normal(sshape) * 4).astype(dt)):
            yield xs, scale, shift


def layouts(x, rows):
    """Rows of ``rows`` elements with a scale each, per column, per element, and along a
    middle axis and the last."""
    return [
        ((x.size // rows, rows), (x.size // rows, 1)),
        ((x.size // 48, 48), (1, 48)),
        ((x.size // 40, 40), (x.size // 40, 40)),
        ((x.size // 96, 3, 32), (1, 3, 32)),
    ]


def test_the_kernels_share_the_plugins_type_and_variant_numbers():
    assert (encode16._OV_F32_NODE, encode16._OV_F16_NODE, encode16._OV_BF16_NODE) == (
        fake.F32, fake.F16, fake.BF16,
    )  # fmt: skip
    assert (encode16._OV_FP16, encode16._OV_F32) == (fake.OV_FP16, fake.OV_F32)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2"])
def test_one_scale_gives_the_general_kernels_bits(fmt, mode, dt, monkeypatch):
    calls = []
    real = module().fake_walk_kernel
    monkeypatch.setattr(
        module(), "fake_walk_kernel", lambda *a, **k: calls.append(a) or real(*a, **k)
    )
    x = data(dt)
    for scale, shift, s, h in one_scales(dt):
        got, want = both(x, s, h, mode, fmt)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (scale, shift, [(x[i], got[i], want[i]) for i in bad[:4]])
    assert len(calls) == len(SCALES) and all(len(c) == 2 for c in calls)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("mode", MODES)
def test_every_scale_layout_gives_the_general_kernels_bits(mode, dt):
    x = data(dt)
    for xs, scale, shift in scale_layouts(x, dt, np.random.default_rng(5), layouts(x, 64)):
        got, want = both(xs, scale, shift, mode, "f8e4m3")
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_lengths_and_out(threads):
    """Rows split between threads, into a non-contiguous out; single rows of every length
    (spec mode's walk too, with a scale per element of 1-D data)."""
    x = np.tile(X, 2)[: 3001 * 97].reshape(3001, 97)
    scale = np.linspace(0.25, 4, 3001, dtype=np.float32)[:, None]
    shift = np.full_like(scale, 0.5)
    with general_kernel():
        want = fp8kit.fake_convert(x, scale, shift, mode="openvino-f32").view(np.uint32)
    out = np.empty((3001, 194), np.float32)[:, ::2]
    with fp8kit.num_threads(threads):
        got = fp8kit.fake_convert(x, scale, shift, mode="openvino-f32", out=out)
        np.testing.assert_array_equal(got.view(np.uint32), want)
        # (a single row of 2 * 4096 elements or more is cut into rows of 4096 and the rest,
        # which the threads share: fake_convert._row_pieces)
        flat = x.reshape(-1)
        for n in (0, 1, 31, 33, 1000, 8191, 8192, 3 * 4096 + 17, flat.size):
            per_element = np.linspace(-3, 3, n, dtype=np.float32)
            for scale, mode in ((2.0, "openvino-fp16"), (per_element, "spec")):
                got = fp8kit.fake_convert(flat[:n], scale, mode=mode)
                with general_kernel():
                    ref = fp8kit.fake_convert(flat[:n], scale, mode=mode)
                np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_nan_scales_take_the_walking_kernels_nan_build(monkeypatch):
    calls = []
    real = module().fake_walk_kernel
    monkeypatch.setattr(
        module(), "fake_walk_kernel", lambda *a, **k: calls.append((a, k)) or real(*a, **k)
    )
    x = X[:4096].reshape(64, 64)
    rows = np.full((64, 1), 2.0, np.float32)
    rows[3] = np.nan
    got = fp8kit.fake_convert(x, rows, mode="openvino-f32")
    # (NaN -> -max before the rounding: the NaN rows' elements are the scale's NaN)
    assert np.isnan(got[3]).all() and not np.isnan(got[4]).any()
    fp8kit.fake_convert(x, np.ones_like(rows), rows, mode="openvino-f32")
    assert [k for _, k in calls] == [{"fix_nan": True}] * 2
    assert [a[1] for a, _ in calls] == [(fake.F32, fake.F32, fake.OV_F32)] * 2
