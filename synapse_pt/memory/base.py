"""The MemorySystem interface shared by SYNAPSE, the related systems and the baselines.

A memory system ingests whole conversations, then retrieves for a batch of questions at once. The
evaluation harness only talks to this interface, so every system is scored on equal terms.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Conversation, Dialogue, Question
from synapse_pt.retrieval.items import RetrievedItem

from .declare import CostModel, SearchSpace
from .gate import RejectionGate


@dataclass
class RetrievalResult:
    """Retrieval output for a batch of B questions.

    Attributes:
        items: per question, the retrieved items in rank order (at most k).
        c_ret: ``[B]`` retrieval confidence (SYNAPSE: activation of the top node, SPEC §1.2 step 7).
        gated: ``[B]`` bool, True where the system refuses to answer (no LLM call is made).
        gate_score: ``[B]`` the signal the gate thresholded (``c_ret`` unless the memory's gate
            reads another, :mod:`synapse_pt.memory.gate`).
        gate_signals: ``{signal: [B]}`` every signal the gate computed (empty for the c_ret gate).
    """

    items: list[list[RetrievedItem]]
    c_ret: torch.Tensor
    gated: torch.Tensor
    gate_score: torch.Tensor | None = None
    gate_signals: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b = len(self.items)
        if self.gate_score is None:
            self.gate_score = self.c_ret
        shapes = {"c_ret": self.c_ret, "gated": self.gated, "gate_score": self.gate_score,
                  **{f"gate_signals[{k!r}]": v for k, v in self.gate_signals.items()}}
        bad = {k: tuple(v.shape) for k, v in shapes.items() if v.shape != (b,)}
        if bad:
            raise ValueError(f"RetrievalResult: {bad} must all be [{b}]")

    def node_ids(self) -> list[list[str]]:
        return [[it.node_id for it in row] for row in self.items]

    def units(self) -> list[list[tuple[str, ...]]]:
        """Per question, the turn ids each item covers, in rank order (the input of
        :func:`~synapse_pt.eval.qa.scorers.retrieval.unit_recall`)."""
        return [[it.covers for it in row] for row in self.items]

    def covered_turns(self) -> list[list[str]]:
        """Per question, every LoCoMo turn id its context covers, once, in rank order."""
        return [list(dict.fromkeys(t for unit in row for t in unit)) for row in self.units()]


def padded_rows(rows: Sequence[Sequence[int]], device: torch.device | str) -> torch.Tensor:
    """``[B, E]`` long tensor of ragged index rows, padded with -1 (at least one column): the
    evidence input of :func:`~synapse_pt.eval.qa.scorers.retrieval.evidence_recall_from_index`."""
    width = max(1, max((len(r) for r in rows), default=0))
    return torch.tensor([list(r) + [-1] * (width - len(r)) for r in rows], dtype=torch.long,
                        device=device)


def as_dialogue(item: Dialogue, index: int = 0) -> Dialogue:
    """``item`` as a bare :class:`Dialogue` (a :class:`Conversation` loses its questions)."""
    if type(item) is Dialogue:
        return item
    if isinstance(item, Conversation):
        return item.dialogue
    raise TypeError(f"MemorySystem.ingest: item {index} is a {type(item).__name__}, not a "
                    "Conversation or Dialogue")


def require_int(key: str, value: object, minimum: int) -> int:
    """``value`` as an ``int``; a ``ValueError`` naming the config key ``memory.<key>`` when it is
    not an integer (``bool`` included) or lies below ``minimum`` (a negative budget, say)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"memory.{key} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def require_choice(key: str, value: object, allowed: Sequence[object]) -> object:
    """``value`` when it is one of ``allowed``; a ``ValueError`` naming the config key
    ``memory.<key>``, the value and the choices otherwise (``memory.trim=Code``, say)."""
    if value not in allowed:
        raise ConfigError(f"memory.{key} must be one of {tuple(allowed)}, got {value!r}")
    return value


