"""GAAMA's settings in two frozen groups: retrieval (:class:`Retrieval`) and build
(:class:`Build`). The config keeps them flat (``memory.seeds``, ``memory.chunk_tokens``): each
key is a field of one group. Values are the public code's (gaama ``2d992f7``) unless marked ours."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synapse_pt.common.declared import check_fields, choice_sets, int_minimums, setting
from synapse_pt.common.errors import ConfigError
from synapse_pt.graph.ppr import HUB_DAMPENING

from .llm_build import PROMPT_SOURCES
from .replies import REPLIES

#: the name the completion budget is sent under (the code's ``max_completion_tokens``,
#: ``adapters/openai_llm.py`` 54; or ``max_tokens``, for servers that know only that name)
BUDGET_PARAMS = ("max_completion_tokens", "max_tokens")

#: the nearest set's source: ``"store"`` (the code's vector store, ``adapters/sqlite_vector.py``
#: 178-238: the ``max(2 knn, 20)`` nearest over every ingested conversation, then those of the
#: question's conversation, at most ``knn``; the seeds are the best of that set) or
#: ``"conversation"`` (ours, issue 53: the ``knn`` nearest of the question's conversation)
NEAREST_RULES = ("conversation", "store")


@dataclass(frozen=True)
class Retrieval:
    """Seeds, candidates, PageRank, score and pack (module docstring of :mod:`.memory`): each
    field a declared setting ``memory.<name>`` (:mod:`synapse_pt.common.declared`; the table:
    docs/settings.md). The budgets: no skills here, but theirs counts in the trim and ``knn``.
    """

    seeds: int = setting(
        "", 40, "top nodes of any kind by cosine (code)", low=1)
    depth: int = setting(
        "", 2, "candidate neighbourhood depth (code)", low=0)
    alpha: float = setting(
        "", 0.6, "PageRank continuation, restart 1 - alpha = 0.4 (code)")
    max_iter: int = setting(
        "", 100, "PageRank iterations at most (code)", low=1)
    tol: float = setting(
        "", 1e-6, "PageRank L1 tolerance (code)")
    edge_weight: float = setting(
        "", 0.8, "weight of every edge type here (code)")
    reflection_edge_weight: float = setting(
        "", 0.5, "weight of DERIVED_FROM_FACT edges; none LLM-free (code)")
    hub_dampening: str = setting(
        "", "code", "code: x hub_degree/degree for nodes above hub_degree, then re-normalised, "
                    "which cancels | effective | off",
        choices=HUB_DAMPENING)
    hub_degree: int = setting(
        "", 50, "the degree above which a node is a hub (code)", low=1)
    cosine_weight: float = setting(
        "", 1.0, "score = cosine_weight cos/max cos + ppr_weight PPR/max PPR (code)")
    ppr_weight: float = setting(
        "", 0.1, "the score's PageRank weight (code)")
    graph_only_cosine: str = setting(
        "", "zero", "a candidate found only through the graph, outside its nearest set: zero "
                    "(the code's, similarity 0) | real (its real similarity, ours)",
        choices=("real", "zero"))
    knn: int | None = setting(
        "", None, "the nearest set's size; null: the code's max(2 * pack budgets, 2 * seeds) "
                  "= 330", low=1)
    nearest: str = setting(
        "", "store", "where the nearest set and the seeds come from: store (the code's: the "
                     "max(2 knn, 20) nearest over every ingested conversation, then the "
                     "question's) | conversation (ours, issue 53: the knn nearest of its own)",
        choices=NEAREST_RULES)
    max_facts: int = setting(
        "", 60, "pack budget of facts (code)", low=0)
    max_reflections: int = setting(
        "", 20, "pack budget of reflections (code)", low=0)
    max_skills: int = setting(
        "", 5, "pack budget of skills: no skills here; counts in the trim's and knn's total "
               "(code)", low=0)
    max_episodes: int = setting(
        "", 80, "pack budget of episodes (code)", low=0)
    max_words: int = setting(
        "", 1000, "the pack is trimmed to this many words (code)", low=1)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def k_nearest(self) -> int:
        """``knn``, or the code's rule: max(2 * total pack budget, 2 * seeds) (330)."""
        if self.knn is not None:
            return self.knn
        return max(2 * (self.max_facts + self.max_reflections + self.max_skills
                        + self.max_episodes), 2 * self.seeds)


@dataclass(frozen=True)
class Build:
    """The graph build: each field a declared setting ``memory.<name>``
    (:mod:`synapse_pt.common.declared`; the table: docs/settings.md). ``concepts_per_episode``
    is the LLM-free build's; the rest the LLM build's (:mod:`.build`)."""

    concepts_per_episode: int = setting(
        "", 3, "LLM-free build: concepts per episode (GAAMA's prompt asks for 1-3); the LLM "
               "build keeps every concept of a reply, as the code", low=1)
    chunk_tokens: int = setting(
        "", 500, "turns per extraction request, at most this many tokens (code)", low=1)
    context_cosine: float = setting(
        "", 0.75, "known concepts and older messages in a chunk's context: similarity >= this "
                  "on the code's (1 + cos) / 2 scale (code)")
    reflections_per_group: int = setting(
        "", 3, "reflections our prompt asks for per chunk (ours; prompts=ours only)", low=1)
    prompts: str = setting(
        "", "upstream", "the build's prompts: upstream (GAAMA's files from upstream_path) | "
                        "ours (our wording and reply form)",
        choices=PROMPT_SOURCES)
    upstream_path: str | None = setting(
        "", None, "the folder of GAAMA's pinned prompt files (null: found as "
                  "eval.upstream_path)")
    max_tokens: int | None = setting(
        "", None, "completion budget of an extraction request; null: the prompt set's (the "
                  "code's 8,000 / 4,000 under upstream, 768 under ours)", low=1)
    replies: str | None = setting(
        "", None, "how replies are read and asked again: code | repair (ours); null: code "
                  "under prompts=upstream, repair under prompts=ours",
        choices=REPLIES)
    temperature: float | None = setting(
        "", None, "sampling temperature of every build request; null: not sent, the API's "
                  "default (as the code)")
    seed: int | None = setting(
        "", None, "sampling seed of every build request; null: not sent (as the code)", low=0)
    budget_param: str = setting(
        "", "max_completion_tokens", "the name max_tokens is sent under (the code's "
                                     "max_completion_tokens) | max_tokens",
        choices=BUDGET_PARAMS)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.replies == "code" and self.prompts != "upstream":
            raise ConfigError("memory.replies=code reads and re-asks in GAAMA's own reply form, "
                              "which memory.prompts=ours does not ask for: set "
                              "memory.replies=repair (or null)")

    @property
    def reply_reading(self) -> str:
        """``replies`` resolved: ``"code"`` or ``"repair"``."""
        if self.replies is not None:
            return self.replies
        return "code" if self.prompts == "upstream" else "repair"

    @property
    def sampling(self) -> dict[str, Any]:
        """The request parameters of every build request (:class:`~synapse_pt.models.llm.base.
        ChatRequest` fields)."""
        return {"temperature": self.temperature, "seed": self.seed,
                "budget_param": self.budget_param}


#: the rules the settings name and the least value of each count (the declaration's), which
#: :meth:`~synapse_pt.memory.base.MemorySystem.configure_retrieval` checks a sweep's change by
CHOICES = choice_sets(Retrieval, Build)
INT_MINIMUMS = int_minimums(Retrieval, Build)

