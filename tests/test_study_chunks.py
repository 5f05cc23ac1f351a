"""Studies in chunks (streaming with a working-memory budget), masked arrays, DataArrays."""

import dataclasses
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from study_rows import same_rows

from fp8kit import study
from fp8kit.study._chunks import plan_chunks

FORMATS = ["float8_e4m3fn", "float8_e5m2"]


def tensors():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 5, 70)).astype(np.float32)
    a[2, 1, 3], a[7, 4, 69] = np.nan, -np.inf
    d = rng.standard_normal((3, 64, 40)) * np.float32([[[1e-3]], [[1]], [[1e30]]])
    d[1, 5, 7] = np.nan
    d = d.astype(ml_dtypes.bfloat16)  # (read as is by the kernels)
    return {
        "a": a,
        "b": (rng.standard_normal(130) * 0.1).astype(ml_dtypes.bfloat16),
        "c": rng.standard_normal((40, 20)),
        "z": np.zeros((3, 64), np.float16),
        "d": d,
    }


@pytest.mark.parametrize("block_axis", [-1, 0])
def test_results_identical_across_chunk_budgets(block_axis):
    t = tensors()
    scalings = ["none", "tensor", "channel", "block:32", "block:16", "delayed:4"]
    fmts = FORMATS + ["bfloat16"]
    ref = study.sweep(t, fmts, scalings, block_axis=block_axis)
    for budget in (64, 500, 3000, 20000):
        same_rows(study.sweep(t, fmts, scalings, block_axis=block_axis, chunk_bytes=budget), ref)


def test_plan_chunks_cover_the_tensor_in_order_within_budget():
    shape = (3, 5, 70)
    boxes = plan_chunks(shape, 40, {2: 32})
    covered = np.zeros(shape, int)
    for box in boxes:
        covered[tuple(slice(s, e) for s, e in box)] += 1
        starts = box[2][0]
        assert starts % 32 == 0 or box[2][0] // 32 == (box[2][1] - 1) // 32
    assert (covered == 1).all()
    flat = [np.ravel_multi_index([s for s, _ in b], shape) for b in boxes]
    assert flat == sorted(flat)
    assert max(np.prod([e - s for s, e in b]) for b in boxes) <= 40


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_peak_working_memory_within_the_budget(tmp_path, dtype):
    budget = 2**18
    shape = (256, 2048) if dtype == np.float32 else (512, 2048)  # 8 budgets either way
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32).astype(dtype)
    path = tmp_path / "w.bin"
    x.tofile(path)
    mm = np.memmap(path, dtype=dtype, mode="r", shape=shape)
    assert mm.nbytes == 8 * budget
    scalings = ["tensor", "channel", "block:32", "delayed:4"]
    study.sweep({"w": mm[:64]}, FORMATS, scalings, chunk_bytes=budget)  # kernels loaded
    tracemalloc.start()
    try:
        rows = study.sweep({"w": mm}, FORMATS, scalings, chunk_bytes=budget)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= budget, peak
    same_rows(rows, study.sweep({"w": x}, FORMATS, scalings))


def test_masked_elements_never_count():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    mask = rng.random(x.shape) < 0.25
    noisy = np.where(mask, np.float32(1e30), x)
    noisy[0, 0], mask[0, 0] = np.nan, True
    m = np.ma.masked_array(noisy, mask)
    scalings = ["tensor", "block:32"]
    rows = study.sweep({"m": m}, FORMATS, scalings)
    assert all(r.metrics.count == (~mask).sum() and r.metrics.nan_inputs == 0 for r in rows)
    # tensor scaling: the same figures as the unmasked elements alone
    same_rows(
        [r for r in rows if r.scaling == "tensor"],
        [
            dataclasses.replace(r, shape=x.shape)
            for r in study.sweep({"m": x[~mask]}, FORMATS, ["tensor"])
        ],
    )
    same_rows(study.sweep({"m": m}, FORMATS, scalings, chunk_bytes=700), rows)
    assert float(study.scale_for(m, "float8_e4m3fn")) == float(
        study.scale_for(x[~mask], "float8_e4m3fn")
    )
    q = study.quantize(m, "float8_e4m3fn")
    assert isinstance(q, np.ma.MaskedArray) and (q.mask == mask).all()
    assert np.array_equal(
        q[~mask], study.quantize(x, "float8_e4m3fn", scale=q_scale(x, mask))[~mask]
    )
    e = study.error_metrics(m, q, fmt="float8_e4m3fn", scale=q_scale(x, mask))
    assert e.count == (~mask).sum() and e.nan_inputs == 0 and e.max_abs_error < 1


