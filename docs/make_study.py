"""Generate the worked study of docs/study.md: its tables (between the ``<!-- study:NAME -->``
markers) and the figures docs/study.png (the demo) and docs/study_model.png (a generated
model of 12 layers).

    python docs/make_study.py            # rewrite docs/study.md and both figures

A docs build calls :func:`build`; :func:`tables` alone (no matplotlib) is what the test
that keeps docs/study.md current compares against.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

DOCS = Path(__file__).resolve().parent
if str(DOCS.parent) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(DOCS.parent))

from fp8kit import study  # noqa: E402
from fp8kit.study import report  # noqa: E402

FORMATS = ["float8_e4m3fn", "float8_e5m2"]
SCALINGS = ["none", "tensor", "channel", "block:32"]
STEP_SCALINGS = ["channel", "delayed:16:max", "delayed:16:most_recent"]
MODEL_FORMATS = ["float8_e4m3fn", "float8_e5m2", "bfloat16"]
MODEL_SCALINGS = ["tensor", "channel", "block:32"]
#: The block recipes compared on the demo (issue 43): MX's rules, tiles, NVFP4.
RECIPE_FORMATS = ["float8_e4m3fn", "float4_e2m1fn"]
RECIPE_SCALINGS = ["channel", "block:32", "block:32:floor", "block:32:ceil", "block:32:even",
                   "block:32:rceil", "tile:128", "tile:1x128:pow2", "nvfp4", "nvfp4:16x16",
                   "nvfp4:single"]  # fmt: skip


def activations(seed: int = 1, steps: int = 64, size: int = 4096) -> np.ndarray:
    """A seeded stand-in for one activation tensor recorded over training steps (leading
    axis): normal values whose range swings slowly (a factor e**1.5 up and down over the
    run) and jitters from step to step (x0.8 to x1.25)."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    amp = np.exp(1.5 * np.sin(2 * np.pi * t / steps)) * rng.uniform(0.8, 1.25, steps)
    return (rng.standard_normal((steps, size)) * amp[:, None]).astype(np.float32)


def model(seed: int = 2, layers: int = 12, width: int = 128) -> dict[str, np.ndarray]:
    """A seeded stand-in for a small bfloat16 transformer checkpoint, with checkpoint-style
    names: an embedding, per layer a norm vector (values near 1) and attention and MLP
    matrices whose tails grow heavier with depth (Student-t, 30 degrees of freedom in the
    first layer down to 2.5 in the last) and whose rows (output channels) differ in range
    (a log-normal factor), then a final norm."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    t = {"model.embed_tokens.weight": rng.standard_normal((512, width)) * 0.02}
    for i in range(layers):
        df = 30.0 * (2.5 / 30.0) ** (i / max(1, layers - 1))
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + 0.05 * rng.standard_normal(width)
        for name, shape in (("self_attn.q_proj", (width, width)),
                            ("mlp.up_proj", (4 * width, width)),
                            ("mlp.down_proj", (width, 4 * width))):  # fmt: skip
            rows = np.exp(0.5 * rng.standard_normal((shape[0], 1)))
            t[p + name + ".weight"] = rng.standard_t(df, shape) * rows * 0.02
    t["model.norm.weight"] = 1 + 0.05 * rng.standard_normal(width)
    return {k: v.astype(ml_dtypes.bfloat16) for k, v in t.items()}


def tables() -> dict[str, str]:
    """The Markdown tables of the page, by marker name."""
    demo = study.sweep(study.demo_tensors(seed=0), FORMATS, SCALINGS)
    acts = {"activations": activations()}
    steps = study.sweep(acts, FORMATS, STEP_SCALINGS)
    steps_margin = study.sweep(acts, FORMATS, STEP_SCALINGS, margin=1)
    mrows = study.sweep(model(), MODEL_FORMATS, MODEL_SCALINGS)
    recipes = study.sweep(study.demo_tensors(seed=0), RECIPE_FORMATS, RECIPE_SCALINGS)
    e4m3 = [r for r in mrows if r.format == "float8_e4m3fn"]
    return {
        "demo": report.format_table(demo, markdown=True),
        "demo-summary": report.format_summary(study.summarize(demo), markdown=True),
        "model-top": report.format_table(report.worst(mrows, 2), markdown=True),
        "model-summary": report.format_summary(study.summarize(mrows), markdown=True),
        "delayed": report.format_table(steps, markdown=True),
        "delayed-margin": report.format_table(steps_margin, markdown=True),
        "recipes": report.format_summary(study.summarize(recipes), markdown=True),
        "model-roles": report.format_summary(study.summarize(e4m3, by="role"), markdown=True),
    }


def fill(text: str, parts: dict[str, str]) -> str:
    """Replace what lies between ``<!-- study:NAME -->`` and ``<!-- /study:NAME -->``."""
    for name, body in parts.items():
        pattern = re.compile(
            rf"(<!-- study:{re.escape(name)} -->\n).*?(<!-- /study:{re.escape(name)} -->)", re.S
        )
        if not pattern.search(text):
            raise ValueError(f"docs/study.md has no <!-- study:{name} --> block")
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


#: The figures :func:`draw` writes (the docs build draws them again into _generated/).
FIGURES = ("study.png", "study_model.png")


def draw(outdir: str | Path = DOCS) -> None:
    """Draw ``outdir/study.png`` (the demo, as in the table) and ``outdir/study_model.png``
    (the generated model: per-layer panel, bfloat16's infinite SQNR)."""
    from fp8kit.study.plot import plot_study

    outdir = Path(outdir)
    tensors = study.demo_tensors(seed=0)
    rows = study.sweep(tensors, FORMATS, SCALINGS)
    plot_study(rows, tensors, outdir / "study.png", title="fp8kit study (built-in demo)")
    tensors = model()
    rows = study.sweep(tensors, MODEL_FORMATS, MODEL_SCALINGS)
    plot_study(rows, tensors, outdir / "study_model.png",
               title="fp8kit study of a generated 12-layer bfloat16 model")  # fmt: skip


def build(outdir: str | Path = DOCS, *, plot: bool = True) -> None:
    """Rewrite ``outdir/study.md``'s tables and (with ``plot``) draw the figures."""
    outdir = Path(outdir)
    page = outdir / "study.md"
    page.write_text(fill(page.read_text(), tables()))
    if plot:
        draw(outdir)


if __name__ == "__main__":
    build()
