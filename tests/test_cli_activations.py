"""`fp8kit study --activations`: GEMM-output rows from .npz, .safetensors, .npy and
synthetic inputs, in the table, JSON, CSV and figure; the errors."""

import csv
import json

import numpy as np
import pytest

from fp8kit.cli import build_parser, main
from fp8kit.study.gemm import ACCUMULATORS

W1 = "model.layers.0.mlp.up_proj.weight"
W2 = "model.layers.1.mlp.down_proj.weight"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def checkpoint(tmp_path):
    rng = np.random.default_rng(0)
    weights = {
        W1: (rng.standard_normal((48, 64)) * 0.02).astype(np.float32),
        W2: (rng.standard_normal((16, 48)) * 0.02).astype(np.float32),
        "model.norm.weight": np.ones(16, np.float32),  # 1-D: not a GEMM
    }
    acts = {
        W1: rng.standard_normal((5, 64)).astype(np.float32),
        W2: np.abs(rng.standard_normal((2, 3, 48))).astype(np.float32),  # (..., K)
    }
    np.savez(tmp_path / "model.npz", **weights)
    np.savez(tmp_path / "acts.npz", **acts)
    return tmp_path, weights, acts


def gemm_lines(out):
    """The GEMM table's data lines (after its heading and rule)."""
    part = out.split("GEMM outputs y = x @ w.T")[1].split("\n\nGEMM summary")[0]
    return part.splitlines()[4:]


COMMON = ("--formats", "float8_e4m3fn", "--scaling", "tensor", "block:32")


def test_npz_activations_every_output(checkpoint, capsys):
    tmp, _, _ = checkpoint
    j, c = tmp / "r.json", tmp / "r.csv"
    code, out, err = run(capsys, "study", tmp / "model.npz", *COMMON, "--activations",
                         tmp / "acts.npz", "--json", j, "--csv", c)  # fmt: skip
    assert code == 0
    # block:32 runs on exact only (the defaults' other two cannot apply MX scales): noted
    assert err.count("GEMM skipped: float8_e4m3fn block:32: accumulator 'hopper-") == 2
    rows = [line.split() for line in gemm_lines(out)]
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [
        (W1, "5", "tensor", "hopper-fast"),
        (W1, "5", "tensor", "hopper-promote128"),
        (W1, "5", "tensor", "exact"),
        (W1, "5", "block:32", "exact"),
        (W2, "6", "tensor", "hopper-fast"),
        (W2, "6", "tensor", "hopper-promote128"),
        (W2, "6", "tensor", "exact"),
        (W2, "6", "block:32", "exact"),
    ]
    assert "GEMM summary: all 2 layers pooled" in out
    doc = json.loads(j.read_text())
    assert doc["activations"] == str(tmp / "acts.npz")
    assert doc["accumulators"] == ["hopper-fast", "hopper-promote128", "exact"]
    g = doc["gemm"]
    assert len(g["rows"]) == 8 and len(g["summary"]) == 4 and len(g["skipped"]) == 2
    first = g["rows"][0]
    assert first["tensor"] == W1 and first["instruction"].startswith("Hopper wgmma")
    assert float(first["acc_sqnr_db"]) > float(first["sqnr_db"])
    assert len(doc["rows"]) == 3 * 2  # the tensor rows: every tensor, the norm's too
    with open(c) as fh:
        kinds = [r["kind"] for r in csv.DictReader(fh)]
    assert kinds.count("gemm") == 8 and kinds.count("gemm-summary") == 4


def test_safetensors_activations(checkpoint, capsys):
    st = pytest.importorskip("safetensors.numpy")
    tmp, _, acts = checkpoint
    st.save_file({k: np.ascontiguousarray(v) for k, v in acts.items()},
                 str(tmp / "acts.safetensors"))  # fmt: skip
    code, out, err = run(capsys, "study", tmp / "model.npz", "--formats", "float8_e4m3fn",
                         "--scaling", "channel", "--activations", tmp / "acts.safetensors",
                         "--accumulators", "ada", "exact")  # fmt: skip
    assert code == 0 and "GEMM skipped" not in err
    rows = [line.split() for line in gemm_lines(out)]
    assert [(r[0], r[4]) for r in rows] == [(W1, "ada"), (W1, "exact"), (W2, "ada"), (W2, "exact")]
    npz_code, npz_out, _ = run(capsys, "study", tmp / "model.npz", "--formats", "float8_e4m3fn",
                               "--scaling", "channel", "--activations", tmp / "acts.npz",
                               "--accumulators", "ada", "exact")  # fmt: skip
    assert gemm_lines(npz_out) == gemm_lines(out)  # the same samples, the same figures


