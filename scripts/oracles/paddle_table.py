"""The PADDLE oracle table: ``x + y``, ``x / y`` and ``x == y`` in paddle's dynamic mode.

``python scripts/oracles/paddle_table.py`` writes tests/data/promotion/paddle.json (CPU).
Tensors have shape [2], 0-d tensors shape [], and Python scalars go through paddle's operator
overloading (the spec's "Tensor-to-Scalar" case).  Cells where paddle raised its
type-promotion error are ``"error"``; where promotion passed but the CPU has no kernel for the
resulting type (float16/bfloat16/float8 and uint16/uint32/uint64 arithmetic) they are
``"nokernel"``.  Tensors are made with paddle's dtype objects and results named by their
``DataType`` (paddle 3.3 prints ``paddle.uint16`` as ``paddle.bfloat16``).  Two Python
scalars are not asked.

``build_nary`` writes paddle_nary.json: ``paddle.sum``, ``paddle.prod``, ``paddle.cumsum`` and
``paddle.mean`` of a tensor and a 0-d tensor of each type, and chains ``a + b + c + ...`` of 3
to 6 operands (Python evaluates them left to right; the first operand is a tensor or 0-d
tensor).  Paddle promotes only in binary operators: ``concat``, ``stack`` and ``add_n`` refuse
inputs of different types, so a chain is paddle's answer for more than two operands.
"""

from __future__ import annotations

import operator
import sys
import warnings
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
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def build():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # paddle warns about ccache at import
        import paddle

    paddle.set_device("cpu")
    paddle.disable_static()

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        shape = [2] if kind == "tensor" else []
        # the dtype object: paddle reads the string "uint16" as bfloat16
        return paddle.ones(shape, dtype="float32").astype(getattr(paddle, name))

    def name_of(dtype):
        # repr is <DataType.UINT16: 4>; str(paddle.uint16) is "paddle.bfloat16" in paddle 3.3
        return repr(dtype).split(".")[1].split(":")[0].lower()

    def run(fn):
        def cell(a, b):
            try:
                return name_of(fn(make(a), make(b)).dtype)
            except Exception as e:  # paddle raises its own exception types
                text = str(e)
                if "Type promotion" in text or "InvalidType" in text:
                    return "error"
                if ("NotFound" in text and "kernel" in text) or (
                    "CallScalarFunction" in text and "not implemented" in text
                ):
                    return "nokernel"
                raise

        return cell

    ops = C.operands(DTYPES)
    table = {
        "preset": "PADDLE",
        "generator": "scripts/oracles/paddle_table.py",
        "library": f"paddlepaddle {paddle.__version__} (dynamic mode, CPU)",
        "operands": ops,
        "ops": {
            "add": C.grid(ops, run(operator.add), skip_py_pairs=True),
            "divide": C.grid(ops, run(operator.truediv), skip_py_pairs=True),
            "compare": C.grid(ops, run(operator.eq), skip_py_pairs=True),
        },
    }
    return {"paddle": table}


def _paddle():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # paddle warns about ccache at import
        import paddle

    paddle.set_device("cpu")
    paddle.disable_static()
    return paddle


def build_nary():
    paddle = _paddle()

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        shape = [2] if kind == "tensor" else []
        return paddle.ones(shape, dtype="float32").astype(getattr(paddle, name))

    def name_of(dtype):
        return repr(dtype).split(".")[1].split(":")[0].lower()

    def guarded(fn):
        try:
            return name_of(fn().dtype)
        except Exception as e:  # paddle raises its own exception types
            text = str(e)
            if "Type promotion" in text or "InvalidType" in text:
                return "error"
            if (
                ("NotFound" in text and "kernel" in text)
                or "not implemented" in text
                or ("kernel_iter == iter->second.end()" in text)
            ):
                return "nokernel"
            raise

    def chain(ops):
        def run():
            x = make(ops[0])
            for o in ops[1:]:
                x = x + make(o)
            return x

        return guarded(run)

    def cumsum(x):
        return paddle.cumsum(x, 0) if x.ndim else paddle.cumsum(x)

    reducers = {"sum": paddle.sum, "prod": paddle.prod, "cumsum": cumsum, "mean": paddle.mean}
    red_ops = C.operands(DTYPES, scalars=False)
    exotic = ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
    rare = C.RARE + exotic
    # tensors of different kinds do not mix: half the chains keep to one kind
    ints = [d for d in DTYPES if "int" in d or d == "bool"]
    inexact = [d for d in DTYPES if "float" in d or "complex" in d]
    lead = ("tensor", "0d")
    mixes = (
        C.random_mixes(DTYPES, count=200, seed=4441, lead=lead, rare=rare)
        + C.random_mixes(ints, count=100, seed=4442, lead=lead, rare=rare)
        + C.random_mixes(inexact, count=100, seed=4443, lead=lead, rare=rare)
    )
    table = {
        "preset": "PADDLE",
        "generator": "scripts/oracles/paddle_table.py",
        "library": f"paddlepaddle {paddle.__version__} (dynamic mode, CPU)",
        "reductions": {
            "operands": red_ops,
            "ops": C.reduction_cells(red_ops, lambda r, a: guarded(lambda: reducers[r](make(a)))),
        },
        "mixes": {"chain": [m + [chain(m)] for m in mixes]},
    }
    return {"paddle_nary": table}


if __name__ == "__main__":
    C.main(lambda: {**build(), **build_nary()}, ["paddle", "paddle_nary"])
