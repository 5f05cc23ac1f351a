"""fp8kit.study.error_metrics against a plain float64 numpy computation of every figure."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fp8kit
from fp8kit import study

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]


def oracle(x, q, fmt=None, scale=1.0):
    """Every figure in float64 numpy, written from the definitions, not from the kernel."""
    x = np.asarray(x).astype(np.float64)
    q = np.asarray(q).astype(np.float64)
    s = np.broadcast_to(np.asarray(scale, np.float64), x.shape)
    finite_x = np.isfinite(x)
    ok = finite_x & np.isfinite(q)
    xs, qs, ss = x[ok], q[ok], s[ok]
    err = qs - xs
    nz = xs != 0
    res = {
        "count": x.size,
        "compared": int(ok.sum()),
        "nan_inputs": int(np.isnan(x).sum()),
        "inf_inputs": int(np.isinf(x).sum()),
        "lost": int((finite_x & ~np.isfinite(q)).sum()),
        "sum_sq_error": float(np.sum(err**2)),
        "sum_sq_signal": float(np.sum(xs**2)),
        "max_abs_error": float(np.abs(err).max()) if err.size else math.nan,
        "max_rel_error": float((np.abs(err[nz]) / np.abs(xs[nz])).max(initial=0.0))
        if err.size
        else math.nan,
        "n_flushed": int((nz & (qs == 0)).sum()),
    }
    if fmt is not None:
        f = fp8kit.get_format(fmt)
        # saturated: the scaled value lies where rounding without a largest value would leave
        # the format's range, i.e. where round_to(saturate=False) overflows (to Inf or NaN)
        with np.errstate(over="ignore"):
            overflow = ~np.isfinite(fp8kit.round_to(np.abs(xs) * ss, f, saturate=False))
        res["n_saturated"] = int(overflow.sum())
        # subnormal: the format's value q stands for (q * s, rounded to the format: q is g / s
        # rounded in the data's dtype) is below the smallest normal
        with np.errstate(over="ignore"):
            g = fp8kit.round_to(np.abs(qs) * ss, f, saturate=True)
        res["n_subnormal"] = int(((qs != 0) & (g < f.smallest_normal)).sum())
    return res


def check(m, want):
    for key in ("count", "compared", "nan_inputs", "inf_inputs", "lost", "n_flushed"):
        assert getattr(m, key) == want[key], key
    for key in ("max_abs_error", "max_rel_error"):
        got = getattr(m, key)
        assert got == want[key] or (math.isnan(got) and math.isnan(want[key])), key
    for key in ("sum_sq_error", "sum_sq_signal"):
        assert getattr(m, key) == pytest.approx(want[key], rel=1e-12, abs=0), key
    n = want["compared"]
    if n:
        se, ss = want["sum_sq_error"], want["sum_sq_signal"]
        assert m.rmse == pytest.approx(math.sqrt(se / n), rel=1e-12)
        want_sqnr = math.inf if se == 0 else (-math.inf if ss == 0 else 10 * math.log10(ss / se))
        # the sums agree to ~1e-12 relative, so the dB figure to ~1e-11 dB absolute
        assert m.sqnr_db == pytest.approx(want_sqnr, rel=1e-12, abs=1e-9)
        assert m.flushed_to_zero == want["n_flushed"] / n
    if "n_saturated" in want:
        assert m.n_saturated == want["n_saturated"]
        assert m.n_subnormal == want["n_subnormal"]
        if n:
            assert m.saturated == want["n_saturated"] / n
            assert m.subnormal == want["n_subnormal"] / n
    else:
        assert m.saturated is None and m.subnormal is None


def sample(shape, rng, dtype=np.float32):
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-20, 12, shape))
    flat = x.reshape(-1)
    specials = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -3e38, 500.0, 464.0, 61440.0]
    flat[: len(specials)] = specials[: flat.size]
    with np.errstate(over="ignore"):
        return x.astype(dtype)


SCALE_SHAPES = [
    pytest.param((300, 70), (), id="per-tensor"),
    pytest.param((300, 70), (300, 1), id="per-row"),
    pytest.param((300, 70), (70,), id="per-column"),
    pytest.param((4, 3, 8, 5), (4, 3, 1, 5), id="blocks-4d"),
    pytest.param((2, 3, 2, 3, 2, 7), (2, 1, 2, 1, 2, 1), id="six-dims-expanded"),
    pytest.param((600, 400), (600, 1), id="large-threaded"),
]


@pytest.mark.parametrize("shape, scale_shape", SCALE_SHAPES)
@pytest.mark.parametrize("fmt", FLOAT8)
def test_every_figure_matches_numpy_float64(fmt, shape, scale_shape):
    rng = np.random.default_rng(len(shape) + sum(scale_shape))
    x = sample(shape, rng)
    scale = np.exp2(rng.integers(-4, 8, scale_shape)).astype(np.float32)
    scale = (scale * rng.uniform(0.6, 1.0, scale_shape)).astype(np.float32)
    q = study.quantize(x, fmt, scale=scale)
    q.reshape(-1)[-3:] = [np.nan, np.inf, 0.0]  # lost values and a flush to zero
    m = study.error_metrics(x, q, fmt=fmt, scale=scale)
    check(m, oracle(x, q, fmt, scale))
    assert m.nan_inputs == 1 and m.inf_inputs == 2 and m.lost >= 1


@pytest.mark.parametrize(
    "dtype",
    [np.float16, ml_dtypes.bfloat16, np.float32, np.float64],
    ids=lambda d: np.dtype(d).name,
)
def test_data_dtypes(dtype):
    rng = np.random.default_rng(3)
    x = sample((5000,), rng, dtype)
    q = study.quantize(x, "float8_e5m2", "tensor")
    assert q.dtype == x.dtype
    s = study.scale_for(x, "float8_e5m2")
    check(study.error_metrics(x, q, fmt="float8_e5m2", scale=s), oracle(x, q, "float8_e5m2", s))


def test_without_format_saturated_and_subnormal_are_none():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    q = np.array([1.0, 2.0, 2.0], np.float32)
    m = study.error_metrics(x, q)
    check(m, oracle(x, q))
    assert m.max_abs_error == 1.0 and m.max_rel_error == pytest.approx(1 / 3)


def test_mixed_dtypes_are_compared_in_float64():
    x = np.array([0.1, 0.2], np.float64)
    q = np.array([0.1, 0.2], np.float32)  # the float32 rounding is the error
    m = study.error_metrics(x, q)
    check(m, oracle(x, q))
    assert m.max_abs_error == abs(float(np.float32(0.2)) - 0.2)


def test_all_zero_tensor():
    # no division by zero: no error at all gives SQNR +Inf; relative error is 0 (no x != 0)
    x = np.zeros((10, 10), np.float32)
    m = study.error_metrics(x, x, fmt="float8_e4m3fn")
    assert m.sqnr_db == math.inf and m.rmse == 0 and m.max_rel_error == 0
    assert m.flushed_to_zero == 0 and m.saturated == 0 and m.subnormal == 0


def test_zero_signal_with_error_is_minus_inf():
    m = study.error_metrics(np.zeros(3), np.array([0.0, 1.0, 0.0]))
    assert m.sqnr_db == -math.inf and m.max_abs_error == 1.0


def test_only_nan_and_inf_inputs():
    x = np.array([np.nan, np.inf, -np.inf], np.float32)
    m = study.error_metrics(x, x, fmt="float8_e4m3fn")
    assert (m.compared, m.nan_inputs, m.inf_inputs) == (0, 1, 2)
    assert math.isnan(m.sqnr_db) and math.isnan(m.rmse)


def test_nan_inputs_never_poison_the_averages():
    x = np.array([1.0, np.nan, 2.0, -np.inf, 4.0])
    q = np.array([1.0, np.nan, 2.5, -448.0, 4.0])
    m = study.error_metrics(x, q)
    assert m.sum_sq_error == 0.25 and m.sum_sq_signal == 21.0 and m.compared == 3
    assert m.sqnr_db == pytest.approx(10 * math.log10(84))


@pytest.mark.parametrize(
    "fmt, below, at, above",
    [
        # README: "values up to the midpoint between max and the next step round to max (464
        # for float8_e4m3fn, whose max 448 has an even mantissa; from 61440 up float8_e5m2
        # overflows)": only values beyond that are changed by saturation.
        pytest.param("float8_e4m3fn", 463.9, 464.0, 464.1, id="e4m3fn-tie-rounds-to-max"),
        pytest.param("float8_e5m2", 61439.0, 61440.0, 61441.0, id="e5m2-tie-overflows"),
    ],
)
def test_saturated_counts_values_that_saturation_changes(fmt, below, at, above):
    x = np.array([below, at, above, -above])
    q = study.quantize(x, fmt, "none")
    m = study.error_metrics(x, q, fmt=fmt)
    tie_overflows = fp8kit.get_format(fmt).max_code & 1
    assert m.n_saturated == 2 + tie_overflows
    check(m, oracle(x, q, fmt))


def test_pooled_equals_metrics_of_the_concatenation():
    rng = np.random.default_rng(5)
    a, b = sample((1000,), rng), sample((333,), rng)
    qa, qb = study.quantize(a, "float8_e4m3fn"), study.quantize(b, "float8_e4m3fn")
    sa, sb = study.scale_for(a, "float8_e4m3fn"), study.scale_for(b, "float8_e4m3fn")
    pooled = study.ErrorMetrics.pooled(
        [
            study.error_metrics(a, qa, fmt="float8_e4m3fn", scale=sa),
            study.error_metrics(b, qb, fmt="float8_e4m3fn", scale=sb),
        ]
    )
    scale = np.concatenate([np.full(a.shape, sa), np.full(b.shape, sb)])
    check(pooled, oracle(np.concatenate([a, b]), np.concatenate([qa, qb]), "float8_e4m3fn", scale))


def test_threaded_and_serial_agree():
    rng = np.random.default_rng(8)
    x = sample((400_000,), rng)
    q, s = study.quantize(x, "float8_e4m3fn", "tensor", return_scale=True)
    with fp8kit.num_threads(1):
        one = study.error_metrics(x, q, fmt="float8_e4m3fn", scale=s)
    with fp8kit.num_threads(2):
        two = study.error_metrics(x, q, fmt="float8_e4m3fn", scale=s)
    assert one.max_abs_error == two.max_abs_error and one.n_flushed == two.n_flushed
    assert one.sum_sq_error == pytest.approx(two.sum_sq_error, rel=1e-12)
    check(two, oracle(x, q, "float8_e4m3fn", s))


def test_empty_arrays():
    m = study.error_metrics(np.zeros(0, np.float32), np.zeros(0, np.float32), fmt="float8_e5m2")
    assert m.count == 0 and m.compared == 0 and math.isnan(m.sqnr_db)


@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(max_dims=3, max_side=40),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    ),
    st.sampled_from(FLOAT8),
    st.floats(2.0**-20, 2.0**20, width=32),
)
def test_property_matches_oracle(x, fmt, scale):
    q = study.quantize(x, fmt, scale=np.float32(scale))
    check(study.error_metrics(x, q, fmt=fmt, scale=scale), oracle(x, q, fmt, np.float32(scale)))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        pytest.param(dict(x=np.zeros(3), q=np.zeros(4)), ValueError, "shape", id="shapes"),
        pytest.param(dict(x=np.arange(3), q=np.zeros(3)), TypeError, "x must have", id="int-x"),
        pytest.param(dict(x=np.zeros(3), q=["a"] * 3), TypeError, "q must", id="str-q"),
        pytest.param(
            dict(x=np.zeros((3, 2)), q=np.zeros((3, 2)), scale=np.ones(3)),
            ValueError,
            r"scale of shape \(3,\) does not fit x's shape \(3, 2\): along axis 1 its length 3 "
            "must be 1, 2, or a divisor of 2",
            id="scale-shape",
        ),
        pytest.param(
            dict(x=np.zeros(2), q=np.zeros(2), fmt="e4m3"), ValueError, "valid:", id="format"
        ),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    x, q = kwargs.pop("x"), kwargs.pop("q")
    with pytest.raises(exc, match=match):
        study.error_metrics(x, q, **kwargs)
