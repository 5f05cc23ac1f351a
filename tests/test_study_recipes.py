"""Issue 43's recipes and honest metrics: tiles (1 x N, N x N, power-of-two scales), the
scale returned by ``quantize(..., return_scale=True)`` and accepted by ``error_metrics``
for every recipe (the sweep's figures), unregistered formats through every recipe,
xarray in and out, 16-bit formats unscaled by default, crest factors."""

import math

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import FloatFormat, study

F = "float8_e4m3fn"
#: (spec, quantize keywords) of every recipe but delayed
RECIPES = [
    ("none", dict(scaling="none")),
    ("tensor", dict(scaling="tensor")),
    ("channel", dict(scaling="channel")),
    ("block:32", dict(scaling="block")),
    ("block:16:rceil", dict(scaling="block", block_size=16, scale_mode="rceil")),
    ("block:32:even", dict(scaling="block", scale_mode="even")),
    ("tile:32", dict(scaling="tile", block_size=32)),
    ("tile:1x64:pow2", dict(scaling="tile", block_size=(1, 64), pow2=True)),
    ("tile:16x24", dict(scaling="tile", block_size=(16, 24))),
    ("nvfp4", dict(scaling="nvfp4")),
    ("nvfp4:16x16:single", dict(scaling="nvfp4", block_size=(16, 16), tensor_scale=None)),
]


