"""Markdown tables generated from the code (docs/promotion.md)."""

from __future__ import annotations

from collections.abc import Iterable

from ._engine import result_type
from ._policy import (
    _FIELDS,
    _KIND_PAIRS,
    ARRAY_API,
    JAX,
    JAX_X64,
    NUMPY,
    ONEFLOW,
    PADDLE,
    PRESETS,
    REDUCTIONS,
    TORCH,
    PromotionPolicy,
    openvino,
)
from ._types import (
    _NAME_OF_DTYPE,
    _PY_INDEX,
    ALL_DTYPES,
    UNREPRESENTED,
    PromotionError,
    _operand,
)


def _short(operand: str) -> str:
    level, name = _operand(operand, "operand")
    short = (
        name.replace("float8_", "f8_")
        .replace("bfloat", "bf")
        .replace("float", "f")
        .replace("complex", "c")
        .replace("uint", "u")
        .replace("int", "i")
    )
    return {"tensor": short, "0d": f"0d {short}", "py": f"py {name}"}[level]


def _cell(policy: PromotionPolicy, a: str, b: str, op: str) -> str:
    try:
        return _short(_NAME_OF_DTYPE[result_type(a, b, policy=policy, op=op)])
    except PromotionError:
        return "-"


def operands_of(
    policy: PromotionPolicy, *, zero_dim: bool = True, scalars: bool = True
) -> list[str]:
    """The operand list of a policy's tables: its tensors, 0-d tensors and Python scalars.

    Parameters
    ----------
    policy : PromotionPolicy
        Whose types to list.
    zero_dim, scalars : bool, default True
        Include the 0-d tensors (``"0d:int8"``) and the Python scalars (``"py:int"``).

    Returns
    -------
    list of str
        Operand spellings that :func:`result_type` accepts.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> P.operands_of(P.ARRAY_API)[-4:]
    ['py:bool', 'py:int', 'py:float', 'py:complex']
    """
    ops = list(policy.dtypes)
    if zero_dim:
        ops += [f"0d:{n}" for n in policy.dtypes]
    if scalars:
        ops += [f"py:{k}" for k in _PY_INDEX]
    return ops


def promotion_table(
    policy: PromotionPolicy,
    *,
    op: str = "add",
    rows: list[str] | None = None,
    columns: list[str] | None = None,
) -> str:
    """A Markdown table of ``result_type(row, column, policy=policy, op=op)``.

    Rows default to the policy's tensors, 0-d tensors and Python scalars; columns to its
    tensors.  ``-`` marks a PromotionError.

    Parameters
    ----------
    policy : PromotionPolicy
        The rules to tabulate.
    op : {"add", "divide", "compare"}, default "add"
        The operation, as for :func:`result_type`.
    rows, columns : list of str, optional
        Operands (see :func:`operands_of` for the spellings).

    Returns
    -------
    str
        The Markdown table, types in short spelling (``i8``, ``f8_e4m3fn``, ``py float``).

    Raises
    ------
    ValueError
        If ``op`` is unknown.
    TypeError
        If an operand is not a type the engine knows.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> print(P.promotion_table(P.ARRAY_API, rows=["int8", "py:float"], columns=["int8", "uint8"]))
    | ARRAY_API | i8 | u8 |
    |---|---|---|
    | **i8** | i8 | i16 |
    | **py float** | - | - |
    """
    rows = operands_of(policy) if rows is None else rows
    columns = list(policy.dtypes) if columns is None else columns
    lines = [
        f"| {policy.name} | " + " | ".join(_short(c) for c in columns) + " |",
        "|" + "---|" * (len(columns) + 1),
    ]
    for r in rows:
        lines.append(
            f"| **{_short(r)}** | " + " | ".join(_cell(policy, r, c, op) for c in columns) + " |"
        )
    return "\n".join(lines)


