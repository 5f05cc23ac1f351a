"""Rounding modes and flush options of fp8kit.study.quantize and study.sweep (issue 20)."""

import numpy as np
import pytest

import fp8kit
from fp8kit import study

F = "float8_e4m3fn"


def _data():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 40)) * 2.0**-7).astype(np.float32)
    x[0, :3] = np.float32(1e-40)  # float32 subnormal inputs
    x[1, 0] = np.float32(2.0**-8)  # e4m3fn subnormal after a scale of 1
    return x


def _bits(a):
    return np.asarray(a).view(np.uint32 if np.asarray(a).dtype == np.float32 else np.uint64)


def test_flush_matches_fake_convert_and_round_to():
    x = _data()
    q = study.quantize(x, F, "none", flush_subnormals=True)
    ref = fp8kit.fake_convert(x, np.float32(1), destination_type=F, flush_subnormals=True)
    np.testing.assert_array_equal(_bits(q), _bits(ref))
    assert q[1, 0] == 0 and study.quantize(x, F, "none")[1, 0] != 0
    # explicit scale, and the flushed inputs
    s = np.float32(4.0)
    q = study.quantize(x, F, scale=s, flush_subnormal_inputs=True, flush_subnormals=True)
    ref = fp8kit.fake_convert(
        x, s, destination_type=F, flush_subnormals=True, flush_subnormal_inputs=True
    )
    np.testing.assert_array_equal(_bits(q), _bits(ref))
    # float64 data: round_to of the scaled values by hand
    x64 = x.astype(np.float64)
    q = study.quantize(x64, F, scale=8.0, flush_subnormals=True, rounding="toward_zero")
    y = np.clip(x64 * 8.0, -448, 448)
    ref = fp8kit.round_to(y, F, flush_subnormals=True, rounding="toward_zero") / 8.0
    np.testing.assert_array_equal(q, ref)


def test_flush_inputs_float16_own_dtype():
    x = np.array([2.0**-20, -(2.0**-20), 1.0], np.float16)  # float16 subnormals
    s = np.float32(1024.0)
    q = study.quantize(x, "float8_e5m2", scale=s, flush_subnormal_inputs=True)
    assert q.tolist() == [0.0, 0.0, 1.0] and np.signbit(q[1])
    assert study.quantize(x, "float8_e5m2", scale=s)[0] == 2.0**-20


def test_stochastic_reproducible_and_equals_fake_convert():
    x = _data()
    a = study.quantize(x, F, "none", rounding="stochastic", seed=7)
    b = study.quantize(x, F, "none", rounding="stochastic", seed=7)
    ref = fp8kit.fake_convert(x, np.float32(1), destination_type=F, rounding="stochastic", seed=7)
    np.testing.assert_array_equal(_bits(a), _bits(b))
    np.testing.assert_array_equal(_bits(a), _bits(ref))
    c = study.quantize(x, F, "none", rounding="stochastic", seed=8)
    assert not np.array_equal(a, c)
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    np.testing.assert_array_equal(
        study.quantize(x, F, "block", block_size=8, rounding="stochastic", seed=g1),
        study.quantize(x, F, "block", block_size=8, rounding="stochastic", seed=g2),
    )


@pytest.mark.parametrize("scaling", ["tensor", "block", "explicit"])
def test_dask_equals_numpy(scaling):
    da = pytest.importorskip("dask.array")
    x = _data()
    kw = dict(rounding="stochastic", seed=11, flush_subnormals=True, flush_subnormal_inputs=True)
    sk = (
        dict(scale=np.float32(2.0) ** np.arange(40, dtype=np.float32) % 7)
        if scaling == "explicit"
        else dict(scaling=scaling, block_size=8)
    )
    ref = study.quantize(x, F, **sk, **kw)
    for chunks in [(2, 8), (4, 16), (1, 40), (3, 24)]:
        got = study.quantize(da.from_array(x, chunks=chunks), F, **sk, **kw).compute()
        np.testing.assert_array_equal(_bits(got), _bits(ref), err_msg=str(chunks))


def test_bad_values():
    x = _data()
    with pytest.raises(ValueError, match="quantize: rounding must be one of"):
        study.quantize(x, F, rounding="nearest")
    with pytest.raises(ValueError, match="quantize: seed is only used"):
        study.quantize(x, F, seed=1)
    with pytest.raises(ValueError, match="quantize: random_bits must be"):
        study.quantize(x, F, rounding="stochastic", random_bits=0)
    with pytest.raises(TypeError, match="quantize: flush_subnormals must be"):
        study.quantize(x, F, flush_subnormals="yes")
    with pytest.raises(TypeError, match="quantize: flush_subnormal_inputs must be"):
        study.quantize(x, F, flush_subnormal_inputs=None)
    with pytest.raises(TypeError, match="sweep: flush_subnormals must be"):
        study.sweep(x, [F], ["tensor"], flush_subnormals=1)
    with pytest.raises(ValueError, match="delayed"):
        study.sweep(x, [F], ["delayed"], flush_subnormals=True)


def test_sweep_flush_rows_equal_quantize_and_metrics():
    x = _data()
    opts = dict(flush_subnormals=True, flush_subnormal_inputs=True)
    rows = study.sweep(x, [F], ["none", "tensor", "channel", "block:16"], **opts)
    base = study.sweep(x, [F], ["none"])
    assert rows[0].metrics != base[0].metrics  # the flush changed the row
    cases = [("none", {}), ("tensor", {}), ("channel", dict(axis=0)),
             ("block", dict(axis=-1, block_size=16))]  # fmt: skip
    xs = fp8kit._args.flush_inputs(x)
    for row, (kind, kw) in zip(rows, cases, strict=True):
        q = study.quantize(x, F, kind, **kw, **opts)
        # (per-block scales as scale_for gives them: repeated per element along the axis of
        # 40, not a multiple of 16)
        sc = np.asarray(study.scale_for(xs, F, kind, **kw), np.float64)
        assert row.metrics == study.error_metrics(x, q, fmt=F, scale=sc), kind
        assert row.metrics.n_subnormal == 0


def test_dask_masked_flush_inputs_keeps_mask():
    da = pytest.importorskip("dask.array")
    x = np.ma.masked_array(_data(), np.zeros((4, 40), bool))
    x.mask[2, :5] = True
    ref = study.quantize(x, F, "tensor", flush_subnormal_inputs=True, flush_subnormals=True)
    got = study.quantize(
        da.from_array(x, chunks=(2, 20), asarray=False),
        F, "tensor", flush_subnormal_inputs=True, flush_subnormals=True,
    ).compute()  # fmt: skip
    assert isinstance(got, np.ma.MaskedArray)
    np.testing.assert_array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(ref))
    np.testing.assert_array_equal(got.filled(0), ref.filled(0))