class MemorySystem(ABC):
    """A conversational memory: ``ingest`` conversations, then ``retrieve`` for many questions.

    Retrieval must not read a question's category or gold data (no label leakage, SPEC §3): only
    ``Question.sample_id`` (which conversation's memory to search) and ``Question.question``.
    """

    name: str = "memory"
    gate: RejectionGate | None = None  # the rejection gate (memory.gate); None: none configured
    # constructor arguments that only affect retrieval: a sweep may change them on an ingested
    # memory (see configure_retrieval) instead of rebuilding it
    retrieval_fields: tuple[str, ...] = ()
    # integer settings (counts, budgets) and their least allowed value, checked on construction
    # (:func:`require_int`) and again when a sweep changes them (configure_retrieval)
    int_minimums: Mapping[str, int] = {}
    # settings that name a rule and the rules allowed, checked on construction
    # (:func:`require_choice`) and again when a sweep changes them (configure_retrieval)
    choices: Mapping[str, tuple[object, ...]] = {}
    # how large an answer context it can hand the answer model and what its build asks of an
    # LLM, read by the estimate (memory/declare.py); every memory declares its own
    cost_model: CostModel | None = None
    # the retrieval settings a held-out search draws candidates from (memory/declare.py)
    search_space: SearchSpace | None = None
    # the answer style and judge protocol of the system's own code, used where the run asks for
    # the memory's own steps (eval.answer_style=system, eval.judge_protocol=system); the shared
    # answer step and mem0's judge for a memory whose code has none
    own_steps: tuple[str, str] = ("shared", "mem0")

    @classmethod
    def declared_cost_model(cls) -> CostModel:
        """The class's :attr:`cost_model`; an error naming the memory where it declares none (the
        estimate never falls back on another memory's rule)."""
        if not isinstance(cls.cost_model, CostModel):
            raise NotImplementedError(
                f"{cls.__module__}.{cls.__name__} declares no cost model: set the class "
                "attribute cost_model = CostModel(context=...) (synapse_pt/memory/declare.py, "
                "docs/adding_a_memory.md) so that the estimate can size its answer context")
        return cls.cost_model

    @classmethod
    def declared_search_space(cls) -> SearchSpace:
        """The class's :attr:`search_space`; an error naming the memory where it declares none,
        or where a key is not under one of its ``retrieval_fields``."""
        if not isinstance(cls.search_space, SearchSpace):
            raise NotImplementedError(
                f"{cls.__module__}.{cls.__name__} declares no search space: set the class "
                "attribute search_space = SearchSpace(discrete={...}, continuous={...}) over its "
                "retrieval_fields (synapse_pt/memory/declare.py, docs/adding_a_memory.md) so "
                "that a held-out search can tune it")
        outside = sorted(cls.search_space.fields() - set(cls.retrieval_fields))
        if outside:
            raise ValueError(f"{cls.__name__}.search_space varies {outside}, which are not "
                             f"retrieval fields (those are {list(cls.retrieval_fields)})")
        return cls.search_space

    def configure_retrieval(self, **settings: object) -> None:
        """Change retrieval-only settings (``retrieval_fields``) of an ingested memory; every
        setting is checked (``int_minimums``, ``choices``) before any is set."""
        unknown = sorted(set(settings) - set(self.retrieval_fields))
        if unknown:
            raise ValueError(f"{type(self).__name__}: {unknown} are not retrieval settings "
                             f"(those are {list(self.retrieval_fields)})")
        for key, value in settings.items():
            if key in self.int_minimums:
                settings[key] = require_int(key, value, self.int_minimums[key])
            if key in self.choices:
                require_choice(key, value, self.choices[key])
        for key, value in settings.items():
            setattr(self, key, value)

    def ingest(self, conversations: Sequence[Dialogue]) -> None:
        """Build the memory of each conversation (a later call adds more conversations).

        Conversations are stripped to their :class:`~synapse_pt.data.schema.Dialogue` (speakers
        and sessions) before the system sees them: no memory can read the questions, gold
        answers or evidence of what it ingests."""
        self.ingest_dialogues([as_dialogue(c, i) for i, c in enumerate(conversations)])

    @abstractmethod
    def ingest_dialogues(self, dialogues: Sequence[Dialogue]) -> None:
        """Build the memory of each dialogue (called by :meth:`ingest`; adds to what is held)."""

    @abstractmethod
    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        """Retrieve for all questions in one batched call, each within its own conversation."""

    def describe(self) -> dict[str, object]:
        """Identity and settings recorded in every result row (e.g. ``llm_free_extractor``)."""
        return {"memory": self.name}

    def gated_result(self, questions: Sequence[Question], items: list[list[RetrievedItem]],
                     c_ret: torch.Tensor, gated: torch.Tensor) -> RetrievalResult:
        """The retrieval result after the memory's gate (:attr:`gate`): ``gated`` is the
        memory's own C_ret decision, kept by the paper's ``c_ret`` gate."""
        c_ret, gated = c_ret.cpu(), gated.cpu()
        if self.gate is None:
            return RetrievalResult(items, c_ret, gated)
        score, decision, signals = self.gate(questions, c_ret, gated)
        return RetrievalResult(items, c_ret, decision, gate_score=score.float(),
                               gate_signals=signals)


def memory_class(cfg: Mapping[str, Any]) -> type[MemorySystem]:
    """The memory class a run config's ``memory`` group builds, read without building it (its
    declarations: cost model, search space, own answer steps); an error naming
    ``memory._target_`` otherwise."""
    from hydra.utils import get_class

    target = str(cfg["memory"].get("_target_", ""))
    cls = get_class(target) if target else None
    if not (isinstance(cls, type) and issubclass(cls, MemorySystem)):
        raise ConfigError(f"memory._target_={target!r} is not a MemorySystem class")
    return cls
