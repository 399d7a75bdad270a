r"""Query and text processing shared by the strong LLM-free retrieval stack (issue 16).

* :class:`Analyzer`: the BM25 analyser, :func:`~synapse_pt.retrieval.tokenize.tokenize`'s
  ``\w+`` tokens, optionally without English stop words (scikit-learn's list,
  ``ENGLISH_STOP_WORDS``) and Porter-stemmed (``nltk.stem.PorterStemmer``). The same analyser runs
  on documents and queries.
* :func:`neutralise_speakers`: a dense query with the conversation's speaker names removed. In a
  rendering ``"{speaker}: {text}"`` every turn of a speaker carries the name, so a query naming
  that speaker matches all of them and the content drowns; the speaker is used as a separate prior
  instead (:func:`~synapse_pt.retrieval.combine.speaker_prior`).
* :func:`named_speaker`: which of the two speakers a question names (``-1``: neither or both).
* :func:`resolve_pronouns`: a turn with first and second person replaced by the speakers' names.
* :func:`person_references`: how often a turn refers to its speaker and to its listener (first-
  versus second-person wording and their names): whose life the turn describes.
* :func:`split_sentences`: a turn's sentences (nltk's Punkt tokenizer with its default parameters:
  no trained model, nothing downloaded; it knows no abbreviations, so "Dr. Lee" is split after
  "Dr.", which costs a sentence-level signal little).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from synapse_pt.cache.texts import TextValueCache, cached_map, library_versions

from .tokenize import tokenize

__all__ = ["Analyzer", "english_stop_words", "named_speaker", "neutralise_speakers",
           "person_references", "porter_stem", "resolve_pronouns", "split_sentences",
           "split_sentences_many", "swap_speakers"]



@lru_cache(maxsize=1)
def english_stop_words() -> frozenset[str]:
    """scikit-learn's ``ENGLISH_STOP_WORDS`` (imported on first use: sklearn takes about a
    second to import)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem import PorterStemmer  # importing nltk takes about a second: only when used

    return PorterStemmer()


@lru_cache(maxsize=1)
def _punkt() -> Any:
    from nltk.tokenize import PunktSentenceTokenizer

    return PunktSentenceTokenizer()


@lru_cache(maxsize=1 << 16)
def porter_stem(token: str) -> str:
    """``nltk.stem.PorterStemmer().stem(token)`` (its default NLTK-extensions mode), memoised."""
    return _stemmer().stem(token)


@dataclass(frozen=True)
class Analyzer:
    """BM25 analyser: lowercase ``\\w+`` tokens, optionally stop-word-free and stemmed.

    >>> Analyzer(stopwords=True, stem=True)("Caroline went running with her friends")
    ['carolin', 'went', 'run', 'friend']
    """

    stopwords: bool = False
    stem: bool = False
    stop_list: frozenset[str] | None = field(default=None, repr=False)  # None: scikit-learn's

    def __call__(self, text: str) -> list[str]:
        tokens = tokenize(text)
        if self.stopwords:
            stop = english_stop_words() if self.stop_list is None else self.stop_list
            tokens = [t for t in tokens if t not in stop]
        if self.stem:
            tokens = [porter_stem(t) for t in tokens]
        return tokens

    @property
    def name(self) -> str:
        parts = [p for p, on in (("nostop", self.stopwords), ("porter", self.stem)) if on]
        return "+".join(["word", *parts])

    def many(self, texts: Sequence[str], cache: TextValueCache | None = None) -> list[list[str]]:
        """The tokens of each text, through ``cache`` when given (keyed by the analyser's name
        and the versions of the libraries behind it); a custom ``stop_list`` is not cached."""
        if self.stop_list is not None:
            cache = None
        identity = f"analyzer/{self.name}/" + library_versions("nltk", "scikit-learn")
        return cached_map(cache, identity, texts, lambda batch: [self(t) for t in batch])


def _name_pattern(names: Sequence[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True) if n)
    return re.compile(rf"\b(?:{alternatives})(?:'s|’s)?\b", flags=re.IGNORECASE)


def neutralise_speakers(text: str, speakers: Sequence[str]) -> str:
    """``text`` without the speakers' names (and their possessive ``'s``), spaces tidied.

    >>> neutralise_speakers("What did Caroline's mom give Melanie?", ["Caroline", "Melanie"])
    'What did mom give?'
    """
    if not any(speakers):
        return text
    out = _name_pattern(speakers).sub("", text)
    out = re.sub(r"\s+([?.!,;:])", r"\1", out)
    return re.sub(r"\s{2,}", " ", out).strip()


