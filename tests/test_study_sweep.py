"""Sweeps (consistency with quantize + error_metrics, notes), file reading (safetensors
written by hand, and by the safetensors package as an oracle), reports and the plot."""

import csv
import io
import json
import math
import struct

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import study
from fp8kit.study import report
from fp8kit.study.io import StudyInputError, load_tensors, read_safetensors

FORMATS = ["float8_e4m3fn", "float8_e5m2"]
SUMS = ("sqnr_db", "rmse", "sum_sq_error", "sum_sq_signal")


def same_metrics(a, b):
    """Equal figures; the sums to rounding (their order depends on the memory layout)."""
    da, db = a.as_dict(), b.as_dict()
    for k in SUMS:
        assert da.pop(k) == pytest.approx(db.pop(k), rel=1e-13), k
    assert da == db


def test_rows_equal_quantize_then_error_metrics():
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.standard_normal((64, 96)).astype(np.float32),
        "v": (rng.standard_normal(70) * 1e-3).astype(np.float64),
    }
    scalings = ["none", "tensor", "channel", "block:32", "block:16"]
    rows = study.sweep(tensors, FORMATS, scalings, margin=1, pow2=True)
    assert [(r.tensor, r.scaling, r.format) for r in rows] == [
        (t, study.parse_scaling(s).label, f) for t in tensors for s in scalings for f in FORMATS
    ]
    for r in rows:
        x = tensors[r.tensor]
        kind = r.scaling.split(":")[0]
        kw = dict(margin=1, pow2=True)
        if kind == "block":
            kw = dict(block_size=int(r.scaling.split(":")[1]), axis=-1)
        if kind == "channel" and x.ndim < 2:
            kind = "tensor"  # 1-D: one channel
        q, qs = study.quantize(x, r.format, kind, **kw, return_scale=True)
        s = study.scale_for(x, r.format, kind, **kw)
        np.testing.assert_array_equal(qs, s)  # (per-block scales as scale_for gives them)
        same_metrics(r.metrics, study.error_metrics(x, q, fmt=r.format, scale=s))
        finite = np.asarray(s)[np.isfinite(s)]
        assert (r.scale_min, r.scale_max) == (finite.min(), finite.max())
        assert r.shape == x.shape and r.dtype == x.dtype.name


def test_16bit_data_is_measured_in_its_dtype():
    x = (np.random.default_rng(1).standard_normal((32, 64)) * 10).astype(ml_dtypes.bfloat16)
    (row,) = study.sweep({"b": x}, ["float8_e4m3fn"], ["channel"])
    q = study.quantize(x, "float8_e4m3fn", "channel")
    s = study.scale_for(x, "float8_e4m3fn", "channel")
    same_metrics(row.metrics, study.error_metrics(x, q, fmt="float8_e4m3fn", scale=s))
    assert row.dtype == "bfloat16"


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_fused_pass_on_edge_values_equals_quantize_then_error_metrics(dtype):
    # blocks of 1024 with and without NaN/Inf (the fused kernel's fast and careful paths),
    # values at and around e5m2's overflow threshold (ties round up there), zeros, values
    # that flush, and recurring error ratios (bfloat16 ties) for max_rel's candidate test
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 2304)) * 10.0 ** rng.integers(-6, 6, (6, 1))).astype(dtype)
    x = x.astype(np.float32)
    x[1, :300] = np.array([61440.0, -61440.0, 57344.0, 65536.0, 1e-9, 0.0] * 50)
    x[2, 5], x[3, 2000], x[4, 7] = np.nan, np.inf, -np.inf
    x = x.astype(dtype)
    rows = study.sweep({"x": x}, ["float8_e5m2"], ["none", "block:32"])
    for r in rows:
        kind, kw = ("block", dict(block_size=32, axis=-1)) if "block" in r.scaling else ("none", {})
        q = study.quantize(x, "float8_e5m2", kind, **kw)
        s = study.scale_for(x, "float8_e5m2", kind, **kw)
        if kind == "block":
            s = np.repeat(s, 32, axis=-1)
        same_metrics(r.metrics, study.error_metrics(x, q, fmt="float8_e5m2", scale=s))
        assert r.metrics.nan_inputs == 1 and r.metrics.inf_inputs == 2
    assert rows[0].metrics.n_saturated > 0 and rows[0].metrics.n_flushed > 0


