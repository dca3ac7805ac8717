"""The article before a word that a message fills in at run time: "an int", "a str", "an 8-byte frame"."""

from __future__ import annotations

import re

# Words that start with a vowel letter but a consonant sound ("a uint32", "a unicode string", "a one-off").
# (Patterns, compiled by re.match on first use and cached there: only an error message needs them, and compiling
# the two costs every process that imports this module a millisecond.)
_CONSONANT_SOUNDS = r"(?i)^(uni|use|usu|uti|uint|ur[aeiou]|eu|one\b|once)"
# Words that start with a consonant letter but a vowel sound.
_VOWEL_SOUNDS = r"(?i)^(hour|honest|honou?r|heir)"


def article(word: str) -> str:
    """'a' or 'an', as said before `word` (a type name, a number such as 8 or 11,000, a plain word)."""
    if not word:
        return "a"
    if word[0].isdigit():
        return "an" if _number_starts_with_a_vowel(word) else "a"
    if re.match(_VOWEL_SOUNDS, word):
        return "an"
    if word[0].lower() in "aeiou" and not re.match(_CONSONANT_SOUNDS, word):
        return "an"
    return "a"


def with_article(word: str) -> str:
    return f"{article(word)} {word}"


def _number_starts_with_a_vowel(text: str) -> bool:
    """8, 11, 18, 80-89, 800-899, 8,000, 11,000, 18,000,000... are said with 'an'."""
    digits = re.match(r"[\d,_]+", text)
    whole = (digits.group(0) if digits else text).replace("_", ",")
    if "," in whole:
        lead = whole.split(",")[0]
    else:
        # said in groups of three from the right: 11000 is "eleven thousand"
        lead = whole[: len(whole) % 3 or 3] if len(whole) > 3 else whole
    return lead.startswith("8") or lead in ("11", "18")