def test_synthetic_on_the_demo_is_seeded(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    args = ("study", "--formats", "float8_e4m3fn", "--scaling", "channel", "--activations",
            "synthetic:3", "--accumulators", "hopper-fast", "exact", "--top", "1")  # fmt: skip
    code, out, err = run(capsys, *args, "--plot", tmp_path / "s.png", "--markdown")
    assert code == 0 and err == ""
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| tensor | tokens | format |" in out
    _, again, _ = run(capsys, *args, "--markdown")
    assert again == out
    _, other, _ = run(capsys, *args, "--markdown", "--seed", "1")
    assert other.split("GEMM outputs")[1] != out.split("GEMM outputs")[1]


def test_single_npy_pairs_with_the_only_weight(tmp_path, capsys):
    rng = np.random.default_rng(1)
    np.save(tmp_path / "w.npy", rng.standard_normal((8, 32)).astype(np.float32))
    np.save(tmp_path / "inputs.npy", rng.standard_normal((4, 32)).astype(np.float32))
    code, out, _ = run(capsys, "study", tmp_path / "w.npy", "--formats", "float8_e5m2",
                       "--scaling", "tensor", "--activations", tmp_path / "inputs.npy")  # fmt: skip
    assert code == 0
    assert [line.split()[0] for line in gemm_lines(out)] == ["w"] * 3


def test_without_activations_nothing_changes(checkpoint, capsys):
    tmp, _, _ = checkpoint
    code, out, err = run(capsys, "study", tmp / "model.npz", *COMMON)
    assert code == 0 and "GEMM" not in out and err == ""


@pytest.mark.parametrize(
    "extra, message",
    [
        pytest.param(("--activations", "synthetic:0"), "expected synthetic:N", id="synthetic0"),
        pytest.param(("--activations", "synthetic:x"), "expected synthetic:N", id="syntheticx"),
        pytest.param(("--activations", "synthetic:2", "--accumulators", "hopper"),
                     "--accumulators: unknown accumulator 'hopper'; valid: exact", id="name"),
        pytest.param(("--accumulators", "exact"), "--accumulators applies to the GEMMs of "
                     "--activations", id="no-activations"),
        pytest.param(("--activations", "nowhere.npz"), "nowhere.npz: no such file", id="file"),
    ],
)  # fmt: skip
def test_option_errors(checkpoint, capsys, extra, message):
    tmp, _, _ = checkpoint
    code, out, err = run(capsys, "study", tmp / "model.npz", *COMMON, *extra)
    assert code == 1 and out == ""
    assert err.startswith("fp8kit study: error: ") and message in err


def test_missing_key_names_the_weight(checkpoint, capsys):
    tmp, _, acts = checkpoint
    np.savez(tmp / "partial.npz", **{W1: acts[W1], "other": acts[W1]})
    code, out, err = run(capsys, "study", tmp / "model.npz", *COMMON, "--activations",
                         tmp / "partial.npz")  # fmt: skip
    assert code == 1 and out == ""
    assert f"no input samples for weight '{W2}': no tensor of that name" in err
    assert "--exclude" in err
    # leaving it out works
    code, out, _ = run(capsys, "study", tmp / "model.npz", *COMMON, "--activations",
                       tmp / "partial.npz", "--exclude", "*down_proj*")  # fmt: skip
    assert code == 0 and {line.split()[0] for line in gemm_lines(out)} == {W1}


def test_k_mismatch_names_the_shapes(checkpoint, capsys):
    tmp, _, acts = checkpoint
    np.savez(tmp / "bad.npz", **{W1: acts[W1][:, :60], W2: acts[W2]})
    code, _, err = run(capsys, "study", tmp / "model.npz", *COMMON, "--activations",
                       tmp / "bad.npz")  # fmt: skip
    assert code == 1
    assert f"samples '{W1}' have shape (5, 60) but weight '{W1}' has shape (48, 64)" in err


def test_no_2d_weight(tmp_path, capsys):
    np.save(tmp_path / "v.npy", np.ones(8, np.float32))
    code, _, err = run(capsys, "study", tmp_path / "v.npy", "--activations", "synthetic:2")
    assert code == 1 and "no 2-D tensor among the inputs" in err


def test_help_lists_every_accumulator():
    parser = build_parser()
    study = parser._subparsers._group_actions[0].choices["study"]
    text = study.format_help()
    for name in ACCUMULATORS:
        assert name in text, name
