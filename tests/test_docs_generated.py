"""The generated blocks of the docs pages are current, and the pages agree with the README.

The site regenerates every block while it builds (docs/_ext/fp8kit_docs.py); the committed
copies, which GitHub shows, must be what the code generates now.  Rewrite them with
``python docs/_ext/fp8kit_docs.py``.
"""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def load_extension():
    spec = importlib.util.spec_from_file_location("fp8kit_docs", DOCS / "_ext" / "fp8kit_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXT = load_extension()
PAGES = EXT.pages()


@pytest.mark.parametrize("page", [pytest.param(p, id=p.name) for p in PAGES])
def test_generated_blocks_are_current(page):
    text = page.read_text()
    assert EXT.fill(text) == text, "stale generated block: run python docs/_ext/fp8kit_docs.py"


def test_every_table_page_has_its_blocks():
    names = {m["name"] for p in PAGES for m in EXT.BLOCK.finditer(p.read_text())}
    assert {"format-table", "more-formats-table", "cast-table", "rounding-table"} <= names
    assert {"cast-to-more-table", "cast-from-more-table"} <= names
    assert {"p3109-table", "compare-tables"} <= names
    assert {"promotion:knobs", "promotion:TORCH", "promotion:disagreements"} <= names
    assert {"study:demo", "api:formats", "api:promotion", "api:study"} <= names
    assert {f"api:{s}" for s in EXT.API_SECTIONS} | {"api:reexports"} <= names


def test_unknown_blocks_are_refused():
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        EXT.fill("<!-- nope -->\nx\n<!-- /nope -->")
    with pytest.raises(ValueError, match="unknown api section 'nope'"):
        EXT.generate("api:nope")


def test_api_reference_covers_every_public_name():
    import fp8kit

    text = "\n".join(EXT.api_block(s) for s in [*EXT.API_SECTIONS, "reexports"])
    for name in fp8kit.__all__:
        assert re.search(rf"\b{re.escape(EXT.home_of(name))}\b", text), name
    for module in (fp8kit.promotion, fp8kit.study):
        for name in module.__all__:
            assert f"{module.__name__}.{name}" in text, name


def test_getting_started_has_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    block = re.search(
        r"<!-- ci:commands -->\n(```bash\n.*?```)\n<!-- /ci:commands -->", readme, re.S
    )
    assert block, "README.md has no ci:commands block"
    assert block[1] in (DOCS / "getting_started.md").read_text()


def test_readme_says_how_to_build_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert "python -m sphinx -W -b html docs docs/_build/html" in readme
    assert (
        "python -m sphinx -W -b html docs docs/_build/html"
        in (DOCS / "getting_started.md").read_text()
    )


def test_every_page_is_in_the_toctree():
    index = (DOCS / "index.md").read_text()
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, re.S)[1]
    lines = [line.strip() for line in toctree.splitlines() if line.strip() and ":" not in line]
    entries = {re.sub(r"^.*<(.+)>$", r"\1", line) for line in lines}  # "Title <page>" too
    assert entries == {p.stem for p in PAGES} - {"index"}
