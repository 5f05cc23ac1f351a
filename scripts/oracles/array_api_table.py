"""The ARRAY_API oracle table: ``array_api_strict.result_type`` and ``/`` on every ordered pair.

``python scripts/oracles/array_api_table.py`` writes tests/data/promotion/array_api.json.
array-api-strict implements the standard's dtypes only (no float16, bfloat16, float8 or
4-bit integers).  Two Python scalars are not asked (the standard needs an array or dtype).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def build():
    import array_api_strict as xp

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        return xp.ones((2,) if kind == "tensor" else (), dtype=getattr(xp, name))

    def name_of(dt):
        return str(dt).rsplit(".", 1)[-1]

    def result_type(a, b):
        try:
            return name_of(xp.result_type(make(a), make(b)))
        except TypeError:
            return "error"

    def divide(a, b):
        try:
            return name_of((make(a) / make(b)).dtype)
        except TypeError:
            return "error"

    ops = C.operands(DTYPES)
    table = {
        "preset": "ARRAY_API",
        "generator": "scripts/oracles/array_api_table.py",
        "library": f"array-api-strict {xp.__version__} (standard {xp.__array_api_version__})",
        "operands": ops,
        "ops": {
            "add": C.grid(ops, result_type, skip_py_pairs=True),
            "divide": C.grid(ops, divide, skip_py_pairs=True),
        },
    }
    return {"array_api": table}


if __name__ == "__main__":
    C.main(build, ["array_api"])
