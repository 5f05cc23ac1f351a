"""Generate the worked study of docs/study.md: its tables (between the ``<!-- study:NAME -->``
markers) and the figure docs/study.png.

    python docs/make_study.py            # rewrite docs/study.md and docs/study.png

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


def activations(seed: int = 1, steps: int = 64, size: int = 4096) -> np.ndarray:
    """A seeded stand-in for one activation tensor recorded over training steps (leading
    axis): normal values whose range swings slowly (a factor e**1.5 up and down over the
    run) and jitters from step to step (x0.8 to x1.25)."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    amp = np.exp(1.5 * np.sin(2 * np.pi * t / steps)) * rng.uniform(0.8, 1.25, steps)
    return (rng.standard_normal((steps, size)) * amp[:, None]).astype(np.float32)


def tables() -> dict[str, str]:
    """The Markdown tables of the page, by marker name."""
    demo = study.sweep(study.demo_tensors(seed=0), FORMATS, SCALINGS)
    acts = {"activations": activations()}
    steps = study.sweep(acts, FORMATS, STEP_SCALINGS)
    steps_margin = study.sweep(acts, FORMATS, STEP_SCALINGS, margin=1)
    return {
        "demo": report.format_table(demo, markdown=True),
        "delayed": report.format_table(steps, markdown=True),
        "delayed-margin": report.format_table(steps_margin, markdown=True),
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


def build(outdir: str | Path = DOCS, *, plot: bool = True) -> None:
    """Rewrite ``outdir/study.md``'s tables and (with ``plot``) draw ``outdir/study.png``."""
    outdir = Path(outdir)
    page = outdir / "study.md"
    page.write_text(fill(page.read_text(), tables()))
    if plot:
        from fp8kit.study.plot import plot_study

        tensors = study.demo_tensors(seed=0)
        rows = study.sweep(tensors, FORMATS, SCALINGS)
        plot_study(rows, tensors, outdir / "study.png", title="fp8kit study (built-in demo)")


if __name__ == "__main__":
    build()
