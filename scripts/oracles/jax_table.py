"""The JAX oracle tables: ``jnp.result_type`` and ``jnp.true_divide`` on every ordered pair.

``python scripts/oracles/jax_table.py`` writes tests/data/promotion/jax_x64.json (with
``jax_enable_x64``) and jax.json (JAX's default 32-bit mode).  Tensors and 0-d tensors are
numpy arrays (strongly typed for JAX); Python scalars are JAX's weakly typed operands.  For
two dtypes ``jnp.result_type`` is ``jnp.promote_types`` followed by JAX's canonicalization
(64-bit types become 32-bit ones when x64 is off).  Every ml_dtypes type is an operand
(jax accepts them all but complex32/bcomplex32); ``not_represented`` lists the ml_dtypes types
that jax accepts and fp8kit does not represent (none with jax 0.10.2).
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


if __name__ == "__main__":
    C.main(build, ["jax_x64", "jax"])
