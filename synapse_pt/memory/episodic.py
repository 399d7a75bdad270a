"""Shared bookkeeping for memories whose items include the conversation's turns.

Maps turns to retrievable items and questions to their conversation, so every system builds
:class:`~synapse_pt.memory.base.RetrievedItem` rows the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.data.schema import Dialogue, Question, Turn
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem


class TurnRegistry:
    """``(sample_id, dia_id) -> Turn`` for every ingested turn, plus conversation positions.

    Args:
        renderer: the turn template every item's text is rendered with (the memory's own).
    """

    def __init__(self, renderer: TurnRenderer | None = None) -> None:
        self.renderer = renderer or TurnRenderer(DEFAULT_TURN_TEMPLATE)
        self.turns: dict[tuple[str, str], Turn] = {}
        self.conversations: dict[str, Dialogue] = {}
        self.order: list[str] = []

    def add(self, conversations: Sequence[Dialogue]) -> None:
        for conv in conversations:
            if conv.sample_id in self.conversations:
                raise ValueError(f"conversation {conv.sample_id!r} was already ingested")
            self.conversations[conv.sample_id] = conv
            self.order.append(conv.sample_id)
            for t in conv.turns():
                self.turns[(conv.sample_id, t.dia_id)] = t

    def speakers(self, sample_id: str) -> list[str]:
        """``[speaker_a, speaker_b]`` of an ingested conversation."""
        c = self.conversations[sample_id]
        return [c.speaker_a, c.speaker_b]

    def graph_ids(self, questions: Sequence[Question], device: torch.device | str) -> torch.Tensor:
        """``[B]`` position of each question's conversation (error if it was never ingested)."""
        pos = {s: i for i, s in enumerate(self.order)}
        missing = sorted({q.sample_id for q in questions} - pos.keys())
        if missing:
            raise KeyError(f"questions refer to conversations that were not ingested: {missing}")
        return torch.tensor([pos[q.sample_id] for q in questions], device=device)

    def episodic_item(self, sample_id: str, dia_id: str, score: float) -> RetrievedItem:
        t = self.turns[(sample_id, dia_id)]
        return RetrievedItem(dia_id, self.renderer(t), EPISODIC, score, t.timestamp, t.speaker,
                             dated=self.renderer.dated)
