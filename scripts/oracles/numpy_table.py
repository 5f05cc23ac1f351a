"""The NUMPY oracle tables.

``python scripts/oracles/numpy_table.py`` writes, from the installed numpy (2.x, NEP 50):

- tests/data/promotion/numpy.json: ``np.result_type`` (add) and ``np.true_divide`` (divide)
  on every ordered pair of numpy's own numeric dtypes, as arrays of shape (2,), 0-d arrays and
  Python scalars;
- tests/data/promotion/numpy_ml_dtypes.json: ``np.result_type`` and the dtype of ``x + y``
  for arrays of every pair of types, ml_dtypes ones included.  numpy's answers there come
  from the casts and loops ml_dtypes registers: some do not hold both operands, and ``x + y``
  depends on operand order.  fp8kit does not follow them (docs/promotion.md); the table is
  kept to document that.
- tests/data/promotion/numpy_nary.json: ``np.sum``, ``np.prod``, ``np.cumsum`` and ``np.mean``
  of an array and a 0-d array of each of numpy's own types, and ``np.result_type(*operands)``
  on random mixes of 3 to 6 arrays, 0-d arrays and Python scalars (numpy's n-ary promotion:
  the operand of the highest category promotes with each other one, and those results join).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

NUMPY_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def build():
    import ml_dtypes
    import numpy as np

    def dtype(name):
        return np.dtype(getattr(ml_dtypes, name, None) or name)

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        return np.zeros((2,) if kind == "tensor" else (), dtype(name))

    def result_type(a, b):
        try:
            return str(np.result_type(make(a), make(b)))
        except TypeError:
            return "error"

    def add(a, b):
        try:
            with np.errstate(all="ignore"):
                return str((make(a) + make(b)).dtype)
        except TypeError:
            return "error"

    def true_divide(a, b):
        try:
            with np.errstate(all="ignore"):
                return str(np.true_divide(make(a), make(b)).dtype)
        except TypeError:
            return "error"

    ops = C.operands(NUMPY_DTYPES)
    version = f"numpy {np.__version__}"
    own = {
        "preset": "NUMPY",
        "generator": "scripts/oracles/numpy_table.py",
        "library": version,
        "operands": ops,
        "ops": {"add": C.grid(ops, result_type), "divide": C.grid(ops, true_divide)},
    }
    mixed_ops = list(C.ALL_DTYPES)
    ml = {
        "preset": "NUMPY (numpy's own answers for ml_dtypes types; not followed)",
        "generator": "scripts/oracles/numpy_table.py",
        "library": f"{version}, ml_dtypes {ml_dtypes.__version__}",
        "operands": mixed_ops,
        "ops": {
            "result_type": C.grid(mixed_ops, result_type),
            "operator": C.grid(mixed_ops, add),
        },
    }
    return {"numpy": own, "numpy_ml_dtypes": ml}


def build_nary():
    import numpy as np

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        return np.zeros((2,) if kind == "tensor" else (), np.dtype(name))

    def guarded(fn):
        try:
            with np.errstate(all="ignore"):
                return str(fn())
        except TypeError:
            return "error"

    reducers = {"sum": np.sum, "prod": np.prod, "cumsum": np.cumsum, "mean": np.mean}
    red_ops = C.operands(NUMPY_DTYPES, scalars=False)
    mixes = C.random_mixes(NUMPY_DTYPES, count=400, seed=4411)
    table = {
        "preset": "NUMPY",
        "generator": "scripts/oracles/numpy_table.py",
        "library": f"numpy {np.__version__}",
        "reductions": {
            "operands": red_ops,
            "ops": C.reduction_cells(
                red_ops, lambda r, a: guarded(lambda: reducers[r](make(a)).dtype)
            ),
        },
        "mixes": {
            "result_type": [
                m + [guarded(lambda: np.result_type(*map(make, m)))]  # noqa: B023
                for m in mixes
            ]
        },
    }
    return {"numpy_nary": table}


if __name__ == "__main__":
    C.main(lambda: {**build(), **build_nary()}, ["numpy", "numpy_ml_dtypes", "numpy_nary"])
