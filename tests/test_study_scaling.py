"""Scaling recipes against hand-worked examples, MX block scales against the OCP MX rule,
delayed scaling against a hand-worked sequence, and scaled quantization against FakeConvert
and a numpy float64 oracle."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fp8kit
from fp8kit import study
from fp8kit.study.scaling import scaled_round_numpy

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
W = np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)


# scale = max / amax / 2**margin, rounded down to a power of two with pow2; max is 448 for
# float8_e4m3fn, 57344 for float8_e5m2, 240 for float8_e4m3fnuz.
@pytest.mark.parametrize(
    "x, fmt, kwargs, want",
    [
        pytest.param(W, "float8_e4m3fn", {}, 224.0, id="tensor-e4m3: 448/2"),
        pytest.param(W, "float8_e5m2", {}, 28672.0, id="tensor-e5m2: 57344/2"),
        pytest.param(W, "float8_e4m3fnuz", {}, 120.0, id="tensor-e4m3fnuz: 240/2"),
        pytest.param(W, "float8_e4m3fn", {"margin": 1}, 112.0, id="margin-1: 448/2/2"),
        pytest.param(W, "float8_e4m3fn", {"margin": 0.5}, 224 / 2**0.5, id="margin-half"),
        pytest.param(W, "float8_e4m3fn", {"pow2": True}, 128.0, id="pow2: 224 -> 128"),
        pytest.param(W, "float8_e5m2", {"pow2": True}, 16384.0, id="pow2: 28672 -> 2**14"),
        pytest.param(W, "float8_e4m3fn", {"margin": 1, "pow2": True}, 64.0, id="margin+pow2"),
        pytest.param(
            np.array([1.0, np.nan, np.inf, -4.0], np.float32),
            "float8_e4m3fn",
            {},
            112.0,
            id="nan-inf-ignored: 448/4",
        ),
        pytest.param(np.zeros(5, np.float32), "float8_e4m3fn", {}, 1.0, id="zero-amax: 1"),
        pytest.param(
            np.array([2.0**-149], np.float32),
            "float8_e4m3fn",
            {},
            2.0**127,
            id="tiny-amax: clamped to 2**127",
        ),
        pytest.param(np.array([3.0]), "float8_e4m3fn", {}, 448 / 3, id="float64-data"),
        pytest.param(W, "float8_e4m3fn", {"margin": -1}, 448.0, id="negative-margin"),
    ],
)
def test_tensor_scale_hand_worked(x, fmt, kwargs, want):
    s = study.scale_for(x, fmt, "tensor", **kwargs)
    assert s.shape == ()
    assert s.dtype == (np.float64 if x.dtype == np.float64 else np.float32)
    assert float(s) == float(s.dtype.type(want))


@pytest.mark.parametrize(
    "axis, want",
    [
        pytest.param(0, [[224.0], [896.0]], id="rows: 448/2, 448/0.5"),
        pytest.param(1, [[448.0, 224.0]], id="columns: 448/1, 448/2"),
        pytest.param(-1, [[448.0, 224.0]], id="negative-axis"),
    ],
)
def test_channel_scale_hand_worked(axis, want):
    s = study.scale_for(W, "float8_e4m3fn", "channel", axis=axis)
    np.testing.assert_array_equal(s, np.array(want, np.float32))


def test_channel_scale_zero_channel_gets_one_and_default_axis_is_0():
    x = np.array([[0.0, 0.0], [np.nan, 4.0], [np.inf, 0.0]], np.float32)
    s = study.scale_for(x, "float8_e4m3fn", "channel")
    np.testing.assert_array_equal(s.ravel(), [1.0, 112.0, 1.0])


def test_channel_scale_of_3d_tensor_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    for axis in range(3):
        amax = np.abs(x).max(axis=tuple(a for a in range(3) if a != axis), keepdims=True)
        want = (448.0 / amax.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(
            study.scale_for(x, "float8_e4m3fn", "channel", axis=axis), want
        )


def test_none_scaling_is_one():
    assert float(study.scale_for(W, "float8_e4m3fn", "none")) == 1.0


# OCP Microscaling Formats (MX) v1.0, section 6.3, Algorithm 1 (conversion of a vector of
# scalar floats {V_i} to an MX block {X, {P_i}}):
#   "Require: emax_elem = exponent of the largest normal number in the element data format
#    1: shared_exp <- floor(log2(max_i(|V_i|))) - emax_elem
#    2: X <- 2^shared_exp
#    3: for i = 1 to k do
#    4:   P_i = quantize_to_element_format(V_i / X), clamping normal numbers to max normal"
# E8M0 (section 5.4.1): exponent bias 127, exponents -127..127, NaN = 0b11111111, no Inf,
# no zero.  emax_elem: 8 for E4M3 (448 = 1.75 * 2**8), 15 for E5M2 (57344 = 1.75 * 2**15).
# Edge cases the spec leaves open (ours, as the spec authors' emulation library): shared_exp
# > 127 or a NaN/Inf in the block -> NaN scale 0xFF; shared_exp < -127 -> -127; all zeros ->
# 2**-127.
MX_CASES = [
    pytest.param([1.0, 300.0, -3.0, 0.0], "float8_e4m3fn", 0, id="e4m3: floor(log2 300)=8, 8-8=0"),
    pytest.param([448.0, 1.0, 0.0, 0.0], "float8_e4m3fn", 0, id="e4m3: amax 448 -> 0"),
    pytest.param([-512.0, 1.0, 0.0, 0.0], "float8_e4m3fn", 1, id="e4m3: amax 512 -> 9-8=1"),
    pytest.param([511.9, 0.0, 0.0, 0.0], "float8_e4m3fn", 0, id="e4m3: amax 511.9 -> 8-8=0"),
    pytest.param([0.001, 0.0, 0.0, 0.0], "float8_e4m3fn", -18, id="e4m3: log2 0.001 -> -10-8"),
    pytest.param([1.0, 0.5, 0.0, 0.0], "float8_e5m2", -15, id="e5m2: 0-15"),
    pytest.param([6e4, 0.5, 0.0, 0.0], "float8_e5m2", 0, id="e5m2: floor(log2 6e4)=15"),
    pytest.param([1.0, 0.0, 0.0, 0.0], "float8_e4m3fnuz", -7, id="e4m3fnuz: emax 7 (240)"),
    pytest.param([1.0, 0.0, 0.0, 0.0], "float8_e5m2fnuz", -15, id="e5m2fnuz: emax 15"),
    pytest.param([0.0, -0.0, 0.0, 0.0], "float8_e4m3fn", -127, id="all-zero: 2**-127"),
    pytest.param([2.0**-140, 0.0, 0.0, 0.0], "float8_e4m3fn", -127, id="subnormal: clamp -127"),
    pytest.param([1.0, np.nan, 0.0, 0.0], "float8_e4m3fn", None, id="NaN in block: NaN scale"),
    pytest.param([1.0, -np.inf, 0.0, 0.0], "float8_e4m3fn", None, id="Inf in block: NaN scale"),
]


@pytest.mark.parametrize("block, fmt, shared_exp", MX_CASES)
def test_mx_scale_hand_worked(block, fmt, shared_exp):
    x = np.array(block + [3.0, 0.0, 0.0, 0.0], np.float32)  # second block: 3.0
    X = study.mx_scales(x, fmt, block_size=4)
    assert X.dtype == ml_dtypes.float8_e8m0fnu and X.shape == (2,)
    codes = X.view(np.uint8)
    emax = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float8_e4m3fnuz": 7, "float8_e5m2fnuz": 15}
    assert codes[1] == 1 - emax[fmt] + 127  # floor(log2 3) = 1
    if shared_exp is None:
        assert codes[0] == 0xFF and np.isnan(X[0].astype(np.float32))
    else:
        assert codes[0] == shared_exp + 127
        assert X[0].astype(np.float64) == 2.0**shared_exp  # ml_dtypes decodes the E8M0 code
        s = study.scale_for(x, fmt, "block", block_size=4)
        assert s[0] == np.float32(2.0**-shared_exp)


@pytest.mark.parametrize(
    "value, shared_exp",
    [
        pytest.param(2.0**200, None, id="float64: 200-8 > 127 -> NaN"),
        pytest.param(2.0**135 * 1.5, 127, id="float64: 135-8 = 127, the largest"),
        pytest.param(2.0**-200, -127, id="float64: clamp -127"),
    ],
)
def test_mx_scale_e8m0_range_with_float64_data(value, shared_exp):
    codes = study.mx_scales(np.array([value, 1.0]), "float8_e4m3fn", block_size=1).view(np.uint8)
    assert codes[0] == (0xFF if shared_exp is None else shared_exp + 127)


def mx_oracle(x, fmt, block, axis):
    """MX with numpy in float64, written independently: move the axis last, pad it with zeros
    to whole blocks (padding does not change a block's amax), apply the rule, unpad."""
    f = fp8kit.get_format(fmt)
    emax = math.floor(math.log2(f.max))
    v = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    n = v.shape[-1]
    pad = -n % block
    vp = np.concatenate([v, np.zeros(v.shape[:-1] + (pad,))], axis=-1)
    vb = vp.reshape(v.shape[:-1] + (-1, block))
    amax = np.abs(vb).max(axis=-1, keepdims=True)  # NaN if the block has one
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        shared = np.floor(np.log2(amax)) - emax  # +Inf for an Inf in the block
        shared = np.where(amax == 0, -127.0, np.maximum(shared, -127.0))
        X = np.where(shared > 127, np.nan, np.exp2(shared))
        p = fp8kit.round_to(np.clip(vb / X, -f.max, f.max), f)  # clamping to max normal
        q = (p * X).reshape(vp.shape)[..., :n]
    codes = np.where(np.isnan(X), 255, shared + 127).astype(np.uint8)[..., 0]
    return np.moveaxis(q, -1, axis), np.moveaxis(codes, -1, axis)


@pytest.mark.parametrize("fmt", FLOAT8)
@pytest.mark.parametrize(
    "shape, block, axis",
    [
        pytest.param((8, 64), 32, -1, id="rows-of-2-blocks"),
        pytest.param((8, 70), 32, -1, id="ragged-last-block-of-6"),
        pytest.param((64, 3, 5), 16, 0, id="axis-0"),
        pytest.param((4, 50, 6), 8, 1, id="middle-axis-ragged"),
        pytest.param((1000,), 1000, 0, id="one-block"),
        pytest.param((300, 256), 32, -1, id="threaded"),
    ],
)
def test_mx_quantize_matches_the_rule(fmt, shape, block, axis):
    rng = np.random.default_rng(sum(shape) + block)
    x = rng.standard_normal(shape) * np.exp2(
        rng.integers(-30, 30, shape[:1] + (1,) * (len(shape) - 1))
    )
    x = x.astype(np.float32)
    x.reshape(-1)[:3] = [0.0, -0.0, 1e-42]
    q = study.quantize(x, fmt, "block", block_size=block, axis=axis)
    want_q, want_codes = mx_oracle(x, fmt, block, axis)
    np.testing.assert_array_equal(q.astype(np.float64), want_q)
    np.testing.assert_array_equal(
        study.mx_scales(x, fmt, block_size=block, axis=axis).view(np.uint8), want_codes
    )


def test_mx_block_with_nan_becomes_nan():
    x = np.array([1.0, np.nan, 2.0, 3.0, 4.0, 5.0], np.float32)
    q = study.quantize(x, "float8_e4m3fn", "block", block_size=3)
    # second block: amax 5, X = 2**(2-8); 3, 4 and 5 times 64 exist in E4M3
    assert np.isnan(q[:3]).all() and q[3:].tolist() == [3.0, 4.0, 5.0]


def test_mx_saturates_what_the_floor_rule_puts_above_max():
    # amax 500: X = 2**(8-8) = 1 and 500 > 448 clamps: the rule's known clipping
    q = study.quantize(np.array([500.0, 1.0], np.float32), "float8_e4m3fn", "block", block_size=2)
    assert q.tolist() == [448.0, 1.0]


@given(
    hnp.arrays(np.float32, st.integers(1, 200), elements=st.floats(width=32)),
    st.sampled_from(FLOAT8),
    st.integers(1, 40),
)
def test_property_mx_matches_the_rule(x, fmt, block):
    want_q, want_codes = mx_oracle(x, fmt, block, 0)
    with np.errstate(over="ignore"):
        q = study.quantize(x, fmt, "block", block_size=block, axis=0)
    np.testing.assert_array_equal(q.astype(np.float64), want_q.astype(np.float32))
    np.testing.assert_array_equal(
        study.mx_scales(x, fmt, block_size=block, axis=0).view(np.uint8), want_codes
    )


# Transformer Engine, DelayedScaling: "Use the delayed scaling factor strategy.  Use scale
# factor from previous iteration ... and record amax history of amax_history_len steps."
# "max chooses the largest amax in the history window, while most_recent always chooses the
# most recently seen value."  "The scaling factor is estimated so the FP8 tensor's maximum
# absolute value is 2^-margin max_fp8_dtype."  The first step uses the initial scale (1, as
# TE's scale buffers start); an amax of 0 keeps the previous scale.
AMAXES = [2.0, 4.0, 1.0, 1.0, 1.0, 0.0, 8.0]


@pytest.mark.parametrize(
    "kwargs, want",
    [
        pytest.param(
            dict(history_len=3, algo="max"), [1, 224, 112, 112, 112, 448, 448], id="max-window-3"
        ),
        pytest.param(
            dict(history_len=3, algo="most_recent"),
            [1, 224, 112, 448, 448, 448, 448],
            id="most-recent",
        ),
        pytest.param(
            dict(history_len=1, algo="max"), [1, 224, 112, 448, 448, 448, 448], id="max-window-1"
        ),
        pytest.param(
            dict(history_len=16, algo="max"), [1, 224, 112, 112, 112, 112, 112], id="max-window-16"
        ),
        pytest.param(
            dict(history_len=3, algo="max", margin=1), [1, 112, 56, 56, 56, 224, 224], id="margin-1"
        ),
        pytest.param(
            dict(history_len=3, algo="max", pow2=True), [1, 128, 64, 64, 64, 256, 256], id="pow2"
        ),
        pytest.param(
            dict(history_len=3, algo="max", initial_scale=None),
            [224, 224, 112, 112, 112, 448, 448],
            id="first-step-own-amax",
        ),
        pytest.param(
            dict(history_len=3, algo="max", initial_scale=4.0),
            [4, 224, 112, 112, 112, 448, 448],
            id="initial-scale-4",
        ),
    ],
)
def test_delayed_scaling_hand_worked(kwargs, want):
    ds = study.DelayedScaling("float8_e4m3fn", **kwargs)
    got = []
    for a in AMAXES:
        x = np.array([a, -a / 2, 0.0], np.float32)
        got.append(float(ds.scale(x)))
    assert got == want
    assert ds.history == tuple(reversed(AMAXES))[: kwargs["history_len"]]


def test_delayed_scaling_quantize_and_reset():
    ds = study.DelayedScaling("float8_e5m2", history_len=2)
    x = np.array([1000.0, 1.5], np.float32)
    first = ds.quantize(x)  # scale 1
    np.testing.assert_array_equal(first, study.quantize(x, "float8_e5m2", "none"))
    second = study.quantize(x, "float8_e5m2", ds)  # scale 57344 / 1000
    s = np.float32(57344 / 1000)
    np.testing.assert_array_equal(second, fp8kit.fake_convert(x, s, destination_type="f8e5m2"))
    ds.reset()
    assert ds.history == () and float(ds.scale(x)) == 1.0
    with pytest.raises(ValueError, match="is for float8_e5m2"):
        study.quantize(x, "float8_e4m3fn", ds)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        pytest.param(dict(history_len=0), ValueError, "history_len", id="len-0"),
        pytest.param(dict(history_len=2.5), TypeError, "history_len", id="len-float"),
        pytest.param(dict(algo="mean"), ValueError, "most_recent", id="algo"),
        pytest.param(dict(initial_scale=0.0), ValueError, "initial_scale", id="scale-0"),
    ],
)
def test_delayed_scaling_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        study.DelayedScaling("float8_e4m3fn", **kwargs)


