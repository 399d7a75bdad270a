"""Membox's settings in two frozen groups, as GAAMA's (:mod:`synapse_pt.memory.gaama.settings`):
retrieval (:class:`Retrieval`) and build (:class:`Build`). The config keeps them flat
(``memory.k``, ``memory.boundary_threshold``): each key is a field of one group. Values are the
code's (``membox.py``) unless marked ours; the meaning of each is in
:class:`~synapse_pt.memory.membox.memory.MemboxMemory`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from synapse_pt.common import groups
from synapse_pt.common.errors import ConfigError

from ..base import require_choice, require_int
from .llm_build import BUDGET_PARAMS, PARSES, PROMPT_SOURCES, VERIFY_PARSES

MODES = ("compact", "trace")


@dataclass(frozen=True)
class Retrieval:
    """``mode``: ``"compact"`` (boxes only) or ``"trace"`` (boxes + trace events; the code's
    default); ``k``: boxes per question (code: 5)."""

    mode: str = "trace"
    k: int = 5

    def __post_init__(self) -> None:
        require_int("k", self.k, 1)
        require_choice("mode", self.mode, MODES)


@dataclass(frozen=True)
class Build:
    """The LLM-free build (``boundary_threshold``, ``trace_threshold``, ``min_keywords``,
    ``max_keywords``, ``min_event_words``) and the LLM build's requests (``prompts``,
    ``upstream_path``, ``max_tokens``, ``loom_max_tokens``, the reply readings
    ``verify_parse``, ``box_parse``, ``chain_parse`` and the sampling ``temperature``,
    ``seed``, ``budget_param``)."""

    boundary_threshold: float = 0.4
    trace_threshold: float = 0.5
    min_keywords: int = 3
    max_keywords: int = 8
    min_event_words: int = 4
    max_tokens: int | None = None
    loom_max_tokens: int | None = None
    prompts: str = "upstream"
    upstream_path: str | None = None
    verify_parse: str = "strict"
    box_parse: str | None = None
    chain_parse: str | None = None
    temperature: float | None = 0.0
    seed: int | None = None
    budget_param: str | None = None

    def __post_init__(self) -> None:
        require_int("min_event_words", self.min_event_words, 0)
        for key in ("max_tokens", "loom_max_tokens"):
            if getattr(self, key) is not None:
                require_int(key, getattr(self, key), 1)
        for key, allowed in (("prompts", PROMPT_SOURCES), ("verify_parse", VERIFY_PARSES),
                             ("box_parse", (None, *PARSES)), ("chain_parse", (None, *PARSES)),
                             ("budget_param", BUDGET_PARAMS)):
            require_choice(key, getattr(self, key), allowed)
        if self.seed is not None:
            require_int("seed", self.seed, 0)
        t = self.temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
            raise ConfigError(f"memory.temperature must be a number or null, got {t!r}")
        if not 1 <= self.min_keywords <= self.max_keywords:
            raise ValueError(f"memory.min_keywords / max_keywords: need 1 <= min <= max, got "
                             f"{self.min_keywords}, {self.max_keywords}")
        object.__setattr__(self, "boundary_threshold", float(self.boundary_threshold))
        object.__setattr__(self, "trace_threshold", float(self.trace_threshold))
        object.__setattr__(self, "min_keywords", int(self.min_keywords))
        object.__setattr__(self, "max_keywords", int(self.max_keywords))
        object.__setattr__(self, "min_event_words", int(self.min_event_words))


def split_settings(retrieval: Retrieval | None, build: Build | None,
                   flat: Mapping[str, Any]) -> tuple[Retrieval, Build]:
    """The two groups from the flat config keys (``memory.k=...``), over ``retrieval`` /
    ``build`` when given; a key of neither group is refused by name
    (:func:`synapse_pt.common.groups.split_settings`)."""
    first, second = groups.split_settings(
        "MemboxMemory", ((Retrieval, retrieval), (Build, build)), flat)
    return first, second
