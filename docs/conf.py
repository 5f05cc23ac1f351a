"""Sphinx configuration of fp8kit's documentation.

Build it from the repository root with ``python -m sphinx -W -b html docs docs/_build/html``.
The pages are Markdown (MyST), readable on GitHub as they are; every generated block of them
(the tables of formats, cast rules and promotion pairs, the worked study, the API listing) is
generated again from the code by ``_ext/fp8kit_docs.py`` while the site is built.  The build
reaches no network: no intersphinx, no remote images.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # this checkout's fp8kit, installed or not

import fp8kit  # noqa: E402

project = "fp8kit"
author = "fp8kit developers"
copyright = "fp8kit developers"  # noqa: A001
release = version = fp8kit.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "numpydoc",
    "fp8kit_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]

# MyST: GitHub-style anchors for `page.md#heading` links, $...$ untouched, tables as is.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# Autodoc + numpydoc.  Members are listed by autodoc (`:members:` in api.md), not by
# numpydoc's autosummary tables; type hints stay in the signature.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# Missing sections are build errors under -W: every public function documents its
# parameters and what it returns, and shows an example.
# Properties and constants are documented by a sentence; dataclasses whose fields are
# documented as Attributes need no Parameters section.  tests/test_docs_docstrings.py
# checks the Raises sections, which numpydoc does not.
numpydoc_validation_checks = {"PR01", "PR02", "RT01", "EX01"}
numpydoc_validation_exclude = {
    r"\.__\w+__$",
    r"^fp8kit\.FloatFormat\.(?!code_value$)\w+$",  # properties
    r"^fp8kit\.promotion\.[A-Z][A-Z0-9_]*$",  # presets and type lists
    r"^fp8kit\.mma\.[A-Z][A-Z0-9_]*$",  # the lists of architectures and kinds
    r"^fp8kit\.study\.DelayedScaling\.history$",
    r"^fp8kit\.study\.Scaling\.label$",
}
numpydoc_validation_overrides = {"PR01": [r"\nAttributes\n-+\n"]}

highlight_language = "python3"
pygments_style = "sphinx"

html_theme = "pydata_sphinx_theme"
html_title = f"fp8kit {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_theme_options["header_links_before_dropdown"] = 7
html_sidebars = {"**": []}  # every page is top-level: no section navigation to show
html_static_path = []
html_last_updated_fmt = None