@pytest.mark.parametrize("narrow", ["float32", "bfloat16"])
def test_fused_counts_where_float32_products_round_onto_the_limits(narrow):
    # the fused kernel decides saturated (|x| * s > ovf) and subnormal (|q| * s < tiny) on
    # float32 products; with a scale that is not a power of two they round onto ovf and
    # tiny from both sides, and the counts must still be those of the exact products
    from fp8kit._kernels.metrics import overflow_threshold
    from fp8kit.study.metrics import fused_totals, metric_totals

    fmt = fp8kit.get_format("float8_e4m3fn")
    ovf, _ = overflow_threshold(fmt)
    s = np.float32(1.0 + 3 * 2.0**-23)
    near = []
    for limit in (ovf, fmt.smallest_normal, fmt.smallest_normal / 2):
        c = np.float32(limit / np.float64(s))
        near.append(c + np.arange(-40, 41, dtype=np.float32) * np.spacing(c))
    x = np.concatenate(near * 4).astype(np.float32).reshape(-1, 12)
    if narrow == "bfloat16":
        x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    for scale in (np.full((), s), np.full((x.shape[0], 1), s), np.full(x.shape, s)):
        got = fused_totals(x, scale.astype(np.float32), fmt, narrow)
        q = fp8kit.fake_convert(x, scale.astype(np.float32), destination_type=fmt)
        if narrow == "bfloat16":
            q = q.astype(ml_dtypes.bfloat16).astype(np.float32)
        want = metric_totals(x, q, np.broadcast_to(scale, x.shape).astype(np.float64), fmt)
        assert got.tolist() == pytest.approx(want.tolist(), rel=1e-13)
        assert got[7:].tolist() == want[7:].tolist() and got[2:4].tolist() == want[2:4].tolist()
        exact_sat = np.abs(x.astype(np.float64)) * np.float64(s) > ovf
        assert got[8] == exact_sat.sum() > 0 and got[9] > 0


