"""Issue 43's study ergonomics beyond the recipes: the per-role and per-layer summaries
(``summarize(by=)``, ``--group-by``), the new scaling spellings and crest columns in the
CLI, and the figure's fixes (the histogram's count axis and sample size, a fixed colour
range)."""

import json

import numpy as np
import pytest

from fp8kit import study
from fp8kit.cli import main
from fp8kit.study import report


def checkpoint():
    rng = np.random.default_rng(0)
    t = {"model.embed_tokens.weight": rng.standard_normal((32, 64)).astype(np.float32)}
    for i in range(4):
        for p in ("self_attn.q_proj", "mlp.down_proj"):
            t[f"model.layers.{i}.{p}.weight"] = (rng.standard_normal((32, 64)) * (i + 1)
                                                  ).astype(np.float32)  # fmt: skip
    return t


def test_summarize_by_role_and_layer_pool_the_right_tensors():
    t = checkpoint()
    rows = study.sweep(t, ["float8_e4m3fn"], ["tensor", "block:32"])
    by_role = study.summarize(rows, by="role")
    assert [(s.scaling, s.group, s.tensors) for s in by_role] == [
        ("tensor", "model.embed_tokens.weight", 1), ("tensor", "self_attn.q_proj.weight", 4),
        ("tensor", "mlp.down_proj.weight", 4), ("block:32", "model.embed_tokens.weight", 1),
        ("block:32", "self_attn.q_proj.weight", 4), ("block:32", "mlp.down_proj.weight", 4),
    ]  # fmt: skip
    q = [r for r in rows if r.scaling == "tensor" and "q_proj" in r.tensor]
    assert by_role[1].metrics == study.ErrorMetrics.pooled([r.metrics for r in q])
    by_layer = study.summarize(rows, by="layer")
    assert [s.group for s in by_layer[:5]] == ["other", "0", "1", "2", "3"]
    assert by_role[1].as_dict()["group"] == "self_attn.q_proj.weight"
    assert "group" not in study.summarize(rows)[0].as_dict()
    text = report.format_summary(by_role)
    assert text.splitlines()[0].split()[:3] == ["format", "scaling", "group"]
    with pytest.raises(ValueError, match="unknown by 'roles'; valid: role, layer or None"):
        study.summarize(rows, by="roles")


def test_cli_group_by_new_scalings_and_crest(tmp_path, capsys):
    path = tmp_path / "ckpt.npz"
    np.savez(path, **checkpoint())
    code = main(["study", str(path), "--formats", "float8_e4m3fn", "float4_e2m1fn",
                 "bfloat16", "--scaling", "block:32:rceil", "tile:1x32:pow2", "nvfp4:16x16",
                 "--group-by", "role", "--crest", "--json", str(tmp_path / "r.json")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    head = out.splitlines()[0].split()
    assert "crest" in head and "grp" in head  # (the "grp crest" column)
    assert "By role (3 roles; the tensors of each pooled):" in out
    assert "unscaled (16-bit baseline)" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["summary_by"]["by"] == "role" and doc["crest"] is True
    assert {r["group"] for r in doc["summary_by"]["rows"]} == {
        "model.embed_tokens.weight",
        "self_attn.q_proj.weight",
        "mlp.down_proj.weight",
    }
    assert {r["scaling"] for r in doc["rows"]} == {"block:32:rceil", "tile:1x32:pow2",
                                                  "nvfp4:16x16"}  # fmt: skip
    assert all(isinstance(r["crest"], float) for r in doc["rows"])


def test_cli_rejects_a_bad_scaling_with_the_syntax(capsys):
    assert main(["study", "--scaling", "block:32:round"]) == 1
    err = capsys.readouterr().err
    assert "unknown scaling 'block:32:round'" in err and "tile[:N|:RxC][:pow2]" in err


def test_figure_axes_say_count_sample_size_and_keep_one_colour_range():
    pytest.importorskip("matplotlib")
    from fp8kit.study.plot import HEAT_DB, study_figure

    tensors = {"a": np.random.default_rng(1).standard_normal(600_000).astype(np.float32),
               "b": np.random.default_rng(2).standard_normal(1000).astype(np.float32)}  # fmt: skip
    rows = study.sweep(tensors, ["float8_e4m3fn", "float4_e2m1fn"], ["tensor", "block:32"])
    fig = study_figure(rows, tensors)
    hist = next(ax for ax in fig.get_axes() if ax.get_title().startswith("The data's"))
    assert hist.get_ylabel() == "count (log scale)"
    label = hist.get_legend().get_texts()[0].get_text()
    assert label.startswith("data: a sample of ") and "of 601,000 values" in label
    images = [im for ax in fig.get_axes() for im in ax.get_images()]
    assert images and all(im.get_clim() == (-HEAT_DB, HEAT_DB) for im in images)
