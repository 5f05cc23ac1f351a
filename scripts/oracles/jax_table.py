"""The JAX oracle tables: ``jnp.result_type`` and ``jnp.true_divide`` on every ordered pair.

``python scripts/oracles/jax_table.py`` writes tests/data/promotion/jax_x64.json (with
``jax_enable_x64``) and jax.json (JAX's default 32-bit mode).  Tensors and 0-d tensors are
numpy arrays (strongly typed for JAX); Python scalars are JAX's weakly typed operands.  For
two dtypes ``jnp.result_type`` is ``jnp.promote_types`` followed by JAX's canonicalization
(64-bit types become 32-bit ones when x64 is off).  Every ml_dtypes type is an operand
(jax accepts them all but complex32/bcomplex32); ``not_represented`` lists the ml_dtypes types
that jax accepts and fp8kit does not represent (none with jax 0.10.2).

``build_nary`` writes jax_x64_nary.json and jax_nary.json: ``jnp.sum``, ``jnp.prod``,
``jnp.cumsum`` and ``jnp.mean`` (``jax.eval_shape``) of an array and a 0-d array of every type,
and ``jnp.result_type(*operands)`` on random mixes of 3 to 6 arrays, 0-d arrays and weakly
typed Python scalars (JAX's lattice join of all operands).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DTYPES = list(C.ALL_DTYPES)


def build():
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        dt = np.dtype(getattr(ml_dtypes, name, None) or name)
        return np.zeros((2,) if kind == "tensor" else (), dt)

    def result_type(a, b):
        try:
            return str(jnp.result_type(make(a), make(b)))
        except jax.dtypes.TypePromotionError:
            return "error"

    def true_divide(a, b):
        if result_type(a, b) == "error":  # true_divide promotes first: the same error
            return "error"  # (and skipping eval_shape keeps the live test fast)
        try:
            return str(jax.eval_shape(jnp.true_divide, make(a), make(b)).dtype)
        except jax.dtypes.TypePromotionError:
            return "error"

    def accepted(name):
        try:
            jnp.result_type(np.zeros(2, np.dtype(getattr(ml_dtypes, name))), True)
            return True
        except TypeError:
            return False

    extra = [
        n
        for n in dir(ml_dtypes)
        if isinstance(getattr(ml_dtypes, n), type)
        and issubclass(getattr(ml_dtypes, n), np.generic)
        and n not in DTYPES
    ]
    ops = C.operands(DTYPES)
    tables = {}
    before = jax.config.jax_enable_x64
    try:
        for x64, name in [(True, "jax_x64"), (False, "jax")]:
            jax.config.update("jax_enable_x64", x64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Explicitly requested dtype int64 ..." (x32)
                tables[name] = {
                    "preset": "JAX_X64" if x64 else "JAX",
                    "generator": "scripts/oracles/jax_table.py",
                    "library": f"jax {jax.__version__} (jax_enable_x64={x64})",
                    "not_represented": sorted(n for n in extra if accepted(n)),
                    "operands": ops,
                    "ops": {
                        "add": C.grid(ops, result_type),
                        "divide": C.grid(ops, true_divide),
                    },
                }
    finally:
        jax.config.update("jax_enable_x64", before)
    return tables


#: The types of the random mixes: the usual ones and a few narrow ones (islands).
MIX_DTYPES = [
    "bool",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def build_nary():
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        dt = np.dtype(getattr(ml_dtypes, name, None) or name)
        return np.zeros((2,) if kind == "tensor" else (), dt)

    def guarded(fn):
        try:
            return str(fn())
        except (TypeError, ValueError):  # TypePromotionError is a ValueError
            return "error"

    reducers = {"sum": jnp.sum, "prod": jnp.prod, "cumsum": jnp.cumsum, "mean": jnp.mean}
    red_ops = C.operands(DTYPES, scalars=False)
    mixes = C.random_mixes(
        MIX_DTYPES, count=400, seed=4421, rare=C.RARE + ("int4", "float8_e4m3fn")
    )
    tables = {}
    before = jax.config.jax_enable_x64
    try:
        for x64, name in [(True, "jax_x64_nary"), (False, "jax_nary")]:
            jax.config.update("jax_enable_x64", x64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Explicitly requested dtype int64 ..." (x32)
                reductions = C.reduction_cells(
                    red_ops,
                    lambda r, a: guarded(lambda: jax.eval_shape(reducers[r], make(a)).dtype),
                )
                rows = [
                    m + [guarded(lambda: jnp.result_type(*map(make, m)))]  # noqa: B023
                    for m in mixes
                ]
            tables[name] = {
                "preset": "JAX_X64" if x64 else "JAX",
                "generator": "scripts/oracles/jax_table.py",
                "library": f"jax {jax.__version__} (jax_enable_x64={x64})",
                "reductions": {"operands": red_ops, "ops": reductions},
                "mixes": {"result_type": rows},
            }
    finally:
        jax.config.update("jax_enable_x64", before)
    return tables


if __name__ == "__main__":
    C.main(lambda: {**build(), **build_nary()}, ["jax_x64", "jax", "jax_x64_nary", "jax_nary"])
