"""Studies of dask arrays (blockwise amaxes and metric sums) and on Dask schedulers:
threads, processes and a dask.distributed LocalCluster of worker processes."""

import json
import math

import ml_dtypes
import numpy as np
import pytest
from study_rows import SUMS, same_rows

from fp8kit import study

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

FORMATS = ["float8_e4m3fn", "float8_e5m2"]


def same_metrics(a, b):
    same_rows([study.SweepRow("x", (), "", "", "", a, 0, 0)],
              [study.SweepRow("x", (), "", "", "", b, 0, 0)])  # fmt: skip


def data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 70)).astype(np.float32) * np.exp(rng.normal(size=(37, 1)))
    x = x.astype(np.float32)
    x[3, 5], x[30, 69] = np.nan, np.inf
    return x


@pytest.fixture(autouse=True)
def sync_scheduler(request):
    """Dask's synchronous scheduler, except where a test brings its own."""
    if "cluster" in request.fixturenames or "scheduler" in request.fixturenames:
        yield
        return
    with dask.config.set(scheduler="sync"):
        yield


@pytest.mark.parametrize("chunks", [(10, 23), (37, 70), ((5, 32), (7, 50, 13))])
def test_sweep_over_dask_equals_numpy(chunks):
    x = data()
    scalings = ["none", "tensor", "channel", "block:32", "block:16", "delayed:4"]
    fmts = FORMATS + ["bfloat16"]
    ref = study.sweep({"x": x}, fmts, scalings)
    same_rows(study.sweep({"x": da.from_array(x, chunks=chunks)}, fmts, scalings), ref)


def test_large_tensor_sums_agree_across_chunkings():
    # 16M elements: the sums must not drift with the length of a chunk (the metrics kernels
    # sum runs of SUM_BLOCK elements on their own; one running sum per chunk differed by
    # 1.1e-12..1.7e-12 relative between the numpy call and 512-row Dask blocks)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4096, 4096)).astype(np.float32)
    ref = study.sweep({"w": w}, ["float8_e5m2"], ["channel"])
    for chunks in [(512, 4096), (1000, 4096), (4096, 1500)]:
        same_rows(study.sweep({"w": da.from_array(w, chunks=chunks)}, ["float8_e5m2"],
                              ["channel"]), ref)  # fmt: skip
    ref_budget = study.sweep({"w": w}, ["float8_e5m2"], ["channel"], chunk_bytes=1 << 20)
    same_rows(ref_budget, ref)


@pytest.mark.parametrize(
    "kind, kw",
    [("none", {}), ("tensor", {"margin": 1}), ("channel", {"axis": 1}),
     ("block", {"block_size": 16}), ("block", {"block_size": 8, "axis": 0})],
)  # fmt: skip
def test_scale_quantize_error_metrics_on_dask(kind, kw):
    x = data()
    d = da.from_array(x, chunks=(10, 23))  # chunks cut MX blocks: rechunked
    s = study.scale_for(d, "float8_e4m3fn", kind, **kw)
    q = study.quantize(d, "float8_e4m3fn", kind, **kw)
    assert isinstance(s, da.Array) and isinstance(q, da.Array)
    assert q.dtype == x.dtype and q.shape == x.shape
    s_np = study.scale_for(x, "float8_e4m3fn", kind, **kw)
    q_np = study.quantize(x, "float8_e4m3fn", kind, **kw)
    assert s.shape == s_np.shape and np.array_equal(s.compute(), s_np, equal_nan=True)
    assert np.array_equal(q.compute(), q_np, equal_nan=True)
    scale = 2.0 if kind != "channel" else study.scale_for(x, "float8_e4m3fn", "channel", axis=1)
    same_metrics(
        study.error_metrics(d, q, fmt="float8_e4m3fn", scale=scale),
        study.error_metrics(x, q_np, fmt="float8_e4m3fn", scale=scale),
    )


def test_mx_scales_explicit_scale_delayed_and_bfloat16_on_dask():
    x = data()
    d = da.from_array(x, chunks=(9, 40))
    codes = study.mx_scales(d, "float8_e5m2", block_size=32)
    assert codes.dtype == ml_dtypes.float8_e8m0fnu
    assert np.array_equal(codes.compute().view(np.uint8),
                          study.mx_scales(x, "float8_e5m2").view(np.uint8))  # fmt: skip
    q = study.quantize(d, "float8_e4m3fn", scale=np.float32(3.0))
    assert np.array_equal(q.compute(), study.quantize(x, "float8_e4m3fn", scale=np.float32(3.0)),
                          equal_nan=True)  # fmt: skip
    d1, d2 = study.DelayedScaling("float8_e4m3fn"), study.DelayedScaling("float8_e4m3fn")
    for _ in range(2):
        assert np.array_equal(study.quantize(d, "float8_e4m3fn", d1).compute(),
                              study.quantize(x, "float8_e4m3fn", d2), equal_nan=True)  # fmt: skip
    xb = x.astype(ml_dtypes.bfloat16)
    qb = study.quantize(da.from_array(xb, chunks=7), "float8_e4m3fn", "block", block_size=8)
    assert qb.dtype == xb.dtype
    assert np.array_equal(qb.compute(), study.quantize(xb, "float8_e4m3fn", "block", block_size=8),
                          equal_nan=True)  # fmt: skip


