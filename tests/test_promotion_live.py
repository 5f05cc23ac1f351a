"""The stored oracle tables are still what the libraries say (needs the libraries: CI has them).

Each test runs one generator of scripts/oracles/ in-process against the installed library and
compares its tables with tests/data/promotion/*.json cell by cell.  If a library changes its
promotion, regenerate with ``python scripts/oracles/<lib>_table.py`` and review the diff (and
tests/test_promotion_tables.py, which checks fp8kit against the tables).
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


def test_torch_table():
    pytest.importorskip("torch")
    _compare(_generator("torch_table.py").build())


def test_numpy_tables():
    import numpy as np

    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip("the NUMPY tables are NumPy 2's (NEP 50)")
    _compare(_generator("numpy_table.py").build())


def test_jax_tables():
    pytest.importorskip("jax")
    _compare(_generator("jax_table.py").build())


def test_array_api_table():
    pytest.importorskip("array_api_strict")
    _compare(_generator("array_api_table.py").build())


def test_paddle_table():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # paddle warns about ccache at import
        pytest.importorskip("paddle")
    _compare(_generator("paddle_table.py").build())


def test_openvino_tables():
    pytest.importorskip("openvino")
    _compare(_generator("openvino_table.py").build())
