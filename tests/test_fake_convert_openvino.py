"""mode="openvino" against the openvino package's CPU device (a one-node FakeConvert-13
model), bit for bit, on over a million values per destination type and data type."""

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from openvino_oracle import fake_convert_evaluate, fake_convert_ov

import fp8kit

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid|divide)")


def _cpu_flags():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


# The CPU plugin's float16 and bfloat16 paths depend on the instruction set (docs).
ISA = {"avx512_fp16", "avx512_bf16"} <= _cpu_flags()
needs_isa = pytest.mark.skipif(not ISA, reason="bit-exactness pinned for AVX512-FP16/BF16 CPUs")

DATA = [np.float32, np.float16, ml_dtypes.bfloat16]


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def values(dtype, n, rng):
    """Random floats across the whole range, with specials, ties and subnormals mixed in."""
    x = (rng.standard_normal(n) * np.exp2(rng.uniform(-24, 20, n))).astype(np.float32)
    k = n // 20
    x[:k] = rng.choice(
        np.float32(
            [
                0.0,
                -0.0,
                np.inf,
                -np.inf,
                np.nan,
                448.0,
                464.0,
                480.0,
                57344.0,
                61440.0,
                2.0**-9,
                2.0**-10,
                2.0**-17,
                1e-40,
            ]
        ),
        k,
    )
    x[k : 2 * k] = rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return x.astype(dtype)


@needs_isa
@pytest.mark.parametrize("dest", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("dtype", DATA, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", ["per-tensor", "per-channel", "per-channel-shift"])
def test_matches_openvino_cpu_bit_for_bit(dest, dtype, case):
    rng = np.random.default_rng(len(dest) + len(case) + np.dtype(dtype).itemsize)
    if case == "per-tensor":
        x = values(dtype, 1_000_003, rng)
        scale = np.asarray(rng.uniform(0.01, 100), dtype=dtype)
        shift = None
    else:
        x = values(dtype, 500 * 2003, rng).reshape(500, 2003)
        scale = np.exp2(rng.integers(-8, 8, (500, 1))) * rng.uniform(0.5, 2, (500, 1))
        scale = scale.astype(dtype)
        scale.reshape(-1)[:4] = [0.0, -3.0, np.inf, np.nan]
        shift = rng.standard_normal((500, 1)).astype(dtype) if "shift" in case else None
        if shift is not None:
            shift.reshape(-1)[:3] = [0.0, -0.0, np.nan]
    got = fp8kit.fake_convert(x, scale, shift, destination_type=dest, mode="openvino")
    want = fake_convert_ov(x, scale, shift, destination_type=dest)
    bad = np.flatnonzero(bits(got).ravel() != bits(want).ravel())
    assert not bad.size, [
        (bits(x).ravel()[i], bits(got).ravel()[i], bits(want).ravel()[i]) for i in bad[:5]
    ]


def test_openvino_mode_differs_from_the_spec_as_documented():
    x = np.float32([1.0625 + 2**-23, np.nan, -0.0])  # f16 double rounding; NaN -> -max
    spec = fp8kit.fake_convert(x, np.float32(1.0))
    ov = fp8kit.fake_convert(x, np.float32(1.0), mode="openvino")
    assert spec[0] == 1.125 and ov[0] == 1.0
    assert np.isnan(spec[1]) and ov[1] == -448.0
    # dequantization multiplies by the reciprocal: 7*3 = 21 rounds to 20, then 20 * (1/3)
    # in OpenVINO (0x40d55556) but 20 / 3 by the formula (0x40d55555)
    x7 = np.float32([7.0])
    assert bits(fp8kit.fake_convert(x7, np.float32(3.0), mode="openvino"))[0] == 0x40D55556
    assert bits(fp8kit.fake_convert(x7, np.float32(3.0)))[0] == 0x40D55555


def test_openvino_mode_refuses_other_formats():
    with pytest.raises(ValueError, match="supports f8e4m3 and f8e5m2"):
        fp8kit.fake_convert(
            np.zeros(2, np.float32), 1.0, destination_type="float8_e4m3fnuz", mode="openvino"
        )
    with pytest.raises(ValueError, match="mode must be 'spec' or 'openvino'"):
        fp8kit.fake_convert(np.zeros(2, np.float32), 1.0, mode="ov")


@needs_isa
def test_openvino_evaluate_differs_from_its_cpu_device():
    # node.evaluate (OpenVINO core's reference code) is not what the CPU device computes:
    # it maps NaN to +max and divides by the scale (docs/fake_convert.md)
    x = np.float32([np.nan, 7.0])
    s = np.float32(3.0)
    ev = fake_convert_evaluate(x, s)
    cpu = fake_convert_ov(x, s)
    assert ev[0] == np.float32(448.0) / s  # NaN -> +max, then divide
    assert cpu[0] == np.float32(-448.0) * (np.float32(1.0) / s)  # NaN -> -max, reciprocal
    assert bits(ev)[1] == 0x40D55555 and bits(cpu)[1] == 0x40D55556
    assert (bits(fp8kit.fake_convert(x, s, mode="openvino")) == bits(cpu)).all()