def disagreement_table(
    policies: Iterable[PromotionPolicy] | None = None, *, op: str = "add"
) -> str:
    """The pairs on which the policies disagree, side by side (Markdown).

    Every unordered pair of tensor types, and each type with each Python scalar, is listed
    when the policies that have both types do not all agree; ``n/a`` marks a policy that
    lacks a type, ``-`` an error.

    Parameters
    ----------
    policies : iterable of PromotionPolicy, optional
        Default: every preset of :data:`PRESETS`.
    op : {"add", "divide", "compare"}, default "add"
        The operation, as for :func:`result_type`.

    Returns
    -------
    str
        The Markdown table, one row per pair on which they disagree.

    Raises
    ------
    ValueError
        If ``op`` is unknown.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> P.disagreement_table([P.NUMPY, P.TORCH]).splitlines()[0]
    '| pair | NUMPY | TORCH |'
    """
    policies = list(PRESETS.values()) if policies is None else list(policies)
    lines = [
        "| pair | " + " | ".join(p.name for p in policies) + " |",
        "|" + "---|" * (len(policies) + 1),
    ]
    names = list(ALL_DTYPES)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i:]]
    pairs += [(a, f"py:{k}") for a in names for k in _PY_INDEX]
    for a, b in pairs:
        cells = []
        for p in policies:
            if a not in p.dtypes or (not b.startswith("py:") and b not in p.dtypes):
                cells.append("n/a")
            else:
                cells.append(_cell(p, a, b, op))
        known = {c for c in cells if c != "n/a"}
        if len(known) > 1:
            lines.append(f"| {_short(a)}, {_short(b)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _knob_value(policy: PromotionPolicy, field: str) -> str:
    v = getattr(policy, field)
    if field == "dtypes":
        return "all" if v == ALL_DTYPES else ", ".join(_short(n) for n in v)
    if field == "mixes":
        return "all" if v == frozenset(_KIND_PAIRS) else ", ".join(sorted(v)) or "none"
    if field in ("unpromotable", "true_divide_keeps", "float_ranks"):
        return ", ".join(_short(n) for n in v) or "none"
    if field == "islands":
        return (
            "; ".join(
                f"{'/'.join(_short(n) for n in m)} with {'/'.join(k) or 'nothing'}" for m, k in v
            )
            or "none"
        )
    if field == "scalar_dtypes":
        return ", ".join(_short(n) if n else "none" for n in v)
    if field == "canonical":
        return ", ".join(f"{_short(a)}->{_short(b)}" for a, b in v) or "none"
    if field == "reductions":
        return ", ".join(f"{op} {rule}" for op, rule in v)
    if field == "reduction_types":
        cells = (f"{op}({_short(n)})->{r if r == 'error' else _short(r)}" for op, n, r in v)
        return ", ".join(cells) or "none"
    if field == "reductions_keep_zero_dim":
        return ", ".join(v) or "none"
    return str(v)


def knob_table(policies: Iterable[PromotionPolicy] | None = None) -> str:
    """The policies' fields side by side (Markdown): every preset is one set of knobs.

    Parameters
    ----------
    policies : iterable of PromotionPolicy, optional
        Default: every preset of :data:`PRESETS`.

    Returns
    -------
    str
        The Markdown table: one row per field, one column per policy.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> P.knob_table([P.TORCH, P.NUMPY]).splitlines()[7]
    '| int_to_float | float | safe_width |'
    """
    policies = list(PRESETS.values()) if policies is None else list(policies)
    lines = [
        "| field | " + " | ".join(p.name for p in policies) + " |",
        "|" + "---|" * (len(policies) + 1),
    ]
    for f in _FIELDS:
        if f.name == "name":
            continue
        lines.append(f"| {f.name} | " + " | ".join(_knob_value(p, f.name) for p in policies) + " |")
    return "\n".join(lines)


def _coverage_cell(policy: PromotionPolicy, name: str) -> str:
    if name not in policy.dtypes:
        return "n/a"
    if name in policy.unpromotable:
        return "refused"
    island = policy._island_of.get(name)  # type: ignore[attr-defined]
    if island is None:
        return "yes"
    return "with " + ("/".join(island[1]) if island[1] else "itself") + " only"


def coverage_table(policies: Iterable[PromotionPolicy] | None = None) -> str:
    """Which types each policy has (Markdown): one row per type fp8kit knows.

    ``yes``: promotes by the policy's rules; ``with bool/int only``: an island that meets
    only those kinds (and itself); ``refused``: the framework has the type but promotes it
    with nothing; ``n/a``: not a type of the framework.

    Parameters
    ----------
    policies : iterable of PromotionPolicy, optional
        Default: every preset of :data:`PRESETS`.

    Returns
    -------
    str
        The Markdown table.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> from fp8kit.promotion._tables import coverage_table
    >>> coverage_table([P.TORCH, P.OPENVINO]).splitlines()[-7]
    '| f8_e8m0fnu | with itself only | refused |'
    """
    policies = list(PRESETS.values()) if policies is None else list(policies)
    lines = [
        "| type | " + " | ".join(p.name for p in policies) + " |",
        "|" + "---|" * (len(policies) + 1),
    ]
    for n in ALL_DTYPES:
        lines.append(
            f"| {_short(n)} | " + " | ".join(_coverage_cell(p, n) for p in policies) + " |"
        )
    return "\n".join(lines)


def _unrepresented_table() -> str:
    lines = ["| name | what it is |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in UNREPRESENTED.items()]
    return "\n".join(lines)


#: The frameworks compared in docs/promotion.md: OpenVINO's type logic without its lossy
#: errors, and JAX's 64-bit lattice (the 32-bit mode narrows it).
_DISAGREEMENT_POLICIES = (
    openvino(promote_unsafe=True),
    TORCH,
    NUMPY,
    JAX_X64,
    ARRAY_API,
    PADDLE,
    ONEFLOW,
)

#: Mixes of operands whose n-ary answer is not the pairwise answer folded left to right
#: (docs/promotion.md; each agrees with its library's recorded table).
_NARY_EXAMPLES = (
    (TORCH, ("int8", "py:float", "0d:float16")),
    (TORCH, ("bool", "0d:int8", "py:float", "0d:float16")),
    (NUMPY, ("int8", "uint8", "float16")),
    (NUMPY, ("int8", "uint16", "float16")),
    (NUMPY, ("int8", "uint16", "complex64")),
    (JAX, ("int8", "py:float", "float16")),
    (JAX_X64, ("int16", "uint64", "float16")),
    (ARRAY_API, ("py:bool", "py:int", "int8")),
    (ONEFLOW, ("0d:uint8", "py:float", "bool")),
)


def _outcome(policy: PromotionPolicy, operands: Iterable[str], op: str = "add") -> str:
    try:
        return _short(_NAME_OF_DTYPE[result_type(*operands, policy=policy, op=op)])
    except PromotionError:
        return "-"


def _folded(policy: PromotionPolicy, operands: tuple[str, ...]) -> str:
    acc = operands[0]
    for x in operands[1:]:
        try:
            acc = _NAME_OF_DTYPE[result_type(acc, x, policy=policy)]
        except PromotionError:
            return "-"
    return _short(acc)


def nary_table(examples: Iterable[tuple[PromotionPolicy, tuple[str, ...]]] | None = None) -> str:
    """Mixes of operands promoted at once and by folding pairs, side by side (Markdown).

    Parameters
    ----------
    examples : iterable of (PromotionPolicy, operands), optional
        Default: the cases docs/promotion.md shows, one or more per preset whose n-ary rule is
        not a fold of pairs.

    Returns
    -------
    str
        The Markdown table: the policy, the operands, ``result_type(*operands)`` and the
        pairwise answer folded left to right (``-``: PromotionError).

    Raises
    ------
    TypeError
        If an operand is not a type the engine knows.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> print(P.nary_table([(P.NUMPY, ("int8", "uint8", "float16"))]))
    | policy | operands | all at once | folding pairs |
    |---|---|---|---|
    | NUMPY | i8, u8, f16 | f16 | f32 |
    """
    examples = _NARY_EXAMPLES if examples is None else examples
    lines = ["| policy | operands | all at once | folding pairs |", "|---|---|---|---|"]
    for policy, ops in examples:
        row = (policy.name, ", ".join(_short(o) for o in ops), _outcome(policy, ops))
        lines.append("| " + " | ".join(row) + f" | {_folded(policy, tuple(ops))} |")
    return "\n".join(lines)


#: The rows of the reduction tables: operands whose results tell the frameworks apart.
_REDUCTION_ROWS = (
    "bool",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "0d:bool",
    "0d:int8",
)


def reduction_table(
    policies: Iterable[PromotionPolicy] | None = None,
    *,
    op: str = "sum",
    rows: Iterable[str] | None = None,
) -> str:
    """The result type of a reduction under each policy (Markdown): one row per operand.

    ``n/a`` marks a type the policy lacks, ``-`` an error.

    Parameters
    ----------
    policies : iterable of PromotionPolicy, optional
        Default: every preset of :data:`PRESETS`.
    op : {"sum", "prod", "cumsum", "mean"}, default "sum"
        The reduction.
    rows : iterable of str, optional
        Tensors and 0-d tensors (``"0d:int8"``); default: a selection that tells the
        frameworks apart.

    Returns
    -------
    str
        The Markdown table.

    Raises
    ------
    ValueError
        If ``op`` is not a reduction.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> print(P.reduction_table([P.TORCH, P.NUMPY], op="mean", rows=["int8", "float16"]))
    | mean | TORCH | NUMPY |
    |---|---|---|
    | i8 | - | f64 |
    | f16 | f16 | f16 |
    """
    if op not in REDUCTIONS:
        raise ValueError(f"op: {op!r} is not a reduction; valid: {', '.join(REDUCTIONS)}")
    policies = list(PRESETS.values()) if policies is None else list(policies)
    rows = _REDUCTION_ROWS if rows is None else tuple(rows)
    lines = [
        f"| {op} | " + " | ".join(p.name for p in policies) + " |",
        "|" + "---|" * (len(policies) + 1),
    ]
    for r in rows:
        name = _operand(r, "rows")[1]
        cells = [_outcome(p, [r], op) if name in p.dtypes else "n/a" for p in policies]
        lines.append(f"| {_short(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _doc_policies() -> dict[str, PromotionPolicy]:
    extra = [openvino(promote_unsafe=True), openvino(pytorch_scalar_promotion=True)]
    return {**PRESETS, **{p.name: p for p in extra}}


def docs_block(name: str) -> str:
    """A generated block of docs/promotion.md: a policy's table (by name) or
    ``"disagreements"``.

    Parameters
    ----------
    name : str
        ``"knobs"``, ``"coverage"``, ``"unrepresented"``, ``"disagreements"``, ``"nary"``,
        ``"reductions-sum"`` (``-prod``, ``-cumsum``, ``-mean``), or the name of a preset
        or of one of the OpenVINO variants the page shows
        (``"OPENVINO(promote_unsafe=True)"``).

    Returns
    -------
    str
        The Markdown block.

    Raises
    ------
    ValueError
        If ``name`` is none of these.

    Examples
    --------
    >>> from fp8kit import promotion as P
    >>> P.docs_block("TORCH").splitlines()[0].startswith("| TORCH | bool | i1 | i2 | i4 |")
    True
    """
    if name == "disagreements":
        return disagreement_table(_DISAGREEMENT_POLICIES)
    if name == "knobs":
        return knob_table(_doc_policies().values())
    if name == "coverage":
        return coverage_table()
    if name == "unrepresented":
        return _unrepresented_table()
    if name == "nary":
        return nary_table()
    if name.startswith("reductions-") and name[11:] in REDUCTIONS:
        return reduction_table(op=name[11:])
    policies = _doc_policies()
    if name not in policies:
        raise ValueError(
            f"unknown docs block {name!r}; valid: knobs, coverage, unrepresented, "
            f"disagreements, nary, {', '.join('reductions-' + r for r in REDUCTIONS)}, "
            f"{', '.join(policies)}"
        )
    return promotion_table(policies[name])