def swap_speakers(text: str, speakers: Sequence[str]) -> str:
    """``text`` with the two speakers' names exchanged (possessives kept).

    >>> swap_speakers("When did Melanie paint Caroline's portrait?", ["Caroline", "Melanie"])
    "When did Caroline paint Melanie's portrait?"
    """
    a, b = speakers
    if not a or not b:
        return text
    swap = {a.lower(): b, b.lower(): a}
    return re.sub(rf"\b({re.escape(a)}|{re.escape(b)})\b",
                  lambda m: swap[m.group(1).lower()], text, flags=re.IGNORECASE)


def named_speaker(text: str, speakers: Sequence[str]) -> int:
    """Index in ``speakers`` of the one speaker ``text`` names; ``-1`` if it names none or several.

    >>> named_speaker("When did Melanie paint a sunrise?", ["Caroline", "Melanie"])
    1
    """
    found = [i for i, name in enumerate(speakers)
             if name and _name_pattern([name]).search(text) is not None]
    return found[0] if len(found) == 1 else -1


# first and second person -> the speaker's and the listener's names ({s}, {l}); contractions first
_PERSON_RULES: tuple[tuple[str, str], ...] = (
    (r"i'm", "{s} is"), (r"i've", "{s} has"), (r"i'll", "{s} will"), (r"i'd", "{s} would"),
    (r"you're", "{l} is"), (r"you've", "{l} has"), (r"you'll", "{l} will"),
    (r"you'd", "{l} would"), (r"we're", "{s} and {l} are"), (r"we've", "{s} and {l} have"),
    (r"my|mine", "{s}'s"), (r"myself|me|i", "{s}"), (r"your|yours", "{l}'s"),
    (r"yourself|yourselves|you", "{l}"), (r"our|ours", "{s} and {l}'s"),
    (r"ourselves|we|us", "{s} and {l}"),
)
_PERSON = [(re.compile(rf"\b(?:{pattern})\b", flags=re.IGNORECASE), repl)
           for pattern, repl in _PERSON_RULES]


def resolve_pronouns(text: str, speaker: str, listener: str) -> str:
    """``text`` spoken by ``speaker`` to ``listener`` with first and second person replaced by
    their names, so a turn says whose life it describes ("you ran a race" -> "Melanie ran a
    race"). Apostrophes are normalised to ``'`` first.

    >>> resolve_pronouns("I'm proud of you and your kids, my friend!", "Caroline", "Melanie")
    "Caroline is proud of Melanie and Melanie's kids, Caroline's friend!"
    """
    out = text.replace("\u2019", "'")
    for pattern, repl in _PERSON:
        out = pattern.sub(repl.format(s=speaker, l=listener), out)
    return out


_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'll|i'd|me|my|mine|myself)\b",
                           flags=re.IGNORECASE)
_SECOND_PERSON = re.compile(
    r"\b(?:you|you're|you've|you'll|you'd|your|yours|yourself|yourselves)\b", flags=re.IGNORECASE)


def person_references(text: str, speaker: str, listener: str) -> tuple[int, int]:
    """``(to the speaker, to the listener)``: how many words of ``text`` (spoken by ``speaker`` to
    ``listener``) refer to each: first-person pronouns and the speaker's name, second-person
    pronouns and the listener's name (plural "we"/"our" refer to both and count for neither).

    >>> person_references("I ran a race, have you? Melanie said I'm fast", "Caroline", "Melanie")
    (2, 2)
    """
    text = text.replace("\u2019", "'")

    def named(name: str) -> int:
        return len(_name_pattern([name]).findall(text)) if name else 0

    return (len(_FIRST_PERSON.findall(text)) + named(speaker),
            len(_SECOND_PERSON.findall(text)) + named(listener))


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (Punkt with default parameters); ``[text]`` if it has none.

    >>> split_sentences("I went hiking. It was great! You?")
    ['I went hiking.', 'It was great!', 'You?']
    """
    sentences = [s for s in _punkt().tokenize(text) if s.strip()]
    return sentences or [text]


def split_sentences_many(texts: Sequence[str], cache: TextValueCache | None = None
                         ) -> list[list[str]]:
    """:func:`split_sentences` of each text, through ``cache`` when given."""
    return cached_map(cache, "sentences/punkt-default/" + library_versions("nltk"), texts,
                      lambda batch: [split_sentences(t) for t in batch])
