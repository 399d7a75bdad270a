"""GAAMA's graph (SPEC §2): node kinds, typed edges stored in both directions, one conversation's
graph while it is built (:class:`GraphBuilder`) and once embedded (:class:`Block`), its episodes as
the code writes them, and the LLM-free build.

The LLM-free build (``gaama-llm-free`` in every result row): facts are the sentences of each
turn with first and second person replaced by the speakers' names
(:func:`~synapse_pt.retrieval.text.resolve_pronouns`), so each reads standalone, ``DERIVED_FROM``
their episode; concepts (snake_case topic labels, never a person's name) come from the configured
LLM-free extractor, at most ``concepts_per_episode`` per episode (``HAS_CONCEPT``), with
``ABOUT_CONCEPT`` from each fact to the concepts of its episode that it mentions; no reflections.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from synapse_pt.data.schema import Dialogue, Turn
from synapse_pt.graph.extraction import ConceptExtractor, drop_speakers
from synapse_pt.retrieval.text import resolve_pronouns, split_sentences

EPISODE, FACT, CONCEPT, REFLECTION = "episode", "fact", "concept", "reflection"
EDGE_TYPES = ("NEXT", "DERIVED_FROM", "DERIVED_FROM_FACT", "HAS_CONCEPT", "ABOUT_CONCEPT")


def concept_label(text: str) -> str:
    """A topic label in GAAMA's snake_case form (``"pottery class"`` -> ``"pottery_class"``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


@dataclass
class Block:
    """One conversation's graph: node ``kind``/``text``/``covers`` (the LoCoMo turns a node's
    content comes from) lists, local ``edge_index`` ``[2, E]``, edge types ``[E]``, the node
    embeddings ``x`` and, for the LLM build, ``stored`` ``[N]`` bool: the nodes whose row in
    the code's vector store is this conversation's (``None``: all)."""

    sample_id: str
    kind: list[str]
    text: list[str]
    covers: list[tuple[str, ...]]
    timestamp: list[Any]
    speaker: list[str | None]
    edge_index: torch.Tensor
    edge_type: torch.Tensor
    x: torch.Tensor
    stored: torch.Tensor | None = None


class GraphBuilder:
    """Nodes and typed edges (both directions) of one conversation while it is built."""

    def __init__(self) -> None:
        self.kind: list[str] = []
        self.text: list[str] = []
        self.covers: list[tuple[str, ...]] = []
        self.stamp: list[Any] = []
        self.who: list[str | None] = []
        self.edges: list[tuple[int, int, int]] = []
        self.concepts: dict[str, int] = {}

    def node(self, kind: str, text: str, covers: tuple[str, ...], stamp: Any,
             who: str | None = None) -> int:
        self.kind.append(kind)
        self.text.append(text)
        self.covers.append(covers)
        self.stamp.append(stamp)
        self.who.append(who)
        return len(self.kind) - 1

    def concept(self, label: str, text: str | None = None) -> int | None:
        """The node of a concept label (created on first use, its text ``text``, by default the
        label's words, ``pottery class``; ``None`` for an empty label)."""
        if not label:
            return None
        if label not in self.concepts:
            self.concepts[label] = self.node(
                CONCEPT, label.replace("_", " ") if text is None else text, (), None)
        return self.concepts[label]

    def link(self, a: int, b: int, edge: str) -> None:
        t = EDGE_TYPES.index(edge)
        self.edges.extend([(a, b, t), (b, a, t)])


def episode_texts(d: Dialogue) -> dict[str, str]:
    """``{dia_id: episode text}`` as GAAMA's LoCoMo loader writes an event's content
    (``[<session date_time string>] <speaker>: <text>``, or ``<speaker>: <text>`` for a
    session without a date; no caption)."""
    return {t.dia_id: (f"[{s.date_time_raw}] {t.speaker}: {t.text}" if s.date_time_raw
                       else f"{t.speaker}: {t.text}")
            for s in d.sessions for t in s.turns}

def episodes(d: Dialogue) -> tuple[GraphBuilder, list[Turn], list[int]]:
    """A conversation's episode nodes, chained by ``NEXT``: ``(graph, turns, episode nodes)``."""
    g = GraphBuilder()
    turns = list(d.turns())
    texts = episode_texts(d)
    nodes = [g.node(EPISODE, texts[t.dia_id], (t.dia_id,), t.timestamp, t.speaker)
             for t in turns]
    for a, b in zip(nodes, nodes[1:], strict=False):
        g.link(a, b, "NEXT")
    return g, turns, nodes

def llm_free_graph(d: Dialogue, extractor: ConceptExtractor, concepts_per_episode: int
                   ) -> GraphBuilder:
    """The LLM-free build: episodes, sentence facts and extractor concepts (module docstring)."""
    g, turns, nodes = episodes(d)
    # one window per episode; the listener's name is not in a one-turn window's speakers, so
    # both speakers are dropped here (GAAMA's concepts are never person names)
    speakers = {d.speaker_a.casefold(), d.speaker_b.casefold()}
    concepts_of = [drop_speakers(c, speakers)
                   for c in extractor.extract([[t] for t in turns])]
    for e, t, found in zip(nodes, turns, concepts_of, strict=True):
        listener = d.speaker_b if t.speaker == d.speaker_a else d.speaker_a
        mine = [g.concept(concept_label(c)) for c in found[:concepts_per_episode]]
        mine = [c for c in mine if c is not None]
        for c in mine:
            g.link(e, c, "HAS_CONCEPT")
        for sentence in split_sentences(t.content):
            f = g.node(FACT, resolve_pronouns(sentence, t.speaker, listener), (t.dia_id,),
                       t.timestamp)
            g.link(f, e, "DERIVED_FROM")
            low = sentence.lower()
            for c in mine:
                if any(w in low for w in g.text[c].split() if len(w) > 2):
                    g.link(f, c, "ABOUT_CONCEPT")
    return g
