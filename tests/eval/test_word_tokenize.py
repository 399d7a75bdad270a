"""``word_tokenize`` is ``nltk.word_tokenize`` given nltk's English ``punkt_tab`` data.

The reference: the bundled model written out as the four ``punkt_tab/english`` files nltk reads
(its own file format), then nltk's public ``nltk.word_tokenize`` run on every LoCoMo-10 gold answer
and on sentences made to exercise abbreviations, initials and quotes.
"""

from __future__ import annotations

from pathlib import Path

import nltk
import pytest
from nltk import tokenize as nltk_tokenize

from synapse_pt.eval.qa.scorers.word_tokenize import word_tokenize

CASES = [
    "i went to paris. it was fun.",
    "mr. smith and dr. jones met on jan. 5. they talked.",
    "j. r. r. tolkien wrote it. she loved it!",
    "she said 'wow' and left... then? nothing.",
    "the u.s. team won. caroline's friend didn't go.",
    "\"charlotte's web\" and 'the hobbit'. both.",
    "at 3 p.m. we left. at 5 a.m. we came back.",
    "",
]


def write_punkt_tab(root: Path) -> None:
    """The bundled English model in nltk's punkt_tab layout (tab-separated, one item a line)."""
    from punkt.data import english

    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True)
    (lang / "abbrev_types.txt").write_text("\n".join(sorted(english.ABBREV_TYPES)) + "\n")
    (lang / "sent_starters.txt").write_text("\n".join(sorted(english.SENT_STARTERS)) + "\n")
    (lang / "collocations.tab").write_text(
        "".join(f"{a}\t{b}\n" for a, b in sorted(english.COLLOCATIONS)))
    (lang / "ortho_context.tab").write_text(
        "".join(f"{k}\t{v}\n" for k, v in sorted(english.ORTHO_CONTEXT.items())))


@pytest.fixture()
def nltk_with_punkt_tab(tmp_path: Path):
    write_punkt_tab(tmp_path)
    nltk.data.path.insert(0, str(tmp_path))
    nltk_tokenize._get_punkt_tokenizer.cache_clear()
    try:
        yield nltk.word_tokenize
    finally:
        nltk.data.path.remove(str(tmp_path))
        nltk_tokenize._get_punkt_tokenizer.cache_clear()


def test_nltk_is_the_pinned_version() -> None:
    assert nltk.__version__ == "3.9.1"  # A-Mem's requirements.txt


def test_equals_nltk_word_tokenize_on_cases(nltk_with_punkt_tab) -> None:
    for text in CASES:
        assert word_tokenize(text) == nltk_with_punkt_tab(text), text


@pytest.mark.locomo
def test_equals_nltk_word_tokenize_on_every_locomo_answer(nltk_with_punkt_tab, locomo) -> None:
    texts = [str(q.answer).lower() for q in locomo.questions() if q.answer is not None]
    texts += [t.content.lower() for t in list(locomo.turns())[:1500]]
    assert len(texts) > 3000
    mismatches = [t for t in texts if word_tokenize(t) != nltk_with_punkt_tab(t)]
    assert mismatches == []