def test_masked_dask_and_dataarray():
    x = data()
    mask = np.zeros(x.shape, bool)
    mask[::3] = True
    m = np.ma.masked_array(np.where(mask, np.float32(1e30), x), mask)
    dm = da.from_array(m, chunks=(10, 35), asarray=False)
    same_rows(study.sweep({"m": dm}, FORMATS), study.sweep({"m": m}, FORMATS))
    xr = pytest.importorskip("xarray")
    a = xr.DataArray(da.from_array(x, chunks=10), dims=("o", "i"))
    same_rows(study.sweep({"x": a}, FORMATS), study.sweep({"x": x}, FORMATS))


def test_nothing_computed_until_asked():
    def boom():
        raise RuntimeError("computed")

    lazy = da.from_delayed(dask.delayed(boom)(), shape=(8, 64), dtype=np.float32)
    for kind in ("tensor", "channel", "block"):
        study.scale_for(lazy, "float8_e4m3fn", kind)
        q = study.quantize(lazy, "float8_e4m3fn", kind)
        with pytest.raises(RuntimeError, match="computed"):
            q.compute()


def test_dask_errors():
    with pytest.raises(TypeError, match="dtype"):
        study.quantize(da.ones(4, dtype=np.int32), "float8_e4m3fn")
    with pytest.raises(ValueError, match="axis"):
        study.scale_for(da.ones((2, 4), dtype=np.float32), "float8_e4m3fn", "channel", axis=2)
    with pytest.raises(ValueError, match="shape"):
        study.error_metrics(da.ones(4, dtype=np.float32), np.ones(5, np.float32))
    for bad in (3, "bogus"):
        with pytest.raises(ValueError, match="scheduler"):
            study.sweep(np.ones(4, np.float32), scheduler=bad)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    codes = {np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.float32): "F32"}
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": codes[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}  # fmt: skip
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def checkpoint(tmp_path):
    rng = np.random.default_rng(11)
    shards = []
    for k in range(3):
        t = {f"layers.{2 * k + j}.w": rng.standard_normal((24, 64)).astype(ml_dtypes.bfloat16)
             for j in range(2)}  # fmt: skip
        t[f"norm.{k}"] = rng.standard_normal(64).astype(np.float32)
        path = tmp_path / f"model-{k + 1:05d}-of-00003.safetensors"
        write_safetensors(path, t)
        shards.append(str(path))
    return shards


def study_json(argv, path):
    from fp8kit.cli import main

    assert main(["study", *argv, "--json", str(path), "--no-progress"]) == 0
    rows = json.loads(path.read_text())["rows"]
    return rows


def same_json_rows(got, ref):
    assert [(r["tensor"], r["format"], r["scaling"]) for r in got] == [
        (r["tensor"], r["format"], r["scaling"]) for r in ref
    ]
    for g, r in zip(got, ref, strict=True):
        for k in SUMS:
            a, b = g.pop(k), r.pop(k)
            assert a == b or math.isclose(a, b, rel_tol=1e-12), k
        assert g == r


@pytest.mark.parametrize(
    "scheduler", ["threads", pytest.param("processes", marks=pytest.mark.slow)]
)
def test_cli_scheduler_local(tmp_path, capsys, scheduler):
    shards = checkpoint(tmp_path)
    ref = study_json(shards, tmp_path / "ref.json")
    if scheduler == "processes":
        shards = shards[:1]  # worker processes start slowly: one shard is enough here
        ref = study_json(shards, tmp_path / "ref.json")
    got = study_json([*shards, "--scheduler", scheduler], tmp_path / "got.json")
    same_json_rows(got, ref)
    capsys.readouterr()


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as c:
        yield c


def test_local_cluster_sweep_and_cli(cluster, tmp_path, capsys):
    """One cluster of 2 worker processes: sweep over a dask array, and the CLI with each
    worker reading its own shards, both equal to the local run."""
    from distributed import Client, get_task_stream

    x = data()
    scalings = ["tensor", "channel", "block:32", "delayed:4"]
    with Client(cluster) as client, get_task_stream(client) as tasks:
        got = study.sweep({"x": da.from_array(x, chunks=(10, 35))}, FORMATS, scalings)
    workers = {t["worker"] for t in tasks.data if "chunk_totals" in str(t["key"])}
    assert len(workers) == 2, workers  # both worker processes measured blocks
    same_rows(got, study.sweep({"x": x}, FORMATS, scalings))
    shards = checkpoint(tmp_path)
    ref = study_json(shards, tmp_path / "ref.json")
    got_cli = study_json([*shards, "--scheduler", cluster.scheduler_address],
                         tmp_path / "got.json")  # fmt: skip
    same_json_rows(got_cli, ref)
    capsys.readouterr()
