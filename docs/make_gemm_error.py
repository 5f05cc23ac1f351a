"""Generate docs/gemm.md's measurement: DeepSeek-V3's test of fp8 GEMM accumulation.

Random fp8 (e4m3) matrices A (64 x K) and B (K x 64), K = 128 ... 16384, multiplied by
:func:`fp8kit.matmul` under Hopper's chained wgmma (fast accumulation), the same with
promotion to fp32 every 128 elements of K, and the exact sum rounded once to fp32; each
output against the exact product of the fp8 values (computed in float64, which is exact
here: see :func:`exact_product`).  Two kinds of matrices: entries uniform on [0, 1) (every
output far from zero: the relative error of each output is meaningful) and standard normal
entries (some outputs are near zero, where any error is a large relative one: the error is
taken relative to the RMS of the exact outputs).

    python docs/make_gemm_error.py        # rewrite docs/gemm.md's tables and docs/gemm_error.png

It runs in about 10 s on two cores.  tests/test_study_gemm.py recomputes the first rows of
the tables and checks them against the page.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

DOCS = Path(__file__).resolve().parent
if str(DOCS.parent) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(DOCS.parent))

import fp8kit  # noqa: E402

KS = tuple(2**e for e in range(7, 15))  # 128 ... 16384
M = N = 64
SEED = 0
FIGURE = "gemm_error.png"
WGMMA = ("Hopper", "wgmma", "m64n256k32.f32.e4m3.e4m3")
#: label -> matmul keywords
ACCUMULATORS = {
    "hopper-fast": dict(instruction=WGMMA),
    "hopper-promote128": dict(instruction=WGMMA, promote_every=128),
    "exact": dict(instruction="exact"),
}
#: kind of matrices -> (title, how its relative error is taken)
KINDS = {
    "uniform": "entries uniform on [0, 1): |y - y*| / |y*|",
    "normal": "standard normal entries: |y - y*| / rms(y*)",
}


def operands(kind: str, k: int, seed: int = SEED):
    """A (M x k) and B (k x N) as float8_e4m3fn, drawn from ``kind`` and rounded to e4m3."""
    import ml_dtypes

    rng = np.random.default_rng([seed, k])
    draw = rng.uniform if kind == "uniform" else (lambda lo, hi, s: rng.standard_normal(s))
    a = draw(0.0, 1.0, (M, k)).astype(ml_dtypes.float8_e4m3fn)
    b = draw(0.0, 1.0, (k, N)).astype(ml_dtypes.float8_e4m3fn)
    return a, b


def exact_product(a, b) -> np.ndarray:
    """``a @ b`` of e4m3 matrices, exactly: every e4m3 value is a multiple of 2**-9 below
    2**9, so every product is an integer times 2**-18 below 2**18, and a sum of K <= 2**16
    of them stays below 2**52 of those units: float64 holds each partial sum exactly, in
    any order."""
    assert a.shape[1] <= 2**16
    return a.astype(np.float64) @ b.astype(np.float64)


def measure(ks=KS) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``{kind: {accumulator: [(max, mean) relative error per K]}}``."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for kind in KINDS:
        res: dict[str, list[tuple[float, float]]] = {name: [] for name in ACCUMULATORS}
        for k in ks:
            a, b = operands(kind, k)
            ref = exact_product(a, b)
            scale = np.abs(ref) if kind == "uniform" else np.sqrt(np.mean(ref**2))
            for name, kw in ACCUMULATORS.items():
                y = fp8kit.matmul(a, b, **kw).astype(np.float64)
                rel = np.abs(y - ref) / scale
                res[name].append((float(rel.max()), float(rel.mean())))
        out[kind] = res
    return out


def _cell(v: float) -> str:
    return "0" if v == 0 else f"{v:.3g}"


def tables(results, ks=KS) -> dict[str, str]:
    """The Markdown tables of docs/gemm.md, by kind: one line per K, max and mean relative
    error per accumulator."""
    out = {}
    for kind, res in results.items():
        head = "| K | " + " | ".join(f"{a} max | {a} mean" for a in res) + " |"
        rule = "|---:|" + "---:|---:|" * len(res)
        lines = [head, rule]
        for i, k in enumerate(ks):
            cells = [f"{_cell(res[a][i][0])} | {_cell(res[a][i][1])}" for a in res]
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        out[kind] = "\n".join(lines)
    return out


def fill(text: str, parts: dict[str, str]) -> str:
    """Replace what lies between ``<!-- gemm-error:NAME begin -->`` and its ``end``."""
    for name, body in parts.items():
        pattern = re.compile(
            rf"(<!-- gemm-error:{name} begin -->\n).*?(<!-- gemm-error:{name} end -->)", re.S
        )
        if not pattern.search(text):
            raise ValueError(f"docs/gemm.md has no <!-- gemm-error:{name} begin --> block")
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


def draw(results, path: str | Path, ks=KS) -> None:
    """The figure: per kind of matrices, max (solid) and mean (dashed) relative error
    against K for each accumulator, on log-log axes (an error of 0 is not drawn)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    colors = {"hopper-fast": "C3", "hopper-promote128": "C0", "exact": "C2"}
    for ax, (kind, res) in zip(axes, results.items(), strict=True):
        for name, pairs in res.items():
            mx = np.array([p[0] for p in pairs])
            mean = np.array([p[1] for p in pairs])
            mx, mean = np.where(mx > 0, mx, np.nan), np.where(mean > 0, mean, np.nan)
            ax.plot(ks, mx, "o-", color=colors[name], label=f"{name}: max")
            ax.plot(ks, mean, "s--", color=colors[name], label=f"{name}: mean", alpha=0.8,
                    markersize=4)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ks, [str(k) for k in ks], fontsize=8)
        ax.set_xlabel("K")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(KINDS[kind], fontsize=10)
    axes[0].set_ylabel("relative error of y = A @ B (64 x 64 outputs)")
    axes[1].tick_params(labelleft=True)
    axes[0].legend(fontsize=8, loc="center right")
    fig.suptitle(
        "fp8 (e4m3) GEMM: accumulation error against the exact product of the fp8 values",
        fontsize=11,
    )
    fig.savefig(Path(path), dpi=150)


def build(outdir: str | Path = DOCS, *, plot: bool = True) -> None:
    """Measure, rewrite ``outdir/gemm.md``'s tables and (with ``plot``) draw the figure."""
    outdir = Path(outdir)
    results = measure()
    page = outdir / "gemm.md"
    page.write_text(fill(page.read_text(), tables(results)))
    if plot:
        draw(results, outdir / FIGURE)


if __name__ == "__main__":
    build()
