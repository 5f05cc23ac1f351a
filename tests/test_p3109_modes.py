"""The issue-20 rounding rules on the P3109 formats (issue 20: both halves together).

Precision-1 formats have no mantissa bits, so "even" and "odd" are the parity of the *code*
(the codes of 2**e and 2**(e+1) differ by one; gfloat, pychop and the draft), and the
unsigned formats have no sign bit: ``flush_subnormals`` there must not mistake the top
magnitude bit for a sign.  Checked against fp8kit's exact oracle on every value, midpoint and
their neighbours, and ``to_odd``/``nearest_even`` against pychop's P3109 API.
"""

import numpy as np
import pytest

import fp8kit
from fp8kit import get_format
from fp8kit._reference import encode_value

pytestmark = pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered")

FORMATS = ["p3109_k8p1se", "p3109_k8p3ue", "p3109_k6p2uf", "p3109_k5p1se"]
MODES = ["to_odd", "nearest_zero", "nearest_even", "toward_negative"]


def sweep(fmt):
    vals = np.array([float(fmt.code_value(c)) for c in range(1 << fmt.bits)])
    vals = np.sort(vals[np.isfinite(vals)])
    mids = (vals[1:] + vals[:-1]) / 2
    x = np.concatenate([vals, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), mids / 3])
    return np.concatenate([x, -x, [np.inf, -np.inf, np.nan, 2 * vals[-1]]])


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("mode", MODES)
def test_modes_and_flush_match_the_exact_oracle(name, mode):
    fmt = get_format(name)
    x = sweep(fmt)
    for sat in (True, False):
        for flush in (False, True):
            got = np.asarray(
                fp8kit.encode(x, fmt, rounding=mode, saturate=sat, flush_subnormals=flush)
            ).view(np.uint8)
            want = [
                encode_value(float(v), fmt, saturate=sat, rounding=mode, flush_subnormals=flush)
                for v in x
            ]
            np.testing.assert_array_equal(got, want, err_msg=f"{sat=} {flush=}")


def test_flush_subnormals_in_unsigned_formats_keeps_the_top_bit():
    # code 0x81 of p3109_k8p3ue is a normal number, not a "negative" subnormal
    fmt = get_format("p3109_k8p3ue")
    x = np.array([fmt.smallest_subnormal, float(fmt.code_value(0x81)), 1.0])
    for sat in (True, False):
        got = fp8kit.encode(x, fmt, rounding="toward_zero", saturate=sat, flush_subnormals=True)
        assert got.tolist() == [0, 0x81, fp8kit.encode(1.0, fmt).item()]


@pytest.mark.parametrize("name", ["p3109_k8p1se", "p3109_k8p3ue", "p3109_k8p4se"])
def test_to_odd_matches_pychop(name):
    pychop = pytest.importorskip("pychop")
    fmt = get_format(name)
    x = sweep(fmt)
    pf = pychop.P3109Format(
        fmt.bits, fmt.mantissa_bits + 1, fmt.signed, "extended" if fmt.has_inf else "finite"
    )
    for mode in ("to_odd", "nearest_even"):
        for sat in (True, False):
            with np.errstate(all="ignore"):
                want = pychop.p3109_quantize(x, pf, rounding=mode, saturate=sat)
            got = fp8kit.round_to(x, fmt, rounding=mode, saturate=sat)
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} {sat=}")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bfloat16"])
def test_fake_convert_by_steps_equals_the_kernel(dtype):
    # The destinations FakeConvert's kernels cannot round in place (unsigned, precision 1)
    # take the formula step by step (float32 numpy operations and round_to); on formats the
    # kernel takes, those steps give the kernel's bits, in every kind of rounding
    import ml_dtypes

    from fp8kit import _args
    from fp8kit.fake_convert import _by_steps

    dt = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((16, 33)) * 50).astype(dt)
    x[0, :4] = [np.inf, -np.inf, np.nan, 0.0]
    sc = (rng.random((16, 1)) * 2 + 0.1).astype(dt)
    sh = rng.standard_normal((16, 1)).astype(dt)
    bits = np.uint16 if dt.itemsize == 2 else np.uint32
    for rounding, seed in (("nearest_even", None), ("toward_zero", None), ("stochastic", 7)):
        for shift in (None, sh):
            got = fp8kit.fake_convert(x, sc, shift, "p3109_k8p4se", rounding=rounding, seed=seed)
            mode, key, rbits = _args.rounding(rounding, seed, 16, "test")
            want = _by_steps(x, sc, shift, get_format("p3109_k8p4se"), rounding, mode, key,
                             rbits, False)  # fmt: skip
            nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
            assert ((got.view(bits) == want.view(bits)) | nan).all(), (rounding, shift is None)


TIE_FREE = ["toward_zero", "toward_positive", "toward_negative", "nearest_away",
            "nearest_zero", "stochastic", "stochastic_c", "stochastic_b", "stochastic_odd",
            "stochastic_half"]  # fmt: skip


@pytest.mark.parametrize("name", ["p3109_k8p1se", "p3109_k8p1sf", "p3109_k5p1se"])
def test_precision_1_rounds_from_float32_bits_where_no_tie_parity_decides(name):
    """Precision 1 widens to float64 only for the modes where the parity of a tie's
    neighbouring codes decides (nearest-even, to_odd; the stochastic variants' first
    rounding goes by the fraction's parity): in the others the
    native kernels round float32, bfloat16 and float16 data (first calls 0.7 s in Numba
    -> 0.1 s): the exact oracle's codes, round_to their values.  flush_subnormals is a
    no-op without mantissa bits (no subnormals), so nearest-even with it takes the
    nearest-even kernels."""
    import ml_dtypes

    from fp8kit._kernels import modes as kmodes
    from fp8kit._kernels.codec import mode_plan
    from fp8kit._kernels.rounding import MODES as NUMBERS
    from fp8kit._kernels.rounding import random_words

    fmt = get_format(name)
    for dt in (np.float32, ml_dtypes.bfloat16, np.float16):
        for mode in TIE_FREE:
            assert not mode_plan(fmt, np.dtype(dt), NUMBERS[mode]).widen_first, (mode, dt)
            if not mode.startswith("stochastic"):
                assert kmodes.mode_kernel(fmt, dt, True, NUMBERS[mode], False) is not None
        for mode in ("nearest_even", "to_odd"):
            assert mode_plan(fmt, np.dtype(dt), NUMBERS[mode]).widen_first, (mode, dt)
    x = sweep(fmt).astype(np.float32)
    rnd = random_words(x.size, 3, 9)
    for mode in TIE_FREE:
        for sat in (True, False):
            kw = dict(rounding=mode, saturate=sat, random_bits=9)
            if mode.startswith("stochastic"):
                kw["seed"] = 3
            got = fp8kit.encode(x, fmt, **kw)
            want = [
                encode_value(float(v), fmt, rounding=mode, saturate=sat, rnd=int(r), random_bits=9)
                for v, r in zip(x, rnd, strict=True)
            ]
            assert np.asarray(got).view(np.uint8).tolist() == want, (mode, sat)
            np.testing.assert_array_equal(fp8kit.round_to(x, fmt, **kw), fp8kit.decode(got, fmt))
    plain = fp8kit.encode(x, fmt)
    np.testing.assert_array_equal(fp8kit.encode(x, fmt, flush_subnormals=True), plain)
    np.testing.assert_array_equal(
        fp8kit.round_to(x, fmt, flush_subnormals=True), fp8kit.decode(plain, fmt)
    )