def q_scale(x, mask):
    return study.scale_for(x[~mask], "float8_e4m3fn")


def test_dataarray_accepted():
    xr = pytest.importorskip("xarray")
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    a = xr.DataArray(x, dims=("out", "in"))
    same_rows(study.sweep({"w": a}, FORMATS), study.sweep({"w": x}, FORMATS))
    assert np.array_equal(study.scale_for(a, "float8_e5m2", "channel"),
                          study.scale_for(x, "float8_e5m2", "channel"))  # fmt: skip


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "1M"])
def test_chunk_bytes_checked(bad):
    with pytest.raises((TypeError, ValueError), match="chunk_bytes"):
        study.sweep(np.ones(4, np.float32), FORMATS, chunk_bytes=bad)


def test_cli_chunk_budget(tmp_path, capsys):
    import json

    from fp8kit.cli import main

    path = tmp_path / "w.npy"
    np.save(path, np.random.default_rng(4).standard_normal((64, 256)).astype(np.float32))
    docs = []
    for extra in ([], ["--chunk-budget", "8K"]):
        out = tmp_path / f"r{len(extra)}.json"
        assert main(["study", str(path), "--json", str(out), "--no-progress", *extra]) == 0
        docs.append([(r["tensor"], r["scaling"], r["compared"], round(r["sqnr_db"], 9))
                     for r in json.loads(out.read_text())["rows"]])  # fmt: skip
    assert docs[0] == docs[1]
    with pytest.raises(SystemExit) as exc:
        main(["study", str(path), "--chunk-budget", "12X"])
    assert exc.value.code == 2
    assert "--chunk-budget" in capsys.readouterr().err


@pytest.mark.parametrize("channel_axis, block_axis", [(0, -1), (2, 1)])
def test_amaxes_from_mx_blocks_equal_the_amax_pass(monkeypatch, channel_axis, block_axis):
    import importlib

    sweep_mod = importlib.import_module("fp8kit.study.sweep")  # (study.sweep: the function)
    t = {"a": tensors()["a"]}  # one chunk, NaN and -Inf in two blocks and two channels
    args = (FORMATS, ["tensor", "channel", "block:32"])
    kw = dict(channel_axis=channel_axis, block_axis=block_axis)
    used = []
    real = sweep_mod._from_blocks
    monkeypatch.setattr(sweep_mod, "_from_blocks", lambda *a: used.append(real(*a)) or used[-1])
    got = study.sweep(t, *args, **kw)
    assert used and used[0] is not None
    monkeypatch.setattr(sweep_mod, "_from_blocks", lambda *a: None)
    ref = study.sweep(t, *args, **kw)
    assert [repr(r.as_dict()) for r in got] == [repr(r.as_dict()) for r in ref]


def test_mx_exponents_by_bits_equal_frexp():
    from fp8kit.formats import get_format
    from fp8kit.study.scaling import mx_exponents

    rng = np.random.default_rng(5)
    amax = np.abs(rng.standard_normal(4000)) * np.exp2(rng.integers(-1100, 1000, 4000))
    amax[:8] = [0.0, 2.0**-149, np.finfo(np.float64).max, 1.0, 2.0**-127, 2.0**135, 448.0, 0.0]
    bad = rng.random(4000) < 0.05
    for name in FORMATS:
        fmt = get_format(name)
        normal = np.where(amax < 2.0**-1022, 0.0, amax)
        for a in (normal, amax):  # all float64 normal (by bits), a subnormal (frexp)
            floor_log2 = np.frexp(a)[1] - 1
            shared = np.maximum(np.where(a > 0, floor_log2 - (fmt.maxexp - 1), -127), -127)
            want = (np.minimum(shared, 127) + 127).astype(np.uint8)
            want[(shared > 127) | bad] = 255
            np.testing.assert_array_equal(mx_exponents(a, bad, fmt), want)


