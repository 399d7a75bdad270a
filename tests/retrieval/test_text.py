"""Query and text processing (synapse_pt/retrieval/text.py), by hand and against the libraries."""

from __future__ import annotations

from nltk.stem import PorterStemmer
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from synapse_pt.retrieval.text import (
    Analyzer,
    named_speaker,
    neutralise_speakers,
    resolve_pronouns,
    split_sentences,
)


def test_analyzer_variants_by_hand() -> None:
    text = "Melanie's kids were running to the beaches"
    assert Analyzer()(text) == ["melanie", "s", "kids", "were", "running", "to", "the", "beaches"]
    assert Analyzer(stopwords=True)(text) == ["melanie", "s", "kids", "running", "beaches"]
    stem = PorterStemmer().stem
    assert Analyzer(stopwords=True, stem=True)(text) == [stem(w) for w in (
        "melanie", "s", "kids", "running", "beaches")] == ["melani", "s", "kid", "run", "beach"]
    assert {"the", "to", "were"} <= ENGLISH_STOP_WORDS
    assert Analyzer(stem=True).name == "word+porter"


def test_neutralise_speakers_by_hand() -> None:
    speakers = ["Caroline", "Melanie"]
    assert neutralise_speakers("When did Caroline go to the LGBTQ support group?", speakers) == \
        "When did go to the LGBTQ support group?"
    assert neutralise_speakers("What is Melanie's hobby?", speakers) == "What is hobby?"
    assert neutralise_speakers("What do caroline and MELANIE share?", speakers) == \
        "What do and share?"
    # names inside other words stay
    assert neutralise_speakers("Did Carolines visit?", speakers) == "Did Carolines visit?"
    assert neutralise_speakers("No names here.", ["", ""]) == "No names here."


def test_named_speaker_one_none_or_both() -> None:
    speakers = ["Caroline", "Melanie"]
    assert named_speaker("What did Caroline research?", speakers) == 0
    assert named_speaker("What is Melanie's hobby?", speakers) == 1
    assert named_speaker("What do Caroline and Melanie share?", speakers) == -1
    assert named_speaker("What happened in May?", speakers) == -1


def test_split_sentences() -> None:
    assert split_sentences("Hey! I painted a lake. Did you see it?") == [
        "Hey!", "I painted a lake.", "Did you see it?"]
    # untrained Punkt knows no abbreviations: it splits after "Dr." (documented)
    assert split_sentences("Dr. Lee liked it.") == ["Dr.", "Lee liked it."]
    assert split_sentences("no punctuation") == ["no punctuation"]


def test_resolve_pronouns_by_hand() -> None:
    assert resolve_pronouns("You ran a charity race? I'm so proud of you!", "Caroline",
                            "Melanie") == ("Melanie ran a charity race? Caroline is so proud "
                                           "of Melanie!")
    assert resolve_pronouns("We met my mom; your dog liked us.", "Ann", "Bob") == \
        "Ann and Bob met Ann's mom; Bob's dog liked Ann and Bob."
    # whole words only, curly apostrophes too
    assert resolve_pronouns("Imagine youth music. I\u2019ve seen it.", "Ann", "Bob") == \
        "Imagine youth music. Ann has seen it."


def test_cached_analyses_and_sentence_splits_equal_the_plain_functions(tmp_path) -> None:
    from synapse_pt.cache.texts import TextValueCache
    from synapse_pt.retrieval.text import split_sentences_many

    texts = ["Caroline went running with her friends. It rained!", "", "Dr. Lee's kids ran."]
    analyzer = Analyzer(stopwords=True, stem=True)
    cache = TextValueCache(tmp_path / "text.sqlite")
    for _ in range(2):  # computed, then served from the cache
        assert analyzer.many(texts, cache) == [analyzer(t) for t in texts]
        assert split_sentences_many(texts, cache) == [split_sentences(t) for t in texts]
    assert cache.hits == 6 and cache.misses == 6
    # a different analyser is a different function: not served the stemmed tokens
    assert Analyzer(stopwords=True).many(texts, cache) == [Analyzer(stopwords=True)(t)
                                                           for t in texts]
    custom = Analyzer(stopwords=True, stop_list=frozenset({"went"}))
    assert custom.many(texts, cache) == [["caroline", "running", "with", "her", "friends", "it",
                                          "rained"], [], ["dr", "lee", "s", "kids", "ran"]]
    assert cache.misses == 9  # the custom stop list bypassed the cache
