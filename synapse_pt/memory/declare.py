"""What a memory declares for the commands that plan and tune it, beside ``ingest``/``retrieve``.

Every :class:`~synapse_pt.memory.base.MemorySystem` declares, at the class level:

* ``cost_model``, a :class:`CostModel`: how large an answer context it can hand the answer model
  and what its build asks of an LLM, read by ``python -m synapse_pt.estimate`` before a run
  (one of the context rules below, with the memory-config keys it reads);
* ``search_space``, a :class:`SearchSpace`: the retrieval settings a held-out search
  (``scripts/tune_heldout.py``) draws its candidates from, as memory-config keys.

A memory that declares neither gets an error naming it and what to declare
(:meth:`~synapse_pt.memory.base.MemorySystem.declared_cost_model`,
:meth:`~synapse_pt.memory.base.MemorySystem.declared_search_space`): no command falls back on
another memory's rule. The declarations are data; the commands read them (the estimate's token
counts live in :mod:`synapse_pt.commands.estimate`, the search in
:mod:`synapse_pt.eval.tuning.heldout`).

Config keys are dotted paths inside the memory's config (``k``, ``params.k``, ``weights.dense``):
the same keys a run overrides as ``memory.<key>=...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["CostModel", "ModelDependentBuild", "SearchSpace", "SessionUnits", "TurnContext",
           "WholeConversation", "WindowExtraction", "WordBudget"]


# ------------------------------------------------------------------ the answer context's size
@dataclass(frozen=True)
class TurnContext:
    """The context is at most ``k`` of the conversation's turns, each a context line: bounded
    exactly by the ``k`` longest (``k`` read from the memory config at the key ``k``).

    ``note``: what the bound assumes beyond that (SYNAPSE: a concept node's line no longer than
    the longest turn's)."""

    k: str = "k"
    note: str = ""


@dataclass(frozen=True)
class WholeConversation:
    """The context is every turn of the conversation (full context)."""


@dataclass(frozen=True)
class WordBudget:
    """The context is a pack trimmed to ``words`` words (config key), estimated at the
    estimate's tokens per word (not a bound: the units exist only once built). ``label`` names
    the pack in the estimate's basis column."""

    words: str = "max_words"
    label: str = "a max_words pack"


@dataclass(frozen=True)
class SessionUnits:
    """The context is ``k`` units (config key), each estimated at a session's mean tokens (not a
    bound: the units exist only once built). ``label`` names them in the basis column."""

    k: str = "k"
    label: str = "k units"


ContextRule = TurnContext | WholeConversation | WordBudget | SessionUnits


# ------------------------------------------------------------------------- the LLM build's calls
@dataclass(frozen=True)
class WindowExtraction:
    """With an LLM concept extractor, one request per window of ``window`` turns (config key),
    each rendered as the builder renders it: exact (a repair round is not counted)."""

    window: str = "graph.window"


@dataclass(frozen=True)
class ModelDependentBuild:
    """With an LLM extractor the build's calls depend on the model's replies (the facts GAAMA's
    reflections group, the boxes Membox's Topic Loom closes): not bounded, and said so."""


ExtractionRule = WindowExtraction | ModelDependentBuild


@dataclass(frozen=True)
class CostModel:
    """What a run of the memory costs in LLM calls, as the estimate reads it.

    Attributes:
        context: the answer context's size (:class:`TurnContext`, :class:`WholeConversation`,
            :class:`WordBudget`, :class:`SessionUnits`).
        extraction: the build's LLM calls under an LLM extractor (:class:`WindowExtraction`,
            :class:`ModelDependentBuild`); ``None``: the memory uses no extractor (no calls).
    """

    context: ContextRule
    extraction: ExtractionRule | None = None


# ------------------------------------------------------------------------------- the search
@dataclass(frozen=True)
class SearchSpace:
    """The retrieval settings a held-out search varies, as memory-config keys (dotted inside the
    memory config: ``k``, ``params.S``, ``weights.dense``); every key's first part must be one
    of the memory's ``retrieval_fields`` (the search reconfigures the ingested memory, it never
    rebuilds it).

    Candidate 0 is the ``reference`` configuration: the method's published values (the paper's,
    the public code's), never values tuned on the data a search is scored on (a config such as
    ``configs/fusion/search4.yaml`` was chosen on all of LoCoMo-10: as candidate 0 it would
    leak into every fold). The others are random combinations of the ``discrete`` values, each
    with random draws of the ``continuous`` ranges
    (:func:`synapse_pt.eval.tuning.heldout.candidates`).
    Settings the space does not vary keep the run's values. An empty space (``SearchSpace()``)
    declares that nothing is tuned: the run's configuration is the one candidate, read held out
    as every other memory's choice is (full context).

    Attributes:
        discrete: key -> the values to combine.
        continuous: key -> ``(low, high)``, drawn uniformly.
        reference: key -> its reference value, for every key of the space.
        batched: the memory evaluates many candidates in one batched call
            (``sweep(questions, params)``: SYNAPSE's activation columns); otherwise each
            candidate is set with ``configure_retrieval`` and retrieved for every question.
    """

    discrete: Mapping[str, tuple] = field(default_factory=dict)
    continuous: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    reference: Mapping[str, object] = field(default_factory=dict)
    batched: bool = False

    def __post_init__(self) -> None:
        keys = {*self.discrete, *self.continuous}
        if set(self.reference) != keys:
            raise ValueError(f"SearchSpace: the reference must give every key a value; missing "
                             f"{sorted(keys - set(self.reference))}, unknown "
                             f"{sorted(set(self.reference) - keys)}")
        both = sorted(set(self.discrete) & set(self.continuous))
        if both:
            raise ValueError(f"SearchSpace: {both} are both discrete and continuous")
        empty = sorted(k for k, v in self.discrete.items() if not tuple(v))
        if empty:
            raise ValueError(f"SearchSpace: discrete settings {empty} have no values")
        bad = {k: v for k, v in self.continuous.items()
               if len(tuple(v)) != 2 or not float(v[0]) <= float(v[1])}
        if bad:
            raise ValueError(f"SearchSpace: continuous ranges must be (low, high), low <= high; "
                             f"got {bad}")

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key the search varies: the discrete ones, then the continuous ones."""
        return (*self.discrete, *self.continuous)

    def fields(self) -> set[str]:
        """The retrieval fields the keys fall under (their first part)."""
        return {key.split(".", 1)[0] for key in self.keys}