def test_widening_buffer_reused_within_a_sweep_and_freed(monkeypatch):
    import importlib

    sweep_mod = importlib.import_module("fp8kit.study.sweep")
    rng = np.random.default_rng(7)
    t = {
        "big": rng.standard_normal((40, 64)).astype(np.float16),
        "small": (rng.standard_normal((8, 32)) * 1e3).astype(np.float16),
        "bf": rng.standard_normal((40, 64)).astype(ml_dtypes.bfloat16),
        "big2": (rng.standard_normal((40, 64)) * 1e-3).astype(np.float16),
    }
    t["small"][1, 2] = np.nan
    t["bf"][3, 4] = np.inf
    seen = []
    real = sweep_mod._widened
    monkeypatch.setattr(sweep_mod, "_widened", lambda x: seen.append(real(x)) or seen[-1])
    got = study.sweep(t, FORMATS, ["tensor", "channel", "block:32"])
    assert len(seen) == 3  # bfloat16 is read as is: never widened
    assert seen[0][1] is not None and all(s[1] is seen[0][1] for s in seen)  # one buffer
    assert not sweep_mod._BUFFERS  # freed at the end of the sweep
    for k, name in enumerate(t):
        ref = study.sweep({name: t[name]}, FORMATS, ["tensor", "channel", "block:32"])
        assert [repr(r.as_dict()) for r in got[6 * k : 6 * k + 6]] == [
            repr(r.as_dict()) for r in ref
        ]


def test_threads_scheduler_splits_the_kernel_threads(monkeypatch):
    import importlib

    import fp8kit

    dask = pytest.importorskip("dask")
    sweep_mod = importlib.import_module("fp8kit.study.sweep")
    seen = []
    real = sweep_mod.study_tensor

    def spy(*args, **kwargs):
        seen.append(fp8kit.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_mod, "study_tensor", spy)
    t = {"a": np.float32([1.0, -2.0]), "b": np.float32([[0.5, 3.0]])}
    with dask.config.set(num_workers=2), fp8kit.num_threads(4):
        rows = study.sweep(t, FORMATS, ["tensor"], scheduler="threads")
    assert seen == [2, 2]  # 4 threads over 2 tasks at a time
    assert [r.as_dict() for r in rows] == [r.as_dict() for r in study.sweep(t, FORMATS, ["tensor"])]


@pytest.mark.parametrize("block_axis", [-1, 0])
def test_all_zero_blocks_are_noted_alike_in_chunks_and_whole(block_axis):
    """An all-zero MX or NVFP4 block gets a note, as a zero amax does per tensor and
    channel, with the same words whether the block scales come from the whole tensor's
    amaxes or from each chunk's (issue 43: there was none).  (MX blocks along the last
    axis are scaled chunk by chunk, along the first from the whole tensor's amaxes when
    a chunk holds a part of a block.)"""
    x = np.random.default_rng(5).standard_normal((16, 96)).astype(np.float32)
    x[0] = 0.0  # 3 blocks of 32, 6 of 16; x[2]: one of 16 (48:64)
    x[1, :32] = 0.0  # one more of 32 (two of 16)
    x[2, 40] = np.nan  # a NaN block is not a zero block
    x[2, 32:40] = 0.0
    x[2, 41:64] = 0.0
    x = x if block_axis == -1 else np.ascontiguousarray(x.T)
    scalings = ["block:32", "block:32:rceil", "nvfp4", "tensor"]
    kw = {"block_axis": block_axis}
    ref = study.sweep({"x": x}, ["float8_e4m3fn", "float4_e2m1fn"], scalings, **kw)
    notes = {r.scaling: [n for n in r.notes if "zero" in n] for r in ref}
    assert notes == {"block:32": ["4 of 48 blocks: zero amax"],
                     "block:32:rceil": ["4 of 48 blocks: zero amax"],
                     "nvfp4": ["9 of 96 blocks: zero amax"], "tensor": []}  # fmt: skip
    for budget in (64, 500, 3000):
        same_rows(study.sweep({"x": x}, ["float8_e4m3fn", "float4_e2m1fn"], scalings,
                              chunk_bytes=budget, **kw), ref)  # fmt: skip