def tile_oracle(x, fmt, rows, cols, pow2=False):
    """Tiles by hand: max / amax per tile (1 for a zero tile), rounded down to a power of
    two with pow2; round(x * s) / s."""
    f = fp8kit.get_format(fmt)
    r, c = x.shape
    pr, pc = -r % rows, -c % cols
    a = np.pad(np.abs(x.astype(np.float64)), ((0, pr), (0, pc)))
    amax = a.reshape((r + pr) // rows, rows, (c + pc) // cols, cols).max(axis=(1, 3))
    s = np.where(amax > 0, f.max / np.where(amax > 0, amax, 1), 1.0)
    if pow2:
        s = 2.0 ** np.floor(np.log2(s))
    s = s.astype(np.float32)
    full = np.repeat(np.repeat(s, rows, 0), cols, 1)[:r, :c]
    q = fp8kit.round_to(np.clip(x * full, -f.max, f.max), f) / full
    return q, s


@pytest.mark.parametrize("rows, cols, pow2", [(32, 32, False), (1, 64, True), (16, 24, False),
                                              (128, 128, True)])  # fmt: skip
def test_tiles_match_the_rule_by_hand(rows, cols, pow2):
    x = study.demo_tensors(shape=(80, 200))["laplace"]  # ragged: neither axis a multiple
    bs = (rows, cols) if rows != cols else rows
    q, s = study.quantize(x, F, "tile", block_size=bs, pow2=pow2, return_scale=True)
    want_q, want_s = tile_oracle(x, F, rows, cols, pow2)
    np.testing.assert_array_equal(q, want_q)
    # per-tile scales, repeated per element along an axis that is not a multiple
    full = np.repeat(np.repeat(want_s, rows, 0), cols, 1)[:80, :200]
    np.testing.assert_array_equal(np.broadcast_to(s, (80, 200)) if s.shape == (80, 200)
                                  else np.repeat(np.repeat(s, 80 // s.shape[0], 0),
                                                 200 // s.shape[1], 1), full)  # fmt: skip


def test_tiles_reduce_to_channel_and_tensor_scaling():
    x = study.demo_tensors(shape=(64, 128))["normal"]
    np.testing.assert_array_equal(
        study.quantize(x, F, "tile", block_size=(1, 128)), study.quantize(x, F, "channel")
    )
    np.testing.assert_array_equal(
        study.quantize(x, F, "tile", block_size=(64, 128)), study.quantize(x, F, "tensor")
    )
    # a 1-D tensor takes tiles of 1 x N
    v = x[0]
    np.testing.assert_array_equal(study.quantize(v, F, "tile", block_size=32),
                                  study.quantize(v, F, "tile", block_size=(1, 32)))  # fmt: skip


@pytest.mark.parametrize("spec, kw", RECIPES, ids=[r[0] for r in RECIPES])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float64],
                         ids=["float32", "bfloat16", "float64"])  # fmt: skip
def test_error_metrics_with_the_returned_scale_equal_the_sweep(spec, kw, dtype):
    x = study.demo_tensors(shape=(48, 100))["student_t3"].astype(dtype)
    x[2, 3] = np.nan
    for fmt in (F, "float8_e5m2", "float4_e2m1fn"):
        (row,) = study.sweep({"w": x}, [fmt], [spec])
        kw2 = dict(kw)
        q, s = study.quantize(x, fmt, kw2.pop("scaling"), return_scale=True, **kw2)
        m = study.error_metrics(x, q, fmt=fmt, scale=s)
        assert row.scaling == spec
        assert (m.n_saturated, m.n_subnormal, m.n_flushed, m.compared, m.lost) == (
            row.metrics.n_saturated, row.metrics.n_subnormal, row.metrics.n_flushed,
            row.metrics.compared, row.metrics.lost)  # fmt: skip
        assert m.max_abs_error == row.metrics.max_abs_error
        assert m.sqnr_db == pytest.approx(row.metrics.sqnr_db, rel=1e-12)
        finite = np.asarray(s, np.float64)[np.isfinite(s)]
        assert (row.scale_min, row.scale_max) == (finite.min(), finite.max())
        # the compact scales of scale_for are the same and error_metrics reads them alike
        np.testing.assert_array_equal(s, study.scale_for(x, fmt, **kw))


def test_readme_example_counts_with_the_scale():
    # issue 43: the MX example reported the shares as if the scale were 1
    x = study.demo_tensors()["laplace"]
    q, s = study.quantize(x, F, "block", return_scale=True)
    m = study.error_metrics(x, q, fmt=F, scale=s)
    row = study.sweep({"laplace": x}, [F], ["block:32"])[0]
    assert m.saturated == row.metrics.saturated == pytest.approx(0.00534, abs=1e-5)
    assert m.subnormal == row.metrics.subnormal < 0.001
    # without the scale, q is read as the format's own values: far more "subnormals"
    assert study.error_metrics(x, q, fmt=F).subnormal > 0.5


def test_error_metrics_reads_per_block_scales_and_refuses_others():
    x = np.arange(1, 65, dtype=np.float32).reshape(2, 32)
    q, s = study.quantize(x, F, "block", block_size=8, return_scale=True)
    assert s.shape == (2, 4)
    full = np.repeat(s, 8, axis=1)
    assert study.error_metrics(x, q, fmt=F, scale=s) == study.error_metrics(x, q, fmt=F,
                                                                            scale=full)  # fmt: skip
    with pytest.raises(ValueError, match=r"along axis 1 its length 5 must be 1, 32, or a "
                                         r"divisor of 32"):  # fmt: skip
        study.error_metrics(x, q, fmt=F, scale=np.ones((2, 5)))
    # quantize takes them back too
    np.testing.assert_array_equal(study.quantize(x, F, scale=s), q)


# --------------------------------------------------------------- unregistered formats
def twin(name):
    f = fp8kit.get_format(name)
    return FloatFormat(name=f"my_{name}", exponent_bits=f.exponent_bits,
                       mantissa_bits=f.mantissa_bits, bias=f.bias, specials=f.specials)  # fmt: skip


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "p3109_k8p1se",
                                  "float6_e3m2fn", "bfloat16"])  # fmt: skip
@pytest.mark.parametrize("spec, kw", RECIPES, ids=[r[0] for r in RECIPES])
def test_an_unregistered_format_through_every_recipe(name, spec, kw):
    user = twin(name)
    assert user.name not in fp8kit.registered_formats()
    x = study.demo_tensors(shape=(32, 64))["laplace"] * 50
    kw = dict(kw)
    scaling = kw.pop("scaling")
    for rounding in ("nearest_even", "toward_zero", "stochastic"):
        extra = dict(rounding=rounding, seed=3 if rounding == "stochastic" else None)
        got = study.quantize(x, user, scaling, **kw, **extra)
        want = study.quantize(x, name, scaling, **kw, **extra)
        np.testing.assert_array_equal(got, want)
    got = study.sweep({"x": x}, [user], [spec])[0]
    want = study.sweep({"x": x}, [name], [spec])[0]
    assert got.metrics == want.metrics and got.format == user.name


