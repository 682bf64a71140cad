"""Chapters written to the book's template stay short: at most 2,500 words of prose in their markdown cells (math,
Markdown tables and code left out). The rendered-page count (tests/test_book_html.py) also counts text that code
prints; this check needs no build, so it holds from the commit on."""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 2500
TEMPLATE_CHAPTERS = ("03_peft", "04_ov_key_heads", "05_linearity")


def prose_words(markdown: str) -> int:
    """Words of ``markdown`` outside display and inline math and Markdown table rows."""
    text = re.sub(r"\$\$.*?\$\$", " ", markdown, flags=re.DOTALL)
    text = re.sub(r"\$[^$]*\$", " ", text)
    text = re.sub(r"^\s*\|.*\|\s*$", " ", text, flags=re.MULTILINE)
    return sum(1 for w in text.split() if re.search(r"\w", w))


def test_prose_words_leave_math_and_tables_out() -> None:
    assert prose_words("One two $a + b$ three.\n\n| a | b |\n|---|---|\n$$x = y$$ four") == 4


@pytest.mark.parametrize("name", TEMPLATE_CHAPTERS)
def test_chapter_prose_is_at_most_2500_words(name: str) -> None:
    nb = jupytext.read(ROOT / "chapters" / f"{name}.py", fmt="py:percent")
    words = prose_words("\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    assert words <= MAX_WORDS, f"{name}: {words} words of prose in its markdown cells (at most {MAX_WORDS})"
