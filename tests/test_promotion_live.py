"""The stored oracle tables are still what the libraries say (needs the libraries: CI has them).

Each test runs one generator of scripts/oracles/ in-process against the installed library and
compares its tables with tests/data/promotion/*.json cell by cell: the pair tables
(``build``) and the n-ary tables of reductions and random mixes (``build_nary``; oneflow's
``build_all``, which needs oneflow 0.9.0 on Python 3.10 and so runs only where it imports).
If a library changes its promotion, regenerate with ``python scripts/oracles/<lib>_table.py``
and review the diff (and tests/test_promotion_tables.py and test_promotion_nary.py, which
check fp8kit against the tables).
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "promotion"


def _generator(script: str):
    path = ROOT / "scripts" / "oracles" / script
    spec = importlib.util.spec_from_file_location(f"oracle_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compare(tables: dict) -> None:
    for name, table in tables.items():
        if "mixes" in table:
            _compare_nary(name, table)
            continue
        stored = json.loads((DATA / f"{name}.json").read_text())
        assert table["operands"] == stored["operands"], name
        assert table.get("not_represented") == stored.get("not_represented"), name
        assert table["ops"].keys() == stored["ops"].keys(), name
        changed = [
            f"{name} {op}: {a} with {b}: stored {old}, now {new}"
            for op, rows in table["ops"].items()
            for a, row, old_row in zip(table["operands"], rows, stored["ops"][op], strict=True)
            for b, new, old in zip(table["operands"], row, old_row, strict=True)
            if new != old
        ]
        assert not changed, "\n".join(changed[:50])


def _compare_nary(name: str, table: dict) -> None:
    stored = json.loads((DATA / f"{name}.json").read_text())
    red, old = table["reductions"], stored["reductions"]
    assert red["operands"] == old["operands"], name
    changed = [
        f"{name} {op}({a}): stored {was}, now {now}"
        for op, row in red["ops"].items()
        for a, now, was in zip(red["operands"], row, old["ops"][op], strict=True)
        if now != was
    ]
    assert table["mixes"].keys() == stored["mixes"].keys(), name
    for kind, rows in table["mixes"].items():
        assert [r[:-1] for r in rows] == [r[:-1] for r in stored["mixes"][kind]], (name, kind)
        changed += [
            f"{name} {kind} {r[:-1]}: stored {s[-1]}, now {r[-1]}"
            for r, s in zip(rows, stored["mixes"][kind], strict=True)
            if r[-1] != s[-1]
        ]
    assert not changed, "\n".join(changed[:50])


def _both(module) -> dict:
    return {**module.build(), **module.build_nary()}


def test_torch_table():
    pytest.importorskip("torch")
    _compare(_both(_generator("torch_table.py")))


def test_numpy_tables():
    import numpy as np

    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip("the NUMPY tables are NumPy 2's (NEP 50)")
    _compare(_both(_generator("numpy_table.py")))


def test_jax_tables():
    pytest.importorskip("jax")
    _compare(_both(_generator("jax_table.py")))


def test_array_api_table():
    pytest.importorskip("array_api_strict")
    _compare(_both(_generator("array_api_table.py")))


def test_paddle_table():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # paddle warns about ccache at import
        pytest.importorskip("paddle")
    _compare(_both(_generator("paddle_table.py")))


def test_openvino_tables():
    pytest.importorskip("openvino")
    _compare(_generator("openvino_table.py").build())


def _oneflow_python() -> str | None:
    """The interpreter OneFlow runs in: FP8KIT_ONEFLOW_PYTHON, else the virtual environment
    scripts/oracles/install_oneflow.sh makes (.oracles/oneflow), else None."""
    import os

    given = os.environ.get("FP8KIT_ONEFLOW_PYTHON")
    if given:
        return given
    venv = Path(__file__).resolve().parents[1] / ".oracles" / "oneflow" / "bin" / "python"
    return str(venv) if venv.exists() else None


def test_oneflow_tables():
    """oneflow 0.9.0 installs on Python 3.10 only: the tables are built in its own
    environment (scripts/oracles/install_oneflow.sh) and compared here; in-process where
    this interpreter has oneflow."""
    import subprocess
    import sys

    python = _oneflow_python()
    if python is None:
        pytest.importorskip("oneflow")
        _compare(_generator("oneflow_table.py").build_all())
        return
    script = Path(__file__).resolve().parents[1] / "scripts" / "oracles" / "oneflow_table.py"
    run = subprocess.run([python, str(script), "--json"], capture_output=True, text=True,
                         timeout=1800, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert sys.executable != python
    _compare(json.loads(run.stdout.strip().splitlines()[-1]))
