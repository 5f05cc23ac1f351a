"""The `fp8kit study` command end to end: table, JSON, CSV and PNG written; exit codes and
one-line errors."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8kit import study
from fp8kit.cli import main

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def table_rows(out):
    """The lines of the first table (the summary follows after a blank line)."""
    return out.split("\n\n")[0].splitlines()[2:]


def test_demo_default(capsys):
    code, out, err = run(capsys, "study")
    assert code == 0 and err == ""
    rows = table_rows(out)
    assert len(rows) == 3 * 2 * 3  # 3 demo tensors x 2 formats x 3 scalings
    assert out.splitlines()[0].split()[:3] == ["tensor", "format", "scaling"]
    assert {r.split()[0] for r in rows} == {"normal", "laplace", "student_t3"}
    assert {r.split()[2] for r in rows} == {"tensor", "channel", "block:32"}


def test_files_and_every_output(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    w = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    np.save(tmp_path / "weights.npy", w)
    j, c, p = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.png"
    code, out, err = run(
        capsys,
        "study",
        str(tmp_path / "weights.npy"),
        "--formats",
        "float8_e4m3fn",
        "float8_e5m2",
        "--scaling",
        "tensor",
        "channel",
        "block:32",
        "--json",
        str(j),
        "--csv",
        str(c),
        "--plot",
        str(p),
    )
    assert code == 0, err
    assert len(table_rows(out)) == 6 and all(r.startswith("weights ") for r in table_rows(out))
    doc = json.loads(j.read_text())
    assert doc["formats"] == ["float8_e4m3fn", "float8_e5m2"]
    assert doc["scalings"] == ["tensor", "channel", "block:32"]
    assert len(doc["rows"]) == 6
    want = study.sweep(w, ["float8_e4m3fn"], ["tensor"])[0].metrics
    assert doc["rows"][0]["sqnr_db"] == want.sqnr_db and doc["rows"][0]["tensor"] == "weights"
    got = list(csv.DictReader(c.read_text().splitlines()))
    assert [g["kind"] for g in got] == ["tensor"] * 6 + ["summary"] * 6
    assert float(got[0]["rmse"]) == want.rmse
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_several_files_keep_their_names(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.ones((4, 4), np.float32))
    np.savez(tmp_path / "b.npz", x=np.ones(8), ids=np.arange(3))
    code, out, err = run(
        capsys,
        "study",
        str(tmp_path / "a.npy"),
        str(tmp_path / "b.npz"),
        "--formats",
        "float8_e5m2",
        "--scaling",
        "tensor",
    )
    assert code == 0
    # names as in the files (the file is a column of --json/--csv; FILE: only on a clash)
    assert [r.split()[0] for r in table_rows(out)] == ["a", "x"]
    assert err == "fp8kit study: skipped 1 tensor: 1 int64 (ids)\n"


def test_safetensors_file(tmp_path, capsys):
    from test_study_sweep import write_safetensors

    rng = np.random.default_rng(1)
    t = {
        "layer.weight": rng.standard_normal((32, 64)).astype(ml_dtypes.bfloat16),
        "layer.bias": rng.standard_normal(32).astype(np.float32),
        "step": np.array([7], np.int32),
    }
    write_safetensors(tmp_path / "m.safetensors", t)
    code, out, err = run(capsys, "study", str(tmp_path / "m.safetensors"), "--formats",
                         "float8_e4m3fn", "--scaling", "channel", "block:32")  # fmt: skip
    assert code == 0
    rows = table_rows(out)
    assert [r.split()[:3] for r in rows] == [
        ["layer.weight", "float8_e4m3fn", "channel"],
        ["layer.weight", "float8_e4m3fn", "block:32"],
        ["layer.bias", "float8_e4m3fn", "channel"],
        ["layer.bias", "float8_e4m3fn", "block:32"],
    ]
    assert "1-D tensor: one channel" in rows[2]
    assert "skipped" in err and "step" in err


def test_markdown_and_options(capsys):
    code, out, _ = run(
        capsys,
        "study",
        "--formats",
        "f8e4m3",
        "--scaling",
        "delayed:4",
        "none",
        "--markdown",
        "--margin",
        "1",
        "--pow2",
        "--threads",
        "1",
        "--seed",
        "3",
    )
    assert code == 0
    lines = out.split("\n\n")[0].splitlines()
    assert lines[0].startswith("| tensor |") and len(lines) == 2 + 3 * 2
    assert "| float8_e4m3fn | delayed:4:max |" in out


def test_progress_bar_forced(capsys):
    code, _, err = run(
        capsys, "study", "--formats", "float8_e4m3fn", "--scaling", "tensor", "--progress"
    )
    assert code == 0
    last = err.rstrip("\n").split("\r")[-1]
    assert last.startswith("study: 100%|") and "786k/786k el [" in last and err.endswith("\n")


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["nope.npy"], "nope.npy: no such file", id="missing-file"),
        pytest.param(
            ["--formats", "e4m3"],
            "unknown format 'e4m3'; valid: float8_e4m3fn",
            id="unknown-format",
        ),
        pytest.param(["--scaling", "rows"], "unknown scaling 'rows'", id="unknown-scaling"),
        pytest.param(["{ints}"], "no floating-point tensors", id="no-floats"),
        pytest.param(["{txt}"], "unsupported file type '.txt'", id="bad-suffix"),
        pytest.param(
            ["--channel-axis", "5"], "channel_axis (tensor 'normal')=5 is out of range", id="axis"
        ),
        pytest.param(
            ["--json", "{dir}/missing/x.json", "--formats", "float8_e5m2", "--scaling", "none"],
            "missing does not exist",
            id="unwritable-output",
        ),
    ],
)
def test_errors_exit_1_with_one_line(tmp_path, capsys, argv, message):
    np.savez(tmp_path / "ints.npz", a=np.arange(3))
    (tmp_path / "t.txt").write_text("1 2 3")
    argv = [
        a.format(ints=tmp_path / "ints.npz", txt=tmp_path / "t.txt", dir=tmp_path) for a in argv
    ]
    code, _, err = run(capsys, "study", *argv)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fp8kit study: error: ")
    assert message in lines[0]


def test_plot_without_matplotlib(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    code, out, err = run(capsys, "study", "--plot", "x.png")
    assert code == 1 and out == ""  # checked before the sweep
    # (an install command that works anywhere: fp8kit is on no package index)
    assert err.strip() == "fp8kit study: error: plotting needs matplotlib: pip install matplotlib"


@pytest.mark.parametrize(
    "argv",
    [["study", "--bogus"], ["study", "--threads", "0"], ["study", "--margin", "x"], ["nope"]],
)
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_no_command_prints_help(capsys):
    code, _, err = run(capsys)
    assert code == 2 and "study" in err


def python_m(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "fp8kit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def test_python_m_help_documents_everything():
    res = python_m("study", "--help")
    assert res.returncode == 0
    for word in (
        "--formats",
        "--scaling",
        "--json",
        "--csv",
        "--plot",
        "--progress",
        "block[:N]",
        "delayed[:LEN[:ALGO]]",
        "SQNR dB",
        "sat %",
        "exit status",
        ".safetensors",
    ):
        assert word in res.stdout, word


def test_python_m_bad_path_has_no_traceback(tmp_path):
    res = python_m("study", str(tmp_path / "missing.safetensors"))
    assert res.returncode == 1
    assert (
        res.stderr.strip()
        == f"fp8kit study: error: {tmp_path / 'missing.safetensors'}: no such file"
    )
    assert "Traceback" not in res.stderr


def test_console_script_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    assert 'fp8kit = "fp8kit.cli:main"' in section.splitlines()
