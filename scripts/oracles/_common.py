"""Shared by the oracle scripts: the operand notation and the table file format.

An operand is written ``"int8"`` (a tensor of shape (2,)), ``"0d:int8"`` (a 0-d tensor) or
``"py:int"`` (a Python scalar: ``py:bool``, ``py:int``, ``py:float``, ``py:complex``).  A table
holds, for each operation, one row per left operand and one column per right operand; a cell
is the result's dtype name (ml_dtypes/numpy spelling), ``"error"`` when the library refuses
the pair, ``"nokernel"`` when the library decided a type but has no kernel to show it, or
``null`` when the pair is not asked (e.g. two Python scalars where the API needs an array).

The n-ary tables (``<lib>_nary.json``) hold each library's reductions (``sum``, ``prod``,
``cumsum``, ``mean`` of one tensor or 0-d tensor: ``"reductions"``) and random mixes of 3 to 6
operands (``"mixes"``: for each way of asking, rows ``[operand, ..., result]``).
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
    if "mixes" in table:
        return dump_nary(table)
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


#: The reductions the n-ary tables record, in this order.
REDUCTIONS = ["sum", "prod", "cumsum", "mean"]


#: Drawn a quarter as often as the other operands by :func:`random_mixes` (so that not every
#: mix of six operands is complex or an island's error).
RARE = ("complex64", "complex128", "py:complex")


def random_mixes(
    dtypes, *, count, seed, sizes=(3, 6), zero_dim=True, scalars=True, lead=None, rare=RARE
):
    """``count`` random operand lists of ``sizes[0]..sizes[1]`` operands (tensors, 0-d tensors
    and Python scalars drawn from ``dtypes``), each with at least one tensor or 0-d tensor.

    ``lead`` restricts the first operand's kinds (``("tensor", "0d")`` for chains of binary
    operators, which Python evaluates left to right: an array first keeps every intermediate
    an array).  Deterministic for a seed (Python's ``random``), so a regenerated table has the
    same operands."""
    import random

    rng = random.Random(seed)
    kinds = ["tensor"] * 5 + (["0d"] * 3 if zero_dim else []) + (["py"] * 2 if scalars else [])

    def draw(pool):
        while True:
            x = rng.choice(pool)
            if x not in rare or rng.random() < 0.25:
                return x

    mixes = []
    while len(mixes) < count:
        n = rng.randint(*sizes)
        ops = []
        for i in range(n):
            kind = rng.choice([k for k in kinds if lead is None or i > 0 or k in lead])
            if kind == "py":
                ops.append(draw(PY_SCALARS))
            else:
                d = draw(dtypes)
                ops.append(d if kind == "tensor" else f"0d:{d}")
        if any(not o.startswith("py:") for o in ops):
            mixes.append(ops)
    return mixes


def reduction_cells(ops, fn):
    """``{reduction: [fn(reduction, operand) for operand in ops]}``."""
    return {r: [fn(r, a) for a in ops] for r in REDUCTIONS}


def dump_nary(table: dict) -> str:
    """An n-ary table: the reductions one row per operation, the mixes one per line."""
    head = {k: v for k, v in table.items() if k not in ("reductions", "mixes")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    red = table["reductions"]
    lines.append('  "reductions": {')
    lines.append(f'    "operands": {json.dumps(red["operands"])},')
    lines.append('    "ops": {')
    items = list(red["ops"].items())
    for i, (op, row) in enumerate(items):
        lines.append(
            f"      {json.dumps(op)}: {json.dumps(row)}" + ("," if i < len(items) - 1 else "")
        )
    lines.append("    }")
    lines.append("  },")
    lines.append('  "mixes": {')
    kinds = list(table["mixes"].items())
    for i, (kind, rows) in enumerate(kinds):
        lines.append(f"    {json.dumps(kind)}: [")
        for j, row in enumerate(rows):
            lines.append(f"      {json.dumps(row)}" + ("," if j < len(rows) - 1 else ""))
        lines.append("    ]" + ("," if i < len(kinds) - 1 else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(table: dict, name: str) -> Path:
    path = DATA / f"{name}.json"
    path.write_text(dump(table))
    return path


def main(build, names):
    """``python script.py``: write every table; ``python script.py --print NAME``: print one;
    ``python script.py --json``: print them all as JSON (for a test running the oracle in
    another interpreter)."""
    tables = build()
    if "--json" in sys.argv:
        print(json.dumps(tables))
        return
    if "--print" in sys.argv:
        print(dump(tables[sys.argv[sys.argv.index("--print") + 1]]))
        return
    for name in names:
        print(write(tables[name], name))
