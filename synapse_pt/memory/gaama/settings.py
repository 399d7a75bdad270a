"""GAAMA's settings in two frozen groups: retrieval (:class:`Retrieval`) and build
(:class:`Build`). The config keeps them flat (``memory.seeds``, ``memory.chunk_tokens``): each
key is a field of one group. Values are the public code's (gaama ``2d992f7``) unless marked ours."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from synapse_pt.common import groups
from synapse_pt.common.errors import ConfigError
from synapse_pt.graph.ppr import HUB_DAMPENING

from ..base import require_choice, require_int
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
CHOICES = {"hub_dampening": HUB_DAMPENING, "graph_only_cosine": ("real", "zero"),
           "nearest": NEAREST_RULES, "prompts": PROMPT_SOURCES, "replies": (None, *REPLIES),
           "budget_param": BUDGET_PARAMS}
# a pack budget of 0 packs none of that kind; below 0 is a mistake (memory.max_facts=-1)
INT_MINIMUMS = {"seeds": 1, "depth": 0, "max_iter": 1, "hub_degree": 1, "knn": 1, "max_facts": 0,
                "max_reflections": 0, "max_skills": 0, "max_episodes": 0, "max_words": 1,
                "concepts_per_episode": 1, "chunk_tokens": 1, "reflections_per_group": 1,
                "max_tokens": 1, "seed": 0}


def _check(group: object) -> None:
    """Names, choices and integer minimums of a group's fields (``None`` allowed where the field
    may be null); floats made floats."""
    for f in fields(group):  # type: ignore[arg-type]
        value = getattr(group, f.name)
        if f.name in CHOICES:
            require_choice(f.name, value, CHOICES[f.name])
        elif f.name in INT_MINIMUMS and value is not None:
            object.__setattr__(group, f.name, require_int(f.name, value, INT_MINIMUMS[f.name]))
        elif f.type == "float":
            object.__setattr__(group, f.name, float(value))


@dataclass(frozen=True)
class Retrieval:
    """Seeds, candidates, PageRank, score and pack (module docstring of :mod:`.memory`).

    ``hub_dampening``: ``"code"`` (x hub_degree/degree for nodes above ``hub_degree``, then
    re-normalised, which cancels), ``"effective"`` or ``"off"``. ``graph_only_cosine``: a
    candidate outside the nearest set keeps similarity 0 (``"zero"``, the code's) or its real one
    (``"real"``, ours). ``knn``: the nearest set's size, ``None`` for the code's rule
    (:attr:`k_nearest`). The budgets: no skills here, but theirs counts in the trim and ``knn``.
    """

    seeds: int = 40
    depth: int = 2
    alpha: float = 0.6  # PageRank continuation (restart 0.4)
    max_iter: int = 100
    tol: float = 1e-6
    edge_weight: float = 0.8
    reflection_edge_weight: float = 0.5  # DERIVED_FROM_FACT
    hub_dampening: str = "code"
    hub_degree: int = 50
    cosine_weight: float = 1.0
    ppr_weight: float = 0.1
    graph_only_cosine: str = "zero"
    knn: int | None = None
    nearest: str = "store"
    max_facts: int = 60
    max_reflections: int = 20
    max_skills: int = 5
    max_episodes: int = 80
    max_words: int = 1000

    def __post_init__(self) -> None:
        _check(self)

    @property
    def k_nearest(self) -> int:
        """``knn``, or the code's rule: max(2 * total pack budget, 2 * seeds) (330)."""
        if self.knn is not None:
            return self.knn
        return max(2 * (self.max_facts + self.max_reflections + self.max_skills
                        + self.max_episodes), 2 * self.seeds)


@dataclass(frozen=True)
class Build:
    """The graph build. ``concepts_per_episode`` (GAAMA's prompt: 1-3) caps the LLM-free build's
    concepts per episode (the LLM build keeps every concept of a reply, as the code); the rest is
    the LLM build's (:mod:`.build`): ``chunk_tokens`` per request, the context threshold
    ``context_cosine`` on the code's (1 + cos) / 2 scale, ``reflections_per_group`` (the count
    our prompt asks for in each chunk's reflection request),
    ``prompts`` (``"upstream"``: GAAMA's files from ``upstream_path``; ``"ours"``),
    ``max_tokens`` (``None``: the code's 8,000 / 4,000, ours 768), ``replies`` (how replies are
    read and asked again, :mod:`.replies`; ``None``: ``"code"`` under ``prompts="upstream"``,
    ``"repair"`` under ``"ours"``), and the sampling sent with every request: ``temperature``
    and ``seed`` (``None``: not sent, the API's defaults, as the code's
    ``adapters/openai_llm.py`` 51-57), ``budget_param`` (the name ``max_tokens`` is sent
    under)."""

    concepts_per_episode: int = 3
    chunk_tokens: int = 500
    context_cosine: float = 0.75
    reflections_per_group: int = 3
    prompts: str = "upstream"
    upstream_path: str | None = None
    max_tokens: int | None = None
    replies: str | None = None
    temperature: float | None = None
    seed: int | None = None
    budget_param: str = "max_completion_tokens"

    def __post_init__(self) -> None:
        _check(self)
        if self.temperature is not None:
            if isinstance(self.temperature, bool) or not isinstance(self.temperature,
                                                                      (int, float)):
                raise ConfigError(f"memory.temperature must be a number or null, got "
                                  f"{self.temperature!r}")
            object.__setattr__(self, "temperature", float(self.temperature))
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


def split_settings(retrieval: Retrieval | None, build: Build | None,
                   flat: Mapping[str, Any]) -> tuple[Retrieval, Build]:
    """The two groups from the flat config keys (``memory.seeds=...``), over ``retrieval`` /
    ``build`` when given; a key of neither group is refused by name
    (:func:`synapse_pt.common.groups.split_settings`)."""
    first, second = groups.split_settings(
        "GAAMAMemory", ((Retrieval, retrieval), (Build, build)), flat)
    return first, second
