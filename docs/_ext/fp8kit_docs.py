"""Generated blocks of fp8kit's Markdown pages, and the Sphinx extension that regenerates them.

A generated block is the text between ``<!-- NAME -->`` and ``<!-- /NAME -->`` in a page of
docs/.  The committed pages hold a copy (so they read well on GitHub) that
tests/test_docs_generated.py keeps current; while Sphinx builds the site, this extension
replaces every block by what the code generates now, so the site never shows a stale table.

    python docs/_ext/fp8kit_docs.py     # rewrite the committed copies of every page

(``python docs/make_study.py`` redraws the committed figures docs/study*.png as well.)

Block names:

``format-table``, ``more-formats-table``
    :func:`fp8kit.format_table` of the built-in and of the further formats.
``cast-table``
    :func:`fp8kit.cast_table`, the Cast-21 rule of every type pair.
``cast-to-more-table``, ``cast-from-more-table``
    :func:`fp8kit.cast_table` from every type to the types beyond Cast-21 (the 2-bit integers
    and the further formats), and from those to the Cast-21 types.
``rounding-table``
    Sample values rounded to float8_e4m3fn in every rounding mode.
``p3109-table``
    :func:`fp8kit.format_table` of the IEEE P3109 formats.
``compare-tables``
    Edge inputs rounded by fp8kit, gfloat and pychop, one table per rounding mode fp8kit
    has (docs/compare.md; :data:`COMPARE_MODES` maps the modes' names).
``cast-disputes``
    The disputed cases of ONNX Cast: the Cast text, ONNX's conformance suite, onnx.reference
    and ONNX Runtime as recorded in tests/data/cast/disputes.json
    (scripts/oracles/cast_disputes.py), beside fp8kit's default and named rules, computed now.
``promotion:NAME``
    :func:`fp8kit.promotion.docs_block` (a preset's table, the knobs, the disagreements).
``study:NAME``
    The worked study's tables (docs/make_study.py).
``api:SECTION``
    The autodoc directives of one section of the API reference, from the ``__all__`` lists.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
if str(ROOT) not in sys.path:  # a source checkout, installed or not
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import fp8kit  # noqa: E402
from fp8kit import mma, promotion, study  # noqa: E402
from fp8kit.cast import ALL_CAST_TYPES, CAST_TYPES, MORE_CAST_TYPES  # noqa: E402

BLOCK = re.compile(r"<!-- (?P<name>[^\s/]\S*) -->\n(?P<body>.*?)<!-- /(?P=name) -->", re.S)
FIGURES = {"study.png", "study_model.png"}  # drawn again at build time into _generated/


@functools.cache
def _make_study():
    spec = importlib.util.spec_from_file_location("make_study", DOCS / "make_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _study_tables() -> dict[str, str]:
    return _make_study().tables()


# ---------------------------------------------------------------------------- rounding table
#: (label, value) of the rows of the rounding table.
ROUNDING_SAMPLES = [
    ("1.0625", 1.0625),  # the tie between 1 and 1.125
    ("1.09375", 1.09375),  # three quarters of the way from 1 to 1.125
    ("-1.0625", -1.0625),
    ("2^-10", 2.0**-10),  # half the smallest subnormal 2**-9: a tie with 0
    ("-2^-11", -(2.0**-11)),  # a quarter of the smallest subnormal
    ("2^-7", 2.0**-7),  # a subnormal (the smallest normal is 2**-6)
    ("0.99 · 2^-6", 0.99 * 2.0**-6),  # rounds up to the smallest normal (a subnormal to odd)
    ("460", 460.0),  # above max 448, below the overflow threshold 464
    ("500", 500.0),  # beyond the threshold
]


def rounding_table() -> str:
    """Each sample rounded to float8_e4m3fn in every deterministic mode, and nearest-even
    with ``flush_subnormals=True``, as fp8kit computes it now; ``a (b)``: ``a`` with
    ``saturate=True``, ``b`` with ``saturate=False``."""
    from fp8kit._kernels.rounding import MODES, is_stochastic

    modes = [(m, False) for m in fp8kit.codec.ROUNDING_MODES if not is_stochastic(MODES[m])]
    modes.append(("nearest_even", True))
    heads = [f"`{m}`" if not flush else "`flush_subnormals`" for m, flush in modes]
    lines = ["| x | " + " | ".join(heads) + " |", "|---:|" + "---:|" * len(modes)]
    for label, value in ROUNDING_SAMPLES:
        x = np.float64(value)
        cells = []
        for mode, flush in modes:
            kw = {"rounding": mode, "flush_subnormals": flush}
            sat = fp8kit.round_to(x, "float8_e4m3fn", **kw)
            nosat = fp8kit.round_to(x, "float8_e4m3fn", saturate=False, **kw)
            cells.append(_num(sat) if _same(sat, nosat) else f"{_num(sat)} ({_num(nosat)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _same(a, b) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True)) and np.signbit(a) == np.signbit(b)


def _num(v) -> str:
    v = float(v)
    if v != v:
        return "NaN"
    if v == 0:
        return "-0" if np.signbit(v) else "0"
    exponent = np.log2(abs(v))
    if abs(v) < 2**-4 and exponent == int(exponent):
        return f"{'-' if v < 0 else ''}2^{int(exponent)}"
    return f"{v:g}"


# ---------------------------------------------------------------------------- compare.md
#: fp8kit's rounding modes and their names in gfloat (``gfloat.RoundMode``) and pychop (the
#: P3109 API's ``rounding=``; ``pychop.Chop``'s ``rmode`` for IEEE-style formats).  A mode
#: appears on docs/compare.md once fp8kit has it; None: the library lacks it.  Stochastic
#: modes are left out (their bits are random).
COMPARE_MODES = {
    "nearest_even": ("TiesToEven", "nearest_even", 1),
    "nearest_away": ("TiesToAway", "nearest_away", 8),
    "toward_zero": ("TowardZero", "toward_zero", 4),
    "toward_positive": ("TowardPositive", "toward_positive", 2),
    "toward_negative": ("TowardNegative", "toward_negative", 3),
    "to_odd": (None, "to_odd", 9),
    "nearest_zero": (None, None, 7),
}
#: the formats compared: P3109 ones (gfloat's and pychop's P3109 definitions) and an
#: IEEE-style E4M3 (gfloat: a FormatInfo built for it; pychop: ``Chop(4, 3)``)
COMPARE_FORMATS = ["p3109_k8p4se", "p3109_k8p3ue", "p3109_k8p1se", "float8_e4m3"]


def _compare_inputs(fmt) -> list[tuple[str, float]]:
    """Edge inputs of one format: a tie and the float32 below it, max, the overflow
    threshold (the midpoint past max) and beyond, huge values, the smallest subnormal's half,
    Inf, NaN, and a negative value (unsigned formats)."""
    from fp8kit._kernels.tables import code_values

    v = code_values(fmt)
    v = np.unique(v[np.isfinite(v) & (v >= 0)])
    i = int(np.searchsorted(v, 11.3))
    tie = float((v[i - 1] + v[i]) / 2)
    step = float(v[-1] - v[-2])
    if fmt.mantissa_bits == 0:
        step = float(v[-1])
    past = float(v[-1] + step / 2)  # halfway to the next (missing) value
    rows = [
        ("tie", tie),
        ("float32 below the tie", float(np.nextafter(np.float32(tie), np.float32(0)))),
        ("max", float(v[-1])),
        ("halfway past max", past),
        ("beyond that", float(v[-1] + step)),
        ("huge", 1e6),
        ("huge, negative", -1e6),
        ("smallest subnormal / 2", float(v[1] / 2)),
        ("+Inf", np.inf),
        ("NaN", np.nan),
    ]
    if fmt.name == "float8_e4m3":  # the cases of issue 20
        rows[3:5] = [("halfway past max", 248.0), ("beyond that", 256.0)]
        rows.insert(2, ("below the tie", 11.49999955))
    if not fmt.signed:
        rows.append(("-1", -1.0))
    return rows


def _gfloat_format(fmt):
    import gfloat
    from gfloat.formats import format_info_p3109

    if fmt.name == "float8_e4m3":
        return gfloat.FormatInfo(
            name="ieee_e4m3", k=8, precision=4, bias=7, is_signed=True,
            domain=gfloat.Domain.Extended, has_nz=True, num_high_nans=7, has_subnormals=True,
            is_twos_complement=False,
        )  # fmt: skip
    k, rest = fmt.name.removeprefix("p3109_k").split("p")
    return format_info_p3109(
        int(k),
        int(rest[:-2]),
        gfloat.Signedness.Signed if rest[-2] == "s" else gfloat.Signedness.Unsigned,
        gfloat.Domain.Extended if rest[-1] == "e" else gfloat.Domain.Finite,
    )


def _pychop_round(fmt, x, mode: str):
    import warnings

    import pychop

    _, p3109_mode, rmode = COMPARE_MODES[mode]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if fmt.name == "float8_e4m3":
            pychop.backend("numpy")
            return pychop.Chop(exp_bits=4, sig_bits=3, rmode=rmode)(x)
        if p3109_mode is None:
            return None
        k, rest = fmt.name.removeprefix("p3109_k").split("p")
        pf = pychop.P3109Format(
            int(k), int(rest[:-2]), rest[-2] == "s", "extended" if rest[-1] == "e" else "finite"
        )
        return pychop.p3109_quantize(x, pf, rounding=p3109_mode, saturate=False)


def compare_table(mode: str) -> str:
    """Edge inputs rounded by fp8kit, gfloat and pychop in one rounding mode (saturate=False;
    pychop's Chop has no saturation), the cells that differ from fp8kit in bold."""
    import gfloat

    lines = [
        "| format | case | x | fp8kit | gfloat | pychop |",
        "|---|---|---:|---:|---:|---:|",
    ]
    g_mode = COMPARE_MODES[mode][0]
    for name in COMPARE_FORMATS:
        fmt = fp8kit.get_format(name)
        labels, xs = zip(*_compare_inputs(fmt), strict=True)
        x = np.array(xs)
        ours = fp8kit.round_to(x, fmt, saturate=False, rounding=mode)
        theirs = []
        with np.errstate(all="ignore"):
            if g_mode is None:
                theirs.append(None)
            else:
                rnd = getattr(gfloat.RoundMode, g_mode)
                g = [gfloat.round_float(_gfloat_format(fmt), float(v), rnd) for v in x]
                if not fmt.signed:  # gfloat: negative input to unsigned formats undefined
                    g = [gv if v >= 0 or v != v else None for gv, v in zip(g, x, strict=True)]
                theirs.append(g)
        theirs.append(_pychop_round(fmt, x, mode))
        for j, (label, v) in enumerate(zip(labels, x, strict=True)):
            cells = [_num(ours[j])]
            for t in theirs:
                if t is None or t[j] is None:
                    cells.append("—")
                    continue
                cell = _num(t[j])
                agree = _same(ours[j], np.float64(t[j])) or (ours[j] != ours[j] and t[j] != t[j])
                cells.append(cell if agree else f"**{cell}**")
            shown = repr(float(v)) if np.isfinite(v) and abs(v) >= 2**-4 else _num(v)
            lines.append(f"| `{name}` | {label} | {shown} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare_modes() -> list[str]:
    """The modes of docs/compare.md: those of COMPARE_MODES that fp8kit has."""
    return [m for m in COMPARE_MODES if m in fp8kit.codec.ROUNDING_MODES]


def compare_page_blocks() -> str:
    """One table per rounding mode fp8kit has (see :func:`compare_table`)."""
    return "\n\n".join(f"### `{m}`\n\n{compare_table(m)}" for m in compare_modes())


# ---------------------------------------------------------------------------- API reference
#: The sections of the API reference of the package's own names, in order; the subpackages
#: ``mma``, ``promotion`` and ``study`` are sections of all their ``__all__``.
API_SECTIONS = {
    "formats": [
        "FloatFormat",
        "get_format",
        "register_format",
        "registered_formats",
        "format_table",
    ],
    "codec": ["encode", "decode", "round_to", "astype", "pack", "unpack"],
    "cast": ["cast", "cast_rule", "cast_table"],
    "fake_convert": ["fake_convert"],
    "threads": ["num_threads", "set_num_threads", "get_num_threads"],
    "matmul": ["matmul", "scaled_mm"],
    "mma": None,
    "promotion": None,
    "study": None,
}
_SUBPACKAGES = {"mma": mma, "promotion": promotion, "study": study}


def home_of(name: str) -> str:
    """The qualified name under which the reference documents ``fp8kit.<name>``: a name the
    package re-exports from a subpackage is documented once, there."""
    obj = getattr(fp8kit, name)
    for subname, sub in _SUBPACKAGES.items():
        if name in sub.__all__ and getattr(sub, name) is obj:
            return f"fp8kit.{subname}.{name}"
    return f"fp8kit.{name}"


def api_block(section: str) -> str:
    """The MyST directives documenting one section of the API (``reexports``: the list of
    the package's names documented in a subpackage)."""
    own = {n for n in fp8kit.__all__ if home_of(n) == f"fp8kit.{n}" and n not in _SUBPACKAGES}
    listed = {n for names in API_SECTIONS.values() if names for n in names}
    if own != listed:
        raise ValueError(
            f"API_SECTIONS and fp8kit.__all__ differ: not listed {sorted(own - listed)}, "
            f"not public {sorted(listed - own)}"
        )
    if section == "reexports":
        return "\n".join(
            f"- `fp8kit.{n}` is {{py:obj}}`{home_of(n)}`"
            for n in fp8kit.__all__
            if home_of(n) != f"fp8kit.{n}"
        )
    if section not in API_SECTIONS:
        valid = ", ".join([*API_SECTIONS, "reexports"])
        raise ValueError(f"unknown api section {section!r}; valid: {valid}")
    names = API_SECTIONS[section]
    if names is None:
        module = _SUBPACKAGES[section]
        modname, names = module.__name__, list(module.__all__)
        out = [_directive("automodule", modname, ["no-members:"])]
    else:
        module, modname, out = fp8kit, "fp8kit", []
    for name in names:
        obj = getattr(module, name)
        qual = f"{modname}.{name}"
        if inspect.isclass(obj):
            options = [] if issubclass(obj, BaseException) else ["members:"]
            out.append(_directive("autoclass", qual, options))
        elif callable(obj):
            out.append(_directive("autofunction", qual, []))
        else:
            out.append(_directive("autodata", qual, ["no-value:"]))
    # autodoc writes reStructuredText, so MyST hands it to the rST parser (eval-rst)
    return "```{eval-rst}\n" + "\n\n".join(out) + "\n```"


def _directive(kind: str, target: str, options: list[str]) -> str:
    return f".. {kind}:: {target}" + "".join(f"\n   :{o}" for o in options)


@functools.cache
def _disputes_module():
    path = ROOT / "scripts" / "oracles" / "cast_disputes.py"
    spec = importlib.util.spec_from_file_location("fp8kit_cast_disputes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cast_disputes_table() -> str:
    """The disputed cases of ONNX Cast side by side (the oracles' answers as recorded)."""
    import json

    mod = _disputes_module()
    data = json.loads(mod.DATA.read_text())
    head = (
        "| case | Cast text | conformance suite | onnx.reference | ONNX Runtime "
        "| fp8kit default | other reading |"
    )
    rows = [head, "|---|---|---|---|---|---|---|"]
    for r in data["cases"]:
        x = mod.value(r["x"], r["from"])
        with np.errstate(all="ignore"):
            ours = mod.show(fp8kit.cast(x, r["to"], saturate=r["saturate"])[0])
            other = "—"
            if r["rule"]:
                alt = fp8kit.cast(x, r["to"], saturate=r["saturate"], rules=r["rule"])[0]
                other = f'{mod.show(alt)} (`rules="{r["rule"]}"`)'
        suite = r["suite"] if r["suite"] is not None else "no case"
        cells = [r["question"], r["cast_text"], suite, r["onnx_reference"], r["onnxruntime"]]
        rows.append("| " + " | ".join([*cells, ours, other]) + " |")
    versions = f"onnx {data['onnx']}, onnxruntime {data['onnxruntime']} (CPU)"
    return "\n".join(rows) + f"\n\nRecorded with {versions} by `{data['generated_by']}`."


# ---------------------------------------------------------------------------- the blocks
def generate(name: str) -> str:
    """The text of the generated block ``name``, from the code as it is now."""
    kind, _, arg = name.partition(":")
    makers: dict[str, Callable[[], str]] = {
        "format-table": fp8kit.format_table,
        "more-formats-table": lambda: fp8kit.format_table(fp8kit.formats.MORE_FORMATS),
        "cast-table": fp8kit.cast_table,
        "cast-to-more-table": lambda: fp8kit.cast_table(ALL_CAST_TYPES, MORE_CAST_TYPES),
        "cast-from-more-table": lambda: fp8kit.cast_table(MORE_CAST_TYPES, CAST_TYPES),
        "rounding-table": rounding_table,
        "cast-disputes": cast_disputes_table,
        "p3109-table": lambda: fp8kit.format_table(fp8kit.formats.P3109_FORMATS),
        "compare-tables": compare_page_blocks,
    }
    if name in makers:
        return makers[name]()
    if kind == "promotion" and arg:
        return promotion.docs_block(arg)
    if kind == "study" and arg:
        return _study_tables()[arg]
    if kind == "api" and arg:
        return api_block(arg)
    raise ValueError(
        f"unknown generated block {name!r}; valid: {', '.join(makers)}, promotion:NAME, "
        "study:NAME, api:SECTION"
    )


def fill(text: str) -> str:
    """``text`` with every generated block replaced by what the code generates now."""

    def block(m: re.Match) -> str:
        name = m["name"]
        return f"<!-- {name} -->\n{generate(name)}\n<!-- /{name} -->"

    return BLOCK.sub(block, text)


def pages() -> list[Path]:
    """The Markdown pages of the site."""
    return sorted(p for p in DOCS.glob("*.md"))


def draw_figures(outdir: Path) -> None:
    """Draw the figures of the pages into ``outdir`` (the worked study's)."""
    outdir.mkdir(parents=True, exist_ok=True)
    _make_study().draw(outdir)  # the figures of docs/make_study.py (FIGURES)


# ---------------------------------------------------------------------------- Sphinx hooks
def _source_read(app, docname: str, source: list[str]) -> None:
    text = fill(source[0])
    for figure in FIGURES:  # the figure drawn for this build, not the committed copy
        text = text.replace(f"]({figure})", f"](_generated/{figure})")
    source[0] = text


def _builder_inited(app) -> None:
    draw_figures(Path(app.srcdir) / "_generated")


def setup(app):
    app.connect("builder-inited", _builder_inited)
    app.connect("source-read", _source_read)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


def main() -> None:
    for page in pages():
        text = page.read_text()
        new = fill(text)
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
