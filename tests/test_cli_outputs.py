"""`fp8kit study`'s output files never lose data (issue 45): an output that is an input is
refused before any work, every output's directory is checked up front, and --json, --csv
and --plot are written all or none, each atomically (a full disk leaves the old files and
no partial or temporary file)."""

import errno
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from fp8kit.cli import main

ARGS = ["--formats", "float8_e4m3fn", "--scaling", "tensor"]


def run(capsys, *argv):
    code = main(["study", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32))
    return path


def one_error(code, out, err, *words):
    assert code == 1 and out == "", out  # refused before the study printed anything
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fp8kit study: error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])


def leftovers(directory):
    return sorted(p.name for p in Path(directory).iterdir() if ".tmp" in p.name)


# ------------------------------------------------------------------ outputs that are inputs
@pytest.mark.parametrize("option", ["--json", "--csv"])
def test_output_that_is_the_input_is_refused(weights, capsys, option):
    before = weights.read_bytes()
    code, out, err = run(capsys, weights, option, weights, *ARGS)
    one_error(code, out, err, f"{option} {weights}: is the input", "another file name")
    assert weights.read_bytes() == before


def test_output_linked_to_an_input_is_refused(weights, tmp_path, capsys):
    """samefile, not the spelling: a symlink and a hard link to the input are the input."""
    before = weights.read_bytes()
    (tmp_path / "sym.json").symlink_to(weights)
    os.link(weights, tmp_path / "hard.csv")
    for option, name in (("--json", "sym.json"), ("--csv", "hard.csv")):
        code, out, err = run(capsys, weights, option, tmp_path / name, *ARGS)
        one_error(code, out, err, "is the input")
    assert weights.read_bytes() == before


def test_output_that_is_a_file_of_an_input_directory_is_refused(tmp_path, capsys):
    """A directory's files and an index's shards are inputs too (checked once they are
    known, still before the study)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    np.save(ckpt / "a.npy", np.ones((4, 4), np.float32))
    np.save(ckpt / "b.npy", np.ones((4, 4), np.float32))
    before = (ckpt / "b.npy").read_bytes()
    code, out, err = run(capsys, ckpt, "--csv", ckpt / "b.npy", *ARGS)
    one_error(code, out, err, "is the input", "b.npy")
    assert (ckpt / "b.npy").read_bytes() == before


def test_output_that_is_the_activations_file_is_refused(tmp_path, capsys):
    np.save(tmp_path / "w.npy", np.ones((8, 16), np.float32))
    acts = tmp_path / "x.npy"
    np.save(acts, np.ones((4, 16), np.float32))
    code, out, err = run(capsys, tmp_path / "w.npy", "--activations", acts, "--json", acts, *ARGS)
    one_error(code, out, err, "is the input", "x.npy")


def test_two_outputs_naming_one_file_are_refused(weights, tmp_path, capsys):
    code, out, err = run(capsys, weights, "--json", tmp_path / "r", "--csv", tmp_path / "r", *ARGS)
    one_error(code, out, err, "also given as --json")


# ------------------------------------------------------------------ places checked up front
def test_missing_directory_is_refused_before_the_study(weights, tmp_path, capsys, monkeypatch):
    import fp8kit.study

    calls = []
    monkeypatch.setattr(fp8kit.study, "sweep", lambda *a, **k: calls.append(1))
    code, out, err = run(capsys, weights, "--csv", tmp_path / "typo" / "r.csv", *ARGS)
    one_error(code, out, err, "--csv", "typo does not exist")
    assert calls == []  # no sweep ran


def test_directory_as_output_is_refused(weights, tmp_path, capsys):
    code, out, err = run(capsys, weights, "--json", tmp_path, *ARGS)
    one_error(code, out, err, "is a directory")


def test_read_only_directory_is_refused(weights, tmp_path, capsys, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.geteuid() == 0:  # (root may write anyway: the directory answers as for others)
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, m: False if str(p) == str(ro) else access(p, m))
    try:
        code, out, err = run(capsys, weights, "--json", ro / "r.json", *ARGS)
    finally:
        ro.chmod(0o700)
    one_error(code, out, err, "is not writable")


# ------------------------------------------------------------------ atomic, all or none
def test_outputs_are_written_with_the_usual_mode_and_no_temporary_file(weights, tmp_path, capsys):
    mask = os.umask(0o022)
    try:
        code, _, err = run(capsys, weights, "--json", tmp_path / "r.json", "--csv",
                           tmp_path / "r.csv", *ARGS)  # fmt: skip
    finally:
        os.umask(mask)
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["tensor"] == "w"
    assert (tmp_path / "r.csv").read_text().startswith("kind,tensor,file,")
    for name in ("r.json", "r.csv"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644
    assert leftovers(tmp_path) == []


def test_output_through_a_symlink_writes_its_file(weights, tmp_path, capsys):
    """As a plain open does: the link stays a link, its file gets the content."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "r.json").write_text("old")
    (tmp_path / "r.json").symlink_to(tmp_path / "real" / "r.json")
    code, _, err = run(capsys, weights, "--json", tmp_path / "r.json", *ARGS)
    assert code == 0, err
    assert (tmp_path / "r.json").is_symlink()
    assert json.loads((tmp_path / "real" / "r.json").read_text())["rows"][0]["tensor"] == "w"
    assert leftovers(tmp_path) == leftovers(tmp_path / "real") == []


