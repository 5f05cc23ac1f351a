"""Every ```python block of README.md and docs/*.md runs.

The blocks of a page run in order in one namespace, in a fresh interpreter (warnings are
errors) whose working directory is a temporary one.  A block with ``>>>`` prompts is a
doctest: its printed output must match (NORMALIZE_WHITESPACE and ELLIPSIS).
Any other block is executed, and its ``assert`` statements checked.
Pages whose examples use ``numba.cuda`` run in numba's CUDA simulator.

    python tests/test_docs_examples.py docs/rounding.md     # run one page's examples
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```python[ \t]*$")


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of every fenced ```python block, dedented."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start, i = m["indent"], i + 2, i + 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"unclosed ```python block at line {start - 1}")
        found.append((start, "\n".join(body) + "\n"))
        i += 1
    return found


def run_page(path: Path) -> int:
    """Run the page's blocks; print each failure; return the number of failures."""
    namespace: dict = {"__name__": "__docs__"}
    flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    runner = doctest.DocTestRunner(optionflags=flags)
    parser = doctest.DocTestParser()
    failures = 0
    for lineno, code in python_blocks(path.read_text()):
        where = f"{path.name}:{lineno}"
        if re.search(r"^>>> ", code, re.M):
            test = parser.get_doctest(code, namespace, where, str(path), lineno - 1)
            failures += runner.run(test, clear_globs=False).failed
            namespace.update(test.globs)  # a DocTest works on a copy
        else:
            try:
                exec(compile(code, where, "exec"), namespace)
            except BaseException as exc:  # report and go on with the next block
                import traceback

                print(f"--- {where}: {type(exc).__name__}: {exc}")
                traceback.print_exc()
                failures += 1
    return failures


def uses_cuda(text: str) -> bool:
    return bool(re.search(r"from numba import cuda|numba\.cuda", text))


PAGES_WITH_EXAMPLES = [p for p in PAGES if python_blocks(p.read_text())]


def test_python_blocks_are_found():
    text = "a\n```python\nx = 1\n```\n  ```python\n  y = 2\n  ```\n```bash\nls\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (6, "y = 2\n")]
    assert len(PAGES_WITH_EXAMPLES) >= 10


@pytest.mark.parametrize(
    "page", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in PAGES_WITH_EXAMPLES]
)
def test_examples_run(page, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if uses_cuda(page.read_text()):
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    proc = subprocess.run(
        [sys.executable, "-W", "error", __file__, str(page)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"examples of {page.name} failed:\n{proc.stdout}\n{proc.stderr}"


if __name__ == "__main__":
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":  # (as tests/cuda_sim/conftest.py)
        from cuda_sim.gil import yield_while_polling

        yield_while_polling()
    sys.exit(1 if run_page(Path(sys.argv[1]).resolve()) else 0)
