"""The library-backed LLM-free extractors, checked against the libraries called directly."""

from __future__ import annotations

import yake

from synapse_pt.graph.consolidation import windows_of
from synapse_pt.graph.extraction import clean_concepts
from synapse_pt.graph.keyphrase import KeyBERTConceptExtractor, YakeConceptExtractor, window_text
from synapse_pt.models.hashing import HashingEncoder


def sample_windows(sample_dataset):
    conv = sample_dataset.conversations[0]
    return conv, windows_of(list(conv.turns()), 5)


def test_yake_equals_the_library_without_the_speakers(sample_dataset) -> None:
    conv, windows = sample_windows(sample_dataset)
    speakers = {conv.speaker_a.casefold(), conv.speaker_b.casefold()}
    ext = YakeConceptExtractor(max_concepts=4)
    lib = yake.KeywordExtractor(lan="en", n=2, dedup_lim=0.9, window_size=1, top=6)
    for window, got in zip(windows, ext.extract(windows), strict=True):
        ranked = [kw for kw, _ in sorted(lib.extract_keywords(window_text(window)),
                                         key=lambda p: p[1])]
        expected = [c for c in clean_concepts(ranked) if c.casefold() not in speakers][:4]
        assert got == expected
    assert ext.name == "llm-free-yake" and ext.llm_free


def test_keybert_phrases_come_from_the_window(sample_dataset) -> None:
    conv, windows = sample_windows(sample_dataset)
    ext = KeyBERTConceptExtractor(HashingEncoder(64), max_concepts=3, ngram_max=1)
    out = ext.extract(windows)
    assert len(out) == len(windows) and ext.name == "llm-free-keybert"
    for window, concepts in zip(windows, out, strict=True):
        assert 1 <= len(concepts) <= 3
        words = window_text(window).lower()
        assert all(c.lower() in words for c in concepts)  # unigrams: words of the window
        assert not {c.casefold() for c in concepts} & {conv.speaker_a.casefold(),
                                                       conv.speaker_b.casefold()}
    # one window alone: KeyBERT returns a flat list for a single document; still one list of
    # the window's own words
    (single,) = ext.extract(windows[:1])
    assert 1 <= len(single) <= 3
    assert all(c.lower() in window_text(windows[0]).lower() for c in single)


def test_speakers_kept_on_request(sample_dataset) -> None:
    _, windows = sample_windows(sample_dataset)
    kept = YakeConceptExtractor(max_concepts=20, include_speakers=True).extract(windows)
    assert any("Nora" in c or "Tomas" in c for cs in kept for c in cs)