def test_fake_convert_takes_an_unregistered_8bit_format():
    user = twin("float8_e4m3fn")
    x = np.float32([0.3, 1000.0, -3.0, np.nan])
    np.testing.assert_array_equal(
        fp8kit.fake_convert(x, np.float32(2.0), destination_type=user),
        fp8kit.fake_convert(x, np.float32(2.0), destination_type="float8_e4m3fn"),
    )
    with pytest.raises(ValueError, match="destination_type 'my_bfloat16' is a 16-bit format"):
        fp8kit.fake_convert(x, np.float32(1.0), destination_type=twin("bfloat16"))


# ----------------------------------------------------------------------------- xarray
def test_xarray_in_and_out_with_dim_names():
    xr = pytest.importorskip("xarray")
    w = study.demo_tensors(shape=(16, 64))["normal"]
    da = xr.DataArray(w, dims=("out", "in"), coords={"out": np.arange(16)}, attrs={"u": "V"},
                      name="w")  # fmt: skip
    q = study.quantize(da, F, "channel", axis="out")
    assert isinstance(q, xr.DataArray) and q.dims == ("out", "in") and q.attrs == {"u": "V"}
    assert q.name == "w" and (q.coords["out"] == da.coords["out"]).all()
    np.testing.assert_array_equal(q.values, study.quantize(w, F, "channel", axis=0))
    q2, s = study.quantize(da, F, "block", axis="in", return_scale=True)
    np.testing.assert_array_equal(q2.values, study.quantize(w, F, "block", axis=1))
    assert s.shape == (16, 2)
    np.testing.assert_array_equal(study.scale_for(da, F, "channel", axis="in"),
                                  study.scale_for(w, F, "channel", axis=1))  # fmt: skip
    with pytest.raises(ValueError, match=r"axis='rows' is not a dim of x; dims: out, in"):
        study.quantize(da, F, "channel", axis="rows")
    with pytest.raises(TypeError, match="is a dim name, but x is not an xarray DataArray"):
        study.quantize(w, F, "channel", axis="out")


# ------------------------------------------------------------ 16-bit formats, crest
def test_16bit_formats_are_the_unscaled_baseline():
    x = study.demo_tensors(shape=(32, 64))["laplace"]
    rows = study.sweep({"x": x}, ["bfloat16", F], ["tensor", "block:32"])
    wide = [r for r in rows if r.format == "bfloat16"]
    assert all(r.scale_min == r.scale_max == 1.0 for r in wide)
    assert all("unscaled (16-bit baseline)" in r.notes for r in wide)
    none = study.sweep({"x": x}, ["bfloat16"], ["none"])[0]
    assert all(r.metrics == none.metrics for r in wide)
    scaled = study.sweep({"x": x}, ["bfloat16"], ["tensor"], scale_wide=True)[0]
    assert scaled.scale_min > 1e37 and not scaled.notes


def test_crest_factors():
    x = study.demo_tensors(shape=(32, 64))["student_t3"].astype(np.float64)
    rows = study.sweep({"x": x}, [F], ["none", "channel", "block:32", "tile:16"], crest=True)
    rms = math.sqrt(np.mean(x**2))
    for r in rows:
        assert r.crest == pytest.approx(np.abs(x).max() / rms, rel=1e-12)
    by = {r.scaling: r.group_crest for r in rows}
    assert by["none"] == pytest.approx(np.abs(x).max() / rms, rel=1e-12)
    rows_crest = np.abs(x).max(axis=1) / np.sqrt(np.mean(x**2, axis=1))
    assert by["channel"] == pytest.approx(rows_crest.mean(), rel=1e-12)
    b = x.reshape(32, 2, 32)
    blocks = np.abs(b).max(axis=2) / np.sqrt(np.mean(b**2, axis=2))
    assert by["block:32"] == pytest.approx(blocks.mean(), rel=1e-12)
    t = x.reshape(2, 16, 4, 16)
    tiles = np.abs(t).max(axis=(1, 3)) / np.sqrt(np.mean(t**2, axis=(1, 3)))
    assert by["tile:16"] == pytest.approx(tiles.mean(), rel=1e-12)
    assert study.sweep({"x": x}, [F], ["block:32"])[0].group_crest is None
    assert study.sweep({"z": np.zeros(8)}, [F], ["none"], crest=True)[0].group_crest is None
