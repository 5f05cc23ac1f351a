"""FakeConvert in the OpenVINO CPU plugin's arithmetic (mode="openvino-fp16" and
"openvino-f32") runs the general (Numba) kernel, fp8kit._kernels.fake.fake_convert_kernel
(the row-walking kernel of LLVM vector code that ran it before was no faster, measured).
Here mode="openvino", the variant of this machine's CPU, meets OpenVINO's CPU device
(tests/openvino_oracle.py) on every float32 boundary pattern and every 16-bit pattern, for
both formats, the scales of test_fake_one_scale (zeros, infinities, subnormal and huge
ones), with and without shifts, in each scale layout; tests/test_fake_convert_openvino.py
pins the facts that tell the two variants apart."""

import ml_dtypes
import numpy as np
import pytest
from openvino_oracle import fake_convert_ov
from test_fake_one_scale import SCALES, X, general_kernel, module

import fp8kit

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid|divide)")

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]
IDS = ["float32", "float16", "bfloat16"]
ALL16 = np.arange(1 << 16, dtype=np.uint16)


def data(dt):
    return X if dt == np.float32 else ALL16.view(dt)


def both(x, scale, shift, fmt):
    """(fp8kit's bits in this machine's variant, OpenVINO's CPU device's bits)."""
    u = f"u{x.dtype.itemsize}"
    with np.errstate(over="ignore", invalid="ignore"):
        got = fp8kit.fake_convert(x, scale, shift, destination_type=fmt, mode="openvino")
    want = fake_convert_ov(x, scale, shift, destination_type=fmt)
    return np.asarray(got).view(u), np.asarray(want).view(u)


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


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2"])
def test_one_scale_meets_the_cpu_device(fmt, dt, monkeypatch):
    calls = []
    real = module().fake_walk_kernel
    monkeypatch.setattr(
        module(), "fake_walk_kernel", lambda *a, **k: calls.append(a) or real(*a, **k)
    )
    x = data(dt)
    for scale, shift, s, h in one_scales(dt):
        got, want = both(x, s, h, fmt)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (scale, shift, [(x[i], got[i], want[i]) for i in bad[:4]])
    assert not calls  # (the general kernel, never the walk)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_every_scale_layout_meets_the_cpu_device(dt):
    x = data(dt)
    for xs, scale, shift in scale_layouts(x, dt, np.random.default_rng(5), layouts(x, 64)):
        got, want = both(xs, scale, shift, "f8e4m3")
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_lengths_and_out(threads):
    """Rows split between threads, into a non-contiguous out; single rows of every length
    (spec mode's walk too, with a scale per element of 1-D data): one thread's bits."""
    x = np.tile(X, 2)[: 3001 * 97].reshape(3001, 97)
    scale = np.linspace(0.25, 4, 3001, dtype=np.float32)[:, None]
    shift = np.full_like(scale, 0.5)
    with fp8kit.num_threads(1):
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


def test_nan_scales_meet_the_cpu_device():
    x = X[:4096].reshape(64, 64)
    rows = np.full((64, 1), 2.0, np.float32)
    rows[3] = np.nan
    got = fp8kit.fake_convert(x, rows, mode="openvino")
    # (NaN -> -max before the rounding: the NaN rows' elements are the scale's NaN)
    assert np.isnan(got[3]).all() and not np.isnan(got[4]).any()
    np.testing.assert_array_equal(
        got.view(np.uint32), np.asarray(fake_convert_ov(x, rows, None)).view(np.uint32)
    )
    got = fp8kit.fake_convert(x, np.ones_like(rows), rows, mode="openvino")
    want = fake_convert_ov(x, np.ones_like(rows), rows)
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(want).view(np.uint32))
