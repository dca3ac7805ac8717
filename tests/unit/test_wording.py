"""The article a message puts before a word it fills in: "item 0 is an int", "an 8-byte frame"."""

from __future__ import annotations

import pytest

from scaler.utility.wording import article, with_article


@pytest.mark.parametrize(("word", "expected"), [
    ("int", "an"), ("str", "a"), ("object", "an"), ("ObjectRequest", "an"), ("uint32", "a"), ("Hello", "a"),
    ("8", "an"), ("11", "an"), ("18,000", "an"), ("80", "an"), ("1", "a"), ("100", "a"), ("11000", "an"),
    ("110000", "a"), ("800", "an"), ("hour", "an"), ("unicode", "a"), ("event", "an"),
])
def test_the_article_fits_the_word(word: str, expected: str) -> None:
    assert article(word) == expected


def test_with_article_puts_it_before_the_word() -> None:
    assert with_article("int") == "an int" and with_article("list") == "a list"
