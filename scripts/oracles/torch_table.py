"""The TORCH oracle table: ``torch.result_type`` and ``torch.true_divide`` on every ordered pair.

Run from the repository root: ``python scripts/oracles/torch_table.py`` writes
tests/data/promotion/torch.json (torch 2.13).  Tensors have shape (2,), 0-d tensors shape ().
``divide`` is the dtype of ``torch.true_divide`` where a kernel exists; where torch decided a
type but has no CPU kernel the cell is ``"nokernel"``; two Python scalars
are not asked (``null``).  The operands are the types of fp8kit's list that torch has
(torch.int1/int2/uint1/uint2 are ml_dtypes' int1/int2/uint1/uint2); ``not_represented`` lists
torch's other dtypes.
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


if __name__ == "__main__":
    C.main(build, ["torch"])
