"""Hand-built conversations, a table encoder and a scripted extractor for the graph tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import torch

from synapse_pt.data.schema import Conversation, Session, Turn
from synapse_pt.graph.extraction import ConceptExtractor
from synapse_pt.models.hashing import HashingEncoder

T0 = datetime(2023, 5, 8, 13, 0)


def make_turn(k: int, *, hours: float = 0.0, speaker: str = "Ann", text: str | None = None,
              session: int = 1, sample_id: str = "s1") -> Turn:
    """Turn ``k`` (dia_id ``"D<session>:<k>"``) at ``T0 + hours``."""
    return Turn(sample_id, f"D{session}:{k}", speaker, text or f"turn {k} of {sample_id}", session,
                k, T0 + timedelta(hours=hours))


def make_conversation(turns: Sequence[Turn], sample_id: str | None = None) -> Conversation:
    sample_id = sample_id or turns[0].sample_id
    sessions = []
    for idx in dict.fromkeys(t.session_index for t in turns):
        st = tuple(t for t in turns if t.session_index == idx)
        sessions.append(Session(idx, st[0].timestamp, "", st))
    return Conversation(sample_id, "Ann", "Bob", tuple(sessions), ())


def simple_conversation(n: int, sample_id: str = "s1", step_hours: float = 1.0) -> Conversation:
    return make_conversation([make_turn(k, hours=k * step_hours, sample_id=sample_id,
                                        speaker="Ann" if k % 2 else "Bob") for k in range(n)])


class TableEncoder:
    """Fixed vectors for chosen texts (normalised), hashed words for the rest; counts calls."""

    def __init__(self, table: dict[str, Sequence[float]] | None = None, dim: int = 8) -> None:
        self.dim = dim
        self.name = f"table-{dim}"
        self.table = {k: torch.tensor(v, dtype=torch.float32) for k, v in (table or {}).items()}
        self.fallback = HashingEncoder(dim)
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        self.calls.append(len(texts))
        out = self.fallback.encode(list(texts))
        for i, t in enumerate(texts):
            if t in self.table:
                out[i] = torch.nn.functional.normalize(self.table[t], dim=0)
        return out


class ScriptedExtractor(ConceptExtractor):
    """Returns ``script[i]`` for window ``i`` (``[]`` past the end); counts calls."""

    name = "scripted"
    llm_free = True

    def __init__(self, script: Sequence[Sequence[str]]) -> None:
        self.script = [list(s) for s in script]
        self.calls: list[int] = []

    def extract(self, windows):
        start = sum(self.calls)
        self.calls.append(len(windows))
        return [list(self.script[start + i]) if start + i < len(self.script) else []
                for i in range(len(windows))]


def unit(*values: float) -> list[float]:
    v = torch.tensor(values, dtype=torch.float32)
    return (v / v.norm()).tolist()


def edges_of(graph, etype: int) -> dict[tuple[int, int], float]:
    """``{(source, target): weight}`` of the edges of one type."""
    mask = graph.edge_type == etype
    ei, w = graph.edge_index[:, mask], graph.edge_weight[mask]
    return {(int(s), int(d)): float(x) for s, d, x in zip(ei[0], ei[1], w, strict=True)}
