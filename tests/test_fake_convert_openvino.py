"""mode="openvino" against the openvino package's CPU device (a one-node FakeConvert-13
model), bit for bit, on over a million values per destination type and data type.

The device computes differently on CPUs with and without AVX512-FP16.  mode="openvino"
follows this machine's CPU, so the oracle tests check the variant of the CPU they run on;
the facts that tell the two variants apart are pinned below without the oracle (measured on
both kinds of CPU, docs/fake_convert.md)."""

import importlib

import ml_dtypes
import numpy as np
import pytest
from openvino_oracle import fake_convert_evaluate, fake_convert_ov

import fp8kit

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid|divide)")


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
    # (one thread: the serial kernels build in a fraction of the threaded ones' time; the
    # threaded openvino kernel meets the oracle in the binade test below)
    with fp8kit.num_threads(1):
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
    with pytest.raises(ValueError, match="mode must be 'spec' or 'openvino'.*got 'ov'"):
        fp8kit.fake_convert(np.zeros(2, np.float32), 1.0, mode="ov")
    with pytest.raises(ValueError, match="mode='openvino-f32' supports f8e4m3 and f8e5m2"):
        fp8kit.fake_convert(
            np.zeros(2, np.float32), 1.0, destination_type="float8_e5m2fnuz", mode="openvino-f32"
        )
    with pytest.raises(ValueError, match="mode='openvino-fp16' rounds to nearest-even only"):
        fp8kit.fake_convert(
            np.zeros(2, np.float32), 1.0, mode="openvino-fp16", rounding="toward_zero"
        )


def _near_powers_of_two(lo, hi, k):
    """float32 values within k codes of each power of two 2**lo .. 2**hi, both signs."""
    c = np.concatenate(
        [np.float32(2.0**e).view(np.uint32) + np.arange(-k, k, dtype=np.int64) for e in
         range(lo, hi + 1)]
    ).astype(np.uint32)  # fmt: skip
    x = c.view(np.float32)
    return np.concatenate([x, -x])


def test_float16_subnormal_slip_of_cpus_without_avx512_fp16():
    # Measured on a CPU without AVX512-FP16 (every float32 in [2**-27, 2**-13], scale 1,
    # against the CPU device): the software float32 -> float16 rounding gives 2**(e + 2)
    # for values of the binades 2**-18 .. 2**-16 whose top 11 fraction bits are set, i.e.
    # just below 2**(e + 1); f8e5m2 (subnormals down to 2**-16) shows it.  With AVX512-FP16
    # the rounding is nearest-even.
    below = np.float32([2.0**-17, 2.0**-16, 2.0**-15, 2.0**-14]) * np.float32(1 - 2**-12)
    one = np.float32(1.0)
    f32 = fp8kit.fake_convert(below, one, destination_type="f8e5m2", mode="openvino-f32")
    fp16 = fp8kit.fake_convert(below, one, destination_type="f8e5m2", mode="openvino-fp16")
    assert f32.tolist() == [2.0**-16, 2.0**-15, 2.0**-14, 2.0**-14]
    assert fp16.tolist() == [0.0, 2.0**-16, 2.0**-15, 2.0**-14]
    assert fp8kit.fake_convert(
        -below, one, destination_type="f8e5m2", mode="openvino-f32"
    ).tolist() == [
        -(2.0**-16),
        -(2.0**-15),
        -(2.0**-14),
        -(2.0**-14),
    ]
    # the slip starts at fraction 0x7FF000 (where a rounding to float16's 10 fraction bits
    # would carry) and stops at the power of two
    edge = np.uint32([0x36FFEFFF, 0x36FFF000, 0x37000000]).view(np.float32)
    got = fp8kit.fake_convert(edge, one, destination_type="f8e5m2", mode="openvino-f32")
    assert got.tolist() == [0.0, 2.0**-16, 0.0]


def test_float16_data_runs_on_float32_nodes_without_avx512_fp16():
    # 7 * 3 = 21 rounds to 20; 1/3 is stored in float16 (0.33325195) on float16 nodes and
    # kept in float32 otherwise: 20 * (1/3) is 6.665039 -> float16 6.6640625, or
    # 6.6666667 -> 6.66796875
    x, s, h = np.float16([7.0]), np.float16(3.0), np.float16(0.0)
    assert fp8kit.fake_convert(x, s, h, mode="openvino-fp16")[0] == 6.6640625
    assert fp8kit.fake_convert(x, s, h, mode="openvino-f32")[0] == 6.66796875
    # bfloat16 runs on bfloat16 nodes on both
    xb = x.astype(ml_dtypes.bfloat16)
    sb, hb = np.asarray(3.0, ml_dtypes.bfloat16), np.asarray(0.0, ml_dtypes.bfloat16)
    assert bits(fp8kit.fake_convert(xb, sb, hb, mode="openvino-fp16")) == bits(
        fp8kit.fake_convert(xb, sb, hb, mode="openvino-f32")
    )


def test_openvino_mode_follows_this_machines_cpu(monkeypatch):
    module = importlib.import_module("fp8kit.fake_convert")  # (the package's name is the function)

    x = np.float32([2.0**-17 * (1 - 2**-12)])
    for has_fp16, variant in [(True, "openvino-fp16"), (False, "openvino-f32")]:
        monkeypatch.setattr(module, "host_has_avx512_fp16", lambda v=has_fp16: v)
        assert bits(
            fp8kit.fake_convert(x, 1.0, destination_type="f8e5m2", mode="openvino")
        ) == bits(fp8kit.fake_convert(x, 1.0, destination_type="f8e5m2", mode=variant))


@pytest.mark.parametrize("dest", ["f8e4m3", "f8e5m2"])
def test_matches_openvino_cpu_near_float16_subnormal_binades(dest):
    # every float32 within 4096 codes of the powers of two 2**-27 .. 2**-13 (the slip above
    # on CPUs without AVX512-FP16), through several scales
    x = _near_powers_of_two(-27, -13, 4096)
    for scale in [1.0, 0.75, 3.0]:
        s = np.float32(scale)
        got = fp8kit.fake_convert(x / s, s, destination_type=dest, mode="openvino")
        want = fake_convert_ov(x / s, s, None, destination_type=dest)
        bad = np.flatnonzero(bits(got) != bits(want))
        assert not bad.size, [(hex(bits(x / s)[i]), got[i], want[i]) for i in bad[:5]]


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
