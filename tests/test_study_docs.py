"""docs/study.md: its tables are what docs/make_study.py generates now."""

import importlib.util
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def load_generator():
    spec = importlib.util.spec_from_file_location("make_study", DOCS / "make_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_tables_are_current():
    gen = load_generator()
    page = (DOCS / "study.md").read_text()
    tables = gen.tables()
    assert set(tables) == set(re.findall(r"<!-- study:([\w-]+) -->", page))
    assert gen.fill(page, tables) == page, "run: python docs/make_study.py"
    for figure in gen.FIGURES:
        assert (DOCS / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({figure})" in page


def test_build_writes_page_and_figure(tmp_path):
    gen = load_generator()
    page = (DOCS / "study.md").read_text()
    blank = re.sub(r"(<!-- study:([\w-]+) -->\n).*?(<!-- /study:\2 -->)", r"\1\3", page,
                   flags=re.S)  # fmt: skip
    (tmp_path / "study.md").write_text(blank)
    gen.build(tmp_path, plot=False)
    assert (tmp_path / "study.md").read_text() == page
