"""The Dask backend: every public array function on Dask arrays is lazy and gives the bits
of the numpy call on the computed input, for any chunking (stochastic rounding included)."""

import numpy as np
import pytest

import fp8kit

da = pytest.importorskip("dask.array")

FMT = "float8_e4m3fn"
STOCH = {"rounding": "stochastic", "seed": 12345}
RNG = np.random.default_rng(7)
X1 = (RNG.standard_normal(20_011) * 50).astype(np.float32)  # crosses the kernels' 8K blocks
X3 = (RNG.standard_normal((9, 10, 7)) * 50).astype(np.float32)
CHUNKS1 = [20_011, (5_000, 3, 15_008), 4_099]  # one block, uneven, many
CHUNKS3 = [(9, 10, 7), (4, 10, 7), (5, (3, 7), (2, 5)), (2, 3, 4)]  # full trailing dims or not

FUNCS = {
    "encode": lambda x, **kw: fp8kit.encode(x, FMT, **kw),
    "round_to": lambda x, **kw: fp8kit.round_to(x, "float8_e5m2", **kw),
    "astype": lambda x, **kw: fp8kit.astype(x, FMT, **kw),
    "cast": lambda x, **kw: fp8kit.cast(x, "float8_e5m2", **kw),
    "fake_convert": lambda x, **kw: fp8kit.fake_convert(x, np.float32(0.5), None, "f8e4m3", **kw),
}


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.itemsize in (1, 2) and a.dtype.kind not in "iub":
        a, b = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", FUNCS)
@pytest.mark.parametrize("x, chunks", [(X1, c) for c in CHUNKS1] + [(X3, c) for c in CHUNKS3])
@pytest.mark.parametrize("kw", [{}, STOCH], ids=["nearest", "stochastic"])
def test_elementwise_equals_numpy(name, x, chunks, kw):
    d = da.from_array(x, chunks=chunks)
    res = FUNCS[name](d, **kw)
    assert isinstance(res, da.Array)
    assert res.chunks == d.chunks and type(res._meta) is np.ndarray
    ref = FUNCS[name](x, **kw)
    assert res.dtype == ref.dtype
    same(res.compute(), ref)


def test_stochastic_random_bits_and_generator_seed():
    d = da.from_array(X3, chunks=(2, 3, 4))
    for bits in (8,):  # (4 elements per random word: other block boundaries)
        kw = {"rounding": "stochastic", "seed": 3, "random_bits": bits}
        same(fp8kit.encode(d, FMT, **kw).compute(), fp8kit.encode(X3, FMT, **kw))
    # a Generator is drawn from once, when the graph is built: every block shares the seed
    res = fp8kit.round_to(d, FMT, rounding="stochastic", seed=np.random.default_rng(5))
    ref = fp8kit.round_to(X3, FMT, rounding="stochastic", seed=np.random.default_rng(5))
    same(res.compute(), ref)
    # seed=None: one fresh seed for the whole array (computing twice gives the same bits)
    res = fp8kit.encode(d, FMT, rounding="stochastic")
    same(res.compute(), res.compute())


def test_decode_and_dtypes():
    codes = fp8kit.encode(X3, FMT)
    d = da.from_array(codes, chunks=(4, 5, 7))
    res = fp8kit.decode(d, FMT, dtype=np.float16)
    assert res.dtype == np.float16 and res.chunks == d.chunks
    same(res.compute(), fp8kit.decode(codes, FMT, dtype=np.float16))
    a8 = da.from_array(codes.view(fp8kit.get_format(FMT).dtype), chunks=5)
    same(fp8kit.decode(a8).compute(), fp8kit.decode(codes, FMT))


