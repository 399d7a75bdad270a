"""What a retrieval returns, item by item: a memory's unit as it goes into the answer prompt.

Every memory system (:mod:`synapse_pt.memory`) returns its items as :class:`RetrievedItem`; the QA
steps (:mod:`synapse_pt.steps`) render them into context lines and the scorers read the turns
they cover.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

EPISODIC = "episodic"
SEMANTIC = "semantic"


@dataclass(frozen=True)
class RetrievedItem:
    """One retrieved memory item, as it goes into the answer prompt.

    ``node_id`` is the LoCoMo ``dia_id`` (``"D3:14"``) for an episodic node and a prefixed id that
    cannot collide with a dia_id for any other node (``"S:17"`` for a semantic node). For a turn,
    ``text`` is the memory's rendering of it (the shared turn template,
    :class:`~synapse_pt.data.render.TurnRenderer`), exactly what was embedded and BM25-indexed;
    ``dated`` says whether that rendering already carries the session date (the answer prompt then
    adds none). ``turn_ids`` are the LoCoMo turns a multi-turn unit covers (a box, a fact derived
    from turns), in order; an episodic item covers its own turn (:attr:`covers`).
    """

    node_id: str
    text: str
    kind: str  # EPISODIC, SEMANTIC, or a system-specific kind
    score: float
    timestamp: datetime | None = None
    speaker: str | None = None
    dated: bool = False
    turn_ids: tuple[str, ...] = ()

    @property
    def covers(self) -> tuple[str, ...]:
        """The LoCoMo turn ids whose content this item puts in the context."""
        if self.turn_ids:
            return self.turn_ids
        return (self.node_id,) if self.kind == EPISODIC else ()
