"""FakeConvert-13 on device arrays: bit for bit the CPU kernel (NaN payloads included), for
both modes, every data type and the scale layouts."""

import numpy as np
import pytest
from numba import cuda

import fp8kit
import fp8kit.cuda

from .simdata import BF16, bits, host, inputs, same_bits, to_device

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid|divide)")

DTYPES = [np.float32, np.float16, BF16]
# ("openvino" is one of the two variants, by the host's CPU: both are run explicitly)
MODES = [("spec", "f8e4m3"), ("spec", "float8_e5m2fnuz"), ("openvino-fp16", "f8e4m3"),
         ("openvino-f32", "f8e5m2")]  # fmt: skip
ROWS = 60


def data(dtype):
    """Data with specials, NaN payloads, ties, subnormals and random bit patterns, as
    (ROWS, n) so that per-row scales meet every kind of value."""
    x = inputs(dtype)
    x = x[: (x.size // ROWS) * ROWS]
    return x.reshape(ROWS, -1)


def channel_scales(dtype, rng):
    """Per-row scale and shift, including 0, a negative, Inf, NaNs with payloads, -0 and
    a subnormal."""
    scale = (np.exp2(rng.integers(-8, 8, (ROWS, 1))) * rng.uniform(0.5, 2, (ROWS, 1))).astype(
        np.float32
    )
    shift = rng.standard_normal((ROWS, 1)).astype(np.float32)
    with np.errstate(invalid="ignore"):
        scale.reshape(-1)[:6] = np.uint32(
            [0, 0xC0400000, 0x7F800000, 0x7FC00001, 0xFF800003, 0x00000004]
        ).view(np.float32)
        shift.reshape(-1)[:4] = np.uint32([0, 0x80000000, 0x7FC00002, 0xFFA00000]).view(np.float32)
        return scale.astype(dtype), shift.astype(dtype)


BY_VALUE = [(np.float32, m, d) for m, d in MODES] + [
    (np.float16, "openvino-fp16", "f8e4m3"),
    (BF16, "spec", "f8e4m3"),
]


@pytest.mark.parametrize(
    "dtype, mode, dest", BY_VALUE, ids=[f"{np.dtype(t).name}-{m}-{d}" for t, m, d in BY_VALUE]
)
def test_scale_by_value(dtype, mode, dest):
    x = data(dtype)
    for scale in [2.5, np.asarray(0.0078125, dtype=dtype)]:
        got = fp8kit.fake_convert(to_device(x), scale, destination_type=dest, mode=mode)
        assert got.dtype == x.dtype
        same_bits(host(got), fp8kit.fake_convert(x, scale, destination_type=dest, mode=mode))


def _per_channel_cases():
    """(dtype, mode, dest): every pair; of the OpenVINO arithmetic on 16-bit data (3-5 s
    each in the simulator) float16 with openvino-fp16 and bfloat16 with openvino-f32 in the
    default run, the other two in the slow one."""
    for dtype in DTYPES:
        for mode, dest in MODES:
            default = (
                mode == "spec" or dtype == np.float32
                or (dtype == np.float16) == (mode == "openvino-fp16")
            )  # fmt: skip
            marks = () if default else pytest.mark.slow
            yield pytest.param(dtype, mode, dest, marks=marks,
                               id=f"{np.dtype(dtype).name}-{mode}-{dest}")  # fmt: skip


@pytest.mark.parametrize("dtype, mode, dest", list(_per_channel_cases()))
def test_per_channel_scale_and_shift(dtype, mode, dest):
    x = data(dtype)
    scale, shift = channel_scales(dtype, np.random.default_rng(len(dest)))
    got = fp8kit.fake_convert(
        to_device(x), to_device(scale), to_device(shift), destination_type=dest, mode=mode
    )
    want = fp8kit.fake_convert(x, scale, shift, destination_type=dest, mode=mode)
    same_bits(host(got), want)


@pytest.mark.parametrize(
    "shape, scale_shape",
    [
        pytest.param((60, 57), (57,), id="inner-runs"),
        pytest.param((2, 3, 40, 5), (1, 3, 1, 1), id="4d-channel"),
        pytest.param((2, 3, 4, 5, 6), (2, 1, 1, 5, 6), id="5d-merged-to-3"),
        pytest.param((7, 40), (), id="0d-device-scale"),
    ],
)
@pytest.mark.parametrize("mode", ["spec", "openvino"])
def test_scale_layouts(shape, scale_shape, mode):
    rng = np.random.default_rng(1)
    x = inputs(np.float32)[: int(np.prod(shape))].reshape(shape)
    scale = rng.uniform(0.1, 10, scale_shape).astype(np.float32)
    shift = rng.standard_normal(scale_shape).astype(np.float32)
    got = fp8kit.fake_convert(to_device(x), to_device(scale), to_device(shift), mode=mode)
    same_bits(host(got), fp8kit.fake_convert(x, scale, shift, mode=mode))
    if scale_shape == ():  # a device scale with a shift given by value
        got = fp8kit.fake_convert(to_device(x), to_device(scale), 0.25, mode=mode)
        same_bits(host(got), fp8kit.fake_convert(x, scale, 0.25, mode=mode))


def test_more_than_four_merged_dimensions_are_refused():
    x = to_device(np.ones((2, 3, 4, 5, 6), np.float32))
    scale = to_device(np.ones((2, 1, 4, 1, 6), np.float32))
    with pytest.raises(ValueError, match="at most 4 merged dimensions"):
        fp8kit.fake_convert(x, scale)


def test_bfloat16_bits_and_out():
    x = data(BF16)
    scale, shift = channel_scales(BF16, np.random.default_rng(7))
    want = fp8kit.fake_convert(x, scale, shift, mode="openvino")
    # uint16 device arrays holding bfloat16 bits (what torch/CuPy can hand over)
    d = to_device(x.view(np.uint16))
    out = cuda.device_array(x.shape, np.uint16)
    got = fp8kit.cuda.fake_convert(
        d, to_device(scale.view(np.uint16)), to_device(shift.view(np.uint16)), mode="openvino",
        out=out, bfloat16=True,
    )  # fmt: skip
    assert got is out
    same_bits(host(out), want)
    # in place
    fp8kit.cuda.fake_convert(d, 2.0, out=d, bfloat16=True)
    same_bits(host(d), fp8kit.fake_convert(x, 2.0))
    with pytest.raises(TypeError, match="bfloat16=True"):
        fp8kit.fake_convert(to_device(x.view(np.uint16)), 2.0)


def test_nan_times_nan_is_deterministic():
    # Two NaN operands: x86 returns the first, made quiet, but LLVM may swap the operands of
    # x * s and q + h.  The CPU kernel fixes the order (x, then s; q, then h), so the GPU
    # can give the same bits.  (q, the rounded value, is NaN with the sign of x * s - h.)
    x = np.uint32([0x7F800001, 0xFFC00005, 0x3F800000]).view(np.float32)
    s = np.uint32([0xFFA00002, 0x7FC00009, 0x40000000]).view(np.float32)
    h = np.uint32([0x7F800003, 0x7FC00007, 0xFFC00007]).view(np.float32)
    want = fp8kit.fake_convert(x, s, h)
    assert [hex(v) for v in bits(want)] == ["0x7fc00000", "0xffc00000", "0xffc00000"]
    same_bits(host(fp8kit.fake_convert(to_device(x), to_device(s), to_device(h))), want)
    assert hex(bits(fp8kit.fake_convert(x, s))[0]) == "0x7fc00000"


@pytest.mark.parametrize("mode", ["openvino-fp16", "openvino-f32"])
def test_float16_subnormal_slip_as_the_cpu_kernel(mode):
    # float32 values just below 2**-17 .. 2**-14, where the two variants differ
    # (tests/test_fake_convert_openvino.py)
    c = np.concatenate([np.float32(2.0**e).view(np.uint32) - np.arange(1, 4200, 97, dtype=np.uint32)
                        for e in (-17, -16, -15, -14)])  # fmt: skip
    x = np.concatenate([c, c | np.uint32(0x80000000)]).view(np.float32)
    got = fp8kit.fake_convert(to_device(x), 1.0, destination_type="f8e5m2", mode=mode)
    want = fp8kit.fake_convert(x, 1.0, destination_type="f8e5m2", mode=mode)
    same_bits(host(got), want)
    other = "openvino-f32" if mode == "openvino-fp16" else "openvino-fp16"
    assert (
        bits(want) != bits(fp8kit.fake_convert(x, 1.0, destination_type="f8e5m2", mode=other))
    ).any()


def test_unsigned_and_precision_one_destinations_stay_on_the_host():
    # the host rounds them step by step with round_to's kernels; the GPU kernels round in
    # place, which these formats' ties (and missing sign) do not allow
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="not supported on the GPU"):
        fp8kit.fake_convert(to_device(x), np.float32(1.0), destination_type="p3109_k8p1se")