@pytest.mark.parametrize("fmt", FLOAT8)
def test_numpy_path_equals_fake_convert_kernel(fmt):
    """The numpy steps (used for float64 data and other widths) give FakeConvert's bits."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(20_000) * np.exp2(rng.integers(-30, 30, 20_000))).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38]
    for scale in (np.float32(0.37), np.float32(1e-3), np.float32(5e4)):
        want = fp8kit.fake_convert(x, scale, destination_type=fmt)
        got = scaled_round_numpy(x, fp8kit.get_format(fmt), np.asarray(scale))
        nan = np.isnan(want)  # (fnuz: the NaN's sign bit may differ)
        assert (np.isnan(got) == nan).all()
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("fmt", [*FLOAT8, "bfloat16", "float16"])
def test_float64_data_rounds_once_in_float64(fmt):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(5000) * 10.0
    x[:3] = [1 + 2**-4 + 2**-40, np.nan, -1e300]
    s = study.scale_for(x, fmt)
    f = fp8kit.get_format(fmt)
    with np.errstate(over="ignore", invalid="ignore"):
        want = fp8kit.round_to(np.clip(x * s, -f.max, f.max), f) / s
    q = study.quantize(x, fmt)
    assert q.dtype == np.float64
    np.testing.assert_array_equal(q, want)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
def test_16bit_data_is_fake_convert_of_16bit_data(dtype, fmt):
    """With a scale that exists in the 16-bit type, quantize is FakeConvert on that type."""
    x = (np.random.default_rng(1).standard_normal(3000) * 3).astype(dtype)
    q = study.quantize(x, fmt, "tensor", pow2=True)
    s = study.scale_for(x, fmt, pow2=True)
    want = fp8kit.fake_convert(x, s.astype(dtype), destination_type=fmt)
    assert q.dtype == x.dtype
    np.testing.assert_array_equal(q.view(np.uint16), want.view(np.uint16))


def test_formats_other_than_8_bits():
    e2m1 = fp8kit.FloatFormat(
        name="t_e2m1fn", exponent_bits=2, mantissa_bits=1, bias=1, specials="fn"
    )
    x = np.array([0.1, 1.0, -3.3, 8.0, np.nan], np.float32)
    # values 0, 0.5, 1, 1.5, 2, 3, 4 (code 0b111 is NaN): amax 8 -> scale 4/8;
    # 0.05 -> 0, 0.5 -> 0.5, -1.65 -> -1.5, 4 -> 4
    np.testing.assert_array_equal(
        study.quantize(x, e2m1, "tensor"),
        np.array([0.0, 1.0, -3.0, 8.0, np.nan], np.float32),
    )
    q = study.quantize(x, "bfloat16", "none")
    np.testing.assert_array_equal(q, fp8kit.round_to(x, "bfloat16"))


def test_explicit_scale():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([[1.0], [100.0]], np.float32)
    np.testing.assert_array_equal(
        study.quantize(x, "float8_e4m3fn", scale=s),
        fp8kit.fake_convert(x, s, destination_type="f8e4m3"),
    )


def test_zero_dim_and_empty_inputs():
    assert study.quantize(np.float32(3.3), "float8_e4m3fn").shape == ()
    assert study.quantize(np.float32(3.3), "float8_e4m3fn", scale=2.0).shape == ()
    ds = study.DelayedScaling("float8_e4m3fn")
    assert study.quantize(np.float32(3.3), "float8_e4m3fn", ds).shape == ()
    assert float(study.scale_for(np.float32(3.0), "float8_e4m3fn", "channel")) == np.float32(
        448 / 3
    )
    assert study.quantize(np.zeros((0, 4), np.float32), "float8_e4m3fn", "block").shape == (0, 4)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        pytest.param(
            lambda: study.scale_for(W, "float8_e4m3fn", "row"),
            ValueError,
            "unknown scaling 'row'; valid: none, tensor, channel, block",
            id="scaling",
        ),
        pytest.param(
            lambda: study.scale_for(W, "e4m3", "tensor"), ValueError, "valid:", id="format"
        ),
        pytest.param(
            lambda: study.scale_for(W, "float8_e4m3fn", "channel", axis=2),
            ValueError,
            "axis=2 is out of range",
            id="axis",
        ),
        pytest.param(
            lambda: study.scale_for(W, "float8_e4m3fn", "channel", axis=1.0),
            TypeError,
            "axis must be an int",
            id="axis-type",
        ),
        pytest.param(
            lambda: study.quantize(W, "float8_e4m3fn", "block", block_size=0),
            ValueError,
            "block_size",
            id="block-size",
        ),
        pytest.param(
            lambda: study.quantize(np.arange(3), "float8_e4m3fn"),
            TypeError,
            "x must have dtype",
            id="int-data",
        ),
        pytest.param(
            lambda: study.quantize(W, "float8_e4m3fn", scale=np.ones(3)),
            ValueError,
            r"scale of shape \(3,\) does not fit x's shape \(2, 2\): along axis 1",
            id="scale-shape",
        ),
        pytest.param(
            lambda: study.mx_scales(W, "float8_e4m3fn", block_size=-1),
            ValueError,
            "block_size",
            id="mx-block",
        ),
    ],
)
def test_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "p3109_k8p3se"])
@pytest.mark.parametrize("shape", [(64, 96), (7, 33), (1000,), (3, 4, 40), (5, 1), (1, 1)])
def test_quantize_in_one_kernel_equals_scale_then_fake_convert(fmt, shape):
    # float32 data, per tensor, per channel and MX blocks (whole and ragged): the one kernel
    # (amax, then FakeConvert; or MX in one pass) gives the bits of compact_scale followed
    # by apply_scale, with NaN, Inf, subnormals, zeros and magnitudes from 1e-30 to 1e30
    from fp8kit.study import scaling

    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-30, 30, shape)).astype(np.float32)
    flat = x.reshape(-1)
    flat[:: max(1, flat.size // 7)] = 0.0
    if flat.size > 4:
        flat[1], flat[2], flat[-1] = 1e-44, np.nan, -np.inf
    if flat.size > 64:  # a block of float32 subnormals only (MX: its amax's leading zeros)
        flat[32:64] = 0.0
        flat[40:45] = [1e-40, -3e-42, 1e-45, 7e-39, 2e-44]
    f = fp8kit.get_format(fmt)
    for kind, kw in [("tensor", {}), ("channel", {}), ("block", dict(block_size=32)),
                     ("block", dict(block_size=5)), ("tensor", dict(margin=1.5, pow2=True)),
                     ("channel", dict(margin=2.0, pow2=True))]:  # fmt: skip
        got = study.quantize(x, fmt, kind, **kw)
        ax, block = scaling._axis_block(x, kind, None, kw.get("block_size", 32), "t")
        margin, pow2 = kw.get("margin", 0.0), kw.get("pow2", False)
        one_kernel = kind != "channel" or math.prod(shape[1:]) > 1  # (channels on axis 0)
        used = scaling._quantize_runs(x, f, kind, ax, block, margin, pow2) is not None
        assert used == one_kernel
        s = scaling.compact_scale(x, f, kind, ax, block, margin, pow2)[0]
        xv, sv = scaling.broadcast_view(x, s, kind, ax, block)
        want = scaling.apply_scale(xv, f, sv).reshape(shape)
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), (kind, kw)
