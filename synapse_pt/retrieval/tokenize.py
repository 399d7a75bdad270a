r"""The one tokeniser for BM25 corpora and queries (SPEC §1.2 step 1).

``tokenize(text)`` lowercases the text and returns its maximal runs of Unicode word characters
(regex ``\w+``: letters, digits, underscore), in order, repeats kept. Punctuation and whitespace
separate tokens, so ``"Caroline's"`` gives ``["caroline", "s"]`` and matches a query for
``"Caroline"``. No stemming, no stop-word list, no downloaded resources: BM25's idf discounts
frequent words within each conversation, and the same function runs on corpus and queries.
"""

from __future__ import annotations

import re

__all__ = ["tokenize"]

_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    r"""Lowercase ``text`` and split it into ``\w+`` word tokens.

    >>> tokenize("Caroline's pottery class -- 7 May, 2023!")
    ['caroline', 's', 'pottery', 'class', '7', 'may', '2023']
    """
    return _WORD.findall(text.lower())
