"""The documentation site builds with warnings as errors (what CI runs, via this test).

``python -m sphinx -W --keep-going -b html docs <dir>`` in a fresh interpreter: every page,
every generated table, the API reference with numpydoc's section checks, the figure.  The
build reaches no network (no intersphinx).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")
pytest.importorskip("numpydoc")
pytest.importorskip("pydata_sphinx_theme")
pytest.importorskip("matplotlib")  # the worked study's figure is drawn at build time


def test_docs_build_without_warnings(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["MPLBACKEND"] = "Agg"
    out = tmp_path / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"sphinx failed:\n{proc.stdout}\n{proc.stderr}"
    pages = {p.stem for p in out.glob("*.html")}
    expected = {p.stem for p in (ROOT / "docs").glob("*.md")}
    assert expected <= pages, f"pages not built: {sorted(expected - pages)}"
    api = (out / "api.html").read_text()
    for name in ("fp8kit.encode", "fp8kit.promotion.result_type", "fp8kit.study.sweep"):
        assert f'id="{name}"' in api, f"{name} is not in the API reference"
    assert (out / "_images" / "study.png").exists()
