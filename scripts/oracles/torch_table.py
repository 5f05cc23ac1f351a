"""The TORCH oracle table: ``torch.result_type`` and ``torch.true_divide`` on every ordered pair.

Run from the repository root: ``python scripts/oracles/torch_table.py`` writes
tests/data/promotion/torch.json (torch 2.13).  Tensors have shape (2,), 0-d tensors shape ().
``divide`` is the dtype of ``torch.true_divide`` where a kernel exists; where torch decided a
type but has no CPU kernel the cell is ``"nokernel"``; two Python scalars
are not asked (``null``).  The operands are the types of fp8kit's list that torch has
(torch.int1/int2/uint1/uint2 are ml_dtypes' int1/int2/uint1/uint2); ``not_represented`` lists
torch's other dtypes.

``build_nary`` writes tests/data/promotion/torch_nary.json: ``torch.sum``, ``torch.prod``,
``torch.cumsum`` and ``torch.mean`` of a tensor or 0-d tensor of each type, and random mixes of
3 to 6 operands: ``elementwise_dtypes`` (``torch._prims_common.elementwise_dtypes`` with the
DEFAULT kind: tensors, 0-d tensors and Python scalars of torch's common types, the category
rule of TensorIterator) and ``cat`` (``torch.cat`` of tensors of every type: its dtype is
``at::native::result_type`` folded over the inputs in order, errors included).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402


def build():
    import torch

    # torch's types that fp8kit represents; the others are listed in "not_represented"
    DTYPES = [n for n in C.ALL_DTYPES if isinstance(getattr(torch, n, None), torch.dtype)]
    everything = {
        getattr(torch, n) for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)
    }
    not_represented = sorted(
        str(d).replace("torch.", "") for d in everything if str(d)[6:] not in DTYPES
    )

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        shape = () if kind == "0d" else (2,)
        return torch.zeros(shape, dtype=getattr(torch, name))

    def name_of(dt):
        return str(dt).replace("torch.", "")

    def result_type(a, b):
        try:
            return name_of(torch.result_type(make(a), make(b)))
        except (RuntimeError, TypeError):
            return "error"

    def true_divide(a, b):
        x, y = make(a), make(b)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
                return name_of(torch.true_divide(x, y).dtype)
        except (RuntimeError, TypeError) as e:
            if "not implemented for" in str(e):
                return "nokernel"
            return "error"

    ops = C.operands(DTYPES)
    table = {
        "preset": "TORCH",
        "generator": "scripts/oracles/torch_table.py",
        "library": f"torch {torch.__version__}",
        "not_represented": not_represented,
        "operands": ops,
        "ops": {
            "add": C.grid(ops, result_type),
            "divide": C.grid(ops, true_divide, skip_py_pairs=True),
        },
    }
    return {"torch": table}


#: torch's types that elementwise_dtypes orders (its get_higher_dtype knows no others)
COMMON = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def build_nary():
    import torch
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    dtypes = [n for n in C.ALL_DTYPES if isinstance(getattr(torch, n, None), torch.dtype)]

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        return torch.zeros(() if kind == "0d" else (2,), dtype=getattr(torch, name))

    def name_of(dt):
        return str(dt).replace("torch.", "")

    def guarded(fn):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return name_of(fn())
        except (RuntimeError, TypeError, ValueError) as e:
            return "nokernel" if "not implemented for" in str(e) else "error"

    reducers = {
        "sum": torch.sum,
        "prod": torch.prod,
        "cumsum": lambda x: torch.cumsum(x, 0),
        "mean": torch.mean,
    }
    red_ops = C.operands(dtypes, scalars=False)

    def elementwise(ops):
        kind = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
        return guarded(lambda: elementwise_dtypes(*map(make, ops), type_promotion_kind=kind)[1])

    def cat(ops):
        return guarded(lambda: torch.cat([make(o) for o in ops]).dtype)

    mixes_e = C.random_mixes(COMMON, count=400, seed=4401)
    exotic = tuple(d for d in dtypes if d not in COMMON)  # islands: rarer, or all mixes fail
    mixes_c = C.random_mixes(
        dtypes, count=300, seed=4402, zero_dim=False, scalars=False, rare=C.RARE + exotic
    )
    table = {
        "preset": "TORCH",
        "generator": "scripts/oracles/torch_table.py",
        "library": f"torch {torch.__version__}",
        "reductions": {
            "operands": red_ops,
            "ops": C.reduction_cells(
                red_ops, lambda r, a: guarded(lambda: reducers[r](make(a)).dtype)
            ),
        },
        "mixes": {
            "elementwise_dtypes": [m + [elementwise(m)] for m in mixes_e],
            "cat": [m + [cat(m)] for m in mixes_c],
        },
    }
    return {"torch_nary": table}


if __name__ == "__main__":
    C.main(lambda: {**build(), **build_nary()}, ["torch", "torch_nary"])