@pytest.mark.parametrize("order", ["growing", "shrinking", "late", "random"])
def test_fused_max_rel_is_exact_wherever_the_largest_ratio_lies(order):
    # the fused kernel divides only the elements whose error ratio may beat the chunk's
    # largest so far (a candidate test on an FMA): ratios that grow along the data make
    # every element a candidate, shrinking ones none after the first, a late peak one
    # in the last segment; the figure must be the full kernel's, exactly
    from fp8kit.study.metrics import fused_totals, metric_totals

    fmt = fp8kit.get_format("float8_e4m3fn")
    n = 3 * 1024 + 77  # (segments of 1024 elements: three and a part)
    ramp = 1.0 + np.arange(n) * (0.0624 / n)  # (rounds to 1: ratio (x - 1) / x grows)
    x = {
        "growing": ramp,
        "shrinking": ramp[::-1],
        "late": np.r_[np.full(n - 5, 1.0 + 2.0**-10), 1.06, np.full(4, 1.0)],
        "random": np.random.default_rng(4).uniform(0.5, 2.0, n),
    }[order].astype(np.float32)
    for shape in ((n,), (7, n // 7)):
        xs = x[: int(np.prod(shape))].reshape(shape)
        for scale in (np.ones((), np.float32), np.ones(shape, np.float32)):
            got = fused_totals(xs, scale, fmt, "float32")
            q = fp8kit.fake_convert(xs, scale, destination_type=fmt)
            want = metric_totals(xs, q, np.broadcast_to(scale, shape).astype(np.float64), fmt)
            assert got[3] == want[3] > 0, (order, shape)
            assert got[2:4].tolist() == want[2:4].tolist()


def test_delayed_rows_replay_the_steps():
    rng = np.random.default_rng(2)
    steps = (rng.standard_normal((12, 50)) * np.exp2(np.arange(12))[:, None]).astype(np.float32)
    (row,) = study.sweep(steps, ["float8_e4m3fn"], ["delayed:4:max"])
    ds = study.DelayedScaling("float8_e4m3fn", history_len=4, algo="max")
    scales = np.array([ds.scale(t) for t in steps])[:, None]
    q = np.stack(
        [study.quantize(t, "float8_e4m3fn", scale=s) for t, s in zip(steps, scales, strict=True)]
    )
    same_metrics(row.metrics, study.error_metrics(steps, q, fmt="float8_e4m3fn", scale=scales))
    assert row.scaling == "delayed:4:max" and scales[0] == 1.0
    assert (row.scale_min, row.scale_max) == (scales.min(), scales.max())
    # amax doubles every step, so the delayed scale (from the step before) saturates
    assert row.metrics.n_saturated > 0


@pytest.mark.parametrize(
    "x, scaling, note",
    [
        pytest.param(np.zeros((4, 4), np.float32), "tensor", "zero amax: scale 1", id="zeros"),
        pytest.param(
            np.array([[0.0, 0.0], [1.0, 2.0]], np.float32),
            "channel",
            "1 of 2 channels: scale 1",
            id="zero-channel",
        ),
        pytest.param(np.ones(8, np.float32), "channel", "1-D tensor: one channel", id="1d-chan"),
        pytest.param(np.ones(8, np.float32), "delayed", "1-D tensor: one step", id="1d-steps"),
        pytest.param(
            np.ones((2, 40), np.float32),
            "block:32",
            "axis length 40 is not a multiple of 32: last block of 8",
            id="ragged",
        ),
        pytest.param(
            np.array([1.0, np.nan, 2.0, np.inf], np.float32),
            "tensor",
            "1 NaN, 1 Inf inputs not compared",
            id="nonfinite",
        ),
        pytest.param(
            np.array([1.0, np.nan, 2.0, 3.0], np.float32),
            "block:2",
            "1 blocks hold NaN/Inf: scale NaN",
            id="nan-block",
        ),
        pytest.param(
            np.array([1.0, np.nan, 2.0, 3.0], np.float32),
            "block:2",
            "1 values lost to NaN scales",
            id="lost",
        ),
    ],
)
def test_notes(x, scaling, note):
    (row,) = study.sweep({"t": x}, ["float8_e4m3fn"], [scaling])
    assert note in row.notes


def test_zero_tensor_row():
    (row,) = study.sweep(np.zeros(100, np.float32), ["float8_e5m2"], ["tensor"])
    assert row.metrics.sqnr_db == math.inf and row.scale_min == row.scale_max == 1.0


@pytest.mark.parametrize("shape", [(0, 32), (0,), (4, 0), (0, 2, 32)])
def test_empty_tensors_give_rows(shape):
    # every scaling, including per-channel (whose per-tensor amax is the channels' largest)
    rows = study.sweep({"w": np.zeros(shape, np.float32)}, formats=["float8_e4m3fn"])
    assert [r.scaling for r in rows] == ["tensor", "channel", "block:32"]
    assert all(r.shape == shape and r.metrics.count == 0 for r in rows)


def test_progress_callback_and_axes():
    calls = []
    x = np.ones((3, 4, 64), np.float32)
    study.sweep(
        x,
        FORMATS,
        ["channel", "block:8"],
        channel_axis=1,
        block_axis=2,
        progress=lambda *a: calls.append(a),
    )
    assert [c[:2] for c in calls] == [(i, 4) for i in range(1, 5)]
    assert calls[0][2] == "x float8_e4m3fn channel"
    with pytest.raises(ValueError, match="channel_axis.*out of range"):
        study.sweep(x, FORMATS, ["channel"], channel_axis=3)


@pytest.mark.parametrize(
    "spec, want",
    [
        pytest.param("block", study.Scaling("block", block_size=32), id="block"),
        pytest.param("block:8", study.Scaling("block", block_size=8), id="block:8"),
        pytest.param("delayed", study.Scaling("delayed"), id="delayed"),
        pytest.param("delayed:4", study.Scaling("delayed", history_len=4), id="delayed:4"),
        pytest.param(
            "delayed:4:most_recent",
            study.Scaling("delayed", history_len=4, algo="most_recent"),
            id="d:4:mr",
        ),
        pytest.param("none", study.Scaling("none"), id="none"),
    ],
)
def test_parse_scaling(spec, want):
    assert study.parse_scaling(spec) == want


@pytest.mark.parametrize("spec", ["block:0", "block:x", "delayed:0", "delayed:4:mean", "row", 3])
def test_parse_scaling_rejects(spec):
    with pytest.raises(ValueError, match="unknown scaling .*; valid: none, tensor"):
        study.parse_scaling(spec)


def test_sweep_rejects_bad_input():
    with pytest.raises(ValueError, match="valid:"):
        study.sweep(np.ones(4, np.float32), ["e4m3"], ["tensor"])
    with pytest.raises(TypeError, match="tensor 'i'"):
        study.sweep({"i": np.arange(4)}, FORMATS, ["tensor"])
    with pytest.raises(ValueError, match="no tensors"):
        study.sweep({}, FORMATS, ["tensor"])


# ---------------------------------------------------------------- reports
@pytest.fixture(scope="module")
def rows():
    x = np.array([[1.0, 2.0, 0.0, np.nan], [0.1, 0.2, 0.3, 0.4]], np.float32)
    return study.sweep({"a": x, "z": np.zeros(4, np.float32)}, FORMATS, ["tensor", "channel"])


def test_table_is_aligned(rows):
    lines = report.format_table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[0].split()[:4] == ["tensor", "format", "scaling", "SQNR"]
    assert set(lines[1]) <= {"-", " "}
    # right-aligned numeric columns end at the same place on every line
    end = lines[0].index("SQNR dB") + len("SQNR dB")
    assert all(line[end - 1] != " " for line in lines[2:])
    assert "inf" in lines[-1]  # the zero tensor: no error
    md = report.format_table(rows, markdown=True).splitlines()
    assert md[0].startswith("| tensor | format |") and md[1].startswith("|---|---|---|---:|")


def test_json_round_trip(rows):
    doc = json.loads(report.to_json(rows, source="test"))
    assert doc["source"] == "test" and len(doc["rows"]) == len(rows)
    r0, last = doc["rows"][0], doc["rows"][-1]
    assert r0["tensor"] == "a" and r0["nan_inputs"] == 1 and r0["shape"] == [2, 4]
    assert r0["sqnr_db"] == rows[0].metrics.sqnr_db
    assert last["sqnr_db"] == "inf"  # JSON has no Infinity


def test_csv_round_trip(rows):
    lines = list(csv.DictReader(io.StringIO(report.to_csv(rows))))
    got = [r for r in lines if r["kind"] == "tensor"]  # the summary lines follow
    assert len(got) == len(rows) and lines[: len(rows)] == got
    assert {r["kind"] for r in lines[len(rows) :]} == {"summary"}
    assert got[0]["shape"] == "2x4" and float(got[0]["rmse"]) == rows[0].metrics.rmse
    assert got[-1]["sqnr_db"] == "inf"


# ---------------------------------------------------------------- files
def write_safetensors(path, tensors, metadata=None, dtype_codes=None):
    """A safetensors file written by hand from the format description: an 8-byte
    little-endian header length, a JSON header, then the raw little-endian data."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        code = (dtype_codes or {}).get(name) or {
            "float16": "F16",
            "bfloat16": "BF16",
            "float32": "F32",
            "float64": "F64",
            "int32": "I32",
            "uint8": "U8",
            "bool": "BOOL",
        }[arr.dtype.name]
        header[name] = {
            "dtype": code,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def sample_tensors():
    rng = np.random.default_rng(3)
    return {
        "h": rng.standard_normal((3, 5)).astype(np.float16),
        "b": rng.standard_normal((4,)).astype(ml_dtypes.bfloat16),
        "f": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "d": rng.standard_normal((6,)),
        "ids": np.arange(5, dtype=np.int32),
        "s": np.array(2.5, np.float32),
    }


def test_read_safetensors_written_by_hand(tmp_path):
    t = sample_tensors()
    p = tmp_path / "m.safetensors"
    write_safetensors(p, t, metadata={"format": "pt"})
    got, skipped = read_safetensors(p)
    assert skipped == ["ids"] and set(got) == {"h", "b", "f", "d", "s"}
    for k, v in got.items():
        assert v.dtype == t[k].dtype and v.shape == t[k].shape
        np.testing.assert_array_equal(v.view(f"u{v.itemsize}"), t[k].view(f"u{v.itemsize}"))


def test_safetensors_package_as_oracle(tmp_path):
    """Files written by the safetensors package (its numpy API) read back identically."""
    st_numpy = pytest.importorskip("safetensors.numpy")
    t = {k: v for k, v in sample_tensors().items() if k != "b"}  # its numpy API has no bf16
    p = tmp_path / "lib.safetensors"
    st_numpy.save_file(t, str(p), metadata={"who": "safetensors"})
    got, skipped = read_safetensors(p)
    assert skipped == ["ids"]
    for k, v in got.items():
        np.testing.assert_array_equal(v, t[k])
    # and what we write by hand, the library reads
    q = tmp_path / "hand.safetensors"
    write_safetensors(q, t)
    for k, v in st_numpy.load_file(str(q)).items():
        np.testing.assert_array_equal(v, t[k])


@pytest.mark.parametrize(
    "mutate, match",
    [
        pytest.param(lambda b: b[:4], "shorter than 8 bytes", id="short"),
        pytest.param(lambda b: struct.pack("<Q", 10**9) + b[8:], "header length", id="length"),
        pytest.param(lambda b: b[:8] + b"[" + b[9:], "header is not valid JSON", id="json"),
        pytest.param(lambda b: b[:-4], "run past the end of the file", id="truncated-data"),
    ],
)
def test_malformed_safetensors(tmp_path, mutate, match):
    p = tmp_path / "ok.safetensors"
    write_safetensors(p, {"f": np.ones(4, np.float32)})
    p.write_bytes(mutate(p.read_bytes()))
    with pytest.raises(StudyInputError, match=match):
        read_safetensors(p)


def test_unknown_safetensors_dtype_code(tmp_path):
    p = tmp_path / "x.safetensors"
    write_safetensors(p, {"f": np.ones(4, np.float32)}, dtype_codes={"f": "F128"})
    with pytest.raises(StudyInputError, match="'F128'"):
        read_safetensors(p)


def test_load_npy_npz(tmp_path):
    t = sample_tensors()
    np.save(tmp_path / "w.npy", t["f"])
    got, skipped = load_tensors(tmp_path / "w.npy")
    assert list(got) == ["w"] and not skipped
    np.savez(tmp_path / "a.npz", f=t["f"], d=t["d"], ids=t["ids"], big=t["f"].astype(">f4"))
    got, skipped = load_tensors(tmp_path / "a.npz", prefix="a:")
    assert set(got) == {"a:f", "a:d", "a:big"} and skipped == ["a:ids"]
    (row,) = study.sweep({"big": got["a:big"]}, ["float8_e4m3fn"], ["tensor"])
    assert row.metrics.compared == t["f"].size


@pytest.mark.parametrize(
    "name, content, match",
    [
        pytest.param("missing.npy", None, "no such file", id="missing"),
        pytest.param("x.txt", b"1 2 3", "unsupported file type '.txt'", id="suffix"),
        pytest.param("x.npy", b"not numpy", "cannot read as .npy", id="bad-npy"),
        pytest.param("x.npz", b"not a zip", "cannot read as .npz", id="bad-npz"),
    ],
)
def test_load_errors(tmp_path, name, content, match):
    p = tmp_path / name
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(StudyInputError, match=match):
        load_tensors(p)


def test_file_without_floats(tmp_path):
    np.savez(tmp_path / "i.npz", ids=np.arange(3))
    with pytest.raises(StudyInputError, match="no floating-point tensors.*skipped ids"):
        load_tensors(tmp_path / "i.npz")


# ---------------------------------------------------------------- plot
def test_plot_writes_png(tmp_path, rows):
    pytest.importorskip("matplotlib")
    from fp8kit.study.plot import plot_study

    t = {
        "a": np.array([[1.0, 2.0, 0.0, np.nan], [0.1, 0.2, 0.3, 0.4]], np.float32),
        "z": np.zeros(4, np.float32),
    }
    out = tmp_path / "p.png"
    plot_study(rows, t, out, title="test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(tmp_path, rows, monkeypatch):
    import sys

    from fp8kit.study.plot import PlotUnavailable, plot_study

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(PlotUnavailable, match=r"needs matplotlib: pip install matplotlib"):
        plot_study(rows, {}, tmp_path / "p.png")


def test_positive_grid():
    from fp8kit.study.plot import positive_grid

    g = positive_grid(fp8kit.get_format("float8_e4m3fn"))
    assert g.size == 126 and g[0] == 2.0**-9 and g[-1] == 448.0


@pytest.mark.parametrize("narrow", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["element", "column", "row"])
def test_fused_pass_reads_every_scale_layout(narrow, layout):
    # a scale per element (copied row by row), per column (one per element along rows)
    # and per row (one value per row), each different: every element must meet its own
    from fp8kit.study.metrics import fused_totals, metric_totals

    fmt = fp8kit.get_format("float8_e4m3fn")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((37, 1100)) * 30).astype(np.float32)
    if narrow == "bfloat16":
        x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    shape = {"element": x.shape, "column": (1, x.shape[1]), "row": (x.shape[0], 1)}[layout]
    scale = np.exp2(rng.uniform(-4, 4, shape)).astype(np.float32)
    got = fused_totals(x, scale, fmt, narrow)
    q = fp8kit.fake_convert(x, scale, destination_type=fmt)
    if narrow == "bfloat16":
        q = q.astype(ml_dtypes.bfloat16).astype(np.float32)
    want = metric_totals(x, q, np.broadcast_to(scale, x.shape).astype(np.float64), fmt)
    assert got.tolist() == pytest.approx(want.tolist(), rel=1e-13)
    assert got[2:4].tolist() == want[2:4].tolist() and got[7:].tolist() == want[7:].tolist()
