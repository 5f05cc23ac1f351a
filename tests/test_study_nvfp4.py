"""NVFP4 (issue 43): ``scaling="nvfp4"`` bit for bit against torchao 0.18's
``nvfp4_quantize`` / ``NVFP4Tensor`` with and without ``per_tensor_amax_to_scale``, 1 x 16
blocks and 16 x 16 tiles, and its sweep rows against quantize then error_metrics."""

import ml_dtypes
import numpy as np
import pytest
from study_rows import same_rows

from fp8kit import study
from fp8kit.study.report import format_table

FP4 = "float4_e2m1fn"


def to_torch(x):
    torch = pytest.importorskip("torch")
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def from_torch(t, dtype):
    torch = pytest.importorskip("torch")
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16)
    return t.numpy().astype(dtype)


def torchao_nvfp4(x, per_tensor_scale=None):
    """(dequantized values, float32 block scales times the tensor scale) of torchao."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

    t = None if per_tensor_scale is None else torch.tensor(per_tensor_scale, dtype=torch.float32)
    nv = NVFP4Tensor.to_nvfp4(to_torch(x).contiguous(), per_tensor_scale=t)
    return from_torch(nv.dequantize(), x.dtype), nv.get_hp_scales().numpy()


def torchao_tensor_scale(x):
    torch = pytest.importorskip("torch")
    from torchao.prototype.mx_formats.nvfp4_tensor import per_tensor_amax_to_scale

    a = np.abs(x.astype(np.float32))
    amax = torch.tensor(float(np.max(a, where=np.isfinite(a), initial=0.0)))
    return float(per_tensor_amax_to_scale(amax))


def data(rng, dtype, rows=24, cols=64, specials=True):
    x = rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-12, 12, (rows, 1))
    if specials:
        x[0, :16] = 0.0  # an all-zero block
        x[1, :16] *= 1e-30  # a block below e4m3's smallest scale
        x[2, 16:32] = 6.0 * 448 * 4  # beyond the largest block scale
        x[3, 5] = 6 * 2.0**-7  # an amax / 6 on e4m3's lowest normal
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("two_level", [False, True], ids=["single", "per-tensor"])
def test_nvfp4_matches_torchao_bit_for_bit(dtype, two_level):
    x = data(np.random.default_rng(4), dtype)
    t = torchao_tensor_scale(x) if two_level else None
    want, hp_scales = torchao_nvfp4(x, t)
    kw = dict(tensor_scale="amax" if two_level else None)
    q, s = study.quantize(x, FP4, "nvfp4", return_scale=True, **kw)
    assert q.dtype == x.dtype and s.shape == (24, 4)
    np.testing.assert_array_equal(q.astype(np.float64), want.astype(np.float64))
    # the scale is the multiplier torchao rounds after: (1 / t) / s8, or 1 / s8
    s8 = hp_scales if t is None else (hp_scales / np.float32(t))  # (exact: t * s8 / t)
    one = np.float32(1.0)
    m = one / s8.astype(np.float32) if t is None else (one / np.float32(t)) / s8
    np.testing.assert_array_equal(s, m.astype(np.float32))
    np.testing.assert_array_equal(s, study.scale_for(x, FP4, "nvfp4", **kw))


def test_nvfp4_with_a_given_tensor_scale_and_nonfinite_blocks():
    x = data(np.random.default_rng(9), np.float32)
    x[5, 3], x[6, 40] = np.nan, np.inf
    t = torchao_tensor_scale(x)  # (of the finite values, as fp8kit's "amax")
    want, _ = torchao_nvfp4(x, t)
    for ts in (t, "amax"):
        q = study.quantize(x, FP4, "nvfp4", tensor_scale=ts)
        np.testing.assert_array_equal(q, want)
    want1, _ = torchao_nvfp4(x)
    np.testing.assert_array_equal(study.quantize(x, FP4, "nvfp4", tensor_scale=None), want1)


@pytest.mark.parametrize("two_level", [False, True])
def test_nvfp4_16x16_tiles_are_the_1x16_rule_on_the_tile_amax(two_level):
    # Transformer Engine's 16 x 16 weight blocks: one E4M3 scale per tile.  With every 1 x 16
    # block holding its tile's amax, torchao's 1 x 16 rule computes the same scales.
    rng = np.random.default_rng(2)
    x = data(rng, np.float32, rows=32, cols=64, specials=False)
    tiles = np.abs(x).reshape(2, 16, 4, 16).max(axis=(1, 3))
    x[:, ::16] = np.repeat(tiles, 16, axis=0) * rng.choice([-1.0, 1.0], (32, 4))
    t = torchao_tensor_scale(x) if two_level else None
    want, _ = torchao_nvfp4(x, t)
    kw = dict(tensor_scale="amax" if two_level else None)
    q, s = study.quantize(x, FP4, "nvfp4", block_size=(16, 16), return_scale=True, **kw)
    assert s.shape == (2, 4)
    np.testing.assert_array_equal(q, want)
    assert study.parse_scaling("nvfp4:16x16").block == (16, 16)


@pytest.mark.parametrize("spec", ["nvfp4", "nvfp4:single", "nvfp4:16x16"])
def test_nvfp4_rows_equal_quantize_then_error_metrics(spec):
    x = study.demo_tensors(shape=(64, 96))["student_t3"]
    x[3, 7] = np.nan
    row = study.sweep({"w": x}, [FP4, "float8_e4m3fn"], [spec])
    sp = study.parse_scaling(spec)
    for r in row:
        q, s = study.quantize(x, r.format, "nvfp4", block_size=sp.block,
                              tensor_scale=sp.tensor_scale, return_scale=True)  # fmt: skip
        m = study.error_metrics(x, q, fmt=r.format, scale=s)
        assert (r.metrics.n_saturated, r.metrics.n_subnormal, r.metrics.n_flushed) == (
            m.n_saturated, m.n_subnormal, m.n_flushed)  # fmt: skip
        assert r.metrics.compared == m.compared and r.metrics.nan_inputs == 1
        assert r.metrics.sqnr_db == pytest.approx(m.sqnr_db, rel=1e-12)
        assert r.metrics.max_abs_error == m.max_abs_error
    chunked = study.sweep({"w": x}, [FP4], [spec], chunk_bytes=3000)[0]
    assert chunked.metrics.n_subnormal == row[0].metrics.n_subnormal
    assert chunked.metrics.sqnr_db == pytest.approx(row[0].metrics.sqnr_db, rel=1e-12)
    assert spec in format_table(row)


def test_nvfp4_subnormal_share_is_of_the_element_values():
    # the element value 1.0 (e2m1's smallest normal) times a non-power-of-two scale comes back
    # an ulp off: it must not count as subnormal (only 0.5 is)
    x = np.tile(np.float32([6.0, 1.0, 0.5, 0.0] * 4), (8, 1)) * np.float32(1.3)
    q, s = study.quantize(x, FP4, "nvfp4", return_scale=True)
    m = study.error_metrics(x, q, fmt=FP4, scale=s)
    assert m.n_subnormal == 8 * 4


def test_nvfp4_dask_equals_numpy():
    da = pytest.importorskip("dask.array")
    x = data(np.random.default_rng(8), np.float32)
    d = da.from_array(x, chunks=(5, 32))
    for kw in (dict(), dict(tensor_scale=None), dict(block_size=(8, 16))):
        q, s = study.quantize(d, FP4, "nvfp4", return_scale=True, **kw)
        wq, ws = study.quantize(x, FP4, "nvfp4", return_scale=True, **kw)
        np.testing.assert_array_equal(q.compute(), wq)
        np.testing.assert_array_equal(s.compute(), ws)
    same_rows(study.sweep({"x": d}, [FP4], ["nvfp4"]), study.sweep({"x": x}, [FP4], ["nvfp4"]))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(tensor_scale=-1.0), "tensor_scale must be 'amax', None or a positive number"),
        (dict(tensor_scale="max"), "got 'max'"),
        (dict(block_size=(16, 16, 1)), r"block_size of scaling 'nvfp4' must be an int or"),
        (dict(block_size=0), "block_size must be a positive int; got 0"),
    ],
)
def test_nvfp4_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        study.quantize(np.ones((2, 32), np.float32), FP4, "nvfp4", **kw)
