"""Shared by the oracle scripts: the operand notation and the table file format.

An operand is written ``"int8"`` (a tensor of shape (2,)), ``"0d:int8"`` (a 0-d tensor) or
``"py:int"`` (a Python scalar: ``py:bool``, ``py:int``, ``py:float``, ``py:complex``).  A table
holds, for each operation, one row per left operand and one column per right operand; a cell
is the result's dtype name (ml_dtypes/numpy spelling), ``"error"`` when the library refuses
the pair, ``"nokernel"`` when the library decided a type but has no kernel to show it, or
``null`` when the pair is not asked (e.g. two Python scalars where the API needs an array).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "promotion"

#: Every dtype the tables may use, in display order.
ALL_DTYPES = [
    "bool",
    "int1",
    "int2",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint1",
    "uint2",
    "uint4",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e4m3",
    "float8_e3m4",
    "float8_e4m3b11fnuz",
    "float8_e8m0fnu",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
PY_SCALARS = ["py:bool", "py:int", "py:float", "py:complex"]
PY_VALUES = {"py:bool": True, "py:int": 1, "py:float": 1.0, "py:complex": 1j}


def operands(dtypes, *, zero_dim=True, scalars=True):
    """Tensors, then 0-d tensors, then Python scalars."""
    ops = list(dtypes)
    if zero_dim:
        ops += [f"0d:{d}" for d in dtypes]
    if scalars:
        ops += PY_SCALARS
    return ops


def split(operand):
    """``"0d:int8"`` -> ("0d", "int8"); ``"int8"`` -> ("tensor", "int8"); ``"py:int"`` -> ("py",
    "int")."""
    if operand.startswith("py:"):
        return "py", operand[3:]
    if operand.startswith("0d:"):
        return "0d", operand[3:]
    return "tensor", operand


def grid(ops, fn, *, skip_py_pairs=False):
    """Rows of ``fn(a, b)`` over the ordered pairs of ``ops``."""
    rows = []
    for a in ops:
        row = []
        for b in ops:
            if skip_py_pairs and a.startswith("py:") and b.startswith("py:"):
                row.append(None)
            else:
                row.append(fn(a, b))
        rows.append(row)
    return rows


def dump(table: dict) -> str:
    """JSON with one row per line, so that diffs of a regenerated table read well."""
    head = {k: v for k, v in table.items() if k != "ops"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    lines.append('  "ops": {')
    op_items = list(table["ops"].items())
    for i, (op, rows) in enumerate(op_items):
        lines.append(f"    {json.dumps(op)}: [")
        for j, row in enumerate(rows):
            comma = "," if j < len(rows) - 1 else ""
            lines.append(f"      {json.dumps(row)}{comma}")
        lines.append("    ]" + ("," if i < len(op_items) - 1 else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(table: dict, name: str) -> Path:
    path = DATA / f"{name}.json"
    path.write_text(dump(table))
    return path


def main(build, names):
    """``python script.py``: write every table; ``python script.py --print NAME``: print one."""
    tables = build()
    if "--print" in sys.argv:
        print(dump(tables[sys.argv[sys.argv.index("--print") + 1]]))
        return
    for name in names:
        print(write(tables[name], name))