def _failing(real, tmp_path, only):
    """os.write or os.fsync that fails with ENOSPC on the temporary files of ``only``."""

    def fake(fd, *rest):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.startswith(str(tmp_path)) and any(f".{n}." in target for n in only):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, *rest)

    return fake


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("call", ["write", "fsync"])
@pytest.mark.parametrize("failing", [("r.json",), ("r.csv",), ("r.json", "r.csv")])
def test_full_disk_leaves_every_old_file_and_nothing_else(
    weights, tmp_path, capsys, monkeypatch, call, failing
):
    """ENOSPC while one output is written (or at its fsync): exit 1 with one line; both
    old files as they were (none truncated, the other not replaced) and no temporary file."""
    (tmp_path / "r.json").write_text("old json")
    (tmp_path / "r.csv").write_text("old csv")
    monkeypatch.setattr(os, call, _failing(getattr(os, call), tmp_path, failing))
    code, out, err = run(capsys, weights, "--json", tmp_path / "r.json", "--csv",
                         tmp_path / "r.csv", *ARGS)  # fmt: skip
    monkeypatch.undo()
    assert code == 1
    lines = err.strip().splitlines()
    first = "--json" if "r.json" in failing else "--csv"  # (the output that failed is named)
    assert lines == [f"fp8kit study: error: {first} {tmp_path / failing[0]}: No space left on "
                     "device"], err  # fmt: skip
    assert (tmp_path / "r.json").read_text() == "old json"
    assert (tmp_path / "r.csv").read_text() == "old csv"
    assert leftovers(tmp_path) == []


def test_failing_figure_writes_no_other_output(weights, tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    import fp8kit.study.plot

    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", args[2])

    monkeypatch.setattr(fp8kit.study.plot, "plot_study", broken)
    code, _, err = run(capsys, weights, "--json", tmp_path / "r.json", "--plot",
                       tmp_path / "r.png", *ARGS)  # fmt: skip
    assert code == 1 and f"--plot {tmp_path / 'r.png'}: No space left on device" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.npy"]


def test_figure_is_written_through_a_temporary_file_of_its_type(weights, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, _, err = run(capsys, weights, "--plot", tmp_path / "r.svg", *ARGS)
    assert code == 0, err
    assert (tmp_path / "r.svg").read_text().lstrip().startswith("<?xml")
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------ --scheduler
def test_scheduler_none_runs_in_process(weights, capsys, monkeypatch):
    import fp8kit.study

    seen = []
    real = fp8kit.study.sweep

    def spy(*args, **kwargs):
        seen.append(kwargs.get("scheduler"))
        return real(*args, **kwargs)

    monkeypatch.setattr(fp8kit.study, "sweep", spy)
    pytest.importorskip("dask")
    np.save(weights.parent / "v.npy", np.ones((4, 4), np.float32))
    monkeypatch.setattr("fp8kit.cli.THREADS_FROM_BYTES", 0)  # (Dask's threads by default)
    code, _, err = run(capsys, weights.parent, *ARGS)
    assert code == 0, err
    code, _, err = run(capsys, weights.parent, "--scheduler", "none", *ARGS)
    assert code == 0, err
    assert seen == ["threads", None]


def test_unknown_scheduler_is_refused_before_reading(capsys):
    code, out, err = run(capsys, "missing.npy", "--scheduler", "thread", *ARGS)
    one_error(code, out, err, "--scheduler 'thread': expected one of none, threads, processes")
