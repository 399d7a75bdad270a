"""LLM-free concept extraction from libraries made for keyphrases (SPEC §1.1, §2).

Beside the hand-written :class:`~synapse_pt.graph.extraction.KeywordConceptExtractor`:

* :class:`KeyBERTConceptExtractor`: KeyBERT (Grootendorst) with the memory's own encoder (the
  bundled MiniLM): candidate n-grams of the window (scikit-learn ``CountVectorizer``, English stop
  words), ranked by the cosine of their embedding with the window's embedding, optionally
  diversified by maximal marginal relevance;
* :class:`YakeConceptExtractor`: YAKE! (Campos et al.), statistical keywords from term position,
  frequency, casing and context, no embedding at all.

Both take every window at once, read the bare utterances (``Turn.content``; the speaker prefix of
the turn template would make the names candidates), drop the speakers' names unless
``include_speakers`` (SPEC §1.1), and are named ``llm-free-keybert`` / ``llm-free-yake`` in configs
and result rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import yake
from keybert import KeyBERT
from keybert.backend import BaseEmbedder

from synapse_pt.data.schema import Turn

from ..models.base import TextEncoder
from .extraction import ConceptExtractor, clean_concepts, drop_speakers, window_speakers

__all__ = ["EncoderBackend", "KeyBERTConceptExtractor", "YakeConceptExtractor", "window_text"]


def window_text(window: Sequence[Turn]) -> str:
    """The window's utterances (image captions included), one per line, without speakers."""
    return "\n".join(t.content for t in window)


def _check_common(cls: str, max_concepts: int, ngram_max: int) -> None:
    if max_concepts < 1:
        raise ValueError(f"{cls}: max_concepts must be >= 1, got {max_concepts}")
    if ngram_max < 1:
        raise ValueError(f"{cls}: ngram_max must be >= 1, got {ngram_max}")


class EncoderBackend(BaseEmbedder):
    """Adapts a :class:`~synapse_pt.models.base.TextEncoder` to KeyBERT's backend interface
    (``embed(documents) -> ndarray``), so KeyBERT embeds with the bundled, cached MiniLM."""

    def __init__(self, encoder: TextEncoder) -> None:
        super().__init__(embedding_model=encoder)
        self.encoder = encoder

    def embed(self, documents: list[str], verbose: bool = False) -> np.ndarray:
        return self.encoder.encode(list(documents)).float().cpu().numpy()


class KeyBERTConceptExtractor(ConceptExtractor):
    r"""KeyBERT keyphrases of each window, embedded with the memory's encoder.

    For a window :math:`w` with candidate n-grams :math:`c` (1 to ``ngram_max`` words, English
    stop words removed), KeyBERT keeps the top ``max_concepts`` by
    :math:`\cos(\mathbf{h}_c, \mathbf{h}_w)`; with ``use_mmr`` by maximal marginal relevance

    .. math::
        \arg\max_{c \notin K} \big[(1 - \lambda) \cos(\mathbf{h}_c, \mathbf{h}_w)
        - \lambda \max_{k \in K} \cos(\mathbf{h}_c, \mathbf{h}_k)\big]

    with :math:`\lambda` = ``diversity``. All windows go to one ``extract_keywords`` call (one
    vocabulary, each candidate embedded once, through the encoder's disk cache).

    Args:
        encoder: the text encoder (the bundled MiniLM in every config).
        max_concepts: concepts per window (default 6).
        ngram_max: longest candidate phrase in words (default 2).
        use_mmr: diversify with MMR (default True).
        diversity: :math:`\lambda` of MMR (default 0.5).
        include_speakers: keep speakers' names as concepts (default False).
    """

    llm_free = True

    def __init__(self, encoder: TextEncoder, max_concepts: int = 6, *, ngram_max: int = 2,
                 use_mmr: bool = True, diversity: float = 0.5,
                 include_speakers: bool = False) -> None:
        _check_common("KeyBERTConceptExtractor", max_concepts, ngram_max)
        if not 0.0 <= diversity <= 1.0:
            raise ValueError(f"KeyBERTConceptExtractor: diversity must lie in [0, 1], "
                             f"got {diversity}")
        self.encoder = encoder
        self.max_concepts = max_concepts
        self.ngram_max = ngram_max
        self.use_mmr = use_mmr
        self.diversity = diversity
        self.include_speakers = include_speakers
        self.model = KeyBERT(model=EncoderBackend(encoder))
        self.name = "llm-free-keybert"

    def extract(self, windows: Sequence[Sequence[Turn]]) -> list[list[str]]:
        if not windows:
            return []
        docs = [window_text(w) for w in windows]
        # over-ask: speaker names and duplicates are dropped afterwards
        top_n = self.max_concepts + (0 if self.include_speakers else 2)
        found = self.model.extract_keywords(
            docs, keyphrase_ngram_range=(1, self.ngram_max), stop_words="english", top_n=top_n,
            use_mmr=self.use_mmr, diversity=self.diversity)
        if len(docs) == 1:  # KeyBERT returns a flat list for a single document
            found = [found]
        out = []
        for window, pairs in zip(windows, found, strict=True):
            concepts = clean_concepts([p for p, _ in pairs])
            if not self.include_speakers:
                concepts = drop_speakers(concepts, window_speakers(window))
            out.append(concepts[: self.max_concepts])
        return out


class YakeConceptExtractor(ConceptExtractor):
    """YAKE! keywords of each window (lower YAKE score = more relevant).

    Args:
        max_concepts: concepts per window (default 6).
        ngram_max: longest keyword in words (YAKE's ``n``, default 2).
        dedup_lim: YAKE's de-duplication threshold (default 0.9).
        window_size: YAKE's co-occurrence window (default 1).
        include_speakers: keep speakers' names as concepts (default False).
    """

    llm_free = True

    def __init__(self, max_concepts: int = 6, *, ngram_max: int = 2, dedup_lim: float = 0.9,
                 window_size: int = 1, include_speakers: bool = False) -> None:
        _check_common("YakeConceptExtractor", max_concepts, ngram_max)
        if not 0.0 < dedup_lim <= 1.0:
            raise ValueError(f"YakeConceptExtractor: dedup_lim must lie in (0, 1], "
                             f"got {dedup_lim}")
        if window_size < 1:
            raise ValueError(f"YakeConceptExtractor: window_size must be >= 1, "
                             f"got {window_size}")
        self.max_concepts = max_concepts
        self.ngram_max = ngram_max
        self.include_speakers = include_speakers
        top = max_concepts + (0 if include_speakers else 2)
        self.model = yake.KeywordExtractor(lan="en", n=ngram_max, dedup_lim=dedup_lim,
                                           window_size=window_size, top=top)
        self.name = "llm-free-yake"

    def extract(self, windows: Sequence[Sequence[Turn]]) -> list[list[str]]:
        out = []
        for window in windows:  # YAKE scores one document at a time (pure Python, no model)
            pairs = self.model.extract_keywords(window_text(window))
            concepts = clean_concepts([kw for kw, _ in sorted(pairs, key=lambda p: p[1])])
            if not self.include_speakers:
                concepts = drop_speakers(concepts, window_speakers(window))
            out.append(concepts[: self.max_concepts])
        return out
