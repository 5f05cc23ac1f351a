"""Rewrite the generated blocks of docs/promotion.md from fp8kit.promotion.docs_block.

Run from the repository root: ``python scripts/promotion_docs.py``.  A block is the text
between ``<!-- promotion:NAME -->`` and ``<!-- /promotion:NAME -->``;
tests/test_promotion.py checks that each is current.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's fp8kit
from fp8kit.promotion import docs_block  # noqa: E402

DOC = ROOT / "docs" / "promotion.md"


def main() -> None:
    text = DOC.read_text()
    pattern = re.compile(r"<!-- promotion:(\S+) -->\n(.*?)<!-- /promotion:\1 -->", re.S)
    text = pattern.sub(
        lambda m: f"<!-- promotion:{m[1]} -->\n{docs_block(m[1])}\n<!-- /promotion:{m[1]} -->",
        text,
    )
    DOC.write_text(text)
    print(DOC)


if __name__ == "__main__":
    main()