@pytest.mark.parametrize("kw", [{}, STOCH], ids=["nearest", "stochastic"])
def test_fake_convert_scale_and_shift_dask_or_numpy(kw):
    scale = (RNG.random((10, 1)) + 0.5).astype(np.float32)
    # (a shift only without stochastic rounding: one Numba specialisation fewer)
    shift = None if kw else (RNG.random((10, 1)) * 0.1).astype(np.float32)
    ref = fp8kit.fake_convert(X3, scale, shift, "f8e4m3", **kw)
    d = da.from_array(X3, chunks=(5, 4, 3))
    for sc, sh in [(scale, shift), (da.from_array(scale, chunks=3), shift)]:
        res = fp8kit.fake_convert(d, sc, sh, "f8e4m3", **kw)
        assert isinstance(res, da.Array) and res.chunks == d.chunks
        same(res.compute(), ref)
    # numpy data with a Dask scale: a Dask result
    res = fp8kit.fake_convert(X3, da.from_array(scale, chunks=5), shift, "f8e4m3", **kw)
    same(res.compute(), ref)


@pytest.mark.parametrize("fmt, top", [("float4_e2m1fn", 16), ("float6_e2m3fn", 64), ("int4", 16)])
@pytest.mark.parametrize("chunks", [1001, 100, 333])
def test_pack_unpack(fmt, top, chunks):
    codes = RNG.integers(0, top, 1001).astype(np.uint8)
    packed = fp8kit.pack(codes, fmt)
    res = fp8kit.pack(da.from_array(codes, chunks=chunks), fmt)
    assert isinstance(res, da.Array)
    same(res.compute(), packed)
    res = fp8kit.unpack(da.from_array(packed, chunks=chunks // 3 + 1), fmt, (7, 143))
    assert isinstance(res, da.Array) and res.shape == (7, 143)
    same(res.compute(), fp8kit.unpack(packed, fmt, (7, 143)))


def _boom(block):
    raise RuntimeError("computed")


def test_calls_are_lazy():
    bad = da.from_array(X3, chunks=(3, 5, 7)).map_blocks(_boom, dtype=np.float32)
    codes = bad.map_blocks(_boom, dtype=np.uint8)
    results = [f(bad) for f in FUNCS.values()] + [f(bad, **STOCH) for f in FUNCS.values()]
    results += [fp8kit.decode(codes, FMT), fp8kit.pack(codes, "float4_e2m1fn")]
    results += [fp8kit.unpack(codes, "float4_e2m1fn", 100)]
    results += [fp8kit.fake_convert(bad, bad[:1], None)]
    assert all(isinstance(r, da.Array) for r in results)
    with pytest.raises(RuntimeError, match="computed"):
        results[0].compute()


def test_clear_errors():
    d = da.from_array(X1, chunks=5000)
    with pytest.raises(ValueError, match="out= is not supported with Dask"):
        fp8kit.encode(d, FMT, out=np.empty(X1.shape, np.uint8))
    with pytest.raises(ValueError, match="out= is not supported with Dask"):
        fp8kit.fake_convert(d, 1.0, out=np.empty_like(X1))
    # checked when the call is made, not when computed
    with pytest.raises(ValueError, match="unknown"):
        fp8kit.encode(d, "float8_nope")
    with pytest.raises(TypeError, match="x must have dtype"):
        fp8kit.encode(d.astype(np.int32), FMT)
    with pytest.raises(TypeError, match="scale has dtype float64"):
        fp8kit.fake_convert(d, np.ones(1))
    with pytest.raises(ValueError, match="does not broadcast"):
        fp8kit.fake_convert(d, da.ones(3, dtype=np.float32))
    gpu_like = d.copy()
    gpu_like._meta = np.empty(0, np.float32).view(np.recarray).__array__()  # numpy: fine
    fp8kit.encode(gpu_like, FMT)

    class DeviceBlock:  # what a Dask array of GPU blocks (CuPy) has as meta
        ndim, shape, dtype = 1, (0,), np.dtype(np.float32)

    gpu_like._meta = DeviceBlock()
    with pytest.raises(TypeError, match="Dask arrays of .*DeviceBlock blocks are not supported"):
        fp8kit.encode(gpu_like, FMT)


@pytest.mark.slow
def test_distributed_worker_processes():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        distributed.Client(cluster) as client,
    ):
        d = da.from_array(X3, chunks=(2, 3, 4))
        for name in ("encode", "fake_convert"):
            res = client.compute(FUNCS[name](d, **STOCH)).result()
            same(res, FUNCS[name](X3, **STOCH))
