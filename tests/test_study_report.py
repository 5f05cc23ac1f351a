"""The study's output: model-level summary, --top, JSON/CSV, records/DataFrame, the figure
(no overlapping text at 6 formats x 5 scalings, inf SQNR, y from 0, PNG/PDF/SVG) and the
progress bar (weighted, never wider than the terminal, quiet without a terminal)."""

import csv
import io
import itertools
import json
import math
import re
import sys

import numpy as np
import pytest

from fp8kit import study
from fp8kit._kernels import metrics as km
from fp8kit.cli import main
from fp8kit.study import report
from fp8kit.study.metrics import ErrorMetrics
from fp8kit.study.plot import check_plot_path, layer_index
from fp8kit.study.progress import StudyProgress
from fp8kit.study.sweep import SweepRow

SIX = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "bfloat16", "float16"]
FIVE = ["none", "tensor", "channel", "block:32", "delayed:16:max"]


def metrics(signal, error, count=256, saturated=0, flushed=0):
    t = np.zeros(km.N_METRICS)
    t[km.SUM_SQ_SIG], t[km.SUM_SQ_ERR] = signal, error
    t[km.SATURATED], t[km.FLUSHED] = saturated, flushed
    return ErrorMetrics.from_totals(count, t)


def fake_rows(names, formats, scalings, *, inf_format=None, seed=0):
    """Rows with made-up metrics (no sweep: no compiles); SQNR about 31 - 3k dB for the
    k-th format, inf for ``inf_format``."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in names:
        for s in scalings:
            for k, f in enumerate(formats):
                db = 31 - 3 * k + rng.normal(0, 1)
                err = 0.0 if f == inf_format else 100 * 10 ** (-db / 10)
                m = metrics(100.0, err, saturated=int(rng.integers(0, 5)))
                rows.append(SweepRow(n, (16, 16), "float32", f, s, m, 1.0, 1.0))
    return rows


def small_data():
    return study.demo_tensors(shape=(8, 64))


# -- summary, --top, files ---------------------------------------------------------------


def test_summary_pools_every_element():
    rows = [
        SweepRow("a", (4,), "float32", "f", "tensor", metrics(10.0, 0.1, 100, 2, 1), 1, 1),
        SweepRow("b", (4,), "float32", "f", "tensor", metrics(90.0, 0.01, 300, 0, 3), 1, 1),
        SweepRow("c", (4,), "float32", "f", "tensor", metrics(1.0, 0.0, 50), 1, 1),
    ]
    (s,) = study.summarize(rows)
    assert (s.format, s.scaling, s.tensors) == ("f", "tensor", 3)
    assert s.metrics.sqnr_db == pytest.approx(10 * math.log10(101.0 / 0.11))
    assert s.metrics.count == 450 and s.metrics.n_saturated == 2
    assert s.metrics.saturated == pytest.approx(2 / 450)
    assert s.metrics.flushed_to_zero == pytest.approx(4 / 450)
    assert s.worst_tensor == "a" and s.worst_sqnr_db == pytest.approx(20.0)


def test_summary_and_worst_per_format_and_scaling():
    rows = study.sweep(small_data(), ["float8_e4m3fn", "float8_e5m2"], ["none", "tensor"])
    summary = study.summarize(rows)
    assert [(s.format, s.scaling) for s in summary] == [
        ("float8_e4m3fn", "none"), ("float8_e4m3fn", "tensor"),
        ("float8_e5m2", "none"), ("float8_e5m2", "tensor"),
    ]  # fmt: skip
    for s in summary:
        group = [r for r in rows if (r.format, r.scaling) == (s.format, s.scaling)]
        assert s.metrics == ErrorMetrics.pooled([r.metrics for r in group])
        low = min(group, key=lambda r: r.metrics.sqnr_db)
        assert (s.worst_tensor, s.worst_sqnr_db) == (low.tensor, low.metrics.sqnr_db)
    top = report.worst(rows, 2)
    assert len(top) == 4 * 2
    for k in range(0, 8, 2):
        pair = top[k : k + 2]
        assert pair[0].metrics.sqnr_db <= pair[1].metrics.sqnr_db
        assert pair[0].tensor == next(
            s.worst_tensor for s in summary if (s.format, s.scaling) == (pair[0].format,
                                                                           pair[0].scaling)
        )  # fmt: skip
    with pytest.raises(ValueError, match="n must be an int >= 1; got 0"):
        report.worst(rows, 0)


def test_nan_sqnr_ranks_last_and_inf_summary():
    nan = SweepRow("empty", (0,), "float32", "f", "none", metrics(0, 0, count=0), 1, 1)
    exact = SweepRow("w", (4,), "float32", "f", "none", metrics(5.0, 0.0, count=4), 1, 1)
    (s,) = study.summarize([nan, exact])
    assert s.worst_tensor == "w" and s.worst_sqnr_db == math.inf and s.metrics.sqnr_db == math.inf
    assert [r.tensor for r in report.worst([nan, exact], 2)] == ["w", "empty"]
    text = report.format_report([nan, exact])
    assert text.splitlines()[-1].split()[4] == "inf"


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_table_ends_with_summary_and_top(capsys, tmp_path):
    args = ["study", "--formats", "float8_e4m3fn", "float8_e5m2", "--scaling", "tensor"]
    code, out, err = cli(capsys, *args)
    assert code == 0 and err == ""
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 3 and blocks[1].startswith("Summary: all 3 tensors pooled (786,432")
    summary = blocks[2].splitlines()
    assert summary[0].split()[:4] == ["format", "scaling", "tensors", "elements"]
    assert [line.split()[:4] for line in summary[2:]] == [
        ["float8_e4m3fn", "tensor", "3", "786432"],
        ["float8_e5m2", "tensor", "3", "786432"],
    ]
    code, out, _ = cli(capsys, *args, "--top", "1", "--markdown", "--json", str(tmp_path / "j"))
    assert code == 0
    blocks = out.strip().split("\n\n")
    assert blocks[0] == "The 1 worst tensor of 3 (lowest SQNR) per format and scaling:"
    assert len(blocks[1].splitlines()) == 2 + 2 and blocks[1].startswith("| tensor |")
    assert blocks[3].startswith("| format | scaling | tensors |")
    assert len(json.loads((tmp_path / "j").read_text())["rows"]) == 6  # files: every row


@pytest.mark.parametrize("argv", [["--top", "0"], ["--top", "x"]])
def test_cli_top_usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(["study", *argv])
    assert exc.value.code == 2


def test_json_and_csv_have_the_summary():
    rows = study.sweep(small_data(), ["float8_e4m3fn"], ["tensor", "block:32"])
    summary = study.summarize(rows)
    doc = json.loads(report.to_json(rows, source="demo"))
    assert len(doc["rows"]) == 6 and len(doc["summary"]) == 2
    assert doc["summary"][0]["sqnr_db"] == summary[0].metrics.sqnr_db
    assert doc["summary"][1]["worst_tensor"] == summary[1].worst_tensor
    assert doc["summary"][0]["tensors"] == 3 and doc["summary"][0]["count"] == 3 * 8 * 64
    lines = list(csv.DictReader(io.StringIO(report.to_csv(rows))))
    assert [d["kind"] for d in lines] == ["tensor"] * 6 + ["summary"] * 2
    assert lines[0]["shape"] == "8x64" and lines[0]["worst_tensor"] == ""
    assert lines[-1]["shape"] == "" and lines[-1]["scaling"] == "block:32"
    assert float(lines[-1]["sqnr_db"]) == summary[1].metrics.sqnr_db
    assert lines[-1]["worst_tensor"] == summary[1].worst_tensor


def test_records_and_dataframe():
    rows = study.sweep(small_data(), ["float8_e4m3fn"], ["tensor"])
    recs = study.records(rows)
    assert [r["tensor"] for r in recs] == ["normal", "laplace", "student_t3"]
    assert recs[0] == rows[0].as_dict()
    low = min(rows, key=lambda r: r.metrics.sqnr_db).tensor
    assert study.records(study.summarize(rows))[0]["worst_tensor"] == low
    with pytest.raises(TypeError, match="got int"):
        study.records([1])
    pd = pytest.importorskip("pandas")
    df = study.to_dataframe(rows)
    assert isinstance(df, pd.DataFrame) and len(df) == 3
    assert df["sqnr_db"].tolist() == [r.metrics.sqnr_db for r in rows]
    assert df["shape"].iloc[0] == (8, 64) and df["notes"].iloc[0] == ""
    assert study.to_dataframe(study.summarize(rows))["tensors"].tolist() == [3]


def test_dataframe_without_pandas(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    rows = fake_rows(["w"], ["float8_e4m3fn"], ["tensor"])
    with pytest.raises(ImportError, match=r"to_dataframe needs pandas.*pip install pandas"):
        study.to_dataframe(rows)


def test_import_fp8kit_loads_no_optional_extra():
    import subprocess

    code = (
        "import sys, fp8kit, fp8kit.study, fp8kit.study.report, fp8kit.study.progress;"
        "print(sorted(m for m in ('pandas', 'tqdm', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "[]"


# -- the figure ------------------------------------------------------------------------------


def drawn_texts(fig):
    """(text, window extent) of every text matplotlib actually draws (tick labels outside
    the view and empty texts are not drawn)."""
    import matplotlib.text

    drawn = []
    original = matplotlib.text.Text.draw

    def draw(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)

    matplotlib.text.Text.draw = draw
    try:
        fig.canvas.draw()
    finally:
        matplotlib.text.Text.draw = original
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in drawn]


def overlapping(fig, tol=0.5):
    texts = drawn_texts(fig)
    bad = []
    for (a, ba), (b, bb) in itertools.combinations(texts, 2):
        w = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
        h = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
        if w > tol and h > tol:
            bad.append((a, b))
    box = fig.bbox
    outside = [t for t, b in texts if b.x0 < box.x0 - 1 or b.x1 > box.x1 + 1
               or b.y0 < box.y0 - 1 or b.y1 > box.y1 + 1]  # fmt: skip
    return texts, bad, outside


def test_overlap_check_can_fail():
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.text(0.5, 0.5, "31.6")
    ax.text(0.51, 0.5, "31.6")
    _, bad, _ = overlapping(fig)
    assert bad == [("31.6", "31.6")]


def bar_axes(fig):
    return next(ax for ax in fig.axes if ax.get_title() == "SQNR per format and scaling")


def test_figure_6_formats_5_scalings_no_overlap_inf_and_zero():
    pytest.importorskip("matplotlib")
    from fp8kit.study.plot import study_figure

    rows = fake_rows(["normal", "laplace", "student_t3"], SIX, FIVE, inf_format="bfloat16")
    fig = study_figure(rows, small_data(), title="six formats, five scalings")
    texts, bad, outside = overlapping(fig)
    assert bad == [] and outside == []
    words = [t for t, _ in texts]
    assert words.count("inf") >= 5 + 1  # five bfloat16 bars and the y tick at the inf level
    for s in FIVE:
        assert s in words  # legend
    ax = bar_axes(fig)
    assert ax.get_ylim()[0] == 0
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == 30 and min(heights) > 0
    inf_level = max(heights)
    assert sum(h == inf_level for h in heights) == 5  # bfloat16's bars reach the inf level
    ticks = dict(zip(ax.get_yticks(), [t.get_text() for t in ax.get_yticklabels()],
                     strict=True))  # fmt: skip
    assert ticks[inf_level] == "inf" and ticks[0] == "0"
    assert fig.dpi >= 200


def test_figure_of_a_model_with_layers():
    pytest.importorskip("matplotlib")
    from fp8kit.study.plot import study_figure

    names = ["model.embed_tokens.weight"] + [
        f"model.layers.{i}.{p}" for i in range(40) for p in ("q_proj.weight", "mlp.up.weight")
    ] + ["lm_head.weight"]  # fmt: skip
    rows = fake_rows(names, SIX[:4], FIVE[1:4])
    fig = study_figure(rows, small_data())
    texts, bad, outside = overlapping(fig)
    assert bad == [] and outside == []
    heat = next(ax for ax in fig.axes if ax.get_title().startswith("SQNR per layer"))
    image = heat.get_images()[0].get_array()
    assert image.shape == (4 * 3, 40 + 1)  # (format, scaling) x (40 layers + "other")
    labels = [t.get_text() for t in heat.get_xticklabels()]
    assert labels[0] == "0" and labels[-1] == "other"
    r = next(r for r in rows if r.tensor == "model.layers.7.q_proj.weight")
    pair = [x for x in rows if layer_index(x.tensor) == 7 and (x.format, x.scaling) ==
            (r.format, r.scaling)]  # fmt: skip
    k = SIX.index(r.format) * 3 + FIVE[1:4].index(r.scaling)
    want = ErrorMetrics.pooled([x.metrics for x in pair]).sqnr_db
    row = [x for x in rows if (x.format, x.scaling) == (r.format, r.scaling)]
    pooled = ErrorMetrics.pooled([x.metrics for x in row]).sqnr_db
    assert image[k, 7] == pytest.approx(want - pooled)  # colour: against the row's SQNR
    ylabels = [t.get_text() for t in heat.get_yticklabels()]
    assert ylabels[k] == f"{r.format} · {r.scaling}: {pooled:.1f} dB"


@pytest.mark.parametrize("suffix, magic", [(".pdf", b"%PDF"), (".svg", b"<?xml"),
                                           (".png", b"\x89PNG")])  # fmt: skip
def test_plot_writes_png_pdf_svg(tmp_path, suffix, magic):
    pytest.importorskip("matplotlib")
    from fp8kit.study.plot import plot_study

    data = small_data()
    rows = fake_rows(list(data), ["float8_e4m3fn", "float8_e5m2"], ["tensor", "channel"])
    path = tmp_path / f"study{suffix}"
    plot_study(rows, data, path, title="t")
    head = path.read_bytes()
    assert head.startswith(magic)
    if suffix == ".png":  # IHDR width: 12 inches at 200 dpi
        assert int.from_bytes(head[16:20], "big") == 2400


def test_plot_path_extension(capsys):
    assert check_plot_path("a/b.SVG") == "svg"
    with pytest.raises(ValueError, match=r"extension '\.jpg'; supported: \.png, \.pdf, \.svg"):
        check_plot_path("x.jpg")
    code, out, err = cli(capsys, "study", "--plot", "x.jpg")
    assert code == 1 and out == ""  # before the sweep
    assert err.startswith("fp8kit study: error: plot path 'x.jpg' has extension '.jpg'")


def test_layer_index():
    assert layer_index("model.layers.10.mlp.down_proj.weight") == 10
    assert layer_index("transformer.h.3.attn.c_attn.weight") == 3
    assert layer_index("encoder/block_2/w") == 2
    assert layer_index("encoder/block/2/w") == 2
    assert layer_index("ckpt/model-00001-of-00002.safetensors:lm_head.weight") is None
    assert layer_index("w8") is None


# -- progress --------------------------------------------------------------------------------


class FakeTty(io.StringIO):
    def isatty(self):
        return True


def lines_of(text):
    return [s for s in re.split(r"[\r\n]", text) if s.strip()]


@pytest.mark.parametrize("use_tqdm", [True, False], ids=["tqdm", "plain"])
def test_progress_fits_the_terminal_and_weighs_elements(monkeypatch, use_tqdm):
    if use_tqdm:
        pytest.importorskip("tqdm")
    monkeypatch.setenv("COLUMNS", "64")
    name = "model.layers.0.mlp.up_proj.weight_with_a_name_longer_than_the_terminal_is_wide"
    data = {name: np.zeros((64, 1000), np.float32), "norm": np.ones(64, np.float32)}
    stream = FakeTty()
    bar = StudyProgress(data, 2, stream=stream, delay=0, use_tqdm=use_tqdm)
    fractions = []
    for k, n in enumerate([name, name, "norm", "norm"]):
        bar(k + 1, 4, f"{n} float8_e4m3fn tensor")
        fractions.append(bar.done / bar.total)
    bar.close()
    assert bar.total == 2 * (64_000 + 64)
    assert fractions == pytest.approx([64_000 / 128_128, 128_000 / 128_128,
                                       (128_000 + 64) / 128_128, 1.0])  # fmt: skip
    lines = lines_of(stream.getvalue())
    assert lines and all(len(s) < 64 for s in lines), lines
    assert re.search(r"100%.*\[\d\d:\d\d<\d\d:\d\d\]", lines[-1])  # elapsed < time left
    assert stream.getvalue().endswith("\n")


def test_progress_quiet_without_a_terminal_and_plain_without_tqdm(monkeypatch):
    data = {"w": np.zeros(1000, np.float32)}
    stream = io.StringIO()  # not a terminal
    bar = StudyProgress(data, 1, stream=stream, delay=0)
    bar(1, 1, "w f s")
    bar.close()
    assert stream.getvalue() == "" and bar.done == 1000
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setenv("COLUMNS", "50")
    stream = FakeTty()
    bar = StudyProgress(data, 1, stream=stream, delay=0)
    bar(1, 1, "w f s")
    bar.close()
    lines = lines_of(stream.getvalue())
    assert lines[-1].startswith("study: 100%|") and "1k/1k el [00:00<00:00]" in lines[-1]
    assert all(len(s) < 50 for s in lines)


def test_progress_waits_for_its_delay():
    stream = FakeTty()
    bar = StudyProgress({"w": np.zeros(10)}, 1, stream=stream, delay=60, use_tqdm=False)
    bar(1, 1, "w f s")
    bar.close()
    assert stream.getvalue() == ""  # a study shorter than the delay prints no bar


def test_readme_puts_the_users_two_commands_first():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", readme, re.S)
    lines = first[1].strip().splitlines()
    assert lines[0] == "python -m pip install ."  # (not -e: see the README)
    assert re.fullmatch(r"fp8kit study \S+\.safetensors", lines[1])
    assert first.start() < readme.index("<!-- ci:commands -->")


def test_summarize_and_worst_refuse_other_items():
    with pytest.raises(TypeError, match="summarize: rows must be SweepRow items; got dict"):
        study.summarize([{}])
    with pytest.raises(TypeError, match="worst: rows must be SweepRow items; got str"):
        report.worst(["x"], 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "names, formats, scalings",
    [
        pytest.param(["a", "b"], "all", FIVE, id="every-format-x5"),
        pytest.param(
            [f"tensor_{i}_{'x' * (i % 30)}" for i in range(200)],
            SIX[:2],
            FIVE[1:2],
            id="200-unnumbered-tensors",
        ),  # fmt: skip
        pytest.param(
            [f"h.{i}.w" for i in range(100)] + ["wte"], SIX[:2], FIVE[:4], id="100-layers"
        ),  # fmt: skip
        pytest.param(["a"], SIX[:2], [f"block:{2**k}" for k in range(1, 13)], id="12-scalings"),
    ],
)
def test_figure_no_overlap_at_scale(names, formats, scalings):
    pytest.importorskip("matplotlib")
    import fp8kit
    from fp8kit.study.plot import study_figure

    formats = fp8kit.registered_formats() if formats == "all" else formats
    fig = study_figure(fake_rows(names, formats, scalings), small_data(), title="at scale")
    _, bad, outside = overlapping(fig)
    assert bad == [] and outside == []


def test_many_formats_lay_the_bars_down():
    """More formats than the bar panel holds side by side (P3109's 120 with the others):
    the bars lie down, one labelled row per format, the first on top as in the rug, and
    nothing overlaps (a few formats keep upright bars: the tests above)."""
    pytest.importorskip("matplotlib")
    import fp8kit
    from fp8kit.study.plot import study_figure

    formats = dict(list(fp8kit.registered_formats().items())[:40])
    fig = study_figure(fake_rows(["a"], formats, FIVE[1:3]), small_data())
    (ax,) = [
        a for sub in fig.subfigs for a in sub.axes if a.get_title() == "SQNR per format and scaling"
    ]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(formats)
    assert ax.get_ylim()[0] > ax.get_ylim()[1]
    bars = [p for p in ax.patches if type(p).__name__ == "Rectangle"]
    assert len(bars) == 40 * 2  # lying: every bar is a row's thickness high, widths vary
    assert {round(b.get_height(), 6) for b in bars} == {round(0.4 * 0.92, 6)}
    _, bad, outside = overlapping(fig)
    assert bad == [] and outside == []
