"""The ARRAY_API oracle table: ``array_api_strict.result_type`` and ``/`` on every ordered pair.

``python scripts/oracles/array_api_table.py`` writes tests/data/promotion/array_api.json.
array-api-strict implements the standard's dtypes only (no float16, bfloat16, float8 or
4-bit integers).  Two Python scalars are not asked (the standard needs an array or dtype).

``build_nary`` writes array_api_nary.json: ``sum``, ``prod``, ``cumulative_sum`` (as
``cumsum``) and ``mean`` of an array and a 0-d array of each type, and
``result_type(*operands)`` on random mixes of 3 to 6 arrays, 0-d arrays and Python scalars
(array-api-strict joins the arrays, then promotes each Python scalar against their type).
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


def build_nary():
    import array_api_strict as xp

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        return xp.ones((2,) if kind == "tensor" else (), dtype=getattr(xp, name))

    def guarded(fn):
        try:
            return str(fn()).rsplit(".", 1)[-1]
        except TypeError:
            return "error"

    reducers = {"sum": xp.sum, "prod": xp.prod, "cumsum": xp.cumulative_sum, "mean": xp.mean}
    red_ops = C.operands(DTYPES, scalars=False)
    # most mixes of every type fail (kinds do not mix): half the mixes keep to one kind
    ints = [d for d in DTYPES if "int" in d]
    inexact = [d for d in DTYPES if "float" in d or "complex" in d]
    mixes = (
        C.random_mixes(DTYPES, count=150, seed=4431)
        + C.random_mixes(ints, count=125, seed=4432)
        + C.random_mixes(inexact, count=125, seed=4433)
    )
    table = {
        "preset": "ARRAY_API",
        "generator": "scripts/oracles/array_api_table.py",
        "library": f"array-api-strict {xp.__version__} (standard {xp.__array_api_version__})",
        "reductions": {
            "operands": red_ops,
            "ops": C.reduction_cells(
                red_ops, lambda r, a: guarded(lambda: reducers[r](make(a)).dtype)
            ),
        },
        "mixes": {
            "result_type": [
                m + [guarded(lambda: xp.result_type(*map(make, m)))]  # noqa: B023
                for m in mixes
            ]
        },
    }
    return {"array_api_nary": table}


if __name__ == "__main__":
    C.main(lambda: {**build(), **build_nary()}, ["array_api", "array_api_nary"])
